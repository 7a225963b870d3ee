"""Batching: many users share one model. Batched decode measured by batch size; a real scheduler, static vs
continuous; one user's latency on a quiet and a busy server."""
import ui.boot  # noqa: F401  first: every module imported once, in one thread (see ui/boot.py)
import pandas as pd
import streamlit as st

from engine.experiments.batching import POLICIES, WorkloadSettings
from ui import batching_runs as runs
from ui import nav
from ui.batching_figures import (gantt, kv_over_time, latency_bars, load_chart, occupancy_chart, sweep_step_time,
                                 sweep_throughput_bar, workload_chart)
from ui.layout import chart, try_this, what_you_see
from ui.measured import measure_again_bar
from ui.models import current_model

nav.through_router()
st.title("Batching: serving many users at once")
st.markdown("A server rarely has one user. Here the model in the sidebar serves a list of requests the way an "
            "inference server does, in real forward passes on this machine, under two policies: **static** "
            "batching and **continuous** batching.")
lm = current_model()

what_you_see(
    "First, how long one decode step takes when it handles 1, 2, 4, ... sequences at once. Then a small "
    "scheduler serves the requests below on the real wall clock, once per policy: a bar chart per request shows "
    "when it waited, was prefilled, decoded and finished. Last, the same request on a quiet and on a busy server.")
try_this("One decode step for one sequence takes some time T. How long will one step take for 8 sequences at once?",
         "Much less than 8 T. Each step has to read every weight of the model from memory whatever the batch size; "
         "with one sequence the arithmetic units mostly wait for that. Extra rows reuse the weights already "
         "loaded, so the step time grows slowly while the tokens per step grow with the batch. Run it below to "
         "see the measured ratio on this machine.", key="batching_try_sweep")

with st.expander("Settings: the requests and the server", expanded=False, icon=":material/tune:"):
    c = st.columns(3)
    n_req = c[0].slider("Requests", 2, 24, 8, key="batching_n")
    rate = c[1].slider("Mean arrival rate (requests / s)", 0.5, 20.0, 4.0, 0.5, key="batching_rate")
    seed = c[2].number_input("Seed", 0, 10_000, 0, key="batching_seed")
    c = st.columns(3)
    lo, hi = c[0].slider("Tokens to generate (min, max)", 1, 48, (4, 24), key="batching_len")
    max_batch = c[1].slider("Max batch (rows per forward pass)", 1, 16, 4, key="batching_max_batch")
    timeout = c[2].slider("Static: longest wait for a full batch (s)", 0.0, 2.0, 0.5, 0.1, key="batching_timeout")
    sizes = st.multiselect("Batch sizes for the decode-step sweep", [1, 2, 4, 8, 16, 32, 64], [1, 2, 4, 8, 16],
                           key="batching_sizes")
    st.caption("Each request asks for exactly its number of tokens (end-of-sequence does not stop it), greedy "
               "decoding. Bigger settings take longer: on 2 CPU cores the defaults take well under a minute.")

ws = WorkloadSettings(int(n_req), float(rate), int(lo), int(hi), int(seed))
sizes = sorted(sizes) or [1]
rates = (0.0, float(rate), float(rate) * 3)
reqs = runs.workload_for(lm.name, ws)

st.header("1. The requests", divider="gray")
chart(workload_chart(reqs), "derived",
      f"Generated from the settings, not measured: arrival gaps drawn from an exponential distribution (Poisson "
      f"arrivals, mean {rate:g} per second, seed {seed}), token counts uniform from {lo} to {hi}. The prompts are "
      f"short questions ({min(len(r.prompt_ids) for r in reqs)} to {max(len(r.prompt_ids) for r in reqs)} tokens "
      f"with the chat template). Hover for the prompt.", key="batching_workload")

key = (lm.name, ws, max_batch, timeout, tuple(sizes))
if not runs.has_run(key):
    st.markdown("Nothing below is precomputed: the button runs the model now, with a progress bar, and keeps the "
                "results for these settings.")
    if st.button("Run on the real model", type="primary", icon=":material/play_arrow:", key="batching_run"):
        runs.mark_run(key)
    else:
        st.stop()

# ------------------------------------------------------------------------------------------------ sweep
measured = [runs.sweep(lm.name, sizes, 6, 2), *(runs.serve(lm.name, ws, p, max_batch, timeout) for p in POLICIES),
            runs.load(lm.name, ws, rates, 12, max_batch)]
sweep, results, load = measured[0].value, [m.value for m in measured[1:-1]], measured[-1].value
measure_again_bar([m.calibration for m in measured], runs.AGAIN, "every batching measurement")

st.header("2. One user leaves the hardware idle", divider="gray")
b1, last = sweep[0], sweep[-1]
st.markdown(
    f"Each row of a batch is a different sequence, decoded in the same forward pass. Going from {b1.batch} to "
    f"{last.batch} sequences per step made a step **{last.median_s / b1.median_s:.1f}\u00d7** as long, and the "
    f"tokens per second **{last.tokens_per_s / b1.tokens_per_s:.1f}\u00d7** as many. A single user's decode "
    "reads all the weights to make one token; batching shares that read among many users.")
c = st.columns(2)
with c[0]:
    chart(sweep_throughput_bar(sweep), "measured",
          "Batch size / median step time, over all rows; labels give the factor over batch 1.", key="batching_tps")
