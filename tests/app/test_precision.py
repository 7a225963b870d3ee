"""AppTest: the precision choice round-trips through the URL, an unsupported one gives a message, and the
"Fewer bytes, faster decode" section measures on a button (tiny model)."""
import pytest
from streamlit.testing.v1 import AppTest

from tests.app.test_pages import PAGES, errors, run_page
from ui.frame import nav

HOME = "pages/loop.py"


def _url(at: AppTest) -> dict:
    return {k: at.query_params[k] for k in at.query_params}


def test_precision_comes_from_the_url_and_goes_back_to_it():
    at = run_page(HOME, model="tiny-random", precision="int8", max_new_tokens="3")
    assert not errors(at), errors(at)
    assert at.session_state["settings"].precision == "int8"
    box = at.sidebar.selectbox(key="w_precision")
    assert box.value == "int8"
    assert any("int8 weights" in c.value for c in at.sidebar.caption)
    assert _url(at).get("precision") in ("int8", ["int8"])
    box.set_value("bfloat16").run()
    assert not errors(at), errors(at)
    assert at.session_state["settings"].precision == "bfloat16"
    assert _url(at).get("precision") in ("bfloat16", ["bfloat16"])
    at.sidebar.selectbox(key="w_precision").set_value("float32").run()
    assert "precision" not in _url(at)  # the default is left out of the link


def test_unsupported_precision_says_why_and_keeps_the_current_one():
    at = AppTest.from_file(str(nav.ROOT / "app.py"), default_timeout=240)
    at.query_params.update(model="tiny-random", precision="float16", max_new_tokens="3")
    at.run()  # the first run reads the link: the message shows there, then the page goes on in float32
    assert not errors(at), errors(at)
    assert any("CUDA" in e.value and "Still using float32" in e.value for e in at.sidebar.error)
    assert at.session_state["settings"].precision == "float32"
    at.switch_page(HOME)
    at.run()
    at.sidebar.selectbox(key="w_precision").set_value("bfloat16").run()
    at.sidebar.selectbox(key="w_precision").set_value("float16").run()
    assert not errors(at), errors(at)
    assert any("CUDA" in e.value and "Still using bfloat16" in e.value for e in at.sidebar.error)
    assert at.session_state["settings"].precision == "bfloat16"


def test_precision_section_measures_on_a_button():
    at = run_page("pages/timeline.py", model="tiny-random", max_new_tokens="3")
    assert not errors(at), errors(at)
    assert any("Fewer bytes, faster decode" in h.value for h in at.header)
    assert not any("precision" in str(d.value.columns) for d in at.dataframe)  # nothing runs before the button
    at.slider(key="precision_tokens").set_value(4)
    at.slider(key="precision_repeats").set_value(5)
    [b for b in at.button if b.key == "precision_run"][0].click()
    at.run()
    assert not errors(at), errors(at)
    tables = [d.value for d in at.dataframe if "speedup vs float32" in d.value.columns]
    assert tables and list(tables[0]["precision"]) == ["float32", "bfloat16", "int8"]
    cost = [d.value for d in at.dataframe if "mean KL (nats)" in d.value.columns]
    assert cost and cost[0]["mean KL (nats)"][0] == 0.0  # float32 against itself
    texts = [d.value for d in at.dataframe if list(d.value.columns) == ["precision", "text"]]
    assert texts and len(texts[0]) == 3
    assert any("tok/s" in m.value for m in at.metric)


@pytest.mark.parametrize("path", PAGES)
def test_every_page_renders_with_int8_weights(path):
    """int8 layers have no .weight tensor (torch.ao packs it): no page may assume one."""
    at = run_page(path, model="tiny-random", max_new_tokens="4", precision="int8")
    assert not errors(at), errors(at)
    assert at.session_state["settings"].precision == "int8"


def test_a_precision_copy_is_made_from_the_loaded_model_not_a_second_load(monkeypatch):
    """One model in memory per name: the bfloat16 copy is cast from the float32 model already loaded. The copy's
    inner cache lookup once passed its arguments differently, missed, and loaded the model a second time."""
    from ui.frame import models as M

    M._load.clear()
    loads = []
    real = M.load_model
    monkeypatch.setattr(M, "load_model", lambda ref, **kw: loads.append(ref.name) or real(ref, **kw))
    at = run_page(HOME, model="tiny-random", max_new_tokens="2")
    assert not errors(at), errors(at)
    at.sidebar.selectbox(key="w_precision").set_value("bfloat16").run()
    assert not errors(at), errors(at)
    assert at.session_state["settings"].precision == "bfloat16"
    assert loads == ["tiny-random"], loads
