"""Paged vs contiguous KV-cache allocation for a mix of request lengths (derived, illustrative lengths).

Contiguous pre-allocation reserves ``max_len`` token slots per request up front, because the final length
is unknown when the request starts. A paged cache (PagedAttention, Kwon et al. 2023, as in vLLM) hands
out fixed blocks of ``block_size`` token slots as the sequence grows, so a request wastes at most the
unused tail of its last block: fewer than ``block_size`` slots.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

VLLM_BLOCK_SIZE = 16


@dataclass(frozen=True)
class Allocation:
    lengths: np.ndarray  # [requests] tokens each request actually holds
    max_len: int
    block_size: int
    paged_slots: np.ndarray  # [requests] slots reserved by the paged cache: ceil(len / block) * block
    contiguous_slots: np.ndarray  # [requests] slots reserved by pre-allocation: max_len each

    @property
    def used(self) -> int:
        return int(self.lengths.sum())

    @property
    def paged_waste(self) -> int:
        return int((self.paged_slots - self.lengths).sum())

    @property
    def contiguous_waste(self) -> int:
        return int((self.contiguous_slots - self.lengths).sum())

    @property
    def blocks(self) -> int:
        return int(self.paged_slots.sum() // self.block_size)


def request_lengths(n: int, max_len: int, seed: int, min_len: int = 8) -> np.ndarray:
    """``n`` request lengths (prompt + answer, in tokens) in [min_len, max_len]: illustrative, seeded.

    Log-uniform, so short chats and long documents both appear, as in real traffic."""
    rng = np.random.default_rng(seed)
    lo, hi = np.log(max(1, min(min_len, max_len))), np.log(max_len)
    return np.clip(np.round(np.exp(rng.uniform(lo, hi, size=n))), 1, max_len).astype(np.int64)


def allocate(lengths, max_len: int, block_size: int = VLLM_BLOCK_SIZE) -> Allocation:
    lengths = np.asarray(lengths, dtype=np.int64)
    if block_size < 1 or max_len < 1 or (lengths > max_len).any() or (lengths < 0).any():
        raise ValueError("need block_size >= 1, max_len >= 1 and 0 <= every length <= max_len")
    paged = -(-lengths // block_size) * block_size  # ceil to whole blocks
    return Allocation(lengths, int(max_len), int(block_size), paged, np.full_like(lengths, max_len))
