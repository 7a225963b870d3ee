"""The attention page's UI: runs (asks the worker, cached), view (pure display values), figures (pure plotly),
sections (the st.* drawing)."""
