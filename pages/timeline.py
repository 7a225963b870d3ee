"""Prefill vs decode, and where the time goes: every number measured on this machine, or derived and said so."""
import ui.boot  # noqa: F401  first: every module imported once, in one thread (see ui/boot.py)
import pandas as pd
import streamlit as st

from engine.experiments import timeline as T
from ui import nav, precision_view
from ui import timeline_runs as runs
from ui.html import chips
from ui.layout import chart, notes, try_this, what_you_see
from ui.measured import measure_again_bar, thread_policy_line
from ui.models import current_model
from ui.runs import current_trace
from ui.state import settings
from ui.timeline_figures import breakdown_chart, cache_chart, floor_chart, gantt, memory_chart, roofline_chart, \
    sweep_chart

MB = 2**20


def rng(s: T.Spread, unit: str = "ms", nd: int = 1) -> str:
    return f"{s.median:.{nd}f} {unit} (range {s.lo:.{nd}f} to {s.hi:.{nd}f}, n={s.n})"


nav.through_router()
st.title("Prefill vs decode: where the time goes")
st.markdown("Generating text has two phases with very different costs. **Prefill** reads the whole prompt in one "
            "forward pass; **decode** then runs one pass per new token. Everything below is timed on this machine, "
            "on the model in the sidebar.")
lm = current_model()
info = lm.info
s = settings()
tr = current_trace()
notes(tr)
tl = T.timeline(tr)
ids = tuple(tr.prompt_ids)

what_you_see(
    "A timeline of the run you configured in the sidebar, drawn to scale, then four experiments you start with a "
    "button: the KV cache on and off, prompt length, a stage-by-stage breakdown of one pass, and memory. "
    "Timings come from the wall clock after a device sync, after a warm-up, as medians over repeats.")
st.warning("This machine may be shared with other work, so timings are noisy: every median comes with its range "
           "(min to max over repeats). Compare numbers measured in the same run, not across runs.",
           icon=":material/speed:")
try_this("The prompt has many tokens and each decode pass handles only one. Will the prefill bar be as wide as "
         "the same number of decode bars put together?",
         "No, much narrower than that. Prefill handles all prompt tokens in one pass, as one big batch of matrix "
         "multiplies; the weights are read from memory once for all of them. A decode pass reads every weight to "
         "produce a single token, so its cost hardly depends on how many tokens it handles.", key="timeline_try")

# ------------------------------------------------------------------------------------------------ timeline
st.header("1. The timeline of this run", divider="gray")
c = st.columns(4)
c[0].metric("Time to first token", f"{tl.ttft_ms:.0f} ms", help="Measured: the prefill pass plus sampling.")
c[1].metric("Time per output token", f"{tl.tpot_ms.median:.0f} ms" if tl.tpot_ms.n else "n/a",
            help="Measured: median decode step." if tl.tpot_ms.n else "Only one token was generated.")
c[2].metric("Tokens / s (whole run)", f"{tl.tokens_per_s:.1f}", help="Derived: new tokens / total measured time.")
c[3].metric("Tokens / s (decode only)", f"{tl.decode_tokens_per_s:.1f}" if tl.tpot_ms.n else "n/a",
            help="Derived: 1000 / median decode step in ms.")
chart(gantt(tl), "measured",
      f"Each bar is one forward pass plus sampling, timed after a device sync, placed end to end. Prefill: "
      f"{tl.prompt_tokens} prompt tokens in one pass ({tl.ttft_ms:.0f} ms); then {len(tl.bars) - 1} decode passes "
      f"of one token each" + (f", {rng(tl.tpot_ms)}." if tl.tpot_ms.n else "."), key="timeline_gantt")
st.markdown(f"The first token appears after **{tl.ttft_ms:.0f} ms**. After that, tokens arrive one per decode pass, "
            "which is why a chat answer pauses, then streams at a steady pace.")

