"""A busy program beside a measurement, for the lessons and tests that show what another program does to a decode
step: a background load that ends by itself (bounded even if nobody stops it).

- ``spin``: one Python process running a busy loop (one core taken, as a browser drawing or a video call does);
- ``torch``: a second torch process doing matrix multiplies on its default threads (a second engine).
"""
from __future__ import annotations

import subprocess
import sys

LOADS = ("spin", "torch")

_SPIN = "import time\nend = time.time() + {d}\nwhile time.time() < end:\n    pass\n"
_TORCH = ("import time, torch\na = torch.randn(384, 384)\nend = time.time() + {d}\n"
          "while time.time() < end:\n    a @ a\n")


def start_load(kind: str, seconds: float) -> subprocess.Popen:
    """A background load that stops by itself after ``seconds`` (bounded even if nobody kills it)."""
    code = (_SPIN if kind == "spin" else _TORCH).format(d=float(seconds))
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_load(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
