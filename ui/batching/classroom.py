"""The teacher's live class view: "this is your class, batched".

The engine worker serves every session's answers in batches (engine/jobs/classbatch.py) and keeps a record of recent
requests and batch steps, without prompt text (engine/jobs/worker.py ``snapshot``). This view draws that record with
the batching page's own charts: sessions connected, requests waiting and running, the batch size of every pass,
and the last minutes of real requests as a Gantt chart, with throughput and latency percentiles.

Who sees it: only a URL with the teacher's token, ``/batching?teacher=<token>``. The token is
``ILE_TEACHER_TOKEN`` when set (scripts/start.sh sets one and prints the link); otherwise this server process makes
one at start and prints the link in the server's log. Students never get the token: their pages, links and the
share link carry no trace of it, and a wrong token shows nothing (the batching page as usual).
"""
from __future__ import annotations

import secrets
import threading

import numpy as np
import streamlit as st

from engine.jobs import worker
from engine.core.serverlog import say
from engine.settings import TEACHER_TOKEN
from engine.batching.experiment import RequestRecord, ServeResult, StepEvent

PARAM = "teacher"
WINDOW_S = 300.0  # the last five minutes
REFRESH_S = 2.0

_LOCK = threading.Lock()
_MADE: str | None = None


def teacher_token() -> str:
    """The token the class view's URL must carry (the environment's, or one made once for this process)."""
    global _MADE
    env = TEACHER_TOKEN.get()
    if env:
        return env
    with _LOCK:
        if _MADE is None:
            _MADE = secrets.token_urlsafe(9)
            say(f"[engine] Class view for the teacher (keep this link to yourself): {_server_url()}/batching?"
                f"{PARAM}={_MADE}")
        return _MADE


def _server_url() -> str:
    """This server's root for a link another machine can open (ui/frame/address.py), from its own options."""
    from ui.frame.address import for_others

    return for_others(st.get_option("server.address"), st.get_option("server.port"),
                      st.get_option("server.baseUrlPath") or "").url


def is_teacher() -> bool:
    given = str(st.query_params.get(PARAM, "") or "")
    return bool(given) and secrets.compare_digest(given.encode(), teacher_token().encode())


def sessions_connected() -> int | None:
    """Browser sessions connected to this server now, or None if unknown. Streamlit has no public count: its
    Runtime's session manager is asked (tests/ui/test_library_internals.py fails when that changes)."""
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


def _answers(snap: dict) -> tuple[list[dict], list[dict]]:
    """The students' answers in a snapshot: (finished, running now). The start's warm-up run (scripts/warm.py) is
    nobody's answer and is left out."""
    done = [h for h in snap["finished"] if h["kind"] == "answer" and h["state"] == "done" and h["started"] is not None
            and not h.get("warmup")]
    live = [j for j in snap["running"] if j["kind"] == "answer" and not j.get("warmup")]
    return done, live


def _wave(snap: dict) -> list[dict]:
    """The latest wave's answers by submit time, finished and running (a running one ends now, with the tokens it
    has so far); times in seconds before now."""
    done, live = _answers(snap)
    live = [dict(j, submitted=-j["waited_s"] - j["running_s"], started=-j["running_s"], first_token=None,
                 finished=0.0) for j in live]
    return latest_wave(sorted(done + live, key=lambda h: h["submitted"]))


def class_result(snap: dict, max_batch: int) -> ServeResult | None:
    """The worker's latest wave of answers (``latest_wave``) as the batching experiment's records (so its charts
    draw them): times in seconds after the wave's first request; no prompt text (requests are named by number
    only)."""
    rows = _wave(snap)
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


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'s' if count != 1 else ''}"


def wave_title(snap: dict) -> str:
    """The class Gantt chart's title: how many answers of the latest wave are ready and how many are being written
    (the batching page's own title, tokens/s and mean latency over every row, would count an answer in progress
    as finished now)."""
    rows = _wave(snap)
    ready = sum(h["state"] == "done" for h in rows)
    writing = len(rows) - ready
    return f"Latest wave: {_n(ready, 'answer')} ready" + (f", {writing} being written" if writing else "")


