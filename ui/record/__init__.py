"""Saved runs in the app: runs (files built on click, an upload checked, its re-run on the worker), view (pure
display values), figures (pure plotly), sections (the st.* drawing: download buttons, upload, comparison)."""