# ------------------------------------------------------------------------------------------ with vs without
st.header("2. With and without the KV cache", divider="gray")
st.markdown("Without a cache, every new token means a forward pass over the *whole* sequence so far. With it, the "
            "keys and values of earlier tokens are kept, and each pass feeds only the newest token. Greedy "
            "decoding both ways must pick exactly the same tokens.")
n_cmp = st.slider("Tokens to generate (both ways)", 2, 48, min(12, max(2, s["max_new_tokens"])),
                  key="timeline_cmp_tokens")
if runs.on_demand("cache", "Run with and without the cache", "Runs the model twice, greedy, on your prompt."):
    with st.spinner("Generating twice: with the cache, then recomputing everything every step..."):
        cc_m = runs.cache_comparison_for(lm.name, ids, n_cmp)
    cc = cc_m.value
    chart(cache_chart(cc), "measured",
          f"Per-step wall time after a device sync, greedy, {cc.prompt_tokens} prompt tokens. Without a cache, step k "
          f"recomputes {cc.prompt_tokens} + k - 1 tokens; with it, each decode step feeds 1.", key="timeline_cache")
    if cc.identical:
        st.success(f"Same tokens out: both runs chose the same {len(cc.cached_ids)} token ids, one by one.",
                   icon=":material/check_circle:")
    else:
        st.error(f"The runs differ from token {cc.first_difference + 1}: a near-tie between two tokens flipped "
                 "by rounding (the two paths add numbers in a different order).", icon=":material/error:")
    st.html(chips(cc.tokens, cc.cached_ids))
    last = len(cc.cached_ms) - 1
    if last >= 1:
        st.markdown(f"Last step: **{cc.recompute_ms[last]:.0f} ms** recomputing {cc.prompt_tokens + last} tokens vs "
                    f"**{cc.cached_ms[last]:.0f} ms** with the cache (measured, one run each).")
    measure_again_bar([cc_m.calibration], runs.again_key("cache"), "both generations")

# ------------------------------------------------------------------------------------------ prompt sweep
st.header("3. Prompt length: time to first token vs time per token", divider="gray")
st.markdown("The same experiment at several prompt lengths (a fixed paragraph repeated to the length). Predict "
            "before you run it: which of the two curves climbs?")
cols = st.columns(3)
lengths = cols[0].multiselect("Prompt lengths (tokens)", [8, 16, 32, 64, 128, 256, 512], default=list(T.SWEEP_LENGTHS),
                              key="timeline_sweep_lengths")
sweep_new = cols[1].slider("Decode steps per run", 2, 16, 6, key="timeline_sweep_new")
sweep_rep = cols[2].slider("Repeats", 1, 5, 3, key="timeline_sweep_repeats")
if not lengths:
    st.info("Pick at least one prompt length.")
elif runs.on_demand("sweep", "Run the sweep", "Each length is warmed up once, then measured 'Repeats' times."):
    sw, sw_cals = runs.sweep(lm.name, tuple(sorted(lengths)), sweep_new, sweep_rep)
    chart(sweep_chart(sw), "measured",
          f"Each length: a warm-up, then medians over {sw.repeats} repeat(s); whiskers span min to max. TPOT is the median of "
          f"{sw.new_tokens - 1} decode steps in each repeat.", key="timeline_sweep")
    st.dataframe(pd.DataFrame([{
        "prompt tokens": r.prompt_tokens, "TTFT median (ms)": round(r.ttft_ms.median, 1),
        "TTFT range (ms)": f"{r.ttft_ms.lo:.1f} to {r.ttft_ms.hi:.1f}", "TPOT median (ms)": round(r.tpot_ms.median, 1),
        "TPOT range (ms)": f"{r.tpot_ms.lo:.1f} to {r.tpot_ms.hi:.1f}"} for r in sw.rows]), hide_index=True)
    measure_again_bar(sw_cals, runs.again_key("sweep"), "every length of the sweep")

