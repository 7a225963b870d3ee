"""AppTest: model names through the policy. Every spelling of a model is one loaded copy (in every mode); a
class server offers only its allow-list (sidebar and race page), refuses free paths and hub ids with a message
that reveals nothing about its file system, and never shows the folder behind a listed label."""
import pytest

from streamlit.testing.v1 import AppTest

import ui.frame.models
from ui.frame import nav
from tests.app.test_pages import errors, run_page, shown

HOME = "pages/loop.py"


@pytest.fixture
def loads(monkeypatch):
    """Every model the app actually loads (calls of engine load_model through ui.frame.models), from an empty cache."""
    seen = []
    real = ui.frame.models.load_model

    def counting(target, *a, **kw):
        seen.append(target)
        return real(target, *a, **kw)

    monkeypatch.setattr(ui.frame.models, "load_model", counting)
    ui.frame.models._load.clear()
    yield seen
    ui.frame.models._load.clear()


@pytest.fixture
def tiny_folder(tmp_path_factory, tiny_lm):
    path = tmp_path_factory.mktemp("teacher-models") / "tiny-copy"
    tiny_lm.model.save_pretrained(path)
    tiny_lm.tokenizer.save_pretrained(path)
    return path


def sidebar_text(at) -> str:
    return " ".join(shown(e.value) for e in [*at.sidebar.error, *at.sidebar.caption, *at.sidebar.markdown])


def test_spellings_of_one_model_load_one_copy(loads, tiny_folder):
    at = run_page(HOME, model=" tiny-random", max_new_tokens="2")
    assert not errors(at), errors(at)
    assert at.session_state["settings"].model == "tiny-random"  # the URL gets the canonical name
    for typed in ("tiny-random ", "TINY-random", "\u200btiny-random"):
        at.sidebar.text_input(key="w_model").set_value(typed).run()
        assert not errors(at), errors(at)
        assert at.session_state["settings"].model == "tiny-random"
    assert loads == ["tiny-random"]
    for typed in (str(tiny_folder), f"{tiny_folder}/", f" {tiny_folder}/./ "):
        at.sidebar.text_input(key="w_model").set_value(typed).run()
        assert not errors(at), errors(at)
        assert at.session_state["settings"].model == str(tiny_folder.resolve())
    assert loads == ["tiny-random", str(tiny_folder.resolve())]


def test_open_mode_for_one_person_still_explains_a_folder(tmp_path):
    at = run_page(HOME, model="tiny-random", max_new_tokens="2")
    at.sidebar.text_input(key="w_model").set_value(str(tmp_path)).run()
    assert any("not a model folder" in e.value for e in at.sidebar.error)


@pytest.fixture
def class_mode(monkeypatch, tiny_folder):
    monkeypatch.setenv("ILE_CLASS_MODE", "on")
    monkeypatch.setenv("ILE_MODELS", f"tiny-random, Tiny copy={tiny_folder}")
    return tiny_folder


NEUTRAL = "This server offers only these models: tiny-random, Tiny copy. Choose one of them. Still using 'tiny-random'."


@pytest.mark.parametrize("asked", ["~/.ssh", "/etc", "/tmp", "HuggingFaceTB/SmolLM2-135M-Instruct", "../..",
                                   "tiny-random/../../etc"])
def test_class_mode_refuses_free_paths_and_hub_ids_neutrally(class_mode, asked, loads):
    at = AppTest.from_file(str(nav.ROOT / "app.py"), default_timeout=240)
    at.query_params.update(model=asked, max_new_tokens="2")  # a student edits the link
    at.run()  # the message belongs to the run that refused the name
    assert not errors(at), errors(at)
    assert [shown(e.value) for e in at.sidebar.error] == [NEUTRAL]
    assert at.session_state["settings"].model == "tiny-random"
    assert loads == ["tiny-random"]  # nothing else was even tried


def test_class_server_without_the_embedded_model_opens_on_its_first_model(class_mode):
    at = AppTest.from_file(str(nav.ROOT / "app.py"), default_timeout=240)
    at.query_params["max_new_tokens"] = "2"
    at.run()  # no model asked for: the default (embedded) is not offered, so the first listed one, quietly
    assert not errors(at) and not at.sidebar.error, [e.value for e in at.sidebar.error]
    assert at.session_state["settings"].model == "tiny-random"


def test_class_mode_offers_the_allow_list_and_hides_the_folder(class_mode, loads):
    at = run_page(HOME, model=" tiny COPY ", max_new_tokens="2")
    assert not errors(at), errors(at)
    assert at.session_state["settings"].model == "Tiny copy"
    assert not [t for t in at.sidebar.text_input if t.key == "w_model"], "class mode must not offer a free text box"
    box = at.sidebar.selectbox(key="w_model")
    assert box.options == ["tiny-random", "Tiny copy"] and box.value == "Tiny copy"
    assert "Tiny copy (offered by this server)" in sidebar_text(at)
    assert str(class_mode) not in sidebar_text(at) and "teacher-models" not in sidebar_text(at)
    box.set_value("tiny-random").run()
    assert not errors(at), errors(at)
    assert at.session_state["settings"].model == "tiny-random" and not at.sidebar.error
    assert loads == [str(class_mode), "tiny-random"]


