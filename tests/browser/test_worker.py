"""The engine worker seen from real browsers: closing a tab mid-race stops the worker's job within a few seconds,
and a class of sessions opening the home page at once each get their own answer, with no error, and the
server's memory settles after they close. ILE_FULL_CLASS_TEST=1 runs the full 20-session class (the suite: 5)."""
from __future__ import annotations

import os
import time
import urllib.parse

import pytest

from tests.browser.harness import assert_no_error, wait_idle

CLASS_PROMPTS = ["What is the capital of France?", "Name a primary colour.", "What is 2 + 3?",
                 "Say hello in Spanish.", "What animal says moo?", "Name a planet.", "What is the opposite of hot?",
                 "Name a fruit that is yellow.", "How many legs does a spider have?", "What colour is the sky?",
                 "Name a day of the week.", "What do bees make?", "What is frozen water called?",
                 "Name a musical instrument.", "What is the largest ocean?", "Which month comes after May?",
                 "What is the capital of Japan?", "Name a shape with three sides.", "What do cows drink?",
                 "What gas do plants breathe in?"]


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _wait_worker(app, pred, timeout: float) -> dict:
    deadline = time.time() + timeout
    stats = app.worker_stats()
    while time.time() < deadline:
        stats = app.worker_stats()
        if pred(stats):
            return stats
        time.sleep(0.1)
    raise AssertionError(f"worker did not reach the state in {timeout} s: {stats}")


def test_closing_the_tab_mid_race_stops_the_workers_job(app_server, browser):
    ctx = browser.new_context(viewport={"width": 1366, "height": 768})
    page = ctx.new_page()
    page.goto(f"{app_server.url}/speculative?temperature=0&max_new_tokens=256")
    start = page.get_by_role("button", name="Start the race")
    start.click()  # a race runs only when asked
    page.wait_for_function("() => document.body.innerText.includes('\u258c')", timeout=300_000)  # lanes streaming
    running = _wait_worker(app_server, lambda s: s.get("busy") and "race" in (s.get("running") or {}).get("key", ""),
                           30)
    before = running.get("cancelled", 0)
    assert start.count() == 1
    ctx.close()  # the person closes the tab mid-race
    t0 = time.time()
    # within one forward pass plus Streamlit noticing the closed socket: about a second on a quiet machine; a
    # loaded one (a suite beside other work) once took over 10 s, so the bound is 30 s and the time is printed
    stats = _wait_worker(app_server, lambda s: not s.get("busy") and s.get("queued", 0) == 0, 30)
    waited = time.time() - t0
    assert stats.get("cancelled", 0) == before + 1, stats
    print(f"worker idle {waited:.1f} s after the tab closed")


def _class(app_server, browser, embedded_lm, n: int) -> float:
    from engine.sampling import SamplingSettings
    from engine.trace import run_trace
    from ui.html import visible

    prompts = CLASS_PROMPTS[:n]
    expected = [visible(run_trace(embedded_lm, p, SamplingSettings(0.0), 6, analyse=False).generated_tokens[0])
                for p in prompts]
    pid = app_server.proc.pid
    rss0 = _rss_kib(pid)
    ctxs, pages = [], []
    t0 = time.time()
    for p in prompts:
        ctx = browser.new_context(viewport={"width": 1366, "height": 768})
        page = ctx.new_page()
        page.set_default_timeout(600_000)
        q = urllib.parse.urlencode({"prompt": p, "max_new_tokens": 6, "temperature": 0})
        page.goto(f"{app_server.url}/?{q}", wait_until="commit")
        ctxs.append(ctx)
        pages.append(page)
    last = 0.0
    for page, want in zip(pages, expected):
        page.wait_for_function("() => document.body.innerText.includes('times in all')", timeout=600_000)
        last = max(last, time.time() - t0)
    for page, want in zip(pages, expected):
        wait_idle(page, timeout=300)
        assert_no_error(page)
        assert f"the model chose {want!r}" in page.inner_text("body")
    rss_open = _rss_kib(pid)
    for ctx in ctxs:
        ctx.close()
    _wait_worker(app_server, lambda s: not s.get("busy") and s.get("queued", 0) == 0, 60)
    time.sleep(5)
    rss_a = _rss_kib(pid)
    time.sleep(10)
    rss_b = _rss_kib(pid)
    print(f"{n} sessions: last answer after {last:.1f} s; server RSS {rss0 / 1024:.0f} MiB before, "
          f"{rss_open / 1024:.0f} MiB open, {rss_a / 1024:.0f} -> {rss_b / 1024:.0f} MiB after closing")
    assert rss_b <= rss_a * 1.03, "memory kept growing after every session closed"
    log = open(app_server.log.name).read()
    assert log.count("loaded model 'embedded' for the app") == 1, "the model must be loaded once for all sessions"
    return last


def test_a_class_of_sessions_each_get_their_own_answer(app_server, browser, embedded_lm):
    n = 20 if os.environ.get("ILE_FULL_CLASS_TEST") == "1" else 5
    _class(app_server, browser, embedded_lm, n)
