"""The precision page's UI: runs (asks the worker, cached), view (pure display values), figures (pure plotly),
sections (the st.* drawing); this topic has only figures and sections (drawn on the timeline page)."""
