"""One reading of the machine's CPU time, shared by the thread policy (engine.measure.threads) and the noise guard
(engine.measure.noise), so both mean the same thing by "other programs' load".

Other programs' load is the work of processes at normal priority: the kernel's busy time of all CPUs (user, system,
interrupts, steal) less its "nice" time. A process that asked for a lower priority (nice above 0: Chromium's
background tabs, indexers, a build run with `nice`, the test suite's parallel phase) gives its core up to the app's
threads the moment they wake, so it neither competes with a measurement nor takes a core from the policy.
"""
from __future__ import annotations

import os

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def niced() -> bool:
    """Whether this process runs at a lower priority than normal (its time is then in the kernel's nice time)."""
    try:
        return os.getpriority(os.PRIO_PROCESS, 0) > 0
    except (AttributeError, OSError):
        return False


def cpu_seconds() -> tuple[float, float] | None:
    """(seconds all CPUs have spent on work at normal priority, seconds of it this process spent) since boot, or
    None where /proc cannot be read. Subtract two readings: the first difference less the second is the other
    programs' share. This process's own time counts only when it is not niced (niced, it is not in the first)."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()[1:]
        with open("/proc/self/stat") as f:
            own = f.read().rsplit(")", 1)[1].split()
        v = [int(x) for x in fields]
        # user, nice, system, idle, iowait, irq, softirq, steal (guest time is already inside user and nice)
        busy = sum(v[:8]) - v[1] - v[3] - (v[4] if len(v) > 4 else 0)
        mine = 0.0 if niced() else (int(own[11]) + int(own[12])) / _TICK
        return busy / _TICK, mine
    except (OSError, ValueError, IndexError):
        return None
