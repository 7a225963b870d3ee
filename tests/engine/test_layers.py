"""The engine is usable without the UI: no engine module imports streamlit, plotly or the ui package (read from
the source, so the check is instant and independent of what other tests imported)."""
import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[2] / "engine"
UI_LIBRARIES = {"streamlit", "plotly", "ui"}


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
            roots.add(str(node.args[0].value).split(".")[0])
    return roots


def test_engine_imports_no_ui_library():
    files = sorted(ENGINE.rglob("*.py"))
    assert len(files) > 20
    bad = {str(f.relative_to(ENGINE)): sorted(imported_roots(f) & UI_LIBRARIES) for f in files}
    assert not {f: b for f, b in bad.items() if b}, bad
    assert imported_roots(ENGINE / "core" / "trace.py") >= {"numpy", "torch"}  # the reader sees real imports
