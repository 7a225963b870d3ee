"""The teacher's live class view: "this is your class, batched".

The engine worker serves every session's answers in batches (engine/core/classbatch.py) and keeps a record of recent
requests and batch steps, without prompt text (engine/core/worker.py ``snapshot``). This view draws that record with
the batching page's own charts: sessions connected, requests waiting and running, the batch size of every pass,
and the last minutes of real requests as a Gantt chart, with throughput and latency percentiles.

Who sees it: only a URL with the teacher's token, ``/batching?teacher=<token>``. The token is
``ILE_TEACHER_TOKEN`` when set (scripts/start.sh sets one and prints the link); otherwise this server process makes
one at start and prints the link in the server's log. Students never get the token: their pages, links and the
share link carry no trace of it, and a wrong token shows nothing (the batching page as usual).
"""
from __future__ import annotations

import os
import secrets
import sys
import threading

import numpy as np
import streamlit as st

from engine.core import worker
from engine.core.classbatch import BATCHED_KINDS
from engine.batching.experiment import RequestRecord, ServeResult, StepEvent

ENV_TOKEN = "ILE_TEACHER_TOKEN"
PARAM = "teacher"
WINDOW_S = 300.0  # the last five minutes
REFRESH_S = 2.0

_LOCK = threading.Lock()
_MADE: str | None = None


def teacher_token() -> str:
    """The token the class view's URL must carry (the environment's, or one made once for this process)."""
    global _MADE
    env = os.environ.get(ENV_TOKEN, "").strip()
    if env:
        return env
    with _LOCK:
        if _MADE is None:
            _MADE = secrets.token_urlsafe(9)
            print(f"[engine] class view for the teacher (keep it to yourself): /batching?{PARAM}={_MADE}",
                  file=sys.stderr, flush=True)
        return _MADE


def is_teacher() -> bool:
    given = str(st.query_params.get(PARAM, "") or "")
    return bool(given) and secrets.compare_digest(given.encode(), teacher_token().encode())


def sessions_connected() -> int | None:
    """Browser sessions connected to this server now (Streamlit's session manager), or None if unknown."""
    try:
        from streamlit.runtime import Runtime

        return int(Runtime.instance()._session_mgr.num_active_sessions())
    except Exception:  # another Streamlit version: say nothing rather than guess
        return None


QUIET_GAP_S = 20.0  # a pause this long with no answer in flight starts a new wave of requests


def latest_wave(rows: list[dict]) -> list[dict]:
    """The requests since the engine last had no answer to work on for ``QUIET_GAP_S`` (rows by submit time):
    the class asking now. Drawn over the whole five minutes, a wave of 20 answers in 8 s sat in the last twentieth
    of a 135 s axis behind one answer from two minutes before, and tokens/s counted the idle minutes between."""
    start, busy_until = 0, None
    for i, h in enumerate(rows):
        if busy_until is not None and h["submitted"] - busy_until >= QUIET_GAP_S:
            start = i
        busy_until = h["finished"] if busy_until is None else max(busy_until, h["finished"])
    return rows[start:]


def class_result(snap: dict, max_batch: int) -> ServeResult | None:
    """The worker's latest wave of answers (``latest_wave``) as the batching experiment's records (so its charts
    draw them): times in seconds after the wave's first request; no prompt text (requests are named by number
    only)."""
    done = [h for h in snap["finished"] if h["kind"] == "answer" and h["state"] == "done" and h["started"] is not None]
    live = [dict(j, submitted=-j["waited_s"] - j["running_s"], started=-j["running_s"], first_token=None,
                 finished=0.0, tokens=0) for j in snap["running"] if j["kind"] == "answer"]
    rows = latest_wave(sorted(done + live, key=lambda h: h["submitted"]))
    if not rows:
        return None
    t0 = rows[0]["submitted"]
    recs = []
    for i, h in enumerate(rows):
        start = h["started"] - t0
        first = (h["first_token"] if h["first_token"] is not None else h["finished"]) - t0
        end = h["finished"] - t0
        recs.append(RequestRecord(i, "", 0, int(h.get("tokens", 0)), h["submitted"] - t0, start, max(first, start),
                                  max(end, first), max(end, first), tuple(range(int(h.get("tokens", 0))))))
    steps = [StepEvent(p, a - t0, b - t0, tuple(range(r)), r, r, 0, 0, 0) for a, b, r, p in snap["steps"]
             if b - t0 >= 0 and p in ("prefill", "decode")]
    wall = max(r.done_s for r in recs)
    return ServeResult("class", "", max_batch, 0.0, tuple(recs), tuple(steps), wall, 0)


