"""Inference Loop Explorer: router only (page config, shared sidebar, navigation)."""
import ui.frame.boot  # noqa: F401  first: every module imported once, in one thread (see ui/frame/boot.py)
import streamlit as st

from ui.frame import (compiling, errors, layout, legacy_pages, models, nav, server_metrics, sidebar, state, style,
                      uploads)

legacy_pages.legacy_mode_off()  # pages/ beside app.py: Streamlit's legacy router off (ui/frame/legacy_pages.py)
server_metrics.closed_to_a_class()  # a class server's /_stcore/metrics reports nothing (ui/frame/server_metrics.py)
uploads.bound_uploads()  # the server keeps few uploads, none once read (ui/frame/uploads.py)

present = state.settings().present
st.set_page_config(page_title="Inference Loop Explorer", page_icon=str(nav.ICON), layout="wide",
                   initial_sidebar_state="collapsed" if present else "auto")
state.start_run()
style.inject(present)
pages = [st.Page(p.path, title=p.title, icon=p.icon, url_path=p.url, default=(i == 0))
         for i, p in enumerate(nav.available())]
page = st.navigation(pages)
with errors.shown_briefly():  # the model load too: any error is one short line, never a blank page
    models.first_start_in_view()  # the first start's conversion, in the main area where the visitor looks
    sidebar.render()
    compiling.warm_for_run(page.url_path)  # compiled mode: its compile in the background, shown, cancellable
layout.begin_page(page.url_path)
state.log_run(page.url_path or "loop")
state.write_query_params(before_page=True)  # a page may end early with st.stop(): the link is current anyway
with errors.shown_briefly():  # a short message, not a traceback with server paths
    page.run()
layout.presenter_nav()
state.write_query_params()  # the page's own values (e.g. the attention head on view); other pages' dropped
