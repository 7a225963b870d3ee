"""Real browser: after the app has been used on every page, the race page's plain lane agrees with
`python -m engine race` (same prompt and settings, measured alternately: CLI, page, CLI, ...) within 15%, median
against median (on a machine whose own speed swings more than 1.5x between the CLI's runs: within their range,
widened by 15%); the race starts only on "Start"; a screenshot at 1366x768 (a projector)."""
import json
import re
import statistics
import subprocess
import sys

import pytest

from engine.speculative import PROMPTS
from tests.browser.harness import ROOT, assert_no_error, new_tab, screenshot, screenshots_wanted, wait_idle
from ui.frame import nav

TOKENS = 32  # enough decode steps for a rate; each of the 3 runs times a warm-up race and 5 races
CLOCK = re.compile(r"clock\s+([\d.]+)\s*s\s+(\d+)\s+tokens\s+([\d.]+)\s+tokens/s")


def _cli_plain_tokens_per_s(prompt: str) -> float:
    out = subprocess.run([sys.executable, "-m", "engine", "race", "--json", "--prompt", prompt, "--drafter",
                          "lookup", "--k", "4", "--max-new-tokens", str(TOKENS)],
                         cwd=ROOT, capture_output=True, text=True, timeout=600, check=True,
                         start_new_session=True)  # a terminal of its own, as the server is (harness.App)
    return json.loads(out.stdout)["plain"]["tokens_per_second"]


def _vs_cli(page: float, cli_before: float, cli_after: float) -> float:
    """The page's plain-lane tokens/s over the mean of the two CLI runs around it."""
    return page / ((cli_before + cli_after) / 2)


def _steady(_page: float, cli_before: float, cli_after: float) -> bool:
    """The CLI agreed with itself within 15% across the page's run."""
    return 0.85 <= cli_after / cli_before <= 1.15


# the page and each CLI run time a warm-up race then 5 races (engine/speculative/repeats.py): one try, CLI / page /
# CLI, took more than the suite's 10 minutes at load 22 on 2 cores
@pytest.mark.timeout(1800)
def test_plain_lane_agrees_with_the_cli(app_server, tabs):
    page = new_tab(tabs, {"width": 1366, "height": 768}, timeout_s=300)
    try:
        # The server used on every page first, as a class would (in the suite, the page tests before this one
        # have used most pages already: only pages that never ran on this server are visited here).
        for p in [p for p in nav.available() if p.url not in app_server.pages_run()]:
            page.goto(f"{app_server.url}/{p.url}?max_new_tokens=2")
            wait_idle(page, timeout=300)
        page.goto(f"{app_server.url}/speculative?temperature=0&max_new_tokens={TOKENS}")
        wait_idle(page, timeout=300)
        assert_no_error(page)
        assert "Measured speedup" not in page.inner_text("body")  # opening the page starts no race
        # moving a control starts no race either
        page.get_by_text("model:self", exact=True).first.click()
        wait_idle(page, timeout=120)
        page.get_by_text("lookup", exact=True).first.click()
        wait_idle(page, timeout=120)
        assert "Measured speedup" not in page.inner_text("body")

        prompt = PROMPTS[1][2]  # the page's default race prompt ("quote"), chat template on, greedy
        tries = []
        cli_before = _cli_plain_tokens_per_s(prompt)
        for _ in range(3):  # CLI, page, CLI; again when the CLI drifted (CLI vs CLI) or the page did, by over 15%:
            # one disturbed page run (measured 0.77 once in a full suite, 0.95-1.01 alone and in the browser tier)
            # should not decide it; a page that is systematically slower fails all three. A retry's page run is
            # bracketed by the CLI run just before it (the last one's "after") and a new one after it
            page.get_by_role("button", name="Start the race").click()
            page.wait_for_function("() => document.body.innerText.includes('Measured speedup')", timeout=600_000)
            wait_idle(page, timeout=300)
            assert_no_error(page)
            cli_after = _cli_plain_tokens_per_s(prompt)
            clocks = CLOCK.findall(page.inner_text("body"))
            assert len(clocks) >= 2, clocks
            assert int(clocks[0][1]) <= TOKENS  # EOS may end it early, never longer
            page_plain = float(clocks[0][2])
            tries.append((page_plain, cli_before, cli_after))
            print(f"plain lane: page {page_plain:.2f} tok/s, CLI {cli_before:.2f} / {cli_after:.2f} tok/s, "
                  f"ratio {_vs_cli(*tries[-1]):.3f}; load {open('/proc/loadavg').read()}")
            if _steady(*tries[-1]) and 0.85 <= _vs_cli(*tries[-1]) <= 1.15:
                break
            cli_before = cli_after
        if screenshots_wanted():
            page.screenshot(path=str(ROOT / "tests" / "browser" / "screenshots" / "speculative-1366.png"))
        screenshot(page, "speculative-1366-full")
        # decided on medians: the page's runs against every CLI run around them, so that one disturbed run cannot
        # decide it either way (a CI run: a steady pair at 0.847, then two pairs whose CLI runs differed 1.5x). On a
        # machine whose own speed swung more than 1.5x between the CLI's runs (measured: 3.9 to 9.5 tokens/s, the
        # same command minutes apart, a neighbour busy on the host), 15% cannot be told from noise: the page must
        # then lie within the range the CLI itself measured, widened by 15% (a full suite on that host: page median
        # 2.0 against CLI runs of 2.1-4.8 tokens/s). A page systematically 15% off fails on a steady machine
        page_median = statistics.median(p for p, _, _ in tries)
        cli = [tries[0][1]] + [a for _, _, a in tries]
        cli_median = statistics.median(cli)
        if max(cli) / min(cli) <= 1.5:
            assert 0.85 <= page_median / cli_median <= 1.15, (page_median, cli_median, tries)
        else:
            print(f"the CLI's own runs spread {max(cli) / min(cli):.2f}x: the page's median is held to their range, "
                  "widened by 15%")
            assert min(cli) / 1.15 <= page_median <= max(cli) * 1.15, (page_median, cli, tries)
    finally:
        page.close()