def latency_percentiles(result: ServeResult) -> dict[str, float]:
    lat = np.array([r.latency_s for r in result.requests if r.token_ids])
    if not len(lat):
        return {}
    return {f"p{q}": float(np.percentile(lat, q)) for q in (50, 90, 99)}


def section() -> bool:
    """The class view, when the URL carries the teacher's token (else nothing; returns whether it drew)."""
    if not is_teacher():
        return False
    from ui.frame import state

    state.put_page_params(**{PARAM: st.query_params.get(PARAM)})  # the teacher's own link stays as it was
    st.header("Your class, batched", divider="gray")
    st.caption("Only this link shows this view (it carries the teacher's token: don't share it). No one's prompt "
               "is shown here: requests are numbers.")
    _class_link()
    _live()
    return True


def _class_link() -> None:
    """The link to give the room: the sidebar's current model, precision, prompt and settings, pinned."""
    from urllib.parse import urlencode, urlsplit

    from ui.frame import state

    try:
        u = urlsplit(st.context.url or "")
        base = f"{u.scheme}://{u.netloc}" if u.netloc else ""
    except Exception:
        base = ""
    link = f"{base}/?{urlencode(state.class_link_params())}"
    st.markdown("**Class link** (set the model, precision, prompt and settings in the sidebar first): every student "
                "who opens it runs exactly these, with the sidebar fixed. It carries no teacher token.")
    st.code(link, language=None)


@st.fragment(run_every=REFRESH_S)
def _live() -> None:
    from ui.batching.figures import gantt, occupancy_chart
    from ui.frame.layout import chart

    w = worker.get_worker()
    snap = w.snapshot(WINDOW_S)
    res = class_result(snap, w.max_batch)
    c = st.columns(5)
    n = sessions_connected()
    c[0].metric("Sessions connected", "?" if n is None else n)
    c[1].metric("Requests waiting", len(snap["queued"]))
    c[2].metric("Running now", len(snap["running"]))
    kinds = {j["kind"] for j in snap["running"]}
    c[3].metric("Batch size now", len(snap["running"]) if kinds == {"answer"} else (1 if snap["running"] else 0))
    answers = [h for h in snap["finished"] if h["kind"] == "answer" and h["state"] == "done"]
    c[4].metric("Answers, last 5 min", len(answers))
    others = [h for h in snap["finished"] if h["kind"] not in BATCHED_KINDS]
    if not snap["batching"]:
        st.info("Batching is off on this server (ILE_BATCHING=off): answers run one at a time.")
    if res is None:
        st.info("No answers in the last five minutes yet. When students open the home page, their requests show "
                "up here as they are served.")
    else:
        m = res.metrics()
        pct = latency_percentiles(res)
        st.markdown(
            f"Latest wave: **{m['tokens']} tokens** for **{m['requests']} requests** in {m['makespan_s']:.1f} s: "
            f"**{m['throughput_tok_s']:.1f} tokens/s**; mean batch **{m['mean_batch']:.1f}** rows per decode step; "
            "latency (request sent to answer ready) " + ", ".join(f"{k} **{v:.1f} s**" for k, v in pct.items()) + ".")
        peak = max((len(x.rids) for x in res.steps), default=1)
        fig = occupancy_chart(res, max(peak, 2))
        fig.layout.shapes, fig.layout.annotations = (), ()  # its line marks the experiment's max batch: not ours
        fig.add_hline(y=peak, line_dash="dot", line_color="#64748b", annotation_text=f"largest batch {peak}",
                      annotation_position="top left")  # above the line (no bar goes higher), left of the legend
        chart(fig, "measured",
              "Rows (requests) in each forward pass the engine ran for your class; bar width = the pass's duration. "
              f"Time 0 is the first request of the latest wave (after {QUIET_GAP_S:.0f} s or more with no answer to "
              f"work on); this server batches up to {w.max_batch} requests.",
              key="class_occupancy")
        chart(gantt(res), "measured",
              "Every answer of the latest wave: waiting for the engine (grey), its prompt pass (orange), its decode "
              "steps, shared with everyone else's (blue). Time 0 is the wave's first request.",
              key="class_gantt")
    if others:
        waited = [(h["started"] or 0) - h["submitted"] for h in others if h["started"] is not None]
        st.caption(f"Also {len(others)} other job{'s' if len(others) != 1 else ''} ran alone in these five minutes, "
                   "as every experiment does so that "
                   f"its timings are its own ({', '.join(sorted({h['kind'].replace('_', ' ') for h in others}))}); "
                   f"they waited {np.median(waited) if waited else 0:.1f} s for the engine on median.")


teacher_token()  # made (and its link printed in the server's log) when the server imports the app's modules
