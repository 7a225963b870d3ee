"""Embeddings & position: each token id becomes a row of the embedding table; position enters as RoPE rotations
(or learned position vectors), read from the real model."""
import ui.frame.boot  # noqa: F401  first: every module imported once, in one thread (see ui/frame/boot.py)
import streamlit as st

from ui.embeddings import sections
from ui.frame import nav
from ui.embeddings.runs import embeddings_for, map_for, prompt_ids
from ui.embeddings.figures import cosine_heatmap, embedding_heatmap, norms_bar, pca_scatter
from ui.embeddings.view import pca_caption
from ui.frame.errors import prompt_refused
from ui.frame.layout import chart, section, what_you_see
from ui.frame.lessons import lesson
from ui.frame.models import current_model
from ui.frame.state import settings

SAMPLE_SIZE = 2000
SAMPLE_SEED = 0
MAX_SHOWN = 96  # tokens drawn in the heatmaps (all are computed)

nav.through_router()
st.title("Embeddings & position")
lm = current_model()
info = lm.info
s = settings()
with prompt_refused(), st.spinner("Looking up the embedding rows..."):
    ids, tokens, chat = prompt_ids(lm.ref, s.prompt, s.chat)
    emb = embeddings_for(lm.ref, ids)
n, d = emb.vectors.shape

pos_kind = info.position_encoding if info.position_encoding in ("rope", "learned") else "unknown"
if section(None, with_next=True):  # a short introduction: on a projector, on the first section's screen
    what_you_see(lesson("embeddings", "what you see", vocab=info.vocab_size, d=d, n=n,
                        position=lesson("embeddings", f"position {pos_kind}")))
    if n > MAX_SHOWN:
        st.caption(f"The heatmaps show the first {MAX_SHOWN} of {n} tokens; everything else uses all of them.")

if section("1. One vector per token"):
    chart(embedding_heatmap(emb.vectors, tokens, MAX_SHOWN), "model",
          f"Rows of this model's input embedding table for the prompt{' (chat template included)' if chat else ''}. "
          "A repeated token gets the identical row: the lookup knows nothing about context.")
    chart(norms_bar(emb.norms, tokens, emb.vocab_norm_quantiles, MAX_SHOWN), "model",
          "L2 norm of each row, against the spread of norms over all vocabulary rows.")
    sections.scale_note(info, emb.norms)  # Gemma: rows scaled by sqrt(hidden) before block 0

if section("2. Which tokens look alike"):
    chart(cosine_heatmap(emb.cosine, tokens, "Cosine similarity between the prompt's embedding vectors",
                         max_tokens=MAX_SHOWN), "model",
          "cos = a\u00b7b / (|a||b|) between rows: 1 = same direction, 0 = unrelated. The diagonal is 1.")

    with st.spinner("Projecting a sample of the vocabulary..."):
        emap = map_for(lm.ref, ids, SAMPLE_SIZE, SAMPLE_SEED)
    chart(pca_scatter(emap), "model", pca_caption(emap))

if section(None):  # the fragment draws its own headers (neighbours, tied embeddings, position)
    names, default, key_default = sections.token_choices(ids, tokens, s.prompt)
    sections.neighbours_to_tied(lm, info, names, default, key_default)  # a fragment: see ui/embeddings_sections
    nav.link("pages/attention.py", "Next: attention, where these vectors meet")
