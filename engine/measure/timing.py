"""Honest wall-clock timing: synchronise the device before reading the clock; keep every run on the same
number of CPU threads."""
from __future__ import annotations

import time

import torch

from engine.measure.threads import apply_policy, at_most_threads, policy_threads

# The engine's CPU thread count for PyTorch: the thread policy's (engine/measure/threads.py, chosen by measurement under
# load). OpenMP gives a new thread the count in force when it starts, and a Streamlit server runs every script
# run in a new thread: one started while another session is inside ``one_thread`` would do all its forward
# passes on one thread. ``restore_threads`` at the start of a run undoes that and applies the policy.
DEFAULT_THREADS = policy_threads()


def restore_threads() -> None:
    apply_policy()


def one_thread():
    """Run a few ops on one [vocab] vector on a single thread. Splitting a 49k-element op across threads
    saves nothing, and on a busy CPU the threads' hand-offs made these functions 20x slower (measured: 860 ms
    vs 44 ms). The count is per OpenMP thread, so a forward pass already running elsewhere is unaffected."""
    return at_most_threads(1)


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
