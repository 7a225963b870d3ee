"""The embeddings page's UI: runs (asks the worker, cached), view (pure display values), figures (pure plotly),
sections (the st.* drawing); no view module (the sections read the runs directly)."""
