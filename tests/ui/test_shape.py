"""The shape of the tree, read from the source (instant, and independent of what other tests imported):

- no import cycles among engine/ and ui/ modules, counting imports inside functions too (a lazy import hides a
  cycle from Python, not from the reader);
- a ui/<topic>/view.py or figures.py imports no streamlit (only sections, runs and the frame draw or cache);
- the engine imports no streamlit, plotly or ui (tests/engine/test_layers.py), and the UI imports no benchmark
  module (``bench``, ``bench_*``: the command line's, not the pages');
- every topic is the first word of its paths: pages/<topic>.py has assets/lessons/<topic>.md and ui/<topic>/.

Each rule is also run on a small bad example, so it is seen to fail.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("engine", "ui")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def imported(tree: ast.AST, known: set[str]) -> set[str]:
    """The known modules a source imports anywhere (top level or inside a function): ``import a.b``, ``from a
    import b`` (b a module or a name in a), ``from a.b import c``."""
    return {m for m in _all_imports(tree, with_names=True) if m in known}


def graph(sources: dict[str, str]) -> dict[str, set[str]]:
    known = set(sources)
    return {m: imported(ast.parse(text), known) - {m} for m, text in sources.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def _sources() -> dict[str, str]:
    return {m: p.read_text(encoding="utf-8") for m, p in modules().items()}


def test_no_import_cycles():
    g = graph(_sources())
    assert len(g) > 100 and g["engine.core.trace"], "the graph reads the real tree"
    assert cycles(g) == []


def test_a_cycle_is_found_even_behind_a_lazy_import():
    bad = {"a": "import b\n", "b": "def f():\n    from a import x\n", "c": "import a\n"}
    assert cycles(graph(bad)) == [["a", "b"]]


def _streamlit_in(text: str) -> bool:
    return any(m.split(".")[0] == "streamlit" for m in _all_imports(ast.parse(text)))


def _all_imports(tree: ast.AST, with_names: bool = False) -> set[str]:
    """Every absolute module a source imports, anywhere in it; ``with_names``: also ``a.b`` for each ``from a
    import b`` (b may be a module)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
            if with_names:
                out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


