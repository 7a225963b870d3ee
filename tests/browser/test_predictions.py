"""A class predicts together, in a real browser on a class server: a teacher tab (the class view), 3 student tabs
in Chromium (ILE_CLASS_SESSIONS=N for more) and 10 more students as websocket sessions that act as a tab does
(scripts/class_tabs.py: ten Chromium tabs, each drawing a measured timeline page, ran past 300 s on the
2 shared cores, over this test's 90 s) open the timeline question from the teacher's link and pick. The teacher's
tally counts every pick within 2 s of the last, a reload keeps its pick and does not vote twice, "Reveal to the
class" opens the answer on every student's page within 3 s (their boxes poll; no reload), and a forged ?q= shows
no error."""
import os
import time
from urllib.parse import parse_qsl

import pytest

from engine import settings
from scripts.class_tabs import Crowd, Tab
from tests.browser.harness import SHOTS, App, assert_no_error, screenshots_wanted

TOKEN = "t0ken-for-the-class-test"
STUDENTS = settings.CLASS_SESSIONS.get() or 3  # in Chromium
SOCKETS = 10  # students as websocket sessions
LINK = "/timeline?model=tiny-random&max_new_tokens=2&pin=1&q=timeline.try-this"
CHOICES = ["No, much narrower", "About as wide", "Wider"]
TALLY_S = 2.0 + 1.0  # the goal, 2 s from the last pick the server takes, plus the click's own trip to it
REVEAL_S = 3.0


def _load() -> str:
    return f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"


def _quiet() -> bool:
    """Are the timing goals measurable here? On a machine running more than a process per core (a shared test
    machine: 9 sessions and a compiler on 2 cores measured load 15-18) the times are printed, not judged; the
    counts, the reveal reaching every page and the reload are checked always."""
    return os.getloadavg()[0] <= (os.cpu_count() or 1)

REVEALED = ("This run decides:", "Too noisy to decide")


@pytest.fixture(scope="module")
def room(browser):
    """The session's Chromium: a second Playwright in this thread is refused in the full browser tier."""
    return browser


@pytest.fixture(scope="module")
def class_server():
    mp = pytest.MonkeyPatch()
    mp.setenv("ILE_CLASS_MODE", "on")
    mp.setenv("ILE_MODELS", "tiny-random")
    mp.setenv("ILE_TEACHER_TOKEN", TOKEN)
    try:
        app = App()
    finally:
        mp.undo()
    yield app
    app.stop()


def _picks(teacher) -> int | None:
    """The teacher's tally count ("Picks" metric), or None before it is drawn."""
    got = teacher.evaluate("""() => { const m = [...document.querySelectorAll('[data-testid="stMetric"]')]
        .find(e => e.innerText.startsWith('Picks')); return m ? m.querySelector('[data-testid="stMetricValue"]')
        .innerText : null; }""")
    return None if got is None else int(got)


