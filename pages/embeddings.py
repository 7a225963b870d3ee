"""Embeddings & position: each token id becomes a row of the embedding table; position enters as RoPE rotations
(or learned position vectors), read from the real model."""
import ui.boot  # noqa: F401  first: every module imported once, in one thread (see ui/boot.py)
import pandas as pd
import streamlit as st

from engine.stages.embeddings import PCA_METHOD
from engine.prompt import PromptError
from ui import nav
from ui.embeddings_data import (embeddings_for, learned_for, map_for, neighbours_for, prompt_ids, relative_for,
                                rope_for, row_pair_for, tied_for)
from ui.embeddings_figures import (cosine_heatmap, embedding_heatmap, learned_heatmap, neighbours_bar, norms_bar,
                                   pca_scatter, relative_heatmap, relative_lines, rope_angle_heatmap,
                                   rope_wavelength_line)
from ui.layout import chart, try_this, what_you_see
from ui.models import current_model
from ui.state import settings
from ui.tokenization_figures import label

SAMPLE_SIZE = 2000
SAMPLE_SEED = 0
MAX_SHOWN = 96  # tokens drawn in the heatmaps (all are computed)

nav.through_router()
st.title("Embeddings & position")
lm = current_model()
info = lm.info
s = settings()
try:
    with st.spinner("Looking up the embedding rows..."):
        ids, tokens, chat = prompt_ids(lm.name, s["prompt"], bool(s["chat"]))
        emb = embeddings_for(lm.name, ids)
except PromptError as exc:
    st.warning(str(exc), icon=":material/edit_note:")
    st.stop()
n, d = emb.vectors.shape

what_you_see(
    f"The first thing the model does with token ids: each id selects one row of a [{info.vocab_size:,} \u00d7 {d}] "
    f"table of learned numbers, so your {n} tokens become a [{n} \u00d7 {d}] matrix. Nothing else happens here; "
    "meaning lives in where those vectors point. Order is added separately: "
    + ("this model rotates queries and keys by an angle that grows with position (RoPE)."
       if info.position_encoding == "rope" else
       "this model adds a learned vector for each position." if info.position_encoding == "learned" else
       "this model's position scheme is not one this page knows."))
if n > MAX_SHOWN:
    st.caption(f"The heatmaps show the first {MAX_SHOWN} of {n} tokens; everything else uses all of them.")

st.header("1. One vector per token", divider="gray")
chart(embedding_heatmap(emb.vectors, tokens, MAX_SHOWN), "model",
      f"Rows of this model's input embedding table for the prompt{' (chat template included)' if chat else ''}. "
      "A repeated token gets the identical row: the lookup knows nothing about context.")
chart(norms_bar(emb.norms, tokens, emb.vocab_norm_quantiles, MAX_SHOWN), "model",
      "L2 norm of each row, against the spread of norms over all vocabulary rows.")

st.header("2. Which tokens look alike", divider="gray")
chart(cosine_heatmap(emb.cosine, tokens, "Cosine similarity between the prompt's embedding vectors",
                     max_tokens=MAX_SHOWN), "model",
      "cos = a\u00b7b / (|a||b|) between rows: 1 = same direction, 0 = unrelated. The diagonal is 1.")

with st.spinner("Projecting a sample of the vocabulary..."):
    emap = map_for(lm.name, ids, SAMPLE_SIZE, SAMPLE_SEED)
chart(pca_scatter(emap), "model",
      f"{PCA_METHOD}, over {len(emap.sample_ids):,} vocabulary rows drawn at random (seed {emap.seed}); the prompt's "
      "tokens are projected onto the same two axes. Two axes keep only a small part of the picture: "
      "closeness here is a hint, the cosine numbers are the truth.")

choices = sorted({i: t for i, t in zip(ids, tokens)}.items(), key=lambda kv: ids.index(kv[0]))
# Default to words the person typed (not the template's role words): alphanumeric tokens found in the prompt.
text_like = [i for i, t in choices if t.strip().isalnum() and t.strip() in s["prompt"]] or \
    [i for i, t in choices if t.strip().isalnum()]
default = text_like[-1] if text_like else choices[-1][0]
key_default = text_like[0] if len(text_like) > 1 else choices[0][0]
names = dict(choices)
q_id = st.selectbox("Nearest tokens to", [i for i, _ in choices], index=[i for i, _ in choices].index(default),
                    format_func=lambda i: f"{label(names[i])!r} (id {i})", key="embeddings_neighbour")
k = st.slider("How many neighbours", 5, 30, 12, key="embeddings_k")
nb = neighbours_for(lm.name, int(q_id), int(k))
chart(neighbours_bar(nb), "model", f"Cosine similarity against all {info.vocab_size:,} rows of the table.")

