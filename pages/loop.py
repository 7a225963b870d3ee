"""Home page: one token, end to end, with the real numbers at every stage."""
import ui.boot  # noqa: F401  first: every module imported once, in one thread (see ui/boot.py)
import numpy as np
import pandas as pd
import streamlit as st

from ui import nav
from ui.html import chips, visible
from ui.layout import chart, notes, try_this, what_you_see
from ui.loop_figures import residual_norm_line, step_times_bar, top_probs_bar
from ui.models import current_model
from ui.runs import block_walk_for, current_trace

nav.through_router()
st.title("The loop: one token, end to end")
st.markdown("A language model writes one token at a time. Every token goes through the same stages, "
            "shown here with the real values from the model running on this machine.")
lm = current_model()
info = lm.info
tr = current_trace()
notes(tr)
a = tr.analysis
n = len(tr.prompt_ids)
first = tr.steps[0]

what_you_see(
    f"**{info.source}**: {info.n_params / 1e6:.0f} M parameters, {info.n_layers} blocks, running on "
    f"**{info.device}** in {info.dtype}. Below, your prompt is turned into a next-token choice, step by step. "
    "Then the loop repeats for every new token, reusing the cache.")
try_this("Before scrolling: how many numbers does the model output to choose *one* next token?",
         f"One score (a *logit*) for every token in its vocabulary: **{info.vocab_size:,}** numbers, "
         "turned into probabilities by softmax, from which a single token is drawn.", key="loop_try")

st.header("1. Text", divider="gray")
st.markdown("The model never sees your text as typed. " + (
    "The chat template wraps it in role markers first; this is the exact text it receives:"
    if tr.encoded.chat_applied else "This is the exact text it receives:"))
st.code(tr.encoded.text, language=None, wrap_lines=True)

st.header("2. Token ids", divider="gray")
st.markdown(f"The tokenizer cuts the text into **{n} tokens**, each an integer id in a vocabulary of "
            f"{info.vocab_size:,}. (Dots are spaces, \u21b5 is a newline.)")
st.html(chips(tr.prompt_tokens, tr.prompt_ids))
nav.link("pages/tokenization.py")

st.header("3. Embedding vectors", divider="gray")
st.markdown(f"Each id picks one row of the embedding table: a vector of **{info.hidden_size}** numbers. "
            f"The prompt becomes a matrix of shape **[{n}, {info.hidden_size}]**. First values of each row:")
emb = pd.DataFrame(a.embedding_preview, columns=[f"dim {i}" for i in range(a.embedding_preview.shape[1])])
emb.insert(0, "token", [visible(t) for t in tr.prompt_tokens])
emb["L2 norm"] = a.residual_norms[0]
st.dataframe(emb.round(4), hide_index=True, height=min(400, 38 + 35 * min(n, 10)))
pos_note = ("Position is not added here: this model rotates queries and keys by position (RoPE) inside attention."
            if info.position_encoding == "rope" else "This model adds a learned position vector to each embedding.")
st.caption(pos_note)
nav.link("pages/embeddings.py")

st.header(f"4. {info.n_layers} transformer blocks", divider="gray")
st.markdown("Each block reads the *residual stream*, computes something, and adds it back: "
            "norm \u2192 attention \u2192 add \u2192 norm \u2192 MLP \u2192 add. "
            "Attention is the only place tokens exchange information; the MLP works on each position alone.")
layer = st.slider("Block to look inside", 0, info.n_layers - 1, 0, key="loop_layer")
walk = block_walk_for(lm.name, tr.prompt_ids, layer)
if walk is None:
    st.caption("This architecture's blocks are not broken down here.")
else:
    df = pd.DataFrame([{"stage": s.name, "shape": str(list(s.shape)), "norm at last position": round(s.norm, 3),
                        "first values at last position": ", ".join(f"{v:+.3f}" for v in s.preview)} for s in walk])
    st.dataframe(df, hide_index=True)
    st.caption(f"Real values inside block {layer} for the last prompt token {visible(tr.prompt_tokens[-1])!r}. "
               "The two 'add' rows are the residual stream after each sub-layer writes into it.")
