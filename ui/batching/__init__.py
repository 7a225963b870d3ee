"""The batching page's UI: runs (asks the worker, cached), view (pure display values), figures (pure plotly),
sections (the st.* drawing), classroom (the teacher's class view, drawn with st.*)."""