with c[1]:
    chart(sweep_step_time(sweep), "measured",
          f"Median of {sweep[0].timed_steps} decode steps after 2 warm-up steps; whiskers 10th to 90th percentile. "
          f"Every row has the same {sweep[0].context_tokens}-token context.", key="batching_step")
st.caption("On a GPU the step time stays almost flat up to large batches; a CPU has far less spare arithmetic, "
           "so its step time rises sooner. The machine may be shared, so compare ratios within this run.")
for flag in runs.sweep_flags(sweep):
    st.warning(flag, icon=":material/report:")
if lesson := runs.sweep_lesson_note(sweep):
    st.info(lesson, icon=":material/psychology:")

# ------------------------------------------------------------------------------------------------ policies
st.header("3. Static vs continuous batching", divider="gray")
st.markdown(
    "**Static**: wait until the batch is full (or the oldest request has waited the timeout), then run that batch "
    "until its longest request is done. Short requests keep their row busy with tokens nobody needs, and requests "
    "that arrive meanwhile wait for the whole batch.  \n**Continuous**: after every decode step, finished requests "
    "leave and waiting ones join (their prompts are prefilled in one pass and their keys and values merged into "
    "the running batch's cache).")
try_this("Which policy gives the short requests their answers sooner, and which one does more forward passes?",
         "Continuous batching finishes short requests sooner: they leave as soon as they are done, and newcomers "
         "do not wait for a whole batch. It may run *more* passes (a prefill each time someone joins), but almost "
         "none of its rows are wasted. Compare the red parts of the two charts below.", key="batching_try_policy")

metrics = [r.metrics() for r in results]
rows = {
    "throughput (tokens/s)": lambda m: f"{m['throughput_tok_s']:.1f}",
    "mean latency (s)": lambda m: f"{m['mean_latency_s']:.2f}",
    "p90 latency (s)": lambda m: f"{m['p90_latency_s']:.2f}",
    "mean time to first token (s)": lambda m: f"{m['mean_ttft_s']:.2f}",
    "p90 time to first token (s)": lambda m: f"{m['p90_ttft_s']:.2f}",
    "forward passes (prefills + decode steps)": lambda m: f"{m['forward_passes']} ({m['prefills']} + {m['decode_steps']})",
    "mean rows per decode step": lambda m: f"{m['mean_batch']:.2f}",
    "wasted decode rows": lambda m: f"{m['wasted_decode_slots']} of {m['decode_slots']} ({m['wasted_fraction']:.0%})",
    "prompt padding (tokens)": lambda m: f"{m['prefill_pad_tokens']} of {m['prefill_tokens']}",
    "peak KV cache (KiB)": lambda m: f"{m['peak_kv_bytes'] / 1024:.0f}",
}
table = pd.DataFrame({m["policy"]: [f(m) for f in rows.values()] for m in metrics}, index=list(rows))
st.dataframe(table)
same = all(a.token_ids == b.token_ids for a, b in zip(results[0].requests, results[1].requests))
st.caption("Measured: wall clock from the first arrival. Latency = arrival to last token; throughput = tokens "
           "generated / time until the last token; wasted rows = decode rows of requests that were already done. "
           + ("Both policies gave every request exactly the same tokens (greedy), as running it alone does."
              if same else "Note: the two policies gave some request different tokens in this run."))
x_max = max(rr.released_s for r in results for rr in r.requests)
for res in results:
    chart(gantt(res, x_max), "measured",
          "One row per request, on the real wall clock: grey = waiting in the queue, orange = its prompt pass, "
          "blue = decoding, red = done but its row still runs with the batch. Ticks mark arrivals.",
          key=f"batching_gantt_{res.policy}")
    chart(occupancy_chart(res, max_batch, x_max), "measured",
          "Every forward pass the server ran, as wide as it took; height = rows in that pass.",
          key=f"batching_occ_{res.policy}")
c = st.columns(2)
with c[0]:
    chart(latency_bars(results), "measured", "Per request, both policies, same requests and arrival times.",
          key="batching_latency")
with c[1]:
    chart(kv_over_time(results), "measured",
          "Bytes of the batch's key and value tensors after each pass (left padding included); "
          "a static batch's cache is freed when the batch ends.", key="batching_kv")
nav.link("pages/kv_cache.py")

# ------------------------------------------------------------------------------------------------ load
st.header("4. Your request on a quiet and on a busy server", divider="gray")
alone, busiest = load[0].probe, load[-1].probe
st.markdown(
    f"The same request ({len(alone.token_ids)} tokens, \u201c{load[0].probe.prompt}\u201d) served with continuous "
    f"batching: alone, then arriving amid {load[1].background} other requests at {rates[1]:g} and {rates[2]:g} "
    f"requests per second. Alone it took **{alone.latency_s:.2f} s**; on the busiest server "
    f"**{busiest.latency_s:.2f} s**, although the model and the request did not change. Benchmarks from a quiet "
    "test machine rarely match a busy production server.")
chart(load_chart(load), "measured",
      "Your latency split into time to first token (waiting, then your prompt pass) and decoding; 'batch' = mean "
      "rows in the decode steps you were part of. " + ("Your tokens were identical in every run."
      if len({p.probe.token_ids for p in load}) == 1 else "Your tokens differed between runs."),
      key="batching_load")
for flag in runs.load_flags(load):
    st.warning(flag, icon=":material/report:")
c = st.columns(2)
with c[0]:
    nav.link("pages/timeline.py")
with c[1]:
    nav.link("pages/speculative.py")