chart(residual_norm_line(a.residual_norms[:, -1], tr.prompt_tokens[-1]), "model",
      "The size of the last position's residual-stream vector after each block (before the final norm).")
nav.link("pages/attention.py")

st.header("5. The last hidden state", divider="gray")
st.markdown(f"After the last block and a final norm, only the **last position** matters for the next token: "
            f"one vector of {info.hidden_size} numbers. First values: "
            f"`{', '.join(f'{v:+.3f}' for v in a.hidden_preview)}`")

st.header("6. Logits over the vocabulary", divider="gray")
logits = tr.first_logits
top5 = list(first.top_ids[:5])  # softmax keeps the order of the logits
tied = (" It is the embedding table reused (tied weights)." if info.tied_embeddings else "")
st.markdown(f"The output head multiplies that vector by a [{info.hidden_size} \u00d7 {info.vocab_size:,}] "
            f"matrix, giving **{info.vocab_size:,} logits**.{tied} They range from {logits.min():.1f} to "
            f"{logits.max():.1f}; the five largest:")
st.dataframe(pd.DataFrame({"token": [visible(t) for t in first.top_tokens[:5]], "token id": top5,
                           "logit": np.round(logits[top5], 3)}), hide_index=True)

st.header("7. Softmax", divider="gray")
st.markdown("Softmax exponentiates and normalises the logits into probabilities that sum to 1. "
            f"The distribution's entropy is **{first.entropy_bits:.2f} bits** (0 = certain).")
chart(top_probs_bar(first.top_tokens[:5], first.top_probs[:5], first.token, "Top-5 next tokens after the prompt"),
      "model", "Probabilities at temperature 1 from this run; red marks the token that was drawn.")

st.header("8. Sample one token", divider="gray")
ss = tr.settings
how = ("greedy (temperature 0): the most likely token is taken" if ss.greedy else
       f"temperature {ss.temperature:g}, top-k {ss.top_k or 'off'}, top-p {ss.top_p:g}, seed {tr.seed}")
st.markdown(f"With **{how}**, the model chose **{visible(first.token)!r}** (id {first.token_id}), which had "
            f"probability **{first.prob:.1%}** under those settings.")
nav.link("pages/sampling.py")

st.header("9. Append, and repeat with the cache", divider="gray")
gen = list(range(len(tr.generated_ids)))
st.markdown(f"The chosen token is appended and the loop runs again, {len(tr.generated_ids)} times in all "
            f"(stopped by {'the end-of-turn token' if tr.stop_reason == 'eos' else 'the max-new-tokens limit'}). "
            "Each later pass feeds **only the new token**: keys and values of earlier tokens come from the KV cache.")
st.html(chips(tr.generated_tokens, tr.generated_ids, highlight={0}))
chart(step_times_bar(tr.steps), "measured",
      f"Wall time per forward pass incl. sampling, after a device sync. Time to first token "
      f"{tr.ttft * 1000:.0f} ms; median decode step {np.median(tr.decode_seconds or [np.nan]) * 1000:.0f} ms.")
steps = pd.DataFrame([{"step": s.index, "phase": s.phase, "tokens in": s.tokens_in, "chosen": visible(s.token),
                       "p(chosen)": round(s.prob, 3), "ms": round(s.seconds * 1000, 1),
                       "KV cache (KiB)": round(s.kv_bytes / 1024, 1)} for s in tr.steps])
st.dataframe(steps, hide_index=True, height=min(420, 38 + 35 * len(gen)))
cols = st.columns(3)
nav_targets = ["pages/timeline.py", "pages/kv_cache.py", "pages/speculative.py"]
for col, target in zip(cols, nav_targets):
    with col:
        nav.link(target)
