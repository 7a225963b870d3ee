"""Skips that cannot hide a failure (tests/skip_streak.py, tests/serving_servers.py ``unavailable``): a timing pair
that skips for noise fails on its third skip in a row, and a llama.cpp the serving tests cannot run fails under CI."""
import pytest

from tests.serving_servers import unavailable
from tests.skip_streak import MAX_IN_A_ROW, SkipStreak


@pytest.fixture
def streak(request):
    """A streak in this run's real pytest cache, under a key of its own, removed afterwards."""
    s = SkipStreak(request.config.cache, request.node.nodeid + "-probe")
    s.measured()
    yield s
    s.measured()


def test_a_third_skip_in_a_row_fails(streak):
    for n in range(1, MAX_IN_A_ROW + 1):
        with pytest.raises(pytest.skip.Exception, match=f"skip {n} in a row"):
            streak.skip("the CLI disagreed with itself")
    with pytest.raises(pytest.fail.Exception, match=f"skipped {MAX_IN_A_ROW + 1} times in a row"):
        streak.skip("the CLI disagreed with itself")
    with pytest.raises(pytest.fail.Exception):  # and it keeps failing until a run measures again
        streak.skip("the CLI disagreed with itself")


def test_a_measured_run_ends_the_streak(streak):
    with pytest.raises(pytest.skip.Exception):
        streak.skip("noise")
    with pytest.raises(pytest.skip.Exception):
        streak.skip("noise")
    streak.measured()
    assert streak.count == 0
    with pytest.raises(pytest.skip.Exception, match="skip 1 in a row"):
        streak.skip("noise")


def test_the_count_lives_in_pytests_cache(request, streak):
    """A new SkipStreak (a later pytest run) reads the count an earlier one left."""
    with pytest.raises(pytest.skip.Exception):
        streak.skip("noise")
    assert SkipStreak(request.config.cache, request.node.nodeid + "-probe").count == 1


@pytest.mark.parametrize("ci, outcome", [("true", pytest.fail.Exception), (None, pytest.skip.Exception),
                                         ("false", pytest.skip.Exception)])
def test_a_missing_llama_cpp_fails_under_ci(monkeypatch, ci, outcome):
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match="llama-server is not built"):
        unavailable("llama-server is not built yet")
