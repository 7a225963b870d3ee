"""Shared fixtures: one tiny random model and one embedded model per test session."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import engine  # noqa: E402,F401  before torch: sets the OpenMP wait policy the app uses (engine/threads.py)


@pytest.fixture(scope="session")
def tiny_lm():
    from engine.models import load_model

    return load_model("tiny-random", device="cpu")


@pytest.fixture(scope="session")
def embedded_lm():
    """The real SmolLM2-135M-Instruct (converted once per machine into the user cache)."""
    from engine.models import load_model

    return load_model("embedded", device="cpu")
