"""The shape of the tree, read from the source (instant, and independent of what other tests imported):

- no import cycles among engine/ and ui/ modules, counting imports inside functions too (a lazy import hides a
  cycle from Python, not from the reader);
- a ui/<topic>/view.py or figures.py imports no streamlit (only sections, runs and the frame draw or cache);
- the engine imports no streamlit, plotly or ui (tests/engine/test_layers.py), and the UI imports no benchmark
  module (``bench``, ``bench_*``: the command line's, not the pages');
- every topic is the first word of its paths: pages/<topic>.py has assets/lessons/<topic>.md and ui/<topic>/;
- a page imports no engine module (it asks its topic's ui); no two folders of engine/ and ui/ import each other;
  no ui topic imports another topic's figures (what two topics draw is ui/frame/figures.py's);
- no product module (engine/, ui/, pages/, app.py) passes MAX_MODULE_LINES lines: past that it does several jobs.

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
          "engine.store", "engine.mode")


def above_the_ground_floor(g: dict[str, set[str]], floor: str = "engine.core",
                           allowed: tuple[str, ...] = GROUND) -> dict[str, list[str]]:
    """For each module of ``floor``: the engine modules it reaches (directly, or through another module, lazily
    too) that are not ``allowed`` (``GROUND``: core, the clock and thread rule it times passes with (and the rule's
    reading of the CPU time), the settings, the engine modes' enum and the bounded store)."""
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


def page_engine_imports(text: str) -> list[str]:
    """The engine modules a page's source imports, anywhere in it (a page asks its UI, never the engine)."""
    return sorted(m for m in _all_imports(ast.parse(text)) if m == "engine" or m.startswith("engine."))


def test_a_page_imports_no_engine_module():
    pages = sorted((ROOT / "pages").glob("*.py"))
    assert len(pages) >= 12
    offenders = {p.name: b for p in pages if (b := page_engine_imports(p.read_text("utf-8")))}
    assert offenders == {}, f"{offenders}: ask the topic's ui module (runs, view, sections) instead"
    planted = "import streamlit as st\nfrom engine.timeline import experiment as T\ndef f():\n    import engine.core.loop\n"
    assert page_engine_imports(planted) == ["engine.core.loop", "engine.timeline"]


def folder_of(module: str) -> str:
    """The folder a module lives in, one level below engine/ or ui/ (engine.core.loop -> engine.core); a module at
    the top of engine/ (engine.settings, engine.store) is its own."""
    parts = module.split(".")
    return ".".join(parts[:2])


def folders_importing_each_other(g: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Pairs of folders that import each other, counting lazy imports: the two would be one floor."""
    edges = {(folder_of(m), folder_of(d)) for m, deps in g.items() for d in deps if folder_of(m) != folder_of(d)}
    return sorted((a, b) for a, b in edges if (b, a) in edges and a < b)


def test_no_two_folders_import_each_other():
    """Each folder of engine/ and ui/ stands on others or is stood on, never both with the same one: engine/record
    imported engine/speculative's records and the race's command imported the record's saving back; engine/measure
    (below the ground floor: core imports its clocks) had a benchmark climbing to the loop."""
    assert folders_importing_each_other(graph(_sources())) == []
    planted = graph({"engine.a.x": "from engine.b.y import f\n", "engine.b.y": "def f():\n    import engine.a.z\n",
                     "engine.a.z": "", "engine.c.w": "import engine.a.x\n"})
    assert folders_importing_each_other(planted) == [("engine.a", "engine.b")]


def other_topics_figures(module: str, text: str) -> list[str]:
    """The figures modules of other ui topics that a ui module imports (shared figure helpers live in
    ui/frame/figures.py)."""
    parts = module.split(".")
    topic = parts[1] if len(parts) > 2 and parts[0] == "ui" else None
    names = _all_imports(ast.parse(text), with_names=True)
    return sorted(m for m in names if m.startswith("ui.") and m.endswith(".figures") and m.count(".") == 2
                  and m.split(".")[1] not in (topic, "frame"))


def test_no_topic_imports_another_topics_figures():
    offenders = {m: b for m, text in _sources().items() if m.startswith("ui.") and (b := other_topics_figures(m, text))}
    assert offenders == {}, f"{offenders}: a helper or figure two topics draw goes to ui/frame/figures.py"
    assert other_topics_figures("ui.serving.figures", "from ui.sampling.figures import unique_labels\n") == [
        "ui.sampling.figures"]
    assert other_topics_figures("ui.record.sections", "def f():\n    from ui.loop import figures\n") == ["ui.loop.figures"]
    assert other_topics_figures("ui.loop.sections", "from ui.loop.figures import x\nfrom ui.frame.figures import y\n") == []


MAX_MODULE_LINES = 450  # docs/architecture.md: a module does one job; past ~450 lines it usually does several
PRODUCT = ("engine", "ui", "pages", "app.py")


def modules_over(root: Path, limit: int = MAX_MODULE_LINES) -> dict[str, int]:
    """The product modules under ``root`` longer than ``limit`` lines, with their lengths."""
    paths = [p for r in PRODUCT for p in ([root / r] if r.endswith(".py") else sorted((root / r).rglob("*.py")))
             if p.is_file()]
    lengths = {str(p.relative_to(root)): len(p.read_text("utf-8").splitlines()) for p in paths}
    return {name: n for name, n in lengths.items() if n > limit}


def test_no_product_module_passes_the_line_limit(tmp_path):
    assert modules_over(ROOT) == {}, "split each by job (docs/architecture.md: a module does one job)"
    (tmp_path / "engine" / "core").mkdir(parents=True)
    (tmp_path / "engine" / "core" / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    (tmp_path / "engine" / "core" / "short.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    (tmp_path / "app.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 2))
    assert modules_over(tmp_path) == {"engine/core/long.py": MAX_MODULE_LINES + 1, "app.py": MAX_MODULE_LINES + 2}
