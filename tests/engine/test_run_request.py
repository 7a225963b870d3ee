"""The sidebar's run as one frozen record (engine.core.request.RunRequest): one key per run that can draw different
tokens, every sampling knob in it (min-p included), greedy runs keyed without what cannot change a token."""
import pytest

from engine.core.loaded import ModelRef
from engine.core.request import RunRequest
from engine.core.sampling import SamplingSettings

pytestmark = pytest.mark.unit
REF = ModelRef("tiny-random")


def run(sampling: SamplingSettings, seed: int = 0, **kw) -> RunRequest:
    return RunRequest(REF, "Name a planet.", kw.pop("chat", True), kw.pop("max_new_tokens", 8), sampling, seed)


def test_greedy_runs_share_a_key_whatever_their_filters_and_seed():
    a = run(SamplingSettings(0.0, 50, 0.95, 0.2), seed=7)
    b = run(SamplingSettings(0.0, 3, 0.5, 0.0), seed=1)
    assert a.key("s") == b.key("s") == run(SamplingSettings()).key("s")
    assert a.canonical().sampling == SamplingSettings() and a.canonical().seed == 0


def test_every_knob_of_a_sampled_run_is_in_its_key():
    base = run(SamplingSettings(0.7, 50, 0.95, 0.0), seed=3)
    others = [run(SamplingSettings(0.8, 50, 0.95, 0.0), seed=3), run(SamplingSettings(0.7, 40, 0.95, 0.0), seed=3),
              run(SamplingSettings(0.7, 50, 0.9, 0.0), seed=3), run(SamplingSettings(0.7, 50, 0.95, 0.1), seed=3),
              run(SamplingSettings(0.7, 50, 0.95, 0.0), seed=4), run(SamplingSettings(0.7, 50, 0.95), seed=3,
                                                                          chat=False),
              run(SamplingSettings(0.7, 50, 0.95), seed=3, max_new_tokens=9)]
    keys = {base.key("s")} | {o.key("s") for o in others}
    assert len(keys) == 1 + len(others)
    assert base.key("s") != base.key("session 2")  # whose it is: another session's kept run is not this one's


def test_a_key_is_the_same_for_the_same_values_in_another_type():
    """A widget or a link may hand an int where a float is meant (temperature 1), or a float seed: one run, one
    key."""
    a = run(SamplingSettings(1, 50, 1, 0), seed=3)
    b = run(SamplingSettings(1.0, 50.0, 1.0, 0.0), seed=3.0)
    assert a.key("s") == b.key("s") and hash(a.key("s")) == hash(b.key("s"))
    assert isinstance(a.canonical().sampling.temperature, float) and isinstance(b.canonical().sampling.top_k, int)


def test_the_worker_gets_the_request_whole(tiny_lm):
    from engine.jobs.classbatch import AnswerRequest, answer_alone

    r = RunRequest(tiny_lm.ref, "Name a planet.", False, 3, SamplingSettings(0.9, 0, 1.0, 0.3), 5)
    tr = answer_alone(AnswerRequest(tiny_lm, r, analyse=False))
    assert tr.settings == r.sampling and tr.seed == 5 and len(tr.generated_ids) <= 3 and tr.prompt == r.prompt
