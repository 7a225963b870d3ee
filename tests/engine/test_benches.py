"""Each benchmark is a typed record (engine.bench.Bench: name, run, arguments, summary, the engine modes it
supports), as JobKind is the worker's contract; nothing reads a benchmark's or an experiment's module attributes by
name (``getattr(mod, "EAGER_ONLY")``, ``hasattr(mod, "summary")``), and no page imports what runs eager."""
from __future__ import annotations

import ast
import importlib

import pytest

from engine.__main__ import BENCHES, bench_of
from engine.bench import Bench
from engine.core.loaded import MODES, Mode
from tests.engine.test_model_ref import ROOT, scan_tree

pytestmark = pytest.mark.unit
# the names a module-attribute protocol would use: a benchmark's parts, and "this work runs eager"
PROTOCOL = ("run", "add_arguments", "summary", "EAGER_ONLY", "EAGER_BECAUSE", "BENCH")


def attribute_lookups(source: str) -> list[int]:
    """Lines that look a module's part up by name (``getattr(x, "summary", None)``, ``hasattr(x, "add_arguments")``)
    or define the old ``EAGER_ONLY`` module attribute."""
    lines = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("getattr", "hasattr") and \
                len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and node.args[1].value in PROTOCOL:
            lines.add(node.lineno)
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "EAGER_ONLY" for t in targets):
                lines.add(node.lineno)
    return sorted(lines)


PLANTED_LOOKUPS = """\
EAGER_ONLY = "why"
lm = in_mode(lm, mode, getattr(mod, "EAGER_ONLY", None))
if hasattr(mod, "add_arguments"):
    mod.add_arguments(p)
text = mod.summary(r) if hasattr(mod, "summary") else ""
n = getattr(lm.info, "n_layers", 0)
"""


def test_the_lookup_scan_finds_planted_lookups():
    """Lines 1, 2, 3 and 5 define or look up a module's part by name; a fact read with a default (line 6) is no
    module protocol."""
    assert attribute_lookups(PLANTED_LOOKUPS) == [1, 2, 3, 5]


def test_no_module_part_is_looked_up_by_name():
    found = scan_tree(attribute_lookups)
    assert not found, f"a benchmark is a Bench record, read as one: {found}"


@pytest.mark.parametrize("name", sorted(BENCHES))
def test_each_benchmark_declares_its_record(name):
    bench = bench_of(name)
    assert isinstance(bench, Bench) and bench.name == name and callable(bench.run)
    assert bench.arguments is None or callable(bench.arguments)
    assert set(bench.modes) <= set(MODES) and Mode.EAGER in bench.modes
    assert (bench.modes == (Mode.EAGER,)) == bool(bench.eager_because)


def test_a_record_that_names_another_benchmark_is_refused(monkeypatch):
    mod = importlib.import_module(BENCHES["kv"])
    monkeypatch.setattr(mod, "BENCH", Bench("timeline", mod.BENCH.run))
    with pytest.raises(AssertionError, match="declares the benchmark 'timeline'"):
        bench_of("kv")


def test_no_page_imports_what_runs_eager():
    """Which work runs eager is its benchmark's record and its topic's own business: a page asks its ui module."""
    found = [f"{p.relative_to(ROOT)}" for p in sorted((ROOT / "pages").glob("*.py"))
             if "EAGER" in p.read_text() or "eager_model" in p.read_text()]
    assert not found, found