def test_class_mode_race_page_draft_box_is_the_allow_list(class_mode):
    at = run_page("pages/speculative.py", model="tiny-random", max_new_tokens="2")
    assert not errors(at), errors(at)
    at.radio(key="speculative_drafter").set_value("model:other").run()
    assert not errors(at), errors(at)
    assert not [t for t in at.text_input if t.key == "speculative_other"]
    box = at.selectbox(key="speculative_other")
    assert box.options == ["tiny-random", "Tiny copy"]


# --- names carry no precision; the model cache holds what the server offers -------------------------

def test_a_name_never_chooses_a_precision():
    """?model=tiny-random@int8 once loaded an int8 copy that the loop page labelled float32: the suffix is
    dropped, the precision setting alone chooses."""
    at = run_page(HOME, model="tiny-random@int8", max_new_tokens="2")
    assert not errors(at), errors(at)
    s = at.session_state["settings"]
    assert s.model == "tiny-random"
    assert at.session_state["last_good_model"] == "tiny-random"
    assert at.session_state["last_good_precision"] == s.precision != "int8"


def test_ref_for_drops_a_typed_precision():
    from engine.core.loaded import ModelRef
    from engine.models.names import plain_name

    assert plain_name("embedded@int8@bfloat16") == "embedded" and plain_name("a@b") == "a@b"
    assert ui.frame.models.ref_for("embedded@int8", "float32") == ModelRef("embedded")
    assert ui.frame.models.ref_for("embedded@float32", "int8") == ModelRef("embedded", "int8")


def test_the_model_cache_holds_every_offered_pair():
    from engine.models.names import policy_from_env
    from engine.models.loading import default_device
    from engine.models.precision import supported

    n_prec = len(supported(default_device()))
    pol = policy_from_env({"ILE_CLASS_MODE": "on", "ILE_MODELS": "embedded,tiny-random,a=/x,b=/y,c=/z"})
    assert ui.frame.models.cache_entries(pol) == 5 * n_prec > 4


def test_the_model_cache_keeps_cache_entries_models_and_no_more(monkeypatch):
    """Open as many (model, precision) pairs as the cache is sized for, then again: none is loaded twice; one more
    pair evicts one (the bound is cache_entries(), not more)."""
    from types import SimpleNamespace

    n = ui.frame.models.cache_entries()
    assert n >= 2 * len(ui.frame.models.builtin())
    seen = []

    def load_model(target, **kw):
        seen.append(target)
        return SimpleNamespace(name=None, info=SimpleNamespace(n_params=1, device="cpu"))

    monkeypatch.setattr(ui.frame.models, "load_model", load_model)
    load = ui.frame.models._load
    names = [f"model-{i}" for i in range(n + 1)]
    load.clear()
    try:
        for _ in range(2):
            for name in names[:n]:
                load(name, name, None)
        assert seen == names[:n]
        load(names[n], names[n], None)
        for name in names[:n]:
            load(name, name, None)
        assert len(seen) > n + 1
    finally:
        load.clear()


def _ask_as(monkeypatch, who: str, prompt: str, passes, **params) -> int:
    """Open the home page as session ``who`` with ``prompt``; the forward passes it took."""
    from ui.frame import work

    monkeypatch.setattr(work, "session_id", lambda: who)
    before = passes["n"]
    at = run_page(HOME, model="tiny-random", max_new_tokens="3", temperature="0", prompt=prompt, **params)
    assert not errors(at), errors(at)
    return passes["n"] - before


@pytest.mark.parametrize("class_mode", ["on", "off"])
def test_a_kept_answer_does_not_tell_a_class_that_someone_else_asked(monkeypatch, passes, class_mode):
    """Answers were kept for the whole server, so repeating another student's exact prompt came back at
    once with no progress box (1.0 s against 3.2 s for a new one): a test of whether someone asked it. In class
    mode a session reuses only its own kept answers, so the repeat does the same work as a new question; for one
    person (open mode) the kept answer is reused, so this check can tell the two apart. On the class link (pin=1)
    each student's question is their own, so kept answers stay per session there too (a shared scope answered a
    classmate's question in 0.33 s against 8.3 s); only the teacher's pinned prompt (pin=prompt), which the whole
    room asks, is shared."""
    monkeypatch.setenv("ILE_CLASS_MODE", class_mode)
    monkeypatch.setenv("ILE_MODELS", "tiny-random")
    prompt = f"a question nobody else should know about, {class_mode} 4711"
    assert _ask_as(monkeypatch, "student-a", prompt, passes) > 0
    repeat = _ask_as(monkeypatch, "student-b", prompt, passes)
    if class_mode == "on":
        assert repeat > 0, "another student's kept answer (and its analysis) came back at once"
        assert _ask_as(monkeypatch, "student-b", prompt, passes) == 0, "a student's own answer is kept for them"
    else:
        assert repeat == 0, "open mode reuses the kept answer"
    linked = f"a question typed on the class link, {class_mode}"
    assert _ask_as(monkeypatch, "student-c", linked, passes, pin="1") > 0
    again = _ask_as(monkeypatch, "student-d", linked, passes, pin="1")
    assert (again > 0) if class_mode == "on" else (again == 0), "a classmate's question on the class link was told"
    pinned = f"the teacher's pinned prompt, {class_mode}"
    assert _ask_as(monkeypatch, "student-e", pinned, passes, pin="prompt") > 0
    assert _ask_as(monkeypatch, "student-f", pinned, passes, pin="prompt") == 0, "the room's pinned prompt is shared"
