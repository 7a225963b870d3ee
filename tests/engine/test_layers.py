"""The engine is usable without the UI: importing every engine module loads neither streamlit nor plotly."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_engine_imports_no_ui_library():
    code = ("import pkgutil, importlib, sys, engine\n"
            "names = [m.name for m in pkgutil.walk_packages(engine.__path__, 'engine.') if m.name != 'engine.__main__']\n"
            "for n in names: importlib.import_module(n)\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('streamlit', 'plotly'))\n"
            "print(len(names), bad)\n"
            "assert len(names) > 20 and not bad, bad\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
