"""The serving page's UI: runs (asks the servers, cached), view (pure display values), figures (pure plotly),
sections (the st.* drawing)."""
