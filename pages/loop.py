"""Home page: the whole loop at a glance, then one token end to end with the real numbers at every stage."""
import ui.frame.boot  # noqa: F401  first: every module imported once, in one thread (see ui/frame/boot.py)
import streamlit as st

from ui.frame import nav
from ui.frame.html import chips
from ui.frame.layout import chart, notes, section, what_you_see
from ui.frame.predict import ask
from ui.frame.lessons import lesson
from ui.loop.details import batch_note, embedding_table, numbers, engine_note, steps_table, top_logits_table
from ui.frame.figures import step_times_bar
from ui.loop.figures import top_probs_bar
from ui.loop.sections import block_inside, loop_picture
from ui.loop.view import softmax_note
from ui.frame.runs import trace_page
from ui.record.sections import save_trace

nav.through_router()
st.title("The loop: one token, end to end")
with trace_page() as tr:  # the page in its progress box's place (see trace_page)
    v = numbers(tr)
    first = tr.steps[0]
    notes(tr)

    if section(None):
        st.markdown(lesson("loop", "glance"))
        loop_picture(tr)
        what_you_see(lesson("loop", "what you see", **v))
        ask("loop", "try this", lesson("loop", "answer", **v), key="loop_try")

    if section("1. Text"):
        st.markdown(lesson("loop", "text", **v))
        st.code(tr.encoded.text, language=None, wrap_lines=True)

    if section("2. Token ids"):
        st.markdown(lesson("loop", "ids", **v))
        st.html(chips(tr.prompt_tokens, tr.prompt_ids))
        nav.link("pages/tokenization.py")

    if section("3. Embedding vectors"):
        st.markdown(lesson("loop", "embeddings", **v))
        st.dataframe(embedding_table(tr), hide_index=True, height=min(400, 38 + 35 * min(v["n"], 10)))
        st.caption(v["pos_note"])
        nav.link("pages/embeddings.py")

    if section(f"4. {v['layers']} transformer blocks"):
        st.markdown(lesson("loop", "blocks", **v))
        block_inside(tr)
        nav.link("pages/attention.py")

    if section("5. The last hidden state"):
        st.markdown(lesson("loop", "hidden", **v))

    if section("6. Logits over the vocabulary"):
        st.markdown(lesson("loop", "logits", **v))
        st.dataframe(top_logits_table(tr), hide_index=True)

    if section("7. Softmax"):
        st.markdown(lesson("loop", "softmax", **v))
        chart(top_probs_bar(first.top_tokens[:5], first.top_probs[:5], first.token, "Top-5 next tokens after the prompt"),
              "model", "Probabilities at temperature 1 from this run; red marks the token that was drawn.")

    if section("8. Sample one token"):
        st.markdown(lesson("loop", "sample", **v))
        if softmax_note(tr.settings):
            st.caption(softmax_note(tr.settings))
        nav.link("pages/sampling.py")

    if section("9. Append, and repeat with the cache"):
        st.markdown(lesson("loop", "append", **v))
        st.html(chips(tr.generated_tokens, tr.generated_ids, highlight={0}))
        chart(step_times_bar(tr.steps), "measured",
              f"Wall time per forward pass incl. sampling, after a device sync. Time to first token "
              f"{v['ttft_ms']:.0f} ms; median decode step {v['decode_ms']:.0f} ms." + engine_note(tr) + batch_note(tr))
        st.dataframe(steps_table(tr), hide_index=True, height=min(420, 38 + 35 * len(tr.steps)))
        for col, target in zip(st.columns(3), ["pages/timeline.py", "pages/kv_cache.py", "pages/speculative.py"]):
            with col:
                nav.link(target)
        save_trace(tr)  # this run as one file, and as a page that replays it offline
