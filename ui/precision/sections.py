"""Section "Fewer bytes, faster decode" of the prefill-vs-decode page: the same model at each precision, measured
in one run on a button, with what it costs in agreement with float32."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from engine.measure.spread import LESSON_RUNS
from engine.precision import PROMPT, experiment as P
from engine.core.loaded import LoadedModel, ModelLoadError
from engine.models.loading import default_device
from engine.core.compiled import DEFAULT_MODE
from engine.models.precision import LABELS, lm_precision, supported
from ui.frame.html import md_escape
from engine.core.prompt import encode_prompt
from engine.measure.threads import threads_said
from ui.frame.layout import chart
from ui.frame.predict import ask
from engine.predictions.records import precision_verdict
from ui.frame.lessons import lesson
from ui.frame import kept, work
from ui.frame.models import get_model, ref_for
from ui.precision.figures import bytes_vs_speed, decode_vs_floor

RESULT = ("precision",)  # kept: ((base model, engine mode), comparison) of this session's last run


def _run(base: str, precisions: tuple[str, ...], new_tokens: int, repeats: int, read_gb_s: float,
         mode: str = DEFAULT_MODE) -> P.PrecisionComparison:
    """Each precision in the sidebar's engine mode; one that mode cannot run (int8 compiled on a CPU) runs eager,
    and says so."""
    with st.status("Comparing precisions on this machine...", expanded=True) as box:
        models = []
        for p in precisions:
            box.write(f"Preparing {LABELS[p]}" + (f", {mode}" if mode != DEFAULT_MODE else "") + "...")
            try:
                models.append(get_model(ref_for(base, p, mode)))
            except ModelLoadError as exc:
                if mode == DEFAULT_MODE:
                    raise
                box.write(md_escape(f"{p}: {exc} Eager runs."))
                models.append(get_model(ref_for(base, p)))
        ids = list(encode_prompt(models[0].tokenizer, PROMPT, use_chat_template=True).ids)
        bar = st.progress(0.0, text="Warming up")
        cmp = work.run(P.compare_precisions, models, ids, new_tokens, repeats, read_gb_s,
                       progress=work.relay("progress"),
                       events={"progress": lambda f, msg: bar.progress(min(1.0, f), text=msg)})
        bar.empty()
        box.update(label="Precisions compared", state="complete", expanded=False)
    return cmp


def answer_text(cmp: P.PrecisionComparison, device: str = "cpu", mode: str = DEFAULT_MODE) -> str:
    """The answer, written from the measurements: each speedup a median of at least LESSON_RUNS alternating repeats
    with its range; a speedup from fewer runs, or from runs more than 1.5x apart, is not made into a verdict."""
    ref = cmp.row(cmp.reference)
    parts = []
    for r in cmp.rows:
        if r.precision == cmp.reference:
            continue
        b = ref.decode_weight_bytes / r.decode_weight_bytes
        flags = cmp.speedup_flags(r.precision)
        if flags:
            parts.append(f"**{r.precision}** reads {b:.2f}\u00d7 fewer bytes per step, but its speed is not a lesson "
                         f"yet: {' '.join(flags)} Compare again.")
            continue
        s = cmp.speedup(r.precision)
        verdict = ("time followed the bytes closely" if s >= 0.8 * b else
                   "faster, but less than the bytes promise" if s > 1.05 else "no faster: the bytes are not the limit")
        parts.append(f"**{r.precision}** reads {b:.2f}\u00d7 fewer bytes per step and decoded **{s:.2f}\u00d7** as fast "
                     f"as float32 (median step {_ms(r.decode_ms)} vs {_ms(ref.decode_ms)}): {verdict}.")
    name = ("precision answer" if not device.startswith("cuda") else
            "precision answer gpu" if mode == DEFAULT_MODE else "precision answer gpu compiled")
    return lesson("timeline", name, verdicts=" ".join(parts))


def _ms(s) -> str:
    return f"{s.median:.2f} ms (range {s.lo:.2f} to {s.hi:.2f}, n={s.n})"


def precision_note(lm: LoadedModel) -> str:
    """One line for the KV cache page: the sidebar's precision and the dtype the cache is stored in."""
    p, i = lm_precision(lm), lm.info
    cache = f"the cache is stored in **{i.dtype}**, {i.bytes_per_value} bytes per value"
    if p == "int8":
        return (f":material/memory: Precision (sidebar): **int8 weights**. Only the weights are int8: keys and "
                f"values are what the layers compute, so {cache}. Quantizing the cache too is the calculator's "
                "int8/fp8 option below.")
    return f":material/memory: Precision (sidebar): **{p}**; {cache}."


