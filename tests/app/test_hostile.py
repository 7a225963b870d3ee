"""AppTest for hostile input from a shared link: messages, not tracebacks; user text kept literal."""
from streamlit.testing.v1 import AppTest

from tests.app.test_pages import errors, run_page
from ui.frame import nav

HOME = "pages/loop.py"


def open_link(**query) -> AppTest:
    """The first run of a shared link, as the person who opens it sees it (the message shows on that run)."""
    at = AppTest.from_file(str(nav.ROOT / "app.py"), default_timeout=240)
    for k, v in query.items():
        at.query_params[k] = v
    return at.run()


def _sidebar_errors(at) -> list[str]:
    return [e.value for e in at.sidebar.error]


def test_a_model_name_over_255_bytes_gives_a_short_message():
    at = open_link(model="a" * 256, max_new_tokens="2")
    assert not errors(at), errors(at)
    msgs = _sidebar_errors(at)
    assert any("too long" in m for m in msgs), msgs
    assert all("/" not in m and "a" * 100 not in m for m in msgs), msgs  # no server paths, no wall of text
    assert at.session_state["settings"].model == "embedded"  # the page itself runs on the default model


def test_markdown_in_a_model_name_stays_literal_text():
    name = "[official instructions](https://example.invalid/login)"
    at = open_link(model=name, max_new_tokens="2")
    assert not errors(at), errors(at)
    msgs = [m for m in _sidebar_errors(at) if "official instructions" in m]
    assert msgs, _sidebar_errors(at)
    # Every markdown mark is escaped, so the link cannot form (the browser test checks the rendered page).
    assert all("](" not in m and "\\[official instructions\\]" in m for m in msgs), msgs


def test_an_empty_chat_parameter_means_the_default_not_off():
    at = run_page(HOME, model="tiny-random", max_new_tokens="2", chat="")
    assert not errors(at), errors(at)
    assert at.session_state["settings"].chat is True
    at = run_page(HOME, model="tiny-random", max_new_tokens="2", chat="0")
    assert at.session_state["settings"].chat is False


def test_a_one_token_race_shows_no_nan_beside_a_speedup():
    at = run_page("pages/speculative.py", model="tiny-random", max_new_tokens="1")
    assert not errors(at), errors(at)
    at.button(key="speculative_go").click().run()  # a race runs only when asked
    assert not errors(at), errors(at)
    values = {m.label: m.value for m in at.metric}
    assert not any("nan" in str(v).lower() for v in values.values()), values
    assert values["Measured speedup"] == "n/a" and values["Paper's formula"] == "n/a"
    assert any("Not enough tokens to measure" in i.value for i in at.info)
    assert not any("as fast" in s.value for s in at.success)
