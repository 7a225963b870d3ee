"""AppTest: the page address is written even when a page ends early with st.stop()."""
from tests.app.test_pages import errors, run_page


def test_url_is_written_when_the_page_stops_early():
    at = run_page("pages/loop.py", model="tiny-random", prompt="   ", max_new_tokens="3")
    assert not errors(at), errors(at)
    assert any("empty" in w.value for w in at.warning)  # the page stopped at its prompt check
    assert at.title == [] or not any("the model chose" in m.value for m in at.markdown)
    at.sidebar.slider(key="w_temperature").set_value(1.25).run()
    assert not errors(at), errors(at)
    assert any("empty" in w.value for w in at.warning)
    assert at.query_params.get("temperature") == "1.25", at.query_params
    assert at.query_params.get("max_new_tokens") == "3" and at.query_params.get("model") == "tiny-random"
