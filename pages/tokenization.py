"""Tokenization: the text cut into the token ids the model really receives."""
import ui.frame.boot  # noqa: F401  first: every module imported once, in one thread (see ui/frame/boot.py)
import streamlit as st

from ui.frame import nav
from ui.tokenization import sections as tokenization_pair
from ui.tokenization import view as V
from ui.frame.layout import chart, section, what_you_see
from ui.frame.predict import ask
from ui.frame.errors import prompt_refused
from ui.frame.html import md_escape
from ui.frame.lessons import lesson
from ui.frame.models import current_model, policy
from ui.frame.state import settings
from ui.tokenization.runs import compare_for, ids_for, pair_offered, paris_ids, segments_for, sources, table_for
from ui.tokenization.figures import bytes_per_token_bar, chip_label, compare_bar, template_view, token_chips

nav.through_router()
st.title("Tokenization: from text to token ids")
lm = current_model()
info = lm.info
s = settings()

choice = st.segmented_control("Text to tokenize", list(V.EXAMPLES), default=V.YOUR_PROMPT, key="tokenization_source")
text = V.text_for(choice, s.prompt)
if V.is_example(choice):
    st.caption(lesson("tokenization", "example note"))
with prompt_refused(), st.spinner("Tokenizing..."):
    table = table_for(lm.ref, text, s.chat)
for note in table.notes:
    st.warning(note, icon=":material/info:")

n = len(table.rows)
if section(None):
    c1, c2 = st.columns([3, 2])  # the first label is long: in halves, presenter view cut it at "newli..."
    label, why = V.raw_toggle(table)  # read from this model's tokenizer: Gemma's pieces have no \u0120
    raw = c1.toggle(label, key="tokenization_raw", help=why)
    show_ids = c2.toggle("Show token ids", value=True, key="tokenization_ids")
    st.html(token_chips(table, raw_pieces=raw, show_ids=show_ids))
    st.caption(lesson("tokenization", "chips caption")
               + (" " + lesson("tokenization", "byte level") if table.byte_level else ""))
    invisible = V.invisible_note(table)  # ⟨U+FE0F⟩ and the like: say what such a chip is
    if invisible:
        st.caption(invisible)
    chart(bytes_per_token_bar(table), "model",
          "UTF-8 bytes each token stands for (orange: a piece of a multi-byte character, dark: special "
          "token), from this model's own tokenizer; no forward pass is needed.")
    what_you_see(lesson("tokenization", "what you see", vocab=info.vocab_size, source=info.source))
    paris = paris_ids(lm.ref)
    answer = V.paris_answer(paris)
    if answer:
        ask("tokenization", "try this", answer, key="tokenization_try", verdict=V.verdict(paris))

if section("Counts"):
    cols = st.columns(5)
    cols[0].metric("Characters", f"{table.n_chars:,}", help="Unicode code points in the text the model receives.")
    cols[1].metric("UTF-8 bytes", f"{table.n_bytes:,}")
    cols[2].metric("Tokens", f"{n:,}", help=f"{sum(r.special for r in table.rows)} of them special control tokens.")
    cols[3].metric("Characters per token", f"{table.chars_per_token:.2f}")
    cols[4].metric("Share of the context", f"{n / info.max_positions:.2%}",
                   help=f"This model accepts at most {info.max_positions:,} positions.")
    st.markdown(V.counts_text(table, info))

if section("Inspect one token"):
    pick = st.selectbox("Token", range(n), key="tokenization_pick",
                        format_func=lambda i: f"#{i}: {chip_label(table.rows[i])}  (id {table.rows[i].id})")
    st.dataframe(V.token_fields(table, pick or 0), hide_index=True, width="stretch")

if section("The chat template: what the model really receives"):
    if table.chat_applied:
        st.markdown(lesson("tokenization", "chat on"))
        st.html(template_view(segments_for(lm.ref, table.ids)))
        st.caption(lesson("tokenization", "chat on caption", typed=len(ids_for(lm.ref, text)), n=n))
    else:
        st.markdown(lesson("tokenization", "chat off" if info.has_chat_template else "no template"))

if section("The token table"):
    shown, csv = V.token_table(table)
    st.dataframe(shown, hide_index=True, width="stretch", height=min(420, 38 + 35 * min(n, 12)))
    st.download_button("Download the token table (CSV)", csv, file_name="tokens.csv", mime="text/csv",
                       key="tokenization_csv", icon=":material/download:")
    st.caption(lesson("tokenization", "csv caption"))

compare_on = section("Compare tokenizers")
if compare_on:
    with st.spinner("Tokenizing with every tokenizer..."):
        counts, problems = compare_for(text, tuple(sources(lm.name)), lm.ref)
    class_mode = policy().class_mode
    st.markdown(lesson("tokenization", "compare intro class" if class_mode else "compare intro"))
    if counts:
        chart(compare_bar(counts, lm.name), "model", lesson("tokenization", "compare caption"))
        for c in counts:
            with st.expander(f"{md_escape(c.name)}: {c.n_tokens} tokens, {c.chars_per_token:.2f} characters per token"):
                st.code(V.tokens_line(c.texts, c.n_tokens), language=None, wrap_lines=True)
    if len(counts) <= 3 and not class_mode:
        st.caption(lesson("tokenization", "no other tokenizers"))
    for p in problems:
        st.caption(f":material/warning: {md_escape(p)}")


pair = pair_offered()
pair_on = pair and section("Two real tokenizers: SmolLM2 vs Gemma 3")
if pair_on:
    tokenization_pair.render(text)
if pair_on or (compare_on and not pair):  # under the page's last section
    nav.link("pages/embeddings.py", "Next: each token id becomes a vector (embeddings & position)")
