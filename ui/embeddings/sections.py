"""The embeddings page's position and tied-embedding sections, drawn whole (the page lays them out in order),
and the choice of default tokens for its pickers.

The pickers rerun only their part of the page (fragments): the neighbour picker drives the neighbours
and section 4's rows, so it and sections 3-4 are one fragment; the number of neighbours and section 3's pickers
are nested ones."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from ui.frame import errors

from engine.embeddings.analysis import rope_refusal

from ui.embeddings.runs import learned_for, neighbours_for, relative_for, rope_for, row_pair_for, tied_for
from ui.embeddings.figures import (cosine_heatmap, learned_heatmap, neighbours_bar, relative_heatmap, relative_lines,
                                   rope_angle_heatmap, rope_wavelength_line)
from ui.frame.layout import chart
from ui.frame.predict import ask
from engine.predictions.grading import nearer_alike, rope_shift
from ui.frame.lessons import lesson
from ui.frame.figures import token_label


def token_choices(ids, tokens, prompt: str):
    """Distinct prompt tokens in order (id -> text), the default for the neighbour and query pickers (a word the
    person typed, not a template role word) and the default key token."""
    choices = sorted({i: t for i, t in zip(ids, tokens)}.items(), key=lambda kv: ids.index(kv[0]))
    text_like = [i for i, t in choices if t.strip().isalnum() and t.strip() in prompt] or \
        [i for i, t in choices if t.strip().isalnum()]
    default = text_like[-1] if text_like else choices[-1][0]
    key_default = text_like[0] if len(text_like) > 1 else choices[0][0]
    return dict(choices), default, key_default


@errors.fragment
def neighbours_to_tied(lm, info, names: dict, default: int, key_default: int) -> None:
    """The end of section 2 (a token's nearest neighbours), then sections 3 and 4; the picked token drives 2 and 4."""
    q_id = st.selectbox("Nearest tokens to", list(names), index=list(names).index(default),
                        format_func=lambda i: f"{token_label(names[i])!r} (id {i})", key="embeddings_neighbour")
    neighbours(lm, info, int(q_id))
    st.header("3. Position: how the model knows the order", divider="gray")
    position(lm, info, names, default, key_default)
    st.header("4. The same table at the other end", divider="gray")
    tied(lm, info, names, q_id)


@errors.fragment
def neighbours(lm, info, q_id: int) -> None:
    k = st.slider("How many neighbours", 5, 30, 12, key="embeddings_k")
    nb = neighbours_for(lm.ref, q_id, int(k))
    chart(neighbours_bar(nb), "model", f"Cosine similarity against all {info.vocab_size:,} rows of the table.")


@errors.fragment
def scale_note(info, norms) -> None:
    """Models that multiply the embedding before block 0 (Gemma: by sqrt(hidden)): the factor and what it does to
    the rows' norms (read from the model; the norms are this prompt's real rows)."""
    scale = getattr(info.arch, "embedding_scale", None) if info.arch is not None else None
    if not scale:
        return
    med = float(sorted(norms)[len(norms) // 2]) if len(norms) else float("nan")
    st.info(lesson("embeddings", "scaled", scale=scale, hidden=info.hidden_size, norm=med, scaled=med * scale),
            icon=":material/open_in_full:")


def position(lm, info, names: dict, default: int, key_default: int) -> None:
    """Section 3: RoPE (or a learned position table), from the real model."""
    choices = list(names.items())
    refused = rope_refusal(lm) if info.position_encoding == "rope" else None
    if refused:
        st.info(f"The RoPE sections are not shown for this model: {refused}.", icon=":material/block:")
    elif info.position_encoding == "rope" and info.head_dim:
        n_pos = st.slider("Positions to show", 16, 256, 64, step=16, key="embeddings_positions")
        ra = rope_for(lm.ref, int(n_pos))
        st.markdown(lesson("embeddings", "rope", head_dim=info.head_dim, pairs=ra.rotary_dim // 2, base=ra.base,
                           d=ra.rotary_dim))
        source = ("The formula above with this model's config" if not ra.scaling else
                  f"This model's own frequencies: its config's rope_type '{ra.scaling}' rescales base^(-2i/d) for "
                  "long contexts, so the slow pairs turn slower than the formula above says")
        chart(rope_angle_heatmap(ra), "derived",
              f"{source}; it matches the cos values the model's own rotary module produces to "
              f"{ra.module_max_diff:.1e}. Pairing: {ra.pairing}.")
        f = info.arch
        bases = sorted({b for b in f.rope_bases if b}) if f is not None else []
        others = {}
        if len(bases) > 1:  # one line per RoPE base: the first layer using each other base
            for b in bases:
                i = next(i for i, x in enumerate(f.rope_bases) if x == b)
                if i and b != ra.base:
                    kind = f"sliding window {f.windows[i]}" if f.windows[i] else "global"
                    others[f"base {b:,.0f} (layer {i}, {kind})"] = rope_for(lm.ref, int(n_pos), i)
        chart(rope_wavelength_line(ra, others), "derived",
              "Wavelength 2\u03c0 / base^(-2i/d) of each pair, from the config"
              + (": a larger base turns slower, so a global layer can tell apart positions far further apart."
                 if others else "."))
        if len(bases) > 1:
            st.caption("This model rotates with a different base per layer kind: " + "; ".join(
                f"layer {i} ({'sliding window ' + str(w) if w else 'global'}): "
                + (f"base {b:g}" if b else "no RoPE (NoPE)")
                for i, (w, b) in enumerate(zip(f.windows, f.rope_bases))) + ". Shown above: layer 0's.")

        st.subheader("The score depends only on the distance")
        st.markdown(lesson("embeddings", "distance"))
        c1, c2, c3 = st.columns(3)
        ids_list = [i for i, _ in choices]
        qt = c1.selectbox("Query from token", ids_list, index=ids_list.index(default), key="embeddings_q",
                          format_func=lambda i: f"{token_label(names[i])!r} (id {i})")
        kt = c2.selectbox("Key from token", ids_list, index=ids_list.index(key_default), key="embeddings_kt",
                          format_func=lambda i: f"{token_label(names[i])!r} (id {i})")
        head = c3.selectbox("Query head", list(range(info.n_heads)), key="embeddings_head")
        demo = relative_for(lm.ref, int(qt), int(kt), int(head), min(int(n_pos), 64))
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
            ask("embeddings", "try rope", lesson("embeddings", "answer rope", a=a, b=b), key="embeddings_try",
                verdict=rope_shift(float(a), float(b)))
    elif info.position_encoding == "learned":
        n_pos = st.slider("Positions to show", 16, 256, 64, step=16, key="embeddings_positions")
        lp = learned_for(lm.ref, int(n_pos))
        st.markdown(f"This model has a second table of {lp.table_size:,} learned vectors, one per position, "
                    "added to the token's embedding before the first block. It cannot read past its last position.")
        chart(learned_heatmap(lp), "model", "Rows of the model's learned position table.")
        chart(cosine_heatmap(lp.cosine, [str(p) for p in range(lp.vectors.shape[0])],
                             "Cosine similarity between position vectors", axis="position", max_tokens=256), "model",
              "Nearby positions have similar vectors: order was learned, not given by a formula.")
        if lp.vectors.shape[0] > 1:
            ask("embeddings", "try learned",
                f"Measured cosine: positions 0 and 1: **{lp.cosine[0, 1]:.3f}**; 0 and {lp.vectors.shape[0] - 1}: "
                f"**{lp.cosine[0, -1]:.3f}**.", key="embeddings_try",
                verdict=nearer_alike(float(lp.cosine[0, 1]), float(lp.cosine[0, -1])))
    elif info.position_encoding == "alibi":
        st.info("This model adds no position vector and rotates nothing: ALiBi subtracts from each attention score a "
                "penalty proportional to the distance between the two tokens (a different slope per head). Position "
                "lives in the attention scores; this page does not draw it.", icon=":material/block:")
    else:
        st.info("This model's position scheme is not one this page can show (neither RoPE nor a learned table).")


def tied(lm, info, names: dict, q_id: int) -> None:
    """Section 4: the input embedding and the output head, one matrix or two."""
    tied = tied_for(lm.ref)
    a, b = row_pair_for(lm.ref, int(q_id))
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
    st.caption(f"First values of token {token_label(names[q_id])!r} (id {q_id}) in both matrices, read from the model.")
