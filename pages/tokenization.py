"""Tokenization: the text cut into the token ids the model really receives."""
import ui.boot  # noqa: F401  first: every module imported once, in one thread (see ui/boot.py)
import pandas as pd
import streamlit as st

from engine.prompt import PromptError
from ui import nav
from ui.layout import chart, try_this, what_you_see
from ui.models import current_model
from ui.state import settings
from ui.tokenization_data import compare_for, ids_for, segments_for, sources, table_for
from ui.tokenization_figures import bytes_per_token_bar, chip_label, compare_bar, label, template_view, token_chips

EXAMPLES = {
    "Your prompt (sidebar)": None,
    "Many scripts: emoji, CJK, right-to-left": "I \u2764\ufe0f tokens \U0001f642\U0001f680 \u6771\u4eac\u306f\u65e5"
                                                "\u672c\u306e\u9996\u90fd\u3002 \u05e9\u05dc\u05d5\u05dd "
                                                "\u0645\u0631\u062d\u0628\u0627 caf\u00e9 na\u00efve",
    "Invisible characters": "zero\u200bwidth\u200bspace, soft\u00adhyphen, word\u2060joiner, non\u00a0breaking",
    "Code": "def add(a, b):\n    \"\"\"Sum.\"\"\"\n    return a + b  # 4 spaces of indent\n\nprint(add(2, 40))",
    "HTML and script (shown literally)": "<script>alert(1)</script> <b>x</b> &amp; <img src=x onerror=alert(2)>",
    "Numbers": "In 2024, 1234567 + 89 = 1234656; pi is 3.14159.",
}

nav.through_router()
st.title("Tokenization: from text to token ids")
lm = current_model()
info = lm.info
s = settings()

choice = st.segmented_control("Text to tokenize", list(EXAMPLES), default="Your prompt (sidebar)",
                              key="tokenization_source") or "Your prompt (sidebar)"
text = EXAMPLES[choice] if EXAMPLES[choice] is not None else s["prompt"]
if EXAMPLES[choice] is not None:
    st.caption("An example text; the sidebar prompt is unchanged. The sidebar's chat-template toggle still applies.")

try:
    with st.spinner("Tokenizing..."):
        table = table_for(lm.name, text, bool(s["chat"]))
except PromptError as exc:
    st.warning(str(exc), icon=":material/edit_note:")
    st.stop()
for note in table.notes:
    st.warning(note, icon=":material/info:")

n = len(table.rows)
c1, c2 = st.columns(2)
raw = c1.toggle("Show raw vocabulary pieces (\u0120 = space, \u010a = newline)", key="tokenization_raw",
                help="Byte-level BPE stores each byte as a printable stand-in character; this shows those "
                     "stored pieces instead of the text they decode to.")
show_ids = c2.toggle("Show token ids", value=True, key="tokenization_ids")
st.html(token_chips(table, raw_pieces=raw, show_ids=show_ids))
st.caption("Hover a chip for its id, raw piece, bytes and character span, or pick one below. "
           + ("Byte-level tokenizer: any text can be encoded, one byte at a time if need be."
              if table.byte_level else ""))
chart(bytes_per_token_bar(table), "model",
      "UTF-8 bytes each token stands for (orange: a piece of a multi-byte character, dark: special "
      "token), from this model's own tokenizer; no forward pass is needed.")

what_you_see(
    "A model reads integers, not letters. Its tokenizer cuts the text into pieces from a fixed vocabulary "
    f"of **{info.vocab_size:,}** entries and sends their ids. Each chip above is one token, exactly as "
    f"**{info.source}** receives it: dots are spaces, \u21b5 is a newline, dark chips are special control tokens, "
    "grey chips are single bytes of a character that no one vocabulary entry spells out.")

try:
    pair = (ids_for(lm.name, "Paris"), ids_for(lm.name, " Paris"), ids_for(lm.name, "paris"))
    try_this("Are `Paris`, ` Paris` (with a leading space) and `paris` the same token for this model?",
             f"Their ids are **{list(pair[0])}**, **{list(pair[1])}** and **{list(pair[2])}**"
             + (". All different: a leading space and a capital letter are part of the token, so to the model "
                "these are unrelated vocabulary entries that it learned separately."
                if len(set(pair)) == 3 else
                ". Compare them: where ids differ, the model sees unrelated vocabulary entries that it learned "
                "separately (this tokenizer may add a leading space on its own)."), key="tokenization_try")
except Exception:  # a tokenizer that cannot encode this: the lesson box is optional
    pass

