"""Start the app with `streamlit run` on a free local port and drive it with Playwright + Debian's Chromium."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from engine import settings

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "tests" / "browser" / "screenshots"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-quic", "--no-first-run", "--disable-sync"]
ERROR_TEXTS = ("Traceback (most recent call last)", "StreamlitAPIException", "Error running app")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def served_env_has_engine_wait_policy() -> bool:
    """Was OMP_WAIT_POLICY in this process's environment put there by the engine (not by the person)?"""
    from engine.measure import threads

    return threads._ENV_WAIT_BEFORE is None and settings.OMP_WAIT_POLICY.is_set()


class App:
    def __init__(self, script: str = "app.py", env: dict | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.run_log = SHOTS.parent / f"runs-{self.port}.log"  # one line per full script run (ui.frame.state.start_run)
        SHOTS.mkdir(parents=True, exist_ok=True)
        self.run_log.write_text("")
        SHOTS.mkdir(parents=True, exist_ok=True)
        self.stats_path = SHOTS / f"worker-{self.port}.json"  # the engine worker's stats (engine/jobs/worker.py)
        env = dict(os.environ, PYTHONUNBUFFERED="1", ILE_WORKER_STATS=str(self.stats_path), ILE_RUN_LOG=str(self.run_log),
                   **(env or {}))
        if served_env_has_engine_wait_policy():
            # The test process imported the engine, which set OMP_WAIT_POLICY for itself: a person's `streamlit
            # run` has no such variable, so the server must set its own policy (it once did not, and
            # the inherited variable hid that from every browser test).
            env.pop("OMP_WAIT_POLICY", None)
        self.log = open(SHOTS.parent / f"streamlit-{self.port}.log", "w")
        self.proc = subprocess.Popen(
            # the address, no file watcher and no usage statistics come from .streamlit/config.toml, as for
            # any start of the app; headless: a test never opens a tab of its own
            [sys.executable, "-m", "streamlit", "run", script, "--server.headless", "true",
             "--server.port", str(self.port)],
            cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        # its own session, as a teacher's terminal is one and the browser another: Linux shares the CPU between
        # sessions (autogroups) or desktop app scopes before the threads inside them, so on a real laptop twenty
        # tabs take the browser's half, not twenty twenty-firsts of the machine. Started in the tests' session,
        # the server was one thread among twenty busy renderers (0.1-0.2 of a core while a class pressed Enter)
        deadline = time.time() + 90
        while time.time() < deadline:
            try:
                if urllib.request.urlopen(self.url + "/_stcore/health", timeout=2).read() == b"ok":
                    return
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError("streamlit did not start")

    def worker_stats(self) -> dict:
        import json

        try:
            return json.loads(self.stats_path.read_text())
        except (OSError, ValueError):
            return {}

    def runs(self) -> int:
        """Full script runs so far, over every session (fragment reruns are not counted)."""
        return len(self.run_log.read_text().splitlines())

    def pages_run(self) -> set[str]:
        """The pages (URL paths) that have had a full script run on this server, in any session."""
        return {line.split(" ", 1)[1] for line in self.run_log.read_text().splitlines() if " " in line}

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of each thread of process ``pid``."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            fields = open(f"/proc/{pid}/task/{tid}/stat").read().rsplit(")", 1)[1].split()
            out[int(tid)] = (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            pass
    return out


def launch(playwright):
    """Chromium with one renderer process per site in each profile, so that a profile's new tab of the app reuses
    the process and the frontend code compiled there (conftest's ``tabs`` keeps it alive). Profiles (Playwright's
    contexts) never share a process: a test that opens one per person still gives each their own."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS + ["--process-per-site"], headless=True)


def new_tab(tabs, viewport: dict, timeout_s: float = 180.0):
    """A new tab, at ``viewport``, in the shared profile (conftest's ``tabs``): one person's new tab of the app, its
    own Streamlit session. Close it with ``page.close()``, as a person closes a tab."""
    page = tabs.new_page()
    page.set_viewport_size(viewport)
    page.set_default_timeout(timeout_s * 1000)
    return page


# How long the app must look idle before a test reads it. Between a key press or a click and the rerun it asks for,
# the state reads not-running for a moment (with a 0.6 s quiet, two tests in a full suite read the page before their
# run: a typed prompt, a deep link's first answer). A wait that has seen a run end after the page's last message to
# the server (a click, a key press: each is one) and after the last wait returned knows its run is done, and a short
# quiet covers the hand-over from a page to the fragments it draws; any other wait waits IDLE_QUIET_S of quiet.
IDLE_QUIET_S = 2.0
QUIET_AFTER_A_RUN_S = 0.5

# Counts the runs that ended in the page (the run state left "running") with a MutationObserver, so that a run
# shorter than one poll is still seen, and notes the count when the page last sent the server a message and when a
# wait last returned. Installed at the start of every document of a profile by ``count_runs``, else by the first wait
# in the document (which then cannot know of the runs before it).
RUN_COUNTER_JS = """(() => {
  if (window.__ileRuns) return;
  const runs = window.__ileRuns = {ended: 0, waited: 0, sent: 0};
  new MutationObserver((records) => {
    runs.ended += records.filter((r) => r.oldValue === 'running').length;
  }).observe(document, {attributes: true, subtree: true, attributeOldValue: true,
                        attributeFilter: ['data-test-script-state']});
  const send = WebSocket.prototype.send;
  WebSocket.prototype.send = function (...args) { runs.sent = runs.ended; return send.apply(this, args); };
})()"""

# [state, a run ended after the page's last message and the last wait]
_STATE_JS = """() => {
  %s;
  const runs = window.__ileRuns;
  const ran = runs.ended > Math.max(runs.waited, runs.sent);
  const app = document.querySelector('[data-testid="stApp"]');
  if (!app) return ['gone', ran];
  if (document.querySelector('[data-testid="stStatusWidget"]') ||
      document.querySelector('[data-testid="stSpinner"]')) return ['busy', ran];
  // drawn, not only run: Plotly is a lazily loaded chunk, so a chart's box exists before its picture, and a starved
  // tab can spend seconds there after the run ended (charts not shown, as in an unselected tab of st.tabs, are not
  // waited for)
  const shown = (el) => el.offsetParent !== null;
  if ([...document.querySelectorAll('[data-testid="stSkeleton"]')].some(shown) ||
      [...document.querySelectorAll('[data-testid="stPlotlyChart"]')].some(
          (c) => shown(c) && !c.querySelector('.main-svg'))) return ['drawing', ran];
  return [app.getAttribute('data-test-script-state'), ran];
}""" % RUN_COUNTER_JS


def count_runs(context) -> None:
    """Count the app's runs from the start of every document of this profile (``wait_idle`` then knows that a
    page opened before the wait has run)."""
    context.add_init_script(RUN_COUNTER_JS)


def wait_idle(page, timeout: float = 180.0) -> None:
    """Wait until Streamlit has finished running the script: the app's own run state (the ``data-test-script-state``
    attribute Streamlit 1.67 puts on ``stApp`` for tests: initial, running, rerunRequested, notRunning, ...) says not
    running, with no status widget or spinner and every shown chart drawn, for a quiet moment: ``IDLE_QUIET_S``, or
    ``QUIET_AFTER_A_RUN_S`` once a run has ended after the page's last message and the last wait. A page that has
    not run yet reads "initial"."""
    page.wait_for_selector('[data-testid="stApp"]', timeout=timeout * 1000)
    deadline = time.time() + timeout
    quiet_since = None
    saw_a_run = False
    while time.time() < deadline:
        state, ran = page.evaluate(_STATE_JS)
        if state is None:  # Streamlit renamed its attribute: say so rather than guess from the widgets
            raise AssertionError("stApp has no data-test-script-state attribute: update tests/browser/harness.py")
        saw_a_run = saw_a_run or ran
        if state != "notRunning":
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.time()
        elif time.time() - quiet_since >= (QUIET_AFTER_A_RUN_S if saw_a_run else IDLE_QUIET_S):
            page.evaluate("() => { window.__ileRuns.waited = window.__ileRuns.ended; }")
            return
        time.sleep(0.1)
    raise TimeoutError("the app kept running")


def wait_text(page, *texts: str, timeout: float = 300.0, where: str = "body") -> None:
    """Wait until every one of ``texts`` is shown: on a loaded machine a page can look idle for a moment before
    its run has drawn what a test checks, so a test waits for what it checks, not only for quiet."""
    page.wait_for_function("([sel, texts]) => { const el = document.querySelector(sel); "
                           "return !!el && texts.every(t => el.innerText.includes(t)); }",
                           arg=[where, list(texts)], timeout=timeout * 1000)


def wait_text_then_check(page, *texts: str, timeout: float = 300.0, where: str = "body") -> None:
    """``wait_text``, returning on a timeout too: the caller's assertions that follow then say what is shown
    instead of the texts (Playwright's timeout would only say it waited)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        wait_text(page, *texts, timeout=timeout, where=where)
    except PlaywrightTimeout:
        pass


def assert_no_error(page) -> None:
    text = page.inner_text("body")
    for bad in ERROR_TEXTS:
        assert bad not in text, f"error on page: {bad}\n{text[:2000]}"
    assert page.locator('[data-testid="stException"]').count() == 0, page.inner_text('[data-testid="stException"]')


def screenshots_wanted() -> bool:
    """Pictures are for a person to look at, never asserted: taken by default, skipped in CI (each whole-page
    picture costs seconds of Chromium drawing on 2 cores) unless ILE_SCREENSHOTS=1; ILE_SCREENSHOTS=0 skips them."""
    wanted = settings.SCREENSHOTS.get()
    return wanted if wanted is not None else not settings.CI.get()


def screenshot(page, name: str, max_height: int = 7000) -> Path:
    """Whole-page picture: Streamlit scrolls an inner container, so grow the viewport to its content first."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    if not screenshots_wanted():
        return path
    size = page.viewport_size
    height = page.evaluate(
        "() => { const m = document.querySelector('[data-testid=\"stMain\"]') || document.body;"
        " return Math.max(m.scrollHeight, document.body.scrollHeight); }")
    page.set_viewport_size({"width": size["width"], "height": min(max_height, max(size["height"], height + 40))})
    page.wait_for_timeout(1500)  # tables draw on a canvas and charts load lazily after a resize
    page.screenshot(path=str(path), full_page=True)
    page.set_viewport_size(size)
    return path


def close_dialogs(page) -> None:
    """Close any modal dialog left open (it makes the page underneath inert)."""
    for _ in range(3):
        if page.locator('[role="dialog"]').count() == 0:
            return
        page.keyboard.press("Escape")
        page.wait_for_timeout(300)
