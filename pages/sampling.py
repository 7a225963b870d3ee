"""Logits & sampling: from the model's scores to one chosen token, stage by stage, and the loop one step at a time."""
import ui.frame.boot  # noqa: F401  first: every module imported once, in one thread (see ui/frame/boot.py)
import streamlit as st

from ui.frame import nav
from ui.sampling import view as SV
from ui.frame.layout import beside, chart, notes, section, what_you_see
from ui.frame.predict import ask
from ui.frame.lessons import lesson
from ui.frame.models import current_model
from ui.frame.runs import current_trace
from ui.sampling.controls import predictions_of
from ui.sampling.sections import dice_and_sections, position_table

nav.through_router()
st.title("Logits & sampling: rolling the model's dice")
lm = current_model()
tr = current_trace()
notes(tr)
def lead() -> None:
    """The lesson boxes, under the dice and the chart they drive (so both fit the first screen)."""
    main, side = beside(1, 1)
    with main:
        what_you_see(lesson("sampling", "what you see", source=lm.info.source))
    with side:
        ask("sampling", "try temperature", lesson("sampling", "answer temperature"), key="sampling_try_temperature")


if section(None):  # the introduction, then the fragment's own headers 1-5: presenter view's first step has the dice
    st.markdown(lesson("sampling", "intro"))
    dice_and_sections(lm, tr, lead)  # a fragment: the dice rerun sections 1-5, not the page

if section("6. A prediction at every position, from one pass"):
    st.markdown(lesson("sampling", "every position"))
    fig, caption, table, bars, height = SV.every_position(lm, tr, *predictions_of(lm, tr))
    chart(fig, "model", caption, key="sampling_positions_chart")
    position_table(table, bars, height)
    c = st.columns(2)
    with c[0]:
        nav.link("pages/speculative.py")
    with c[1]:
        nav.link("pages/loop.py", "Back to the whole loop")
