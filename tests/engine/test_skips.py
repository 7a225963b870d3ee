"""Skips that cannot hide a failure (tests/serving_servers.py ``unavailable``): a llama.cpp the serving tests cannot
run fails under CI. (The timing pairs never skip for noise: docs/testing.md.)"""
import pytest

from tests.serving_servers import unavailable


@pytest.mark.parametrize("ci, outcome", [("true", pytest.fail.Exception), (None, pytest.skip.Exception),
                                         ("false", pytest.skip.Exception)])
def test_a_missing_llama_cpp_fails_under_ci(monkeypatch, ci, outcome):
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match="llama-server is not built"):
        unavailable("llama-server is not built yet")
