"""AppTest: the sidebar's engine help says how answers run in the mode on screen, from the class batcher's decision."""
from tests.app.test_pages import errors, run_page


def test_the_engine_help_follows_the_mode_on_screen():
    from engine.core.compiled import to_mode
    from engine.jobs.classbatch import how_served
    from engine.core.loaded import ModelRef
    from engine.models.loading import load_model

    at = run_page("pages/loop.py", model="tiny-random", mode="compiled", max_new_tokens="3", temperature="0")
    assert not errors(at), errors(at)
    text = at.selectbox(key="w_mode").help
    assert "batches and speculative decoding run eager" not in text  # the sentence the app used to say
    compiled = to_mode(load_model(ModelRef("tiny-random")), "compiled")
    assert f"In this engine mode, {how_served(compiled)}." in text