n_special = sum(r.special for r in table.rows)
st.header("Counts", divider="gray")
cols = st.columns(5)
cols[0].metric("Characters", f"{table.n_chars:,}", help="Unicode code points in the text the model receives.")
cols[1].metric("UTF-8 bytes", f"{table.n_bytes:,}")
cols[2].metric("Tokens", f"{n:,}", help=f"{n_special} of them special control tokens.")
cols[3].metric("Characters per token", f"{table.chars_per_token:.2f}")
cols[4].metric("Share of the context", f"{n / info.max_positions:.2%}",
               help=f"This model accepts at most {info.max_positions:,} positions.")
pairs = n * n * info.n_heads * info.n_layers
st.markdown(
    "**Why the count matters.** The model's context window is counted in tokens "
    f"({info.max_positions:,} here), API prices are per token, and attention compares every token with every "
    f"earlier one: the score matrix has n\u00b2 entries per head and layer. For these {n} tokens that is "
    f"{n}\u00b2 \u00d7 {info.n_heads} heads \u00d7 {info.n_layers} layers = **{pairs:,}** scores "
    "(derived; causal masking skips about half of them). Double the tokens and that number grows four times.")

st.header("Inspect one token", divider="gray")
pick = st.selectbox("Token", range(n), key="tokenization_pick",
                    format_func=lambda i: f"#{i}: {chip_label(table.rows[i])}  (id {table.rows[i].id})")
r = table.rows[pick or 0]
span = table.text[r.start:r.end] if r.start is not None else None
st.dataframe(pd.DataFrame({
    "field": ["position", "token id", "raw piece", "decodes to", "bytes (hex)", "character span", "text in span",
              "kind"],
    "value": [str(r.position), str(r.id), r.piece, label(r.text), r.bytes_hex,
              f"[{r.start}, {r.end})" if r.start is not None else "not reported by this tokenizer",
              label(span) if span is not None else "-",
              "special control token" if r.special else
              ("piece of a multi-byte character (decodes to \ufffd on its own)" if r.partial else "text")],
}), hide_index=True, width="stretch")

st.header("The chat template: what the model really receives", divider="gray")
if table.chat_applied:
    st.markdown("With the chat template on, what you typed is only part of the input. The template adds role "
                "markers (highlighted: special tokens, each a single id), and some templates add a default "
                "system message:")
    st.html(template_view(segments_for(lm.name, table.ids)))
    typed = len(ids_for(lm.name, text))
    st.caption(f"Your text alone is {typed} tokens; the template makes it {n}. Turn the chat template off in the "
               "sidebar to send the raw text instead.")
elif info.has_chat_template:
    st.markdown("The chat template is **off** (sidebar), so the model receives exactly the text above. Turn it on "
                "to see the role markers an instruct model expects.")
else:
    st.markdown("This model has no chat template: it receives exactly the text above.")

st.header("The token table", divider="gray")
df = pd.DataFrame(table.records())
shown = df.copy()
for col in ("piece", "text", "span text"):
    shown[col] = shown[col].map(lambda v: label(v) if isinstance(v, str) else v)
st.dataframe(shown, hide_index=True, width="stretch", height=min(420, 38 + 35 * min(n, 12)))
st.download_button("Download the token table (CSV)", df.to_csv(index=False).encode("utf-8"),
                   file_name="tokens.csv", mime="text/csv", key="tokenization_csv",
                   icon=":material/download:")
st.caption("The CSV keeps the raw text (UTF-8); the table above shows invisible characters by code point.")

st.header("Compare tokenizers", divider="gray")
srcs = tuple(sources(lm.name))
with st.spinner("Tokenizing with every tokenizer..."):
    counts, problems = compare_for(text, srcs, lm.name)
st.markdown("The same text as plain text (no chat template, no special tokens) through every tokenizer this "
            "machine has offline: the two models shipped with the app, a WordPiece tokenizer shipped as a package, the model "
            "loaded now, and any tokenizer in the local Hugging Face cache.")
if counts:
    chart(compare_bar(counts, lm.name), "model",
          "Token counts from each real tokenizer on this machine. The tiny model's 320-entry vocabulary needs "
          "far more tokens for the same text.")
    for c in counts:
        with st.expander(f"{c.name}: {c.n_tokens} tokens, {c.chars_per_token:.2f} characters per token"):
            st.code(" | ".join(label(t) for t in c.texts[:200]) + (" | ..." if c.n_tokens > 200 else ""),
                    language=None, wrap_lines=True)
if len(counts) <= 3:
    st.caption("No other tokenizers were found in the local Hugging Face cache "
               "(~/.cache/huggingface/hub); loading a model by name in the sidebar adds its tokenizer here.")
for p in problems:
    st.caption(f":material/warning: {p}")

nav.link("pages/embeddings.py", "Next: each token id becomes a vector (embeddings & position)")
