"""The served app measures what the engine measures, on a busy machine too: the timeline page's "time to
first token" and "time per output token" against ``python -m engine trace`` on the same prompt and settings,
measured back to back (CLI, page, CLI) while a one-core busy loop runs beside them, as a teacher's laptop has a
browser or a video call running.

The served app once ran without the engine's thread policy (it imported torch before the engine set OpenMP's wait
policy): on a busy laptop its decode step took 469 ms against the CLI's 278 and its first token 5.3 s against 0.35-1.0.
The server here starts without the test process's OMP_WAIT_POLICY (tests/browser/harness.py), as `streamlit run`
does for a person, so that bug fails this test. One disturbed triple does not decide it: three to five are measured,
and the page's median must agree with the median of the CLI runs around them within 1.3x (decode step) and 1.5x
(first token: see FIRST_TOKEN_BOUND)."""
from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import urllib.parse


from engine.measure.busy import start_load, stop_load
from tests.browser.harness import ROOT, assert_no_error, thread_cpu, wait_idle

PROMPT = "Explain in two sentences why the sky is blue."
NEW = 32
BOUND = 1.3
# The first token's bound is wider: beside a one-core busy loop the served page's first token read 1.25x the CLI's
# (the median of ten triples over three full runs, 0.99x to 2.33x) while its decode step read 1.0x, whatever the
# code: the prefill's two threads share the free core with the server's other threads (its script thread used about
# a quarter of a core during a page's run). The bug this test guards against read 5-15x (first token) and 1.7x (step)
FIRST_TOKEN_BOUND = 1.5
TRIES = (3, 5)  # at least, at most


def _cli_ms(new: int) -> tuple[float, float]:
    """The CLI's time to first token and median decode step, in ms."""
    out = subprocess.run([sys.executable, "-m", "engine", "trace", "--json", "--no-attentions", "--prompt", PROMPT,
                          "--max-new-tokens", str(new), "--temperature", "0"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600, check=True,
                         start_new_session=True).stdout  # a terminal of its own, as the server is (harness.App)
    trace = json.loads(out)
    tpot = statistics.median(s["seconds"] for s in trace["steps"] if s["phase"] == "decode")
    return trace["ttft_seconds"] * 1000, tpot * 1000


def _page_ms(page, url: str, new: int) -> tuple[float, float]:
    # a new token count makes a new run: at temperature 0 another seed would reuse the kept one (ui/frame/runs.py)
    q = urllib.parse.urlencode({"prompt": PROMPT, "max_new_tokens": new, "temperature": 0})
    page.goto(f"{url}/timeline?{q}")
    wait_idle(page, timeout=600)
    assert_no_error(page)

    def metric(label: str) -> float:
        text = page.locator('[data-testid="stMetric"]', has_text=label).first.inner_text()
        return float(re.search(r"([\d,.]+)\s*ms", text).group(1).replace(",", ""))

    return metric("Time to first token"), metric("Time per output token")


def _cpu_during(app, before: dict[int, float]) -> str:
    """Which of the server's threads used the CPU while the page ran: the worker's, or others beside it."""
    after = thread_cpu(app.proc.pid)
    worker = set(app.worker_stats().get("native_ids") or ())
    used = sorted(((after[t] - before.get(t, 0.0), t) for t in after), reverse=True)
    busy = [f"{'worker' if t in worker else t} {s:.2f}s" for s, t in used if s >= 0.02]
    return "server CPU by thread during the page's run: " + (", ".join(busy) or "none")


def _server_state(app) -> str:
    """What else the suite's long-lived server holds while it is timed (its RSS, threads and worker counts): in a
    full suite beside a busy loop the page once read 2x the CLI's first token while it read 1.1x alone."""
    try:
        status = open(f"/proc/{app.proc.pid}/status").read()
        rss = int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) // 1024
        threads = int(re.search(r"Threads:\s+(\d+)", status).group(1))
    except (OSError, AttributeError):
        rss = threads = -1
    stats = app.worker_stats()
    return (f"server RSS {rss} MB, {threads} threads, worker submitted {stats.get('submitted')} queued "
            f"{stats.get('queued')} busy {stats.get('busy')}, torch threads on the worker "
            f"{stats.get('torch_threads')}")


def _within(ratio: float, bound: float = BOUND) -> bool:
    return 1 / bound <= ratio <= bound


def _medians(tries: list[dict], i: int) -> tuple[float, float]:
    """The page's median over its runs and the CLI's over every run around them (each run once), for figure i (0
    TTFT, 1 TPOT)."""
    cli = [tries[0]["cli"][0]] + [t["cli"][1] for t in tries]
    return statistics.median(t["page"][i] for t in tries), statistics.median(c[i] for c in cli)


def _medians_agree(tries: list[dict]) -> bool:
    return all(_within(page / cli, bound) for (page, cli), bound in
               ((_medians(tries, i), b) for i, b in ((0, FIRST_TOKEN_BOUND), (1, BOUND))))


def test_timeline_matches_the_cli_beside_a_busy_process(app_server, page):
    load = start_load("spin", 900)  # bounded: it stops by itself
    tries = []
    try:
        # CLI, page, CLI, page, CLI...: each CLI run brackets the page runs on both sides of it (a triple's "after"
        # is the next one's "before"), so three triples cost four CLI runs, not six. The CLI always decodes NEW
        # tokens; the page NEW + i, since a new token count makes a new run (the step's median barely moves)
        cli_b = _cli_ms(NEW)
        for i in range(TRIES[1]):
            cli_a = cli_b
            cpu = thread_cpu(app_server.proc.pid)
            page_ttft, page_tpot = _page_ms(page, app_server.url, NEW + i)
            cpu = _cpu_during(app_server, cpu)
            cli_b = _cli_ms(NEW)
            ttft = page_ttft / ((cli_a[0] + cli_b[0]) / 2)
            tpot = page_tpot / ((cli_a[1] + cli_b[1]) / 2)
            steady = _within(cli_b[1] / cli_a[1]) and _within(cli_b[0] / cli_a[0])
            tries.append(dict(page=(page_ttft, page_tpot), cli=(cli_a, cli_b), ttft=ttft, tpot=tpot, steady=steady))
            print(f"busy machine: page TTFT {page_ttft:.0f} ms, TPOT {page_tpot:.1f} ms; CLI TTFT {cli_a[0]:.0f} / "
                  f"{cli_b[0]:.0f} ms, TPOT {cli_a[1]:.1f} / {cli_b[1]:.1f} ms; ratios TTFT {ttft:.2f}, "
                  f"TPOT {tpot:.2f}; load {open('/proc/loadavg').read().strip()}; {_server_state(app_server)}; {cpu}")
            if len(tries) >= TRIES[0] and _medians_agree(tries):
                break
    finally:
        stop_load(load)
    # decided on medians of at least three triples: the page's runs against every CLI run around them, so that one
    # disturbed run cannot decide it either way (a CI run: five triples, none both steady and within 1.3x, while the
    # medians agreed within 1.21x and 1.00x); the bug above (1.7x and 5x) fails it whatever the noise
    for (i, name), bound in zip(((0, "time to first token"), (1, "time per output token")), (FIRST_TOKEN_BOUND, BOUND)):
        page_median, cli_median = _medians(tries, i)
        assert _within(page_median / cli_median, bound), (name, page_median, cli_median, tries)
