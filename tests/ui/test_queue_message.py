"""A waiting page's line: its place in the fair order and what runs now, by kind only (never a prompt)."""
from ui.frame.work import queue_message


def test_queue_message_names_place_and_what_runs():
    msg = queue_message({"place": 3, "queued": 5, "running": {"answer": 7}, "batch": 7}, 12.4)
    assert "place 3 of 5" in msg and "a batch of 7 answers" in msg and "12 s" in msg
    alone = queue_message({"place": 1, "queued": 1, "running": {"decode_sweep": 1}, "batch": 0}, 2.0)
    assert "decode sweep" in alone and "runs alone" in alone
    assert "nothing" in queue_message({"place": 1, "queued": 1, "running": {}, "batch": 0}, 0.5)


def test_worker_place_follows_the_fair_order():
    import threading

    from engine.jobs.worker import Worker

    w = Worker(batching=False)
    started, release = threading.Event(), threading.Event()
    w.submit(lambda: (started.set(), release.wait(10)), session="a")
    started.wait(10)
    a2 = w.submit(lambda: None, session="a", key="a2")
    b1 = w.submit(lambda: None, session="b", key="b1")
    assert w.place(b1)["place"] == 1 and w.place(a2)["place"] == 2  # b has not been served yet: b first
    info = w.place(a2)
    assert info["queued"] == 2 and info["running"] == {"<lambda>": 1}
    release.set()
    a2.result(10), b1.result(10)
    assert b1.finished_at < a2.finished_at


def test_a_waiting_page_redraws_its_queue_line_only_when_the_words_change(monkeypatch):
    """Each poll (every 50 ms) used to send the same line again: 20 waiting tabs were each sent 20 updates a
    second to draw. The line changes once a second (its seconds) or when the place changes."""
    import threading
    import time
    import types

    from engine.jobs.worker import Worker
    from ui.frame import work

    drawn = []

    class Slot:
        def caption(self, text):
            drawn.append(text)

        def empty(self):
            drawn.append(None)

    ctx = types.SimpleNamespace(session_id="b", yield_check=lambda: None)
    monkeypatch.setattr(work, "get_script_run_ctx", lambda suppress_warning=True: ctx)
    monkeypatch.setattr(work.st, "empty", Slot)
    monkeypatch.setattr(work, "_unrecorded", lambda: __import__("contextlib").nullcontext(True))
    w = Worker(batching=False)
    started, release = threading.Event(), threading.Event()
    w.submit(lambda: (started.set(), release.wait(10)), session="a", key="long")
    started.wait(10)
    threading.Timer(2.3, release.set).start()
    t0 = time.monotonic()
    assert work.run(lambda: 42, key="short", on=w) == 42  # waits about 2.3 s: about 46 polls
    waited = time.monotonic() - t0  # longer on a starved machine (the suite's idle-priority phase): more seconds
    lines = [d for d in drawn if d is not None]
    # "(0 s so far)", "1 s", "2 s", ... one draw per new second, and the "waited" line; a line per poll would be 46+
    assert 2 <= len(lines) <= int(waited) + 2, (waited, lines)
    assert len(set(lines)) == len(lines), "the same line was sent twice"
    assert drawn[-1] is None or "waited" in drawn[-1]  # the line goes (or says it waited) once the job ran


def test_queue_message_says_why_in_one_line():
    """A waiting student is told why in the same line (a seats.refusal reason in words)."""
    from ui.frame.work import why_words

    base = {"place": 2, "queued": 9, "running": {"answer": 8}, "batch": 8}
    for why in ({"reason": "full", "seats": 8}, {"reason": "session"}, {"reason": "long", "seats": 32, "kept": 8},
                {"reason": "client_long", "limit": 6}, {"reason": "share", "clients": 3}):
        words = why_words(why)
        assert words, why
        msg = queue_message({**base, "why": why}, 4.0)
        assert f"why: {words}" in msg and "\n" not in msg and msg.endswith("(4 s so far).")
    assert "24 seats" in why_words({"reason": "long", "seats": 32, "kept": 8})
    assert "6 long requests" in why_words({"reason": "client_long", "limit": 6})
    assert "why" not in queue_message({**base, "why": None}, 1.0)


def test_the_client_is_the_sessions_address_and_this_machine_on_the_loopback(monkeypatch):
    """The worker bounds what one client may hold (engine/jobs/seats.py): a client is the address Streamlit reports
    for the session (st.context.ip_address), and every tab of the server's own machine (reported as None) is one."""
    import types

    from ui.frame import work

    for reported, client in (("10.0.0.5", "10.0.0.5"), ("fe80::1", "fe80::1"), (None, work.THIS_MACHINE)):
        monkeypatch.setattr(work, "st", types.SimpleNamespace(context=types.SimpleNamespace(ip_address=reported)))
        assert work.client_address() == client
