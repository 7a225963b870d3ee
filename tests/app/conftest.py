import pytest
from torch.nn.modules.module import register_module_forward_pre_hook


@pytest.fixture
def passes():
    """Counts top-level model forward passes (any *ForCausalLM module) anywhere in this process: the way to
    prove that a rerun recomputed nothing (counting captions or charts proves only that something is shown)."""
    count = {"n": 0}

    def hook(module, args):
        if type(module).__name__.endswith("ForCausalLM"):
            count["n"] += 1

    handle = register_module_forward_pre_hook(hook)
    yield count
    handle.remove()
