"""The prefill-vs-decode page's experiments, each drawn whole (the page lays them out in order under their
headers). Every measurement waits for its button; results are kept (ui/timeline/runs.py)."""
from __future__ import annotations

import streamlit as st

from engine.core.loaded import Mode
from engine.predictions.records import sweep_verdict
from engine.timeline import experiment as T
from engine.timeline import roofline as R
from ui.timeline import runs
from ui.timeline import view as V
from ui.frame.html import chips
from ui.frame.layout import chart
from ui.frame.lessons import lesson
from ui.frame.measured import measure_again_bar, thread_policy_line
from ui.frame.models import measured_model
from ui.frame.predict import ask
from ui.timeline.figures import (breakdown_chart, cache_chart, floor_chart, kernel_lanes, memory_chart, roofline_chart,
                                 sweep_chart)
from engine.core.compiled import DEFAULT_MODE, mode_of, refused as mode_refused
from engine.timeline.profile import regime
from ui.frame.html import md_escape, visible


def metrics(rows) -> None:
    """A row of st.metric from (label, value, help) tuples."""
    for col, (label, value, help_) in zip(st.columns(len(rows)), rows):
        col.metric(label, value, help=help_)


def cache(lm, ids: tuple[int, ...], max_new_tokens: int) -> None:
    """Section 2: greedy generation with and without the KV cache, on a button."""
    st.markdown(lesson("timeline", "cache"))
    n_cmp = st.slider("Tokens to generate (both ways)", 2, 48, min(12, max(2, max_new_tokens)),
                      key="timeline_cmp_tokens")
    if not runs.on_demand("cache", "Run with and without the cache", "Runs the model twice, greedy, on your prompt."):
        return
    with st.spinner("Generating twice: with the cache, then recomputing everything every step..."):
        cc_m = runs.cache_comparison_for(lm.ref, ids, n_cmp)
    cc = cc_m.value
    chart(cache_chart(cc), "measured", V.cache_caption(cc), key="timeline_cache")
    if cc.identical:
        st.success(f"Same tokens out: both runs chose the same {len(cc.cached_ids)} token ids, one by one.",
                   icon=":material/check_circle:")
    else:
        st.error(lesson("timeline", "cache differs", token=cc.first_difference + 1), icon=":material/error:")
    st.html(chips(cc.tokens, cc.cached_ids))
    if last := V.cache_last_step(cc):
        st.markdown(last)
    measure_again_bar([cc_m.calibration], runs.again_key("cache"), "both generations")


def sweep(lm) -> None:
    """Section 3: time to first token and time per token at several prompt lengths, on a button."""
    st.markdown(lesson("timeline", "sweep"))
    question = st.container()  # asked above the button, graded by the sweep run below it
    cols = st.columns(3)
    lengths = cols[0].multiselect("Prompt lengths (tokens)", [8, 16, 32, 64, 128, 256, 512],
                                  default=list(T.SWEEP_LENGTHS), key="timeline_sweep_lengths")
    new_tokens = cols[1].slider("Decode steps per run", 2, 16, 6, key="timeline_sweep_new")
    repeats = cols[2].slider("Repeats", 1, 5, 3, key="timeline_sweep_repeats")
    ran = bool(lengths) and runs.on_demand("sweep", "Run the sweep",
                                           "Each length is warmed up once, then measured 'Repeats' times.")
    sw, cals, ext = (runs.sweep(measured_model(lm).ref, tuple(sorted(lengths)), new_tokens, repeats) if ran else
                     (None, None, None))
    with question:
        ask("timeline", "sweep try this", lesson("timeline", "sweep answer"), key="timeline_sweep_try",
            verdict=sweep_verdict(sw) if sw is not None else None,
            pending="Run the sweep below (two prompt lengths or more), then reveal again: its shortest and longest "
                    "prompt decide.")
    if not lengths:
        st.info("Pick at least one prompt length.")
        return
    if sw is None:
        return
    chart(sweep_chart(sw), "measured", V.sweep_caption(sw), key="timeline_sweep")
    st.markdown(V.climb_text(sw, ext, lm.info.device))
    st.dataframe(V.sweep_table(sw), hide_index=True)
    measure_again_bar(cals, runs.again_key("sweep"), "every length of the sweep")