def wave_words(snap: dict) -> str:
    """The latest wave in words, what is true now: while answers are being written, how many and their tokens so
    far; tokens/s and latency over the finished answers only (one still running has no latency yet: counted, the
    view read "0 tokens ... 0.0 tokens/s ... latency ." while a class of 5 was decoding)."""
    rows = _wave(snap)
    if not rows:
        return ""
    t0 = rows[0]["submitted"]
    fin = [h for h in rows if h["state"] == "done"]
    now = [h for h in rows if h["state"] != "done"]
    waiting = [j for j in snap.get("queued", []) if j["kind"] == "answer" and not j.get("warmup")]
    out = []
    if now or waiting:
        out.append(f"Now: **{_n(len(now), 'answer')}** being written "
                   f"({_n(sum(int(h.get('tokens', 0)) for h in now), 'token')} so far)"
                   + (f", {len(waiting)} waiting for the engine" if waiting else "") + ".")
    if not fin:
        out.append("No answer of this wave is ready yet: its tokens/s and latency appear with the first one.")
        return " ".join(out)
    tokens = sum(int(h.get("tokens", 0)) for h in fin)
    span = max(h["finished"] for h in fin) - t0
    rate = f": **{tokens / span:.1f} tokens/s**" if span > 0 else ""
    lat = np.array([h["finished"] - h["submitted"] for h in fin])
    out.append(f"Latest wave: **{_n(len(fin), 'answer')}** ready, **{_n(tokens, 'token')}** in {span:.1f} s from its "
               f"first request{rate}; latency (request sent to answer ready) "
               + ", ".join(f"p{q} **{np.percentile(lat, q):.1f} s**" for q in (50, 90, 99)) + ".")
    return " ".join(out)


def section() -> bool:
    """The class view, when the URL carries the teacher's token (else nothing; returns whether it drew)."""
    if not is_teacher():
        return False
    from ui.frame import state

    state.put_page_params(**{PARAM: st.query_params.get(PARAM)})  # the teacher's own link stays as it was
    st.header("Your class, batched", divider="gray")
    st.caption("Only this link shows this view (it carries the teacher's token: don't share it). No one's prompt "
               "is shown here: requests are numbers.")
    root = _class_link()
    from ui.batching import class_predictions

    class_predictions.section(root, state.class_link_params())  # the room's picks, revealed by the teacher
    _live()
    return True


def _class_link() -> str:
    """The links to give the room: the sidebar's current model, precision and settings, pinned; the prompt each
    student's own (the default) or pinned too. Their address is one another machine can open (ui/frame/address.py:
    never the teacher's own localhost), or a line says why there is none."""
    from urllib.parse import urlencode

    from ui.frame import state
    from ui.frame.address import for_others_from

    try:
        browser = st.context.url
    except Exception:  # another Streamlit: the server's own address only
        browser = None
    reach = for_others_from(browser, st.get_option("server.address"), st.get_option("server.port"),
                            st.get_option("server.baseUrlPath") or "")
    st.markdown("**Class link** (set the model, precision and settings in the sidebar first): every student who "
                "opens it runs with exactly these settings, fixed, and types their own question. It carries no "
                "teacher token.")
    st.code(f"{reach.url}/?{urlencode(state.class_link_params())}", language=None)
    st.markdown("**The same with your prompt fixed too** (everyone runs your prompt):")
    st.code(f"{reach.url}/?{urlencode(state.class_link_params(prompt=True))}", language=None)
    if reach.problem:
        st.warning(reach.problem, icon=":material/wifi_off:")
    return reach.url


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
    c[4].metric("Answers, last 5 min", len(_answers(snap)[0]))
    others = [h for h in snap["finished"] if not h["batchable"] and not h.get("warmup")]
    if not snap["batching"]:
        st.info("Batching is off on this server (ILE_BATCHING=off): answers run one at a time.")
    if res is None:
        st.info("No answers in the last five minutes yet. When students open the home page, their requests show "
                "up here as they are served.")
    else:
        m = res.metrics()
        st.markdown(wave_words(snap) + (f" Mean batch **{m['mean_batch']:.1f}** rows per decode step."
                                        if m["decode_steps"] else ""))
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
        fig = gantt(res)
        fig.layout.title.text = wave_title(snap)
        chart(fig, "measured",
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
