"""AppTest: the presenter view is one setting kept in the share link, off by default; on, the home page shows
one section at a time and Next reveals the following one."""
import pytest

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


def _section_label(at):
    return next((m.value for m in at.markdown if m.value.startswith("**Section ") and " of " in m.value), "")


def test_one_section_bar_in_one_vocabulary():
    """The home page showed two rows of section buttons, "Back" / "Next" under the title and "Previous" / "Next"
    at the foot, beside the loop picture's own "Back": one bar now, its buttons named for what they move."""
    at = run_page("pages/loop.py", model="tiny-random", max_new_tokens="3", present="1")
    assert not errors(at), errors(at)
    labels = [b.label for b in at.button]
    assert labels.count("Previous section") == 1 and labels.count("Next section") == 1, labels
    assert "Back" not in labels and "Previous" not in labels and "Next" not in labels, labels
    assert [b.key for b in at.button if b.key.startswith("present_")] == ["present_prev", "present_next"]


@pytest.mark.parametrize("path, first_next", [
    ("pages/tokenization.py", ["Counts"]),
    ("pages/embeddings.py", ["2. Which tokens look alike"]),  # its short introduction shares section 1's screen
    ("pages/sampling.py", None),  # its fragment draws sections 1-5 as one presenter step
    ("pages/timeline.py", ["2. With and without the KV cache"]),
    ("pages/kv_cache.py", ["2. Measured size, step by step"]),
    ("pages/attention.py", None),  # its fragment draws sections 1-3 as one presenter step
])
def test_presenter_next_works_on_every_page(path, first_next):
    """Not only the loop page: every page shows one section at a time, and Next moves to the following one
    (Previous comes back)."""
    at = run_page(path, model="tiny-random", max_new_tokens="3", present="1")
    assert not errors(at), errors(at)
    before = _headers(at)
    assert "Section 1 of" in _section_label(at), _section_label(at)
    at.button(key="present_next").click().run()
    assert not errors(at), errors(at)
    after = _headers(at)
    assert "Section 2 of" in _section_label(at) and after != before
    if first_next is not None:
        assert after == first_next, after
    assert not set(after) & set(before)  # one section at a time: nothing of the first is drawn
    at.button(key="present_prev").click().run()
    assert _headers(at) == before


def test_presenter_on_the_race_page_reaches_the_summary_and_the_sweep():
    at = run_page("pages/speculative.py", model="tiny-random", max_new_tokens="8", present="1")
    at.radio(key="speculative_drafter").set_value("model:self").run()
    at.button(key="speculative_go").click().run()
    assert not errors(at), errors(at)
    assert "Section 1 of 3" in _section_label(at)
    at.button(key="present_next").click().run()
    assert any(h.startswith("Who won") for h in _headers(at))
    at.button(key="present_next").click().run()
    assert _headers(at) == ["Where is the best k?"] and at.button(key="present_next").disabled


@pytest.mark.parametrize("path, first", [("pages/embeddings.py", "1. One vector per token"),
                                         ("pages/attention.py", "1. Every head at a glance")])
def test_a_short_introduction_shares_the_first_sections_screen(path, first):
    """Presenter view: a page whose introduction is a paragraph shows it with its first section (alone, it left the
    projector two-thirds empty: a walkthrough's Embeddings and Attention)."""
    at = run_page(path, model="tiny-random", max_new_tokens="3", present="1")
    assert not errors(at), errors(at)
    assert "Section 1 of" in _section_label(at) and first in _headers(at), _headers(at)