def breakdown(lm, ids: tuple[int, ...], settings: dict) -> None:
    """Section 4: the time of each stage of one prefill and one decode pass, on a button."""
    st.markdown(lesson("timeline", "breakdown"))
    repeats = st.slider("Repeats", 1, 7, 3, key="timeline_bd_repeats")
    if not runs.on_demand("breakdown", "Measure the stages", "A prefill pass over your prompt and one decode pass."):
        return
    bd_m = runs.breakdown(lm.ref, ids, repeats, settings)
    bd = bd_m.value
    chart(breakdown_chart(bd), "measured", V.breakdown_caption(bd), key="timeline_breakdown")
    st.dataframe(V.breakdown_table(bd), hide_index=True)
    st.caption(V.hooks_caption(bd))
    measure_again_bar([bd_m.calibration], runs.again_key("breakdown"), "the stage timing")


def roofline(lm, tl: T.Timeline, ids: tuple[int, ...]) -> R.HardwareProbe:
    """Section 5: the measured bandwidth and matmul speed, the decode-step floor and the roofline; returns the
    probe (section 7 uses its bandwidth)."""
    st.markdown(lesson("timeline", "roofline"))
    remeasure = st.button("Measure the hardware again", key="timeline_probe_again")
    probe = runs.hardware_probe(lm.info.device, remeasure, lm.info.dtype)
    fc_m = runs.floor_check_for(lm.ref, ids)
    fc = fc_m.value
    metrics(V.probe_metrics(probe, fc))
    st.caption(V.probe_caption(probe))
    st.caption(f"CPU thread policy in force: {thread_policy_line()}.")
    chart(floor_chart(fc), "measured", V.floor_caption(fc, lm.info.dtype), key="timeline_floor")
    text, is_lesson = V.floor_text(fc)
    (st.markdown if is_lesson else st.warning)(text)
    measure_again_bar([fc_m.calibration], runs.again_key("floor"), "the step and its floor")
    if not tl.tpot_ms.n:
        st.info("Generate at least 2 tokens (sidebar) to place a decode step of this run on the roofline.")
        return probe
    chart(roofline_chart(probe, V.roofline_points(lm, tl)), "derived",
          f"Roof from the measured bandwidth and matmul speed (a {probe.matmul_dtype} matmul, the model's dtype). Each "
          "point: intensity = FLOPs / bytes with FLOPs \u2248 2 \u00d7 parameters \u00d7 tokens, the output head once (only "
          "the last position's logits are computed), and bytes \u2248 weights + KV cache (derived); height = those "
          "FLOPs / the measured pass time. Left of the ridge a pass is limited by memory, right of it by arithmetic.",
          key="timeline_roofline")
    return probe


def read_bandwidth(lm, ids: tuple[int, ...]) -> float:
    """The measured memory bandwidth (GB/s, median) section 7 uses: the one section 5's floor divides by (measured
    beside a decode step of this prompt) when it was measured, so one page shows one float32 floor; else the probe
    measured on its own, kept for the session (presenter view may skip section 5)."""
    fc = runs.kept_floor_check(lm.ref, ids)
    if fc is not None:
        return fc.read_gb_s.median
    return runs.hardware_probe(lm.info.device, matmul_dtype=lm.info.dtype).read_gb_s.median


def memory(lm, ids: tuple[int, ...]) -> None:
    """Section 6: what one pass keeps for training vs under inference mode, on a button."""
    st.markdown(lesson("timeline", "memory"))
    if not runs.on_demand("memory", "Measure the memory of one pass", "Two forward passes over your prompt."):
        return
    with st.spinner("Running one pass that keeps activations and one under inference mode..."):
        mem = runs.memory_for(lm.ref, ids)
    metrics(V.memory_metrics(mem))
    chart(memory_chart(mem), "measured", V.memory_caption(mem), key="timeline_memory")