# ------------------------------------------------------------------------------------------ breakdown
st.header("4. Where one forward pass spends its time", divider="gray")
st.markdown("Each stage module (embedding, every block's attention, MLP and norms, the output projection) gets a "
            "hook before and after it that syncs the device and reads the clock; sampling is timed on its own. "
            "*Other* is what no hook covers: position tables, masks, residual adds, Python glue.")
bd_rep = st.slider("Repeats", 1, 7, 3, key="timeline_bd_repeats")
if runs.on_demand("breakdown", "Measure the stages", "A prefill pass over your prompt and one decode pass."):
    bd_m = runs.breakdown(lm.name, ids, bd_rep, s)
    bd = bd_m.value
    chart(breakdown_chart(bd), "measured",
          f"Share of each stage's median time over {bd.repeats} repeat(s), your prompt ({bd.prefill.tokens_in} tokens) "
          f"and the decode step after it; sampling with your sidebar settings.", key="timeline_breakdown")
    st.dataframe(pd.DataFrame([{
        "stage": stage, "modules timed": str(bd.module_counts.get(stage, "-")),
        "prefill median (ms)": round(bd.prefill.stage_ms[stage].median, 2),
        "prefill range (ms)": f"{bd.prefill.stage_ms[stage].lo:.2f} to {bd.prefill.stage_ms[stage].hi:.2f}",
        "prefill share": f"{bd.prefill.shares()[stage]:.0%}",
        "decode median (ms)": round(bd.decode.stage_ms[stage].median, 2),
        "decode range (ms)": f"{bd.decode.stage_ms[stage].lo:.2f} to {bd.decode.stage_ms[stage].hi:.2f}",
        "decode share": f"{bd.decode.shares()[stage]:.0%}",
    } for stage in T.STAGES]), hide_index=True)
    st.caption(f"Hooks add a little overhead (a sync and a clock read around each of "
               f"{sum(bd.module_counts.values())} modules): the whole pass took {rng(bd.prefill.hooked_total_ms)} with "
               f"hooks vs {rng(bd.prefill.plain_total_ms)} without (prefill), and {rng(bd.decode.hooked_total_ms, nd=2)} vs "
               f"{rng(bd.decode.plain_total_ms, nd=2)} (decode).")
    measure_again_bar([bd_m.calibration], runs.again_key("breakdown"), "the stage timing")

# ------------------------------------------------------------------------------------------ roofline
st.header("5. Why decode is memory-bound", divider="gray")
st.markdown("A decode pass must read **every weight** from memory to produce one token, and does little "
            "arithmetic with each byte. So the memory bandwidth sets a floor on its time. Below, this machine's "
            "bandwidth and matmul speed are measured, once per browser session.")
remeasure = st.button("Measure the hardware again", key="timeline_probe_again")
probe = runs.hardware_probe(info.device, remeasure)
wbytes = T.decode_weight_bytes(lm)
floor = T.decode_floor_ms(lm, probe.read_gb_s.median)
c = st.columns(3)
c[0].metric("Memory bandwidth (read)", f"{probe.read_gb_s.median:.1f} GB/s",
            help=f"Measured: summing a {probe.buffer_mb:.0f} MiB tensor, range {probe.read_gb_s.lo:.1f} to "
                 f"{probe.read_gb_s.hi:.1f} GB/s. Copy: {probe.copy_gb_s.median:.1f} GB/s (read + write).")
c[1].metric("Matmul throughput", f"{probe.matmul_gflop_s.median:.0f} GFLOP/s",
            help=f"Measured: {probe.matmul_n}x{probe.matmul_n} matrix multiply, 2n\u00b3 FLOPs, range "
                 f"{probe.matmul_gflop_s.lo:.0f} to {probe.matmul_gflop_s.hi:.0f}, {probe.threads} threads.")
