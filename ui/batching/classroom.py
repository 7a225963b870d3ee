"""The teacher's live class view: "this is your class, batched".

The engine worker serves every session's answers in batches (engine/jobs/classbatch.py) and keeps a record of recent
requests and batch steps, without prompt text (engine/jobs/worker.py ``snapshot``). This view draws that record with
the batching page's own charts: sessions connected, requests waiting and running, the batch size of every pass,
and the last minutes of real requests as a Gantt chart, with throughput and latency percentiles.

Who sees it: only a URL with the teacher's token, ``/batching?teacher=<token>`` (ui/frame/teacher.py). Students
never get the token: their pages, links and the share link carry no trace of it, and a wrong token shows nothing
(the batching page as usual).
"""
from __future__ import annotations


import numpy as np
import streamlit as st

from engine.jobs import worker
from engine.jobs.kinds import JobState
from ui.frame.teacher import PARAM, is_teacher, teacher_tabs, teacher_token
from engine.batching.records import RequestRecord, ServeResult, StepEvent

WINDOW_S = 300.0  # the last five minutes
KEEP_S = float("inf")  # the snapshot the waves are cut from: all the worker keeps (engine.jobs.worker.HISTORY)
REFRESH_S = 2.0

def sessions_connected() -> int | None:
    """Browser sessions connected to this server now, the teacher's own tabs left out (ui/frame/teacher.py); None
    if unknown. Streamlit has no public list: its Runtime's session manager is asked
    (tests/ui/test_library_internals.py fails when that changes)."""
    try:
        from streamlit.runtime import Runtime

        active = {info.session.id for info in Runtime.instance()._session_mgr.list_active_sessions()}
    except Exception:  # another Streamlit version: say nothing rather than guess
        return None
    return len(active - teacher_tabs(active))


QUIET_GAP_S = 20.0  # a pause this long with no answer in flight starts a new wave of requests


def waves(rows: list[dict]) -> list[list[dict]]:
    """The requests (rows by submit time) cut into waves wherever the engine had no answer to work on for
    ``QUIET_GAP_S``: a class asking together is one wave."""
    out: list[list[dict]] = []
    busy_until = None
    for h in rows:
        if busy_until is None or h["submitted"] - busy_until >= QUIET_GAP_S:
            out.append([])
        out[-1].append(h)
        busy_until = h["finished"] if busy_until is None else max(busy_until, h["finished"])
    return out


def latest_wave(rows: list[dict]) -> list[dict]:
    """The wave the class view draws: the latest one while it runs or when several answers came together; a lone
    answer after it (one student, or the teacher trying a prompt) does not replace the class's last batch, however
    long ago that was (it was gone after 20 s idle and a single request, or after five minutes). Drawn over every
    request kept instead, a wave of 20 answers in 8 s sat in the last twentieth of a 135 s axis behind one answer
    from two minutes before, and tokens/s counted the idle minutes between."""
    found = waves(rows)
    if not found:
        return []
    last = found[-1]
    if len(last) > 1 or any(h["state"] != JobState.DONE for h in last):
        return last
    return next((w for w in reversed(found) if len(w) > 1), last)


def _answers(snap: dict) -> tuple[list[dict], list[dict]]:
    """The students' answers in a snapshot: (finished, running now). The start's warm-up run (scripts/warm.py) is
    nobody's answer and is left out."""
    done = [h for h in snap["finished"] if h["kind"] == "answer" and h["state"] == JobState.DONE and h["started"] is not None
            and not h.get("warmup")]
    live = [j for j in snap["running"] if j["kind"] == "answer" and not j.get("warmup")]
    return done, live


def _wave_rows(snap: dict) -> list[dict]:
    """The answers finished and running (a running one ends now, with the tokens it has so far); times in seconds
    before now."""
    done, live = _answers(snap)
    return done + [dict(j, submitted=-j["waited_s"] - j["running_s"], started=-j["running_s"], first_token=None,
                        finished=0.0) for j in live]


def _wave(snap: dict) -> list[dict]:
    """The wave drawn (``latest_wave``), its answers by submit time."""
    return latest_wave(sorted(_wave_rows(snap), key=lambda h: h["submitted"]))


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
    ready = sum(h["state"] == JobState.DONE for h in rows)
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
    fin = [h for h in rows if h["state"] == JobState.DONE]
    now = [h for h in rows if h["state"] != JobState.DONE]
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


def since_words(snap: dict) -> str:
    """When the wave drawn is not the latest request: how long ago it ended, and the lone answers since."""
    rows = sorted(_wave_rows(snap), key=lambda h: h["submitted"])
    shown = latest_wave(rows)
    if not shown or shown[-1] is rows[-1]:
        return ""
    later = rows[next(i for i, h in enumerate(rows) if h is shown[-1]) + 1:]
    ended = max(h["finished"] for h in shown)
    return (f" This batch ended {-ended:.0f} s ago; since then {_n(len(later), 'answer')} ran alone, "
            "which does not replace it.")


def section() -> bool:
    """The class view, when the URL carries the teacher's token (else nothing; returns whether it drew)."""
    if not is_teacher():
        return False
    from ui.frame import state

    state.put_page_params(**{PARAM: st.query_params.get(PARAM)})  # the teacher's own link stays as it was
    st.header("Your class, batched", divider="gray")
    _numbers()  # first, on a projector's first screen (presenter view had them below the links, off screen)
    st.caption("Only this link shows this view (it carries the teacher's token: don't share it). No one's prompt "
               "is shown here: requests are numbers.")
    # the links to give the room fold away once the class has asked (open at the start of a class)
    with st.expander("Class links to give the room", icon=":material/link:",
                     expanded=not _answers(worker.get_worker().snapshot(KEEP_S))[0]):
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
def _numbers() -> None:
    """The live numbers: sessions, requests waiting and running, the batch now, answers lately."""
    snap = worker.get_worker().snapshot(KEEP_S)
    c = st.columns(5)
    n = sessions_connected()
    c[0].metric("Student sessions", "?" if n is None else n,
                help="Browser tabs open on this server, your own tabs (the ones with this view's link) left out.")
    c[1].metric("Requests waiting", len(snap["queued"]))
    c[2].metric("Running now", len(snap["running"]))
    kinds = {j["kind"] for j in snap["running"]}
    c[3].metric("Batch size now", len(snap["running"]) if kinds == {"answer"} else (1 if snap["running"] else 0))
    c[4].metric("Answers, last 5 min", sum(h["finished"] >= -WINDOW_S for h in _answers(snap)[0]))


@st.fragment(run_every=REFRESH_S)
def _live() -> None:
    """The class's last batch: in words, its batch sizes and its Gantt chart."""
    from ui.batching.figures import gantt, occupancy_chart
    from ui.frame.layout import chart

    w = worker.get_worker()
    snap = w.snapshot(KEEP_S)
    res = class_result(snap, w.max_batch)
    others = [h for h in snap["finished"] if not h["batchable"] and not h.get("warmup") and h["finished"] >= -WINDOW_S]
    if not snap["batching"]:
        st.info("Batching is off on this server (ILE_BATCHING=off): answers run one at a time.")
    if res is None:
        st.info("No answers yet. When students open the home page, their requests show up here as they are "
                "served, and the last batch stays here until the next one replaces it.")
    else:
        m = res.metrics()
        st.markdown(wave_words(snap) + (f" Mean batch **{m['mean_batch']:.1f}** rows per decode step."
                                        if m["decode_steps"] else "") + since_words(snap))
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