def mode_check(lm, tr, s) -> None:
    """Compiled mode, section 1: the run's tokens against eager's for the same settings (kept or generated, untimed),
    and the first that differs. In float32 they must be the same; in half precision the compiled kernels add in
    another order and a near tie can flip: shown, not hidden."""
    if mode_of(lm) == Mode.EAGER:
        return
    if tr.engine_mode == Mode.EAGER:
        st.caption(":material/info: Compiled mode, but this run's decode steps ran eager: it is longer than any static "
                   "cache of this model, or its compile failed (the sidebar says which).")
        return
    from ui.frame.runs import generation_for
    from ui.loop.details import engine_note

    if engine_note(tr):
        st.caption(engine_note(tr).strip())
    eager = generation_for(s.run(lm.ref.at(mode=DEFAULT_MODE)))
    diff = next((i for i, (a, b) in enumerate(zip(tr.generated_ids, eager.generated_ids)) if a != b), None)
    if diff is None and len(tr.generated_ids) == len(eager.generated_ids):
        st.success(lesson("timeline", "mode same", n=len(tr.generated_ids), dtype=lm.info.dtype),
                   icon=":material/check_circle:")
        return
    diff = diff if diff is not None else min(len(tr.generated_ids), len(eager.generated_ids))
    tok = lambda t, i: md_escape(visible(t.generated_tokens[i])) if i < len(t.generated_tokens) else "(end)"  # noqa: E731
    text = lesson("timeline", "mode differs", token=diff + 1, compiled=tok(tr, diff), eager=tok(eager, diff),
                  dtype=lm.info.dtype)
    (st.error if lm.info.dtype == "float32" else st.warning)(text, icon=":material/difference:")


def kernels(lm, ids: tuple[int, ...]) -> None:
    """Section 8: one prefill and one decode step traced with torch.profiler, eager and compiled side by side, and
    the regime each is in, named from its numbers."""
    st.markdown(lesson("timeline", "kernels"))
    eager_ref = lm.ref.at(mode=DEFAULT_MODE)
    why = mode_refused(lm)
    if not runs.on_demand("kernels", "Trace one step, eager and compiled",
                          "One prefill and one decode step under torch.profiler in each engine mode. Compiled mode "
                          "compiles its decode step first, once (minutes on a 2-core CPU the first time)."):
        return
    keys = [eager_ref] + ([] if why else [eager_ref.at(mode=Mode.COMPILED)])
    if not why:
        with st.spinner("Compiled mode: compiling the decode step for this prompt's static cache (once; before "
                        "anything is traced)..."):
            runs.warm(keys[1], len(ids) + 2)
    with st.spinner("Tracing one prefill and one decode step in each mode..."):
        got = [runs.kernels_for(k, ids) for k in keys]
    if why:
        st.caption(f":material/info: Compiled mode: {md_escape(why)}; only eager is traced.")
    probe = runs.hardware_probe(lm.info.device, matmul_dtype=lm.info.dtype)
    read = runs.floor_check_for(lm.ref, ids).value.read_gb_s  # section 5's: measured beside a decode step
    pairs = []
    for p in (p for m in got for p in m.value):
        point = R.roofline_point(lm, p.phase, p.tokens_in, p.context - p.tokens_in, p.plain_ms)
        floor = R.pass_floor_ms(point, read.median, probe.matmul_gflop_s.median)
        pairs.append((p, regime(p, floor, point.intensity, probe.matmul_gflop_s.median / read.median)))
    st.markdown(lesson("timeline", "kernels regime", verdicts=V.regime_text(pairs, lm.info.device, read)))
    st.dataframe(V.kernel_rows(pairs), hide_index=True)
    for col, key, m in zip(st.columns(len(got)), keys, got):
        with col:
            st.subheader("Compiled" if key != eager_ref else "Eager")
            for p in reversed(m.value):  # the decode step first: the lesson's subject
                chart(kernel_lanes(p, f"{p.mode.capitalize()} {p.phase} step: host vs device"), "measured",
                      V.kernels_caption(p), key=f"timeline_kernels_{key != eager_ref}_{p.phase}")
                st.dataframe(V.top_ops_table(p), hide_index=True)
    measure_again_bar([m.calibration for m in got], runs.again_key("kernels"), "the traces")