def _reached(g: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for n in g.get(todo.pop(), ()):
            if n not in seen:
                seen.add(n)
                todo.append(n)
    return seen


def test_views_and_figures_import_no_streamlit():
    """Not directly, and not through another ui module (a view that calls a cached run is not pure either)."""
    sources = _sources()
    g = graph(sources)
    drawing = {m for m, text in sources.items() if _streamlit_in(text)}
    pure = [m for m in sorted(sources) if m.startswith("ui.") and m.rsplit(".", 1)[-1] in ("view", "figures")]
    assert len(pure) >= 15
    offenders = {m: sorted(({m} | _reached(g, m)) & drawing) for m in pure if ({m} | _reached(g, m)) & drawing}
    assert offenders == {}, f"{offenders}: move the st.* part (or the run) into the topic's sections.py or runs.py"
    assert _streamlit_in("def f():\n    import streamlit as st\n")  # the check sees a lazy import too
    assert _reached({"a": {"b"}, "b": {"c"}}, "a") == {"b", "c"}


def _bench_imports(text: str) -> list[str]:
    names = _all_imports(ast.parse(text), with_names=True)
    return sorted(m for m in names if m.startswith("engine.") and m.rsplit(".", 1)[-1].startswith("bench"))


def test_the_ui_imports_no_benchmark_module():
    files = [*sorted((ROOT / "ui").rglob("*.py")), *sorted((ROOT / "pages").glob("*.py")), ROOT / "app.py"]
    offenders = {p.relative_to(ROOT).as_posix(): b for p in files if (b := _bench_imports(p.read_text("utf-8")))}
    assert offenders == {}, offenders
    assert _bench_imports("from engine.speculative.bench import PROMPTS\n")  # the check can fail
    assert _bench_imports("from engine.timeline import bench_decode\n")


def test_every_page_is_a_topic_in_every_layer():
    pages = sorted(p.stem for p in (ROOT / "pages").glob("*.py"))
    assert "loop" in pages
    for topic in pages:
        assert (ROOT / "assets" / "lessons" / f"{topic}.md").is_file(), topic
        assert (ROOT / "ui" / topic / "__init__.py").is_file(), f"no ui/{topic}/"
        assert (ROOT / "engine" / topic / "__init__.py").is_file(), f"no engine/{topic}/"
    flat = sorted(p.name for p in (ROOT / "ui").glob("*.py") if p.name != "__init__.py")
    assert flat == [], f"ui/ holds sub-packages only (the frame or a topic): {flat}"


def _project_files() -> list[Path]:
    """Every Python file of the project: the app, its pages, the engine, the UI, the scripts and the tests."""
    folders = ("pages", "engine", "ui", "scripts", "tests")
    return [ROOT / "app.py", *[p for d in folders for p in sorted((ROOT / d).rglob("*.py"))]]


def _is_project_module(name: str) -> bool:
    return name.split(".")[0] in ("engine", "ui", "tests", "pages", "scripts")


def private_imports(text: str, production: bool = True) -> list[str]:
    """Where a source takes another module's private (``_name``) name: ``from m import _x`` from a project module,
    and, in production code, ``mod._x`` where ``mod`` names a project module it imported (a test may reach into
    the module under test to patch it; it never imports a private name)."""
    tree = ast.parse(text)
    found, modules = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and _is_project_module(node.module):
            found += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
            modules |= {a.asname or a.name for a in node.names
                        if (ROOT / Path(*node.module.split("."), a.name + ".py")).is_file()
                        or (ROOT / Path(*node.module.split("."), a.name, "__init__.py")).is_file()}
        elif isinstance(node, ast.Import):
            modules |= {a.asname for a in node.names if a.asname and _is_project_module(a.name)}
    if production:
        found += [f"{n.value.id}.{n.attr}" for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                  and isinstance(n.value, ast.Name) and n.value.id in modules and n.attr.startswith("_")
                  and not n.attr.startswith("__")]
    return found


def test_no_module_takes_another_modules_private_name():
    offenders = {}
    for p in _project_files():
        rel = p.relative_to(ROOT).as_posix()
        if (bad := private_imports(p.read_text("utf-8"), production=not rel.startswith("tests/"))):
            offenders[rel] = bad
    assert offenders == {}, f"{offenders}: make the name public where it belongs"
    assert private_imports("from engine.core.trace import _make_record\n")  # the check can fail
    assert private_imports("from engine.core import arch\n\ndef f(m):\n    return arch._find_blocks(m)\n")
    assert not private_imports("from engine.core import arch\n\ndef f(m):\n    return arch._find_blocks(m)\n",
                               production=False)
    # a library's internals are listed in docs/architecture.md ("Library internals relied on"), not here
    assert not private_imports("import torch\n\ndef f():\n    return torch._dynamo\n")


GROUND = ("engine.core", "engine.measure.threads", "engine.measure.cpu_time", "engine.measure.timing", "engine.settings",
          "engine.store")


def above_the_ground_floor(g: dict[str, set[str]], floor: str = "engine.core",
                           allowed: tuple[str, ...] = GROUND) -> dict[str, list[str]]:
    """For each module of ``floor``: the engine modules it reaches (directly, or through another module, lazily
    too) that are not ``allowed`` (``GROUND``: core, the clock and thread rule it times passes with (and the rule's
    reading of the CPU time), the settings
    and the bounded store)."""
    ground = lambda m: any(m == g_ or m.startswith(g_ + ".") for g_ in allowed)  # noqa: E731
    return {m: sorted(n for n in _reached(g, m) if n.startswith("engine") and not ground(n))
            for m in sorted(g) if (m == floor or m.startswith(floor + ".")) and
            any(not ground(n) and n.startswith("engine") for n in _reached(g, m))}


def test_core_imports_no_topic():
    """engine/core is the ground floor: no topic, no loader (engine/models), no job server (engine/jobs)."""
    g = graph(_sources())
    assert "engine.core.loop" in g and "engine.jobs.worker" in g and "engine.models.loading" in g
    assert above_the_ground_floor(g) == {}
    bad = graph({"engine.core.x": "from engine.attention.lens import X\n", "engine.attention.lens": "",
                 "engine.core.y": "def f():\n    import engine.core.x\n"})
    assert above_the_ground_floor(bad) == {"engine.core.x": ["engine.attention.lens"],
                                           "engine.core.y": ["engine.attention.lens"]}


def test_the_job_server_imports_no_topic():
    """engine/jobs (the worker, the class batcher, the job kinds) stands on the ground floor only: a topic that
    wants its work batched defines its own JobKind (engine/loop/inspect.py's BLOCK_WALK) and imports jobs, never
    the other way."""
    g = graph(_sources())
    assert "engine.jobs.classbatch" in g and "engine.jobs.kinds" in g
    assert above_the_ground_floor(g, "engine.jobs", GROUND + ("engine.jobs",)) == {}
    bad = graph({"engine.jobs.x": "def f():\n    from engine.loop.inspect import block_walk\n",
                 "engine.loop.inspect": "", "engine.jobs.kinds": ""})
    assert above_the_ground_floor(bad, "engine.jobs", GROUND + ("engine.jobs",)) == {
        "engine.jobs.x": ["engine.loop.inspect"]}
