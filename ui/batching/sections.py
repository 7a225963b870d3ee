"""The batching page's blocks, each drawn whole (the page lays them out in order under their headers): the
settings, the button that starts the runs, and the three measured sections."""
from __future__ import annotations

import streamlit as st

from engine.batching.workload import POLICIES, WorkloadSettings
from ui.batching import runs
from ui.batching import view as V
from ui.frame import nav
from ui.batching.figures import (gantt, kv_over_time, latency_bars, load_chart, occupancy_chart, sweep_step_time,
                                 sweep_throughput_bar)
from ui.frame.layout import chart
from ui.frame.predict import ask
from ui.frame.lessons import lesson
from ui.frame.measured import measure_again_bar


def settings() -> V.Settings:
    """The settings expander: the requests and the server."""
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
        st.caption(lesson("batching", "settings note"))
    return V.Settings(WorkloadSettings(int(n_req), float(rate), int(lo), int(hi), int(seed)), max_batch, timeout,
                      tuple(sorted(sizes) or [1]))


def run_button(key: tuple) -> bool:
    """Whether the page may measure: the button was pressed once for these settings (then the results are kept).
    Until then it shows the button (the page draws nothing measured, but goes on: presenter view's Next and the
    links below still appear)."""
    if runs.has_run(key):
        return True
    st.markdown(lesson("batching", "not run yet"))
    if st.button("Run on the real model", type="primary", icon=":material/play_arrow:", key="batching_run"):
        runs.mark_run(key)
        return True
    return False


def measure(ref, cfg: V.Settings):
    """Every run of the page (kept ones return at once), and the bar that measures them again:
    (decode-step sweep, one result per policy, quiet-vs-busy load points)."""
    measured = [runs.sweep(ref, cfg.sizes, 6, 2),
                *(runs.serve(ref, cfg.ws, p, cfg.max_batch, cfg.timeout) for p in POLICIES),
                runs.load(ref, cfg.ws, cfg.rates, 12, cfg.max_batch)]
    measure_again_bar([m.calibration for m in measured], runs.AGAIN, "every batching measurement")
    return measured[0].value, [m.value for m in measured[1:-1]], measured[-1].value


def one_user(sweep) -> None:
    """Section 2: the decode step measured at each batch size."""
    st.markdown(V.one_user(sweep))
    c = st.columns(2)
    with c[0]:
        chart(sweep_throughput_bar(sweep), "measured",
              "Batch size / median step time, over all rows; labels give the factor over batch 1.", key="batching_tps")
    with c[1]:
        chart(sweep_step_time(sweep), "measured", V.step_caption(sweep), key="batching_step")
    st.caption(lesson("batching", "cpu vs gpu"))
    for flag in runs.sweep_flags(sweep):
        st.warning(flag, icon=":material/report:")
    if note := runs.sweep_lesson_note(sweep):
        st.info(note, icon=":material/psychology:")


def policies(results, max_batch: int) -> None:
    """Section 3: the same requests served by each policy, on the real wall clock."""
    st.markdown(lesson("batching", "policies"))
    ask("batching", "try policy", lesson("batching", "answer policy"), key="batching_try_policy")
    st.dataframe(V.policy_table(results))
    st.caption(V.policies_caption(results))
    x_max = V.x_max(results)
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


def load(points, rates) -> None:
    """Section 4: one request alone and amid background traffic."""
    st.markdown(V.load_text(points, rates))
    chart(load_chart(points), "measured", V.load_caption(points), key="batching_load")
    for flag in runs.load_flags(points):
        st.warning(flag, icon=":material/report:")
