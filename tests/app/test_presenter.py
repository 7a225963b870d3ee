"""AppTest: the presenter view is one setting kept in the share link, off by default; on, the home page shows
one section at a time and Next reveals the following one."""
from tests.app.test_pages import errors, run_page


def _headers(at):
    return [h.value for h in at.header]


def test_presenter_off_by_default_and_round_trips_through_url():
    at = run_page("pages/loop.py", model="tiny-random", max_new_tokens="3")
    assert not errors(at), errors(at)
    assert "present" not in at.query_params and len(_headers(at)) == 9  # every section drawn

    at.toggle(key="w_present").set_value(True).run()
    assert not errors(at), errors(at)
    assert at.query_params["present"] == ["1"] or at.query_params["present"] == "1"
    assert _headers(at) == []  # presenting: only the introduction with the loop picture
    at.button(key="present_next").click().run()
    assert _headers(at) == ["1. Text"]

    at.toggle(key="w_present").set_value(False).run()
    assert "present" not in at.query_params and len(_headers(at)) == 9


def test_presenter_link_opens_presenting_with_answer_behind_a_toggle():
    at = run_page("pages/loop.py", model="tiny-random", max_new_tokens="3", present="1")
    assert not errors(at), errors(at)
    assert at.toggle(key="w_present").value is True
    reveal = at.toggle(key="loop_try_reveal")
    assert reveal.value is False and not any("vocabulary" in m.value for m in at.markdown if "logit" in m.value)
    reveal.set_value(True).run()
    assert any("logit" in m.value and "vocabulary" in m.value for m in at.markdown)