def render(lm: LoadedModel, read_gb_s: float) -> None:
    """The section; ``read_gb_s``: the bandwidth the page measured (for the floors)."""
    base = lm.ref.name
    options = list(supported(default_device()))
    st.markdown(lesson("timeline", "precision"))
    res = kept.get(RESULT)
    mode = lm.ref.mode
    res = res if res and res[0] == (base, mode) else None  # a comparison of this model in this engine mode
    ask("timeline", "precision try this",
        answer_text(res[1], lm.info.device, mode) if res else lesson("timeline", "precision answer first"),
        key="precision_try", verdict=precision_verdict(res[1] if res else None),
        pending=lesson("timeline", "precision answer first"))
    c = st.columns(3)
    chosen = c[0].multiselect("Precisions (float32 is always the reference)", options,
                              default=options, key="precision_choice")
    new_tokens = c[1].slider("Tokens per run", 4, 48, 16, key="precision_tokens")
    repeats = c[2].slider("Repeats (alternating)", LESSON_RUNS, 9, LESSON_RUNS, key="precision_repeats",
                          help=f"At least {LESSON_RUNS} after a warm-up: the answer above is written from their medians.")
    precisions = tuple(["float32"] + [p for p in options if p in chosen and p != "float32"])
    unsupported = [p for p in ("float16",) if p not in options]
    if unsupported:
        st.caption(f"Not offered on {default_device().type}: float16 (needs a CUDA GPU).")
    if st.button("Compare the precisions", key="precision_run", type="primary",
                 help="Prepares a copy of the model at each precision (once), then times them alternately."):
        try:
            kept.put(RESULT, ((base, mode), _run(base, precisions, new_tokens, repeats, read_gb_s, mode)))
            st.rerun()  # so the reveal above is written from the new numbers
        except ModelLoadError as exc:
            st.error(f"{exc}", icon=":material/error:")
    if not res:
        st.caption(lesson("timeline", "precision nothing yet"))
        return
    _show(res[1])


def _show(cmp: P.PrecisionComparison) -> None:
    ref = cmp.row(cmp.reference)
    cols = st.columns(len(cmp.rows))
    for col, r in zip(cols, cmp.rows):
        col.metric(f"{r.precision}: decode" + ("" if r.precision == cmp.reference else
                                               f" ({cmp.speedup(r.precision):.2f}\u00d7 float32)"),
                   f"{r.decode_tokens_per_s:.1f} tok/s", help="Measured: 1000 / median decode step; the ratio is "
                                                              "float32's median step / this one's, same run.")
    chart(decode_vs_floor(cmp), "measured",
          f"Blue: median decode step over {cmp.repeats} alternating repeat(s) of {cmp.new_tokens} greedy tokens, "
          f"whiskers min to max (measured). Grey: weight bytes one step reads, counted from the stored tensors, / "
          f"the bandwidth measured above (derived). {threads_said(cmp.threads)}.", key="precision_floor")
    chart(bytes_vs_speed(cmp), "measured",
          "Grey: bytes relative to float32 (derived from the tensors); blue: measured decode time relative to "
          "float32 in the same run. Equal bars would mean time follows bytes exactly.", key="precision_ratio")
    rows = []
    for r in cmp.rows:
        over = r.decode_ms.median < r.floor_ms  # faster than the floor would break the model of the floor
        rows.append({
            "precision": r.precision, "compute / KV dtype": r.dtype,
            "weight MB per step": round(r.decode_weight_bytes / 1e6, 1),
            "floor ms (derived)": round(r.floor_ms, 2),
            "decode ms (measured)": f"{r.decode_ms.median:.1f}" + (" (below its floor: suspect)" if over else ""),
            "decode range ms": f"{r.decode_ms.lo:.1f} to {r.decode_ms.hi:.1f}",
            "speedup vs float32": round(cmp.speedup(r.precision), 2),
            "prefill ms (measured)": round(r.prefill_ms.median, 1),
        })
    st.dataframe(pd.DataFrame(rows), hide_index=True)
    st.markdown("**What it costs**: agreement with float32.")
    st.dataframe(pd.DataFrame([{
        "precision": r.precision, f"greedy tokens = float32 (of {cmp.new_tokens})": r.same_tokens,
        f"top-1 agreement ({r.agreement.positions} positions)": f"{r.agreement.top1:.1%}",
        "mean KL (nats)": round(r.agreement.mean_kl, 5), "max KL (nats)": round(r.agreement.max_kl, 4),
    } for r in cmp.rows]), hide_index=True)
    st.caption(f"Measured: decode and prefill times ({cmp.prompt_tokens}-token prompt), greedy tokens, and the "
               f"next-token distributions at all {ref.agreement.positions} positions of a fixed paragraph. Derived: "
               "weight bytes, floors, speedups (ratios of medians of this run), top-1 agreement (same most likely "
               "token as float32) and KL(p_float32 || p). 'Greedy tokens = float32' counts tokens identical from "
               "the start: after the first difference the texts follow different words.")
    st.markdown("**What each one wrote** (same prompt, greedy):")
    st.dataframe(pd.DataFrame([{"precision": r.precision, "text": r.text} for r in cmp.rows]), hide_index=True)