def _wait_picks(teacher, want: int, timeout: float) -> float:
    """Seconds until the teacher's tally reads ``want`` (raises after ``timeout``)."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        if _picks(teacher) == want:
            return time.time() - t0
        time.sleep(0.1)
    raise AssertionError(f"the teacher's tally read {_picks(teacher)}, not {want}, after {timeout:.0f} s")


SCROLLER_JS = """(e, dy) => { let p = e.parentElement;  // Streamlit scrolls an inner container, not the window
    while (p && !(p.scrollHeight > p.clientHeight && /auto|scroll/.test(getComputedStyle(p).overflowY))) p = p.parentElement;
    if (dy === null) { if (p) p.scrollTo(0, 0); return; }
    e.scrollIntoView({block: 'start'}); if (p) p.scrollBy(0, -dy); }"""


def _shot(page, name: str, top: str | None = None, below: int = 90) -> None:
    """The projector's view (1366x768): the element showing ``top`` ``below`` pixels from the top, under the app's
    header (and a presenter's section bar), or the page's first screen when ``top`` is None."""
    anchor = page.locator('[data-testid="stHeading"]').first if top is None else page.get_by_text(top).first
    anchor.evaluate(SCROLLER_JS, None if top is None else below)
    page.wait_for_timeout(1500)  # charts draw after their data arrives
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"))


def _box(page) -> None:
    """Wait until the page has run to its end (its last link drawn; a class page never reads idle: its question box
    polls the tally every second) and shows its question's choices. A click while the first run still waits for a
    measurement is taken only when that run ends."""
    page.get_by_text("Go deeper: Batching").wait_for(timeout=300_000)
    page.locator('[data-testid="stRadio"]').filter(has_text="Your prediction").first.wait_for(timeout=300_000)


def _checked(page):
    """The checked choice of the question box's radio (its label holds the choice's text)."""
    return page.locator('[data-testid="stRadio"]').filter(has_text="Your prediction").first \
        .locator("label").filter(has=page.locator("input:checked"))


def _pick(page, text: str) -> None:
    page.locator('[data-testid="stRadio"]').filter(has_text="Your prediction").first.get_by_text(text, exact=True).click()


@pytest.mark.browser
def test_a_class_predicts_sees_its_tally_and_the_reveal(room, class_server):
    browser = room
    url = class_server.url
    teacher_ctx = browser.new_context(viewport={"width": 1366, "height": 768})
    teacher_ctx.set_default_timeout(180_000)  # 2 shared cores: a page's first load can take a while
    teacher = teacher_ctx.new_page()
    teacher.goto(f"{url}/batching?model=tiny-random&teacher={TOKEN}")
    teacher.get_by_role("button", name="Reveal to the class").wait_for(timeout=300_000)
    assert_no_error(teacher)
    assert _picks(teacher) == 0
    contexts, students, crowd = [], [], Crowd()
    path, query = LINK[1:].split("?")
    sockets = [Tab(url, path, dict(parse_qsl(query))) for _ in range(SOCKETS)]
    everyone = STUDENTS + SOCKETS
    try:
        for _ in range(STUDENTS):  # one profile each: one person each
            ctx = browser.new_context(viewport={"width": 1366, "height": 768}, reduced_motion="reduce")
            ctx.set_default_timeout(180_000)
            contexts.append(ctx)
            page = ctx.new_page()
            page.goto(url + LINK, wait_until="commit")
            students.append(page)
        crowd.open(sockets)
        for k, page in enumerate(students):
            try:
                _box(page)
            except Exception as exc:  # say what the page shows: twice in a full suite a student page never drew its end
                raise AssertionError(f"student {k} of {STUDENTS}: the page shows {page.inner_text('body')[-1500:]!r}"
                                     ) from exc
            assert_no_error(page)
            assert "Your teacher sent you to this question" in page.inner_text("body")
        for i, page in enumerate(students):
            _pick(page, CHOICES[i % 3])
        for _ in range(5):  # one student clicks again and again: still one pick
            _pick(students[0], CHOICES[1])
            _pick(students[0], CHOICES[0])
        for i, tab in enumerate(sockets):
            crowd.do(tab.pick("timeline_try_pick", (i + 1) % 3))
        took = _wait_picks(teacher, everyone, timeout=120)
        print(f"tally: {everyone} picks on the teacher's view {took:.2f} s after the last pick ({_load()})")
        if _quiet():
            assert took <= TALLY_S, f"the tally took {took:.1f} s"

        # a reload is a new Streamlit session at the same address, whose voter id keeps the pick: still counted,
        # shown as this tab's own, and changed in place, never cast twice
        assert "voter=" in students[1].url
        students[1].reload()
        _box(students[1])
        _checked(students[1]).filter(has_text=CHOICES[1 % 3]).wait_for(timeout=30_000)
        assert _picks(teacher) == everyone
        _pick(students[1], CHOICES[2])
        _checked(students[1]).filter(has_text=CHOICES[2]).wait_for(timeout=30_000)
        _wait_picks(teacher, everyone, timeout=30)
        presenter = None
        if screenshots_wanted():  # docs/class.md's pictures, at a projector's 1366x768
            presenter = teacher_ctx.new_page()
            presenter.goto(f"{url}/timeline?model=tiny-random&max_new_tokens=2&present=1")
            presenter.get_by_text("The answer opens here when the class view reveals it").first.wait_for()
            presenter.locator('[data-testid="stPlotlyChart"] .main-svg').first.wait_for()
            assert presenter.locator('[data-testid="stRadio"]').count() == 0  # the projector does not vote
            _shot(presenter, "class-predict-presenter-tally", "Try this.", below=150)
            teacher.bring_to_front()
            _shot(teacher, "class-predict-teacher", "The class predicts")

        teacher.get_by_role("button", name="Reveal to the class").click()
        t0, m0, waiting = time.time(), time.monotonic(), set(range(STUDENTS))
        while (waiting or not all(t.said(*REVEALED, since=m0) for t in sockets)) and time.time() - t0 < 60:
            for i in list(waiting):
                body = students[i].inner_text("body")
                if any(w in body for w in REVEALED):
                    waiting.discard(i)
            time.sleep(0.1)
        took = time.time() - t0
        late = [t for t in sockets if not t.said(*REVEALED, since=m0)]
        print(f"reveal: every one of {everyone} student pages showed the answer {took:.2f} s after the click "
              f"({_load()})")
        assert not waiting and not late, f"{len(waiting) + len(late)} student pages never showed the reveal"
        assert [e for t in sockets for e in t.errors] == []
        if _quiet():
            assert took <= REVEAL_S, f"the reveal took {took:.1f} s to reach every page"
        for page in students:
            assert_no_error(page)
            assert "Your pick" in page.inner_text("body")
        if screenshots_wanted():
            students[-1].bring_to_front()
            _shot(students[-1], "class-predict-student-answer", "Try this.")
        if presenter is not None:
            presenter.bring_to_front()
            presenter.get_by_text("This run decides").or_(presenter.get_by_text("Too noisy to decide")).first.wait_for()
            _shot(presenter, "class-predict-presenter-answer", "Try this.", below=150)
            presenter.close()

        students[0].goto(url + "/timeline?model=tiny-random&max_new_tokens=2&q=%3Cscript%3Ealert(1)%3C/script%3E")
        _box(students[0])
        assert_no_error(students[0])
        assert "Your teacher sent you" not in students[0].inner_text("body")

        teacher.get_by_role("button", name="New round").click()
        _wait_picks(teacher, 0, timeout=120)
    finally:
        crowd.close()
        for ctx in contexts:
            ctx.close()
        teacher_ctx.close()