st.header("3. Position: how the model knows the order", divider="gray")
if info.position_encoding == "rope" and info.head_dim:
    n_pos = st.slider("Positions to show", 16, 256, 64, step=16, key="embeddings_positions")
    ra = rope_for(lm.name, int(n_pos))
    st.markdown(
        "Nothing about position is added to the embedding. Instead, inside every attention layer, each query and "
        f"key vector of {info.head_dim} numbers is cut into {ra.rotary_dim // 2} pairs, and pair *i* at position "
        f"*pos* is rotated by the angle **\u03b8 = pos \u00d7 base^(-2i/d)**, with base = **{ra.base:g}** and "
        f"d = **{ra.rotary_dim}** from this model's config. Low pairs spin fast (pair 0: one radian per token); "
        "high pairs barely move, so they can tell apart positions thousands of tokens away.")
    chart(rope_angle_heatmap(ra), "derived",
          f"The formula above with this model's config; it matches the cos values the model's own rotary module "
          f"produces to {ra.module_max_diff:.1e}. Pairing: {ra.pairing}.")
    chart(rope_wavelength_line(ra), "derived", "Wavelength 2\u03c0 / base^(-2i/d) of each pair, from the config.")

    st.subheader("The score depends only on the distance")
    st.markdown("Rotating q by \u03b8(m) and k by \u03b8(n) leaves q\u00b7k depending on m \u2212 n alone, "
                "because the two rotations partly cancel. Below, one real query vector and one real key vector "
                "are placed at every pair of positions with the model's own rotary module, and the score is measured.")
    c1, c2, c3 = st.columns(3)
    ids_list = [i for i, _ in choices]
    qt = c1.selectbox("Query from token", ids_list, index=ids_list.index(default), key="embeddings_q",
                      format_func=lambda i: f"{label(names[i])!r} (id {i})")
    kt = c2.selectbox("Key from token", ids_list, index=ids_list.index(key_default), key="embeddings_kt",
                      format_func=lambda i: f"{label(names[i])!r} (id {i})")
    head = c3.selectbox("Query head", list(range(info.n_heads)), key="embeddings_head")
    demo = relative_for(lm.name, int(qt), int(kt), int(head), min(int(n_pos), 64))
    st.caption(f"Vectors: {demo.source}.")
    chart(relative_heatmap(demo), "measured",
          f"q\u00b7k/\u221ad after rotation, computed on this machine (above the diagonal the key comes after the "
          "query, which causal attention masks; the maths is the same). Along any diagonal (same m \u2212 n) the "
          f"largest difference is {demo.max_spread:.1e}, while scores range over {demo.value_range:.3f}: "
          "only the distance matters (the rest is float rounding).")
    chart(relative_lines(demo), "measured",
          "Each line starts the key at a different absolute position; they overlap exactly. At distance 0 the "
          "score equals the un-rotated q\u00b7k.")
    if demo.scores.shape[0] > 13:
        a, b = demo.scores[3, 0], demo.scores[13, 10]
        try_this("A query 3 tokens after a key gets some score. If both move 10 positions later (query at 13, "
                 "key at 10), does the score change?",
                 f"No. Measured: score(3, 0) = **{a:.5f}**, score(13, 10) = **{b:.5f}**. With learned absolute "
                 "positions they would differ; RoPE makes attention see distances, not addresses.",
                 key="embeddings_try")
elif info.position_encoding == "learned":
    n_pos = st.slider("Positions to show", 16, 256, 64, step=16, key="embeddings_positions")
    lp = learned_for(lm.name, int(n_pos))
    st.markdown(f"This model has a second table of {lp.table_size:,} learned vectors, one per position, "
                "added to the token's embedding before the first block. It cannot read past its last position.")
    chart(learned_heatmap(lp), "model", "Rows of the model's learned position table.")
    chart(cosine_heatmap(lp.cosine, [str(p) for p in range(lp.vectors.shape[0])],
                         "Cosine similarity between position vectors", axis="position", max_tokens=256), "model",
          "Nearby positions have similar vectors: order was learned, not given by a formula.")
    if lp.vectors.shape[0] > 1:
        try_this("Are the vectors of positions 0 and 1 more alike than 0 and the last one shown?",
                 f"Measured cosine: positions 0 and 1: **{lp.cosine[0, 1]:.3f}**; 0 and {lp.vectors.shape[0] - 1}: "
                 f"**{lp.cosine[0, -1]:.3f}**.", key="embeddings_try")
else:
    st.info("This model's position scheme is not one this page can show (neither RoPE nor a learned table).")

st.header("4. The same table at the other end", divider="gray")
tied = tied_for(lm.name)
a, b = row_pair_for(lm.name, int(q_id))
if tied.tied:
    st.success(f"**Tied embeddings.** The output head that turns the last hidden state into {info.vocab_size:,} "
               f"logits uses the very same [{tied.input_shape[0]:,} \u00d7 {tied.input_shape[1]}] tensor as the "
               "input embedding (same memory; largest difference 0). A token's logit is the dot product of the "
               "hidden state with that token's own embedding.", icon=":material/link:")
else:
    diff = f"; largest difference {tied.max_abs_diff:.3g}" if tied.max_abs_diff is not None else ""
    st.info(f"**Untied.** The output head is a separate matrix of shape {tied.output_shape} "
            f"(input table {tied.input_shape}{diff}).", icon=":material/link_off:")
rows = {"input embedding row": a}
if b is not None:
    rows["output head row"] = b
st.dataframe(pd.DataFrame(rows, index=[f"dim {i}" for i in range(len(a))]).T.round(5), width="stretch")
st.caption(f"First values of token {label(names[q_id])!r} (id {q_id}) in both matrices, read from the model.")

nav.link("pages/attention.py", "Next: attention, where these vectors meet")
