import pytest
import torch


@pytest.fixture(scope="module")
def one_thread():
    """Invariants, not timings: tiny tensors on one intra-op thread avoid OpenMP stalls on a busy shared CPU."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
