"""The app shell: settings round-trip through the URL, bad input gives messages, never a traceback."""
from engine.core.sampling import SamplingSettings
from tests.app.test_pages import errors, run_page

HOME = "pages/loop.py"


def test_settings_come_from_the_url_and_go_back_to_it():
    at = run_page(HOME, model="tiny-random", prompt="Hello <b>world</b>", temperature="0.3", top_k="7",
                  top_p="0.8", seed="11", max_new_tokens="5", chat="0")
    assert not errors(at)
    s = at.session_state["settings"]
    assert (s.prompt, s.temperature, s.top_k, s.top_p, s.seed, s.max_new_tokens, s.chat) == (
        "Hello <b>world</b>", 0.3, 7, 0.8, 11, 5, False)
    assert s.sampling == SamplingSettings(0.3, 7, 0.8)
    assert at.sidebar.text_area[0].value == "Hello <b>world</b>"
    assert at.sidebar.slider(key="w_temperature").value == 0.3
    # Change a widget like a user would: the new value lands in the settings (the browser test checks the URL).
    at.sidebar.slider(key="w_temperature").set_value(1.2).run()
    assert at.session_state["settings"].temperature == 1.2 and s.temperature == 0.3  # a new value, not an edit


def test_extreme_url_values_are_clamped():
    at = run_page(HOME, model="tiny-random", temperature="abc", top_k="-5", top_p="7", max_new_tokens="99999",
                  seed="-3")
    assert not errors(at)
    s = at.session_state["settings"]
    assert s.temperature == 0.7 and s.top_k == 0 and s.top_p == 1.0 and s.max_new_tokens == 256 and s.seed == 0


def test_unknown_model_keeps_the_current_model_and_says_why():
    at = run_page(HOME, model="tiny-random", max_new_tokens="3")
    at.sidebar.text_input(key="w_model").set_value("no-such-org/no-such-model").run()
    assert not errors(at)
    # the message is markdown-escaped (user text stays literal): compare the text it shows
    assert any("Could not load 'no-such-org/no-such-model'" in e.value.replace("\\", "") for e in at.sidebar.error)
    assert at.session_state["settings"].model == "tiny-random"
    assert at.title[0].value.startswith("The loop")


def test_folder_that_is_not_a_model(tmp_path):
    at = run_page(HOME, model="tiny-random", max_new_tokens="3")
    at.sidebar.text_input(key="w_model").set_value(str(tmp_path)).run()
    assert not errors(at)
    assert any("not a model folder" in e.value for e in at.sidebar.error)


def test_empty_prompt_gives_a_message_not_a_traceback():
    at = run_page(HOME, model="tiny-random", prompt="   ")
    assert not errors(at)
    assert any("empty" in w.value for w in at.warning)
