"""The rules every page file keeps, so a newcomer can read and edit one: a page only lays out views.

- at most 110 lines;
- imports no numpy or torch, and never touches st.session_state (per-session state lives in ui/ helpers);
- each page has a lesson file in assets/lessons/ with the sections the page asks for;
- Streamlit's caches are declared in ui/frame/cache.py only.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "app.py", *(ROOT / "pages").glob("*.py")])
MAX_LINES = 110


def _imports(tree: ast.AST) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module.split(".")[0])
    return out


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_a_page_only_lays_out_views(path):
    text = path.read_text(encoding="utf-8")
    lines = len(text.splitlines())
    assert lines <= MAX_LINES, f"{path.name}: {lines} lines (at most {MAX_LINES}): move logic into ui/"
    assert not _imports(ast.parse(text)) & {"numpy", "torch"}, f"{path.name} imports numpy/torch"
    assert "session_state" not in text, f"{path.name} uses st.session_state: keep it in a ui/ helper"


@pytest.mark.parametrize("path", sorted((ROOT / "pages").glob("*.py")), ids=lambda p: p.name)
def test_every_page_has_a_lesson_file(path):
    assert (ROOT / "assets" / "lessons" / f"{path.stem}.md").is_file(), f"no assets/lessons/{path.stem}.md"


def test_every_lesson_section_asked_for_exists():
    """Every literal lesson("page", "section") in pages/ and ui/ names a section that its file has."""
    from ui.frame.lessons import sections

    asked = set()
    for p in [*ROOT.glob("pages/*.py"), *ROOT.glob("ui/**/*.py")]:
        asked.update(re.findall(r"lesson\(\s*\"([a-z_]+)\"\s*,\s*\"([^\"{]+)\"", p.read_text(encoding="utf-8")))
    assert ("loop", "glance") in asked  # the pattern finds what it is for
    missing = [f"{page}: {name}" for page, name in sorted(asked) if name.lower() not in sections(page)]
    assert missing == [], missing


def test_streamlit_caches_are_declared_in_one_module():
    offenders = [p.relative_to(ROOT).as_posix() for p in sorted([*ROOT.glob("ui/**/*.py"), *ROOT.glob("pages/*.py"),
                                                                  ROOT / "app.py"])
                 if re.search(r"st\.cache_(data|resource)\(", p.read_text(encoding="utf-8"))
                 and p.relative_to(ROOT).as_posix() != "ui/frame/cache.py"]
    assert offenders == [], offenders


def test_the_rules_can_fail(tmp_path):
    """The checks above catch what they are for (a test that cannot fail is worse than none)."""
    bad = "import numpy as np\nimport streamlit as st\nst.session_state['x'] = 1\n" + "st.write(1)\n" * 120
    tree = ast.parse(bad)
    assert "numpy" in _imports(tree) and len(bad.splitlines()) > MAX_LINES and "session_state" in bad
