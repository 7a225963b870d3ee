"""Honest wall-clock timing: synchronise the device before reading the clock; keep every run on the same
number of CPU threads."""
from __future__ import annotations

import time

import torch

from engine.measure.threads import apply_policy


def sync(device: torch.device | str | None = None) -> None:
    if torch.cuda.is_available() and (device is None or torch.device(device).type == "cuda"):
        torch.cuda.synchronize()


def now(device=None) -> float:
    sync(device)
    return time.perf_counter()


def configure_worker_threads() -> None:
    """Called once, on the engine worker's thread, when it starts: every forward pass of the process runs there
    under the measured thread policy (engine/measure/threads.py), and nothing changes it later."""
    apply_policy()
