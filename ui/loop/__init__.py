"""The loop page's UI: runs (asks the worker, cached), view (pure display values), figures (pure plotly),
sections (the st.* drawing), details (pure block tables), glance (the pure HTML picture of the loop); sections is the stepper."""
