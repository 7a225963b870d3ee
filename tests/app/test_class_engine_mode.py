"""AppTest: on a class server the engine mode is the teacher's choice. A student who types ``?mode=compiled`` runs in
the room's mode (no compile is started for them: a compile holds the engine for minutes on a CPU), the engine box
is disabled with a line saying whose choice it is, and the teacher's own session sets the room's mode."""
import pytest

import ui.frame.models
from engine.core.loaded import Mode
from ui.frame import teacher
from tests.app.test_pages import errors, run_page, shown

HOME = "pages/loop.py"
TOKEN = "a-test-teachers-token"


@pytest.fixture
def class_server(monkeypatch):
    monkeypatch.setenv("ILE_CLASS_MODE", "on")
    monkeypatch.setenv("ILE_MODELS", "tiny-random")
    monkeypatch.setenv("ILE_TEACHER_TOKEN", TOKEN)
    teacher.set_room_mode(Mode.EAGER)
    yield
    teacher.set_room_mode(Mode.EAGER)


def test_a_students_mode_in_the_address_is_ignored_on_a_class_server(class_server, monkeypatch):
    compiled: list = []

    def no_compile(lm, mode):  # the compiled mode's model is never made for a student (raising: nothing is cached)
        compiled.append(mode)
        raise AssertionError("a student's session asked for the compiled model")

    monkeypatch.setattr(ui.frame.models, "to_mode", no_compile)
    at = run_page(HOME, model="tiny-random", mode="compiled", max_new_tokens="2")
    assert not errors(at), errors(at)
    assert at.session_state["settings"].mode == "eager"
    assert compiled == [], "no compiled model was made for a student"
    box = at.sidebar.selectbox(key="w_mode")
    assert box.disabled and box.value == "eager"
    said = " ".join(shown(c.value) for c in at.sidebar.caption)
    assert "teacher chooses the engine mode" in said


def test_the_teachers_session_sets_the_rooms_mode(class_server):
    # the real compiled model (the class view compiles nothing: its decode step compiles on first use); a stand-in
    # here would stay in the app's model cache and serve later tests an eager model as the compiled one
    at = run_page("pages/batching.py", model="tiny-random", mode="compiled", teacher=TOKEN)
    assert not errors(at), errors(at)
    assert teacher.room_mode() == "compiled" and at.session_state["settings"].mode == "compiled"
    assert not at.sidebar.selectbox(key="w_mode").disabled, "the teacher's own box stays free"
    wrong = run_page("pages/batching.py", model="tiny-random", mode="eager", teacher="not-the-token")
    assert not errors(wrong) and teacher.room_mode() == "compiled", "a wrong token changes nothing"