c[2].metric("Decode-step floor", f"{floor:.1f} ms",
            help=f"Derived: {wbytes / 1e6:.0f} MB of weights read per step / {probe.read_gb_s.median:.1f} GB/s.")
st.caption(f"Measured on {probe.device} with {probe.threads} threads: read {rng(probe.read_gb_s, 'GB/s')}; "
           f"copy {rng(probe.copy_gb_s, 'GB/s')}; matmul {rng(probe.matmul_gflop_s, 'GFLOP/s', 0)}.")
st.caption(f"CPU thread policy in force: {thread_policy_line()}.")
if tl.tpot_ms.n:
    util = floor / tl.tpot_ms.median
    chart(floor_chart(floor, tl.tpot_ms, probe), "derived",
          f"Floor = {wbytes / 1e6:.0f} MB of weights ({info.dtype}) / measured bandwidth; the decode step is the "
          f"measured median of this run (whisker: min to max). Bandwidth utilisation = floor / step = {util:.0%}.",
          key="timeline_floor")
    st.markdown(f"One decode step takes **{tl.tpot_ms.median:.0f} ms**; just streaming the weights once would take "
                f"**{floor:.1f} ms**. The step uses **{util:.0%}** of the measured bandwidth: the rest goes to "
                "overheads (many small kernels, Python, threads waking up) that a big GPU server hides better.")
    points = [T.roofline_point(lm, f"prefill ({tl.prompt_tokens} tok)", tl.prompt_tokens, 0, tl.ttft_ms),
              T.roofline_point(lm, "decode (1 tok)", 1, tl.prompt_tokens, tl.tpot_ms.median)]
    chart(roofline_chart(probe, points), "derived",
          "Roof from the measured bandwidth and matmul speed. Each point: intensity = FLOPs / bytes with FLOPs "
          "\u2248 2 \u00d7 parameters \u00d7 tokens and bytes \u2248 weights + KV cache (derived); height = those FLOPs / "
          "the measured pass time. Left of the ridge a pass is limited by memory, right of it by arithmetic.",
          key="timeline_roofline")
else:
    st.info("Generate at least 2 tokens (sidebar) to compare a measured decode step with the floor.")

# ------------------------------------------------------------------------------------------ memory
st.header("6. Training vs inference: memory of one pass", divider="gray")
st.markdown("Training needs the backward pass, so the forward pass keeps every intermediate result it will need "
            "for gradients. Inference keeps nothing: under `torch.inference_mode` each activation is freed as soon "
            "as the next layer has used it.")
if runs.on_demand("memory", "Measure the memory of one pass", "Two forward passes over your prompt."):
    with st.spinner("Running one pass that keeps activations and one under inference mode..."):
        mem = runs.memory_for(lm.name, ids)
    c = st.columns(3)
    c[0].metric("Saved for backward", f"{mem.saved_for_backward_bytes / MB:.1f} MiB",
                help=f"Measured exactly: {mem.saved_tensor_count} tensors autograd stored (weights excluded).")
    c[1].metric("Saved under inference mode", f"{mem.inference_saved_bytes / MB:.1f} MiB")
    c[2].metric("Peak ratio", f"{mem.training_peak_bytes / max(mem.inference_peak_bytes, 1):.1f}\u00d7",
                help="Measured: peak tensor memory keeping activations / under inference mode.")
    chart(memory_chart(mem), "measured",
          f"Method: {mem.method}. Both passes keep the logits ({mem.logits_bytes / MB:.1f} MiB), as a loss would need.",
          key="timeline_memory")

# ------------------------------------------------------------------------------------------ precision
st.header("7. Fewer bytes, faster decode", divider="gray")
precision_view.render(lm, probe.read_gb_s.median)

st.divider()
cols = st.columns(3)
for col, target in zip(cols, ["pages/kv_cache.py", "pages/speculative.py", "pages/batching.py"]):
    with col:
        nav.link(target)
