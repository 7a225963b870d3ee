"""Fixtures for the AppTests: a forward-pass counter, and full error details (the served config hides them)."""
import pytest
from torch.nn.modules.module import register_module_forward_pre_hook


@pytest.fixture
def passes():
    """Counts top-level model forward passes (any *ForCausalLM module) anywhere in this process: the way to
    prove that a rerun recomputed nothing (counting captions or charts proves only that something is shown)."""
    count = {"n": 0}

    def hook(module, args):
        import torch

        if torch.compiler.is_dynamo_compiling():  # traced into a compiled decode step: counted where Python calls it
            return
        if type(module).__name__.endswith("ForCausalLM"):
            count["n"] += 1

    handle = register_module_forward_pre_hook(hook)
    yield count
    handle.remove()


@pytest.fixture(autouse=True, scope="session")
def full_error_details_in_tests():
    """AppTest runs in this process: a failing AppTest should name its exception and traceback."""
    from streamlit import config

    before = config.get_option("client.showErrorDetails")
    config.set_option("client.showErrorDetails", "full")
    yield
    config.set_option("client.showErrorDetails", before)
