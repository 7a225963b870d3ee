"""Settings are read in one place: engine/settings.py declares every environment variable (typed, with one on/off
vocabulary), no other module of the app, the engine or the scripts reads the environment, every ILE_ name used
anywhere is declared, and docs/settings.md's table is the one the module generates."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from engine import settings as S

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
CODE = ["app.py", "pages", "engine", "ui", "scripts"]
PLANTED = "ILE_" + "TEST_PLANTED"  # built, so the declared-names scan below does not find it


def _python_files(roots=CODE, base: Path = ROOT):
    for r in roots:
        p = base / r
        yield from ([p] if p.is_file() else sorted(p.rglob("*.py")))


def environment_reads(source: str) -> list[int]:
    """Lines that read the process environment: os.environ.get / [...] as a value / `in os.environ`, os.getenv.
    Writing a variable (os.environ[...] = ..., setdefault) and copying the whole mapping for a child process
    (dict(os.environ, ...)) are not reads of a setting."""
    tree = ast.parse(source)
    lines = []

    def is_environ(node) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "environ" and \
            isinstance(node.value, ast.Name) and node.value.id == "os"

    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            f = node.func
            if f.attr == "getenv" and isinstance(f.value, ast.Name) and f.value.id == "os":
                lines.append(node.lineno)
            elif f.attr in ("get", "items", "keys", "values") and is_environ(f.value):
                lines.append(node.lineno)
        elif isinstance(node, ast.Subscript) and is_environ(node.value) and isinstance(node.ctx, ast.Load):
            lines.append(node.lineno)
        elif isinstance(node, ast.Compare) and any(is_environ(c) for c in node.comparators):
            lines.append(node.lineno)
    return lines


def test_the_scan_finds_a_planted_read():
    planted = ("import os\na = os.environ.get('ILE_X')\nb = os.getenv('Y')\nc = os.environ['Z']\n"
               "d = 'W' in os.environ\nos.environ['V'] = '1'\nos.environ.setdefault('U', '2')\n"
               "e = dict(os.environ, A='1')\n")
    assert environment_reads(planted) == [2, 3, 4, 5]


def test_no_module_but_settings_reads_the_environment():
    found = []
    for path in _python_files():
        if path == ROOT / "engine" / "settings.py":
            continue
        found += [f"{path.relative_to(ROOT)}:{n}" for n in environment_reads(path.read_text())]
    assert not found, f"read the environment outside engine/settings.py: {found}"


def test_every_ile_name_used_anywhere_is_declared():
    declared = {s.name for s in S.SETTINGS}
    used: dict[str, str] = {}
    files = list(_python_files(CODE + ["tests"])) + sorted((ROOT / "scripts").glob("*.sh")) + [ROOT / "README.md"]
    files += sorted((ROOT / "docs").glob("*.md"))
    for path in files:
        for name in re.findall(r"\bILE_[A-Z][A-Z0-9_]*[A-Z0-9]\b", path.read_text()):
            used.setdefault(name, str(path.relative_to(ROOT)))
    undeclared = {n: where for n, where in used.items() if n not in declared}
    assert not undeclared, f"ILE_ names used but not declared in engine/settings.py: {undeclared}"


def test_one_vocabulary_for_every_switch(capsys):
    for word in ("1", "on", "TRUE", " yes "):
        assert S.flag(word, False) is True
    for word in ("0", "Off", "false", "no"):
        assert S.flag(word, True) is False
    assert S.flag(None, True) is True and S.flag("  ", False) is False
    assert S.flag("maybe", True, PLANTED) is True  # unreadable: the default, said once
    assert S.flag("maybe", True, PLANTED) is True
    err = capsys.readouterr().err
    assert err.count(PLANTED) == 1 and "neither on" in err


def test_typed_values_from_a_given_mapping():
    assert S.THREAD_POLICY.get({"ILE_THREAD_POLICY": "false"}) is False  # this one once rejected "false"
    assert S.WARM.get({"ILE_WARM": "false"}) is False
    assert S.MAX_BATCH.get({"ILE_MAX_BATCH": "0"}) == 1  # its minimum
    assert S.MAX_BATCH.get({"ILE_MAX_BATCH": "lots"}) == 32  # unreadable: the default
    assert S.MAX_BATCH.get({}) == 32
    assert S.CLASS_MODE.get({"ILE_CLASS_MODE": "TRUE"}) == "on"
    assert S.CLASS_MODE.get({"ILE_CLASS_MODE": "sometimes"}) == "auto"
    assert S.CACHE_DIR.get({"ILE_CACHE_DIR": "~/x"}) == Path("~/x").expanduser()


def test_the_class_engine_is_a_mode_and_a_bad_value_says_so_in_one_line(capsys):
    from engine.core.loaded import Mode

    assert S.CLASS_ENGINE.get({}) is Mode.EAGER
    assert S.CLASS_ENGINE.get({"ILE_CLASS_ENGINE": " Compiled "}) is Mode.COMPILED
    capsys.readouterr()
    assert S.CLASS_ENGINE.get({"ILE_CLASS_ENGINE": "turbo-planted"}) is Mode.EAGER
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ILE_CLASS_ENGINE='turbo-planted' is not one of eager, compiled: eager applies" in err


def test_values_are_read_when_asked_not_at_import(monkeypatch):
    monkeypatch.setenv("ILE_MAX_BATCH", "7")
    assert S.MAX_BATCH.get() == 7
    monkeypatch.setenv("ILE_MAX_BATCH", "9")
    assert S.MAX_BATCH.get() == 9


def test_docs_table_is_current():
    text = S.DOCS.read_text()
    assert S.docs_with_table(text) == text, "docs/settings.md is out of date: run python -m engine settings"
    for s in S.SETTINGS:
        assert f"`{s.name}`" in text
