"""Inference Loop Explorer: router only (page config, shared sidebar, navigation)."""
import ui.frame.boot  # noqa: F401  first: every module imported once, in one thread (see ui/frame/boot.py)
import streamlit as st
from streamlit.runtime.pages_manager import PagesManager

from engine.measure.timing import restore_threads
from ui.frame import errors, layout, nav, sidebar, state, style

# A pages/ folder beside app.py puts Streamlit in its legacy multipage mode: every run is wrapped in a
# navigation of its own built from the file names, which answers deep links with "Page not found" and can
# run a page file without app.py (so without the shared sidebar). The pages are listed explicitly below, so
# switch that mode off for this server process. Streamlit decides it when the first session opens, before
# this file runs, so that session's first run still goes through the legacy router: URL paths equal the file
# stems so it finds the page, and the page hands over to this file (ui.frame.nav.through_router).
PagesManager.uses_pages_directory = False

restore_threads()  # this run's thread may have started inside another session's one-thread section
present = state.settings().present
st.set_page_config(page_title="Inference Loop Explorer", page_icon=":material/all_inclusive:", layout="wide",
                   initial_sidebar_state="collapsed" if present else "auto")
state.start_run()
style.inject(present)
pages = [st.Page(p.path, title=p.title, icon=p.icon, url_path=p.url, default=(i == 0))
         for i, p in enumerate(nav.available())]
page = st.navigation(pages)
with errors.shown_briefly():  # the model load too: any error is one short line, never a blank page
    sidebar.render()
layout.begin_page(page.url_path)
state.log_run(page.url_path or "loop")
state.write_query_params(before_page=True)  # a page may end early with st.stop(): the link is current anyway
with errors.shown_briefly():  # a short message, not a traceback with server paths
    page.run()
layout.presenter_nav()
state.write_query_params()  # the page's own values (e.g. the attention head on view); other pages' dropped
