"""Paged allocation wastes less than one block per request; contiguous wastes up to the maximum length."""
import numpy as np
import pytest

from engine.kv_cache.paging import VLLM_BLOCK_SIZE, allocate, request_lengths


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_paged_waste_below_one_block_per_request(seed):
    lengths = request_lengths(20, 2048, seed)
    a = allocate(lengths, 2048, VLLM_BLOCK_SIZE)
    tail = a.paged_slots - a.lengths
    assert (tail >= 0).all() and (tail < VLLM_BLOCK_SIZE).all()
    assert (a.paged_slots % VLLM_BLOCK_SIZE == 0).all()
    assert a.contiguous_waste == 20 * 2048 - a.used
    assert a.paged_waste <= a.contiguous_waste
    assert a.blocks == int(np.ceil(lengths / VLLM_BLOCK_SIZE).sum())


def test_exact_values():
    a = allocate([16, 17, 1, 100], 128, 16)
    assert a.paged_slots.tolist() == [16, 32, 16, 112]
    assert a.paged_waste == 0 + 15 + 15 + 12
    assert a.contiguous_waste == 4 * 128 - 134
    assert allocate([5], 5, 16).paged_waste == 11  # a block may overshoot the maximum length


def test_lengths_seeded_and_bounded():
    a, b = request_lengths(50, 1000, 3), request_lengths(50, 1000, 3)
    assert (a == b).all() and not (a == request_lengths(50, 1000, 4)).all()
    assert a.min() >= 1 and a.max() <= 1000
    with pytest.raises(ValueError):
        allocate([10, 2000], 1000)
