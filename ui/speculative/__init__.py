"""The speculative page's UI: runs (asks the worker, cached), view (pure display values), figures (pure plotly),
sections (the st.* drawing), race (the race's display values and lane drawing)."""
