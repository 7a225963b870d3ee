"""The prefill-vs-decode page's experiments, each drawn whole (the page lays them out in order under their
headers). Every measurement waits for its button; results are kept (ui/timeline/runs.py)."""
from __future__ import annotations

import streamlit as st

from engine.timeline import experiment as T
from ui.timeline import runs
from ui.timeline import view as V
from ui.frame.html import chips
from ui.frame.layout import chart
from ui.frame.lessons import lesson
from ui.frame.measured import measure_again_bar, thread_policy_line
from ui.timeline.figures import breakdown_chart, cache_chart, floor_chart, memory_chart, roofline_chart, sweep_chart


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
        cc_m = runs.cache_comparison_for(lm.name, ids, n_cmp)
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
    cols = st.columns(3)
    lengths = cols[0].multiselect("Prompt lengths (tokens)", [8, 16, 32, 64, 128, 256, 512],
                                  default=list(T.SWEEP_LENGTHS), key="timeline_sweep_lengths")
    new_tokens = cols[1].slider("Decode steps per run", 2, 16, 6, key="timeline_sweep_new")
    repeats = cols[2].slider("Repeats", 1, 5, 3, key="timeline_sweep_repeats")
    if not lengths:
        st.info("Pick at least one prompt length.")
        return
    if not runs.on_demand("sweep", "Run the sweep", "Each length is warmed up once, then measured 'Repeats' times."):
        return
    sw, cals = runs.sweep(lm.name, tuple(sorted(lengths)), new_tokens, repeats)
    chart(sweep_chart(sw), "measured", V.sweep_caption(sw), key="timeline_sweep")
    st.dataframe(V.sweep_table(sw), hide_index=True)
    measure_again_bar(cals, runs.again_key("sweep"), "every length of the sweep")


def breakdown(lm, ids: tuple[int, ...], settings: dict) -> None:
    """Section 4: the time of each stage of one prefill and one decode pass, on a button."""
    st.markdown(lesson("timeline", "breakdown"))
    repeats = st.slider("Repeats", 1, 7, 3, key="timeline_bd_repeats")
    if not runs.on_demand("breakdown", "Measure the stages", "A prefill pass over your prompt and one decode pass."):
        return
    bd_m = runs.breakdown(lm.name, ids, repeats, settings)
    bd = bd_m.value
    chart(breakdown_chart(bd), "measured", V.breakdown_caption(bd), key="timeline_breakdown")
    st.dataframe(V.breakdown_table(bd), hide_index=True)
    st.caption(V.hooks_caption(bd))
    measure_again_bar([bd_m.calibration], runs.again_key("breakdown"), "the stage timing")


def roofline(lm, tl: T.Timeline) -> T.HardwareProbe:
    """Section 5: the measured bandwidth and matmul speed, the decode-step floor and the roofline; returns the
    probe (section 7 uses its bandwidth)."""
    st.markdown(lesson("timeline", "roofline"))
    remeasure = st.button("Measure the hardware again", key="timeline_probe_again")
    probe = runs.hardware_probe(lm.info.device, remeasure)
    wbytes = T.decode_weight_bytes(lm)
    floor = T.decode_floor_ms(lm, probe.read_gb_s.median)
    metrics(V.probe_metrics(probe, floor, wbytes))
    st.caption(V.probe_caption(probe))
    st.caption(f"CPU thread policy in force: {thread_policy_line()}.")
    if not tl.tpot_ms.n:
        st.info("Generate at least 2 tokens (sidebar) to compare a measured decode step with the floor.")
        return probe
    util = V.utilisation(floor, tl)
    chart(floor_chart(floor, tl.tpot_ms, probe), "derived", V.floor_caption(wbytes, lm.info.dtype, util),
          key="timeline_floor")
    st.markdown(lesson("timeline", "floor", step=tl.tpot_ms.median, floor=floor, util=util))
    chart(roofline_chart(probe, V.roofline_points(lm, tl)), "derived",
          "Roof from the measured bandwidth and matmul speed. Each point: intensity = FLOPs / bytes with FLOPs "
          "\u2248 2 \u00d7 parameters \u00d7 tokens and bytes \u2248 weights + KV cache (derived); height = those FLOPs / "
          "the measured pass time. Left of the ridge a pass is limited by memory, right of it by arithmetic.",
          key="timeline_roofline")
    return probe


def read_bandwidth(lm) -> float:
    """The measured memory bandwidth (GB/s, median) section 7 uses: section 5's probe, kept for the session (so
    presenter view, which skips section 5, still has it)."""
    return runs.hardware_probe(lm.info.device).read_gb_s.median


def memory(lm, ids: tuple[int, ...]) -> None:
    """Section 6: what one pass keeps for training vs under inference mode, on a button."""
    st.markdown(lesson("timeline", "memory"))
    if not runs.on_demand("memory", "Measure the memory of one pass", "Two forward passes over your prompt."):
        return
    with st.spinner("Running one pass that keeps activations and one under inference mode..."):
        mem = runs.memory_for(lm.name, ids)
    metrics(V.memory_metrics(mem))
    chart(memory_chart(mem), "measured", V.memory_caption(mem), key="timeline_memory")
