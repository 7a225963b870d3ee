"""A script that fails on purpose, served with the app's own .streamlit/config.toml (the server runs in the
repository root): one error inside a page (ui.frame.errors.shown_briefly, as app.py runs every page) and one that
escapes the script (Streamlit's own error box)."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

from ui.frame.errors import shown_briefly  # noqa: E402

st.title("Fault test")
with shown_briefly():
    raise RuntimeError(f"page fault in {ROOT / 'pages' / 'secret_page.py'}")
raise OSError(f"script fault in {ROOT / 'engine' / 'secret_module.py'}")
