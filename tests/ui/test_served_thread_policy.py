"""The served app runs under the engine's thread policy however it is started.

OpenMP reads OMP_WAIT_POLICY once, when torch loads it. The app's first import (ui.frame.boot) once imported torch before
engine/__init__ could set the policy, so the served app ran with spinning idle threads while the CLI did not: on a
busy laptop a decode step took 469 ms in the app and 278 ms from the command line. Two guards:
- every file Streamlit can run first (app.py and each page) imports ui.frame.boot before anything else;
- a fresh interpreter that imports ui.frame.boot, as `streamlit run` does (Streamlit itself loads no torch), reports the
  engine's wait policy in force, not "torch was loaded before the engine could set the wait policy".
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENTRIES = sorted([ROOT / "app.py", *(ROOT / "pages").glob("*.py")])


def _first_import(path: Path) -> str:
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            continue
        if isinstance(node, ast.Import):
            return node.names[0].name
        if isinstance(node, ast.ImportFrom):
            return node.module or ""
    return ""


@pytest.mark.parametrize("path", ENTRIES, ids=lambda p: p.name)
def test_every_entry_imports_boot_first(path):
    assert _first_import(path) == "ui.frame.boot", f"{path.name}: `import ui.frame.boot` must be its first import"


def test_boot_imports_the_engine_before_torch():
    order = [n.names[0].name if isinstance(n, ast.Import) else n.module
             for n in ast.parse((ROOT / "ui" / "frame" / "boot.py").read_text(encoding="utf-8")).body
             if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert order.index("engine") < order.index("torch"), order


def test_a_fresh_app_process_runs_the_engines_wait_policy():
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "ILE_THREAD_POLICY")}
    code = ("import sys; assert 'torch' not in sys.modules; import ui.frame.boot; from engine.measure import threads; "
            "p = threads.describe_policy(); print(p.wait, '|', p.wait_note, '|', __import__('os').environ.get("
            "'OMP_WAIT_POLICY'))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300, check=True).stdout.strip().splitlines()[-1]
    wait, note, env_value = (s.strip() for s in out.split("|"))
    assert wait == "passive" and env_value == "PASSIVE", out
    assert note == "set by the engine before torch loaded", out
