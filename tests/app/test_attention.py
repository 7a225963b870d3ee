"""AppTest: the attention page follows the selected layer / head / query and measures its cost on demand."""
import json

from streamlit.testing.v1 import AppTest

from tests.app.test_pages import errors, run_page
from ui.frame import nav

PAGE = "pages/attention.py"


def _titles(at) -> list[str]:
    out = []
    for el in at.get("plotly_chart"):
        spec = json.loads(el.proto.spec)
        out.append(spec.get("layout", {}).get("title", {}).get("text", ""))
    return out


def test_attention_page_selects_layer_head_and_query():
    at = run_page(PAGE, model="tiny-random", max_new_tokens="3", prompt="one two three four five six")
    assert not errors(at), errors(at)
    # the tiny model: 2 layers x 4 heads; the default opens the last layer, head 0
    assert any(h.value.startswith("2. Layer 1, head 0") for h in at.header)
    at.selectbox(key="attention_layer").set_value(0)
    at.selectbox(key="attention_head").set_value(3).run()
    assert not errors(at), errors(at)
    assert any(h.value.startswith("2. Layer 0, head 3") for h in at.header)
    titles = _titles(at)
    assert "Attention weights, layer 0, head 3" in titles
    assert any(t.endswith("layer 0, head 3") and t.startswith("Where") for t in titles)
    assert any(m.label.endswith("layer 0 head 3") for m in at.metric)
    # GQA text follows the head: 4 query heads over 2 KV heads -> head 3 reads KV head 1, shared with head 2
    assert any("Head 3 reads K/V head **1**, shared with heads 2" in md.value for md in at.markdown)

    q = at.selectbox(key="attention_query")
    q.set_value(2).run()
    assert any(t.startswith("Where") and "(position 2)" in t for t in _titles(at))

    at.radio(key="attention_metric").set_value("mean distance (tokens)").run()
    assert not errors(at), errors(at)
    assert any(t.startswith("Mean distance attended") for t in _titles(at))


def test_attention_cost_measured_on_demand():
    at = run_page(PAGE, model="tiny-random", max_new_tokens="2")
    assert "Prefill time vs prompt length" not in _titles(at)  # nothing measured until asked
    at.button(key="attention_cost_go").click().run()
    assert not errors(at), errors(at)
    assert "Prefill time vs prompt length" in _titles(at)
    assert any("growth exponent" in md.value for md in at.markdown)


def _open_link(**query) -> AppTest:
    """The attention page opened directly from a shared link with these URL values (tiny model)."""
    at = AppTest.from_file(str(nav.ROOT / "app.py"), default_timeout=240)
    for k, v in {"model": "tiny-random", "max_new_tokens": "2", **query}.items():
        at.query_params[k] = v
    at.switch_page(PAGE)
    at.run()
    return at


def test_selected_head_is_kept_in_the_url_and_a_link_opens_it():
    at = _open_link(layer="0", head="2")
    assert not errors(at), errors(at)
    assert any(h.value.startswith("2. Layer 0, head 2") for h in at.header)
    at.selectbox(key="attention_head").set_value(3).run()
    assert (at.query_params["layer"], at.query_params["head"]) == ("0", "3")
    at.switch_page("pages/tokenization.py")
    at.run()
    assert "layer" not in at.query_params and "head" not in at.query_params  # another page, not its values


def test_bad_head_in_the_url_is_clamped():
    at = _open_link(layer="99", head="x")
    assert not errors(at), errors(at)
    assert any(h.value.startswith("2. Layer 1, head 0") for h in at.header)  # last layer, default head
