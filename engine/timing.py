"""Honest wall-clock timing: synchronise the device before reading the clock."""
from __future__ import annotations

import time

import torch


def sync(device: torch.device | str | None = None) -> None:
    if torch.cuda.is_available() and (device is None or torch.device(device).type == "cuda"):
        torch.cuda.synchronize()


def now(device=None) -> float:
    sync(device)
    return time.perf_counter()
