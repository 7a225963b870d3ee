"""A saved run: open a RUN.json, see what it recorded, download its replay page, and run it again here beside it."""
import ui.frame.boot  # noqa: F401  first: every module imported once, in one thread (see ui/frame/boot.py)
import streamlit as st

from ui.frame import nav
from ui.frame.layout import section
from ui.frame.predict import lesson_intro
from ui.record import sections

nav.through_router()
st.title("A saved run: recorded there, measured here")

if section(None):
    lesson_intro("record")

record = sections.upload()  # checked before anything reads it; a refused file says why in one line
if record is None:
    st.stop()

if section("What was recorded"):
    sections.summary(record)

if section("Recorded there, measured here"):
    sections.compare(record)
