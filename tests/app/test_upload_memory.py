"""Uploads keep the served app's memory bounded (issue 49): Streamlit kept every file PUT to its upload endpoint
until the session ended, so one session that uploaded 20 files of 60 MB held 1.6 GB (ui/frame/uploads.py).

Through the served app, with websocket sessions that act as the uploader does (scripts/class_tabs.py): one student
opens twelve 60 MB files on the saved-run page, one after another (each read and refused by the page), while four
other sessions PUT three 60 MB files each that no page ever reads. The server's memory afterwards stays within the
uploads' budget of what it was before; and a real saved run still opens and runs here (the page keeps what it
checked: the file's bytes are gone from the server by the time its button is pressed)."""
from __future__ import annotations

import asyncio
import threading
import time

import pytest
import torch

from scripts.class_tabs import Tab, put_file, run
from tests.browser.harness import App

MB = 2**20
FILE = 60 * MB
OPENED, ORPHANS, SESSIONS = 12, 3, 4
UPLOADER = "Open a saved run (RUN.json)"
REFUSALS = ("not a usable saved run", "no longer on the server")  # ui/record/sections.py
SLACK = 160 * MB  # one file in flight (its bytes and the page's text of them) and the allocator's own


@pytest.fixture(scope="module")
def tiny_record(tiny_lm) -> bytes:
    from engine.core.sampling import SamplingSettings
    from engine.core.trace import run_trace
    from engine.record import build, format as F

    tr = run_trace(tiny_lm, "A saved run opened after many uploads.", SamplingSettings(), max_new_tokens=4, seed=0)
    machine = build.machine_facts("cpu", torch.get_num_threads())
    return F.dumps(build.trace_record(tr, tiny_lm.tokenizer, build.model_identity(tiny_lm), machine, "test"))


class Peak:
    """The server's largest resident memory, sampled every 50 ms on a thread of its own."""

    def __init__(self, pid: int):
        import psutil

        self.proc, self.most, self._stop = psutil.Process(pid), 0, threading.Event()
        threading.Thread(target=self._sample, daemon=True).start()

    def now(self) -> int:
        return self.proc.memory_info().rss

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self.most = max(self.most, self.now())

    def stop(self) -> None:
        self._stop.set()


async def _until(check, timeout: float, what: str):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout:.0f} s")


def _run_here(tab: Tab) -> str | None:
    return next((label for label in tab.buttons if label.startswith("Run it here")), None)


async def _uploads(app: App, record: bytes) -> dict:
    student = Tab(app.url, "record", {"model": "tiny-random"})
    others = [Tab(app.url, "record", {"model": "tiny-random"}) for _ in range(SESSIONS)]
    tabs = [student, *others]
    await asyncio.gather(*(t.open() for t in tabs))
    await asyncio.gather(*(t.wait_run(300) for t in tabs))
    mem = Peak(app.proc.pid)
    before = mem.now()
    junk = b" " * FILE  # not JSON: the page reads it and refuses it
    loop = asyncio.get_running_loop()

    async def orphans(tab: Tab) -> list[int]:
        return [await loop.run_in_executor(None, put_file, app.url, f"/_stcore/upload_file/{tab.session_id}/"
                                           f"orphan-{i}", junk) for i in range(ORPHANS)]

    try:
        pending = asyncio.gather(*(orphans(t) for t in others))
        refused = 0
        for i in range(OPENED):
            # wait for this file's own refusal, not for any run to finish: a fragment's timed rerun also finishes
            # a run, and the next upload then replaced a file the page had not read yet (11 of 12, a loaded run)
            sent = time.monotonic()
            assert await student.upload(UPLOADER, junk, f"junk-{i}.json") in (200, 204)
            # refused as not a saved run, or, when the other sessions' files pushed it out of the server's budget
            # before this page's run read it (a loaded machine: the oldest file goes first), as gone: open it again
            await _until(lambda: any(t >= sent and any(why in b for why in REFUSALS) for t, b in student.alerts),
                         120, f"the page's refusal of upload {i}")
            refused += 1
        statuses = await pending
        await asyncio.sleep(1.0)
        after = mem.now()
        done = student.runs_finished
        assert await student.upload(UPLOADER, record, "run.json") in (200, 204)
        await _until(lambda: student.runs_finished > done and _run_here(student), 120, "the real saved run shown")
        done = student.runs_finished
        await student.press(_run_here(student))
        await _until(lambda: student.runs_finished > done, 300, "its run here")
        verdict = next((b for _, b in student.alerts if "Reproduced" in b), None)
    finally:
        mem.stop()
        await asyncio.gather(*(t.close() for t in tabs), return_exceptions=True)
    return {"before": before, "after": after, "peak": mem.most, "orphans": statuses, "refused": refused,
            "verdict": verdict, "errors": [e for t in tabs for e in t.errors]}


@pytest.mark.serial
def test_many_large_uploads_leave_the_servers_memory_bounded(monkeypatch, tiny_record):
    from ui.frame.uploads import BUDGET

    monkeypatch.setenv("ILE_MODELS", "tiny-random")
    monkeypatch.setenv("ILE_PREPARE_GEMMA", "off")
    app = App()
    try:
        got = run(_uploads(app, tiny_record), timeout=1200)
        log = open(app.log.name).read()
    finally:
        app.stop()
    grown, peak = (got["after"] - got["before"]) / MB, (got["peak"] - got["before"]) / MB
    print(f"{OPENED} x 60 MB opened in one session, {SESSIONS} x {ORPHANS} x 60 MB never read: the server grew "
          f"{grown:.0f} MB (peak +{peak:.0f} MB; budget {BUDGET / MB:.0f} MB)")
    assert all(s in (200, 204) for ss in got["orphans"] for s in ss), got["orphans"]  # the files were taken
    assert got["errors"] == [], got["errors"]
    assert "Traceback" not in log, log[log.index("Traceback"):][:3000]
    assert got["refused"] >= OPENED, "the page did not read and refuse every junk file"
    assert got["verdict"] is not None, "a real saved run no longer opened and ran here after the uploads"
    assert grown * MB < BUDGET + SLACK, f"the server kept {grown:.0f} MB of uploads (budget {BUDGET / MB:.0f} MB)"
