"""Inference Loop Explorer: router only (page config, shared sidebar, navigation)."""
import streamlit as st

from ui import nav, sidebar, state

st.set_page_config(page_title="Inference Loop Explorer", page_icon=":material/all_inclusive:", layout="wide")
state.settings()
pages = [st.Page(p.path, title=p.title, icon=p.icon, url_path=p.url, default=(i == 0))
         for i, p in enumerate(nav.available())]
page = st.navigation(pages)
sidebar.render()
page.run()
state.write_query_params()
