"""Every page's run makes its forward passes through engine.core.loop (the one door to the model): a hook counts
the model passes that did not come through it, and those made off the engine worker's thread, while each page
runs on the tiny model."""
import pytest

from tests.app.test_pages import PAGES, errors, run_page


@pytest.mark.parametrize("path", PAGES)
def test_every_pass_of_a_page_goes_through_the_loop(path, door):
    at = run_page(path, model="tiny-random", max_new_tokens="4")
    assert not errors(at), errors(at)
    assert door["outside"] == 0, door["where"][:1]
    assert door["off_worker"] == 0, door["off_where"][:1]  # no pass on a script thread (the model load's included)
