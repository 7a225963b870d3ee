"""docs/architecture.md lists every cache layer, and cannot go stale: every ``@memo(...)`` / ``@shared(...)``
function (st.cache_data / st.cache_resource through ui/frame/cache.py), every ``functools.lru_cache`` and every
``BoundedStore("name", ...)`` in engine/ and ui/ (found by AST) must be named in its cache section, on a table row
that also names its module; and every function the ``st.cache_data`` table names must still be a cached function
of that module. Each check fails on a planted example."""
import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
SECTION = "## Caches"


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    return ast.unparse(node)


def caches_in(path: str, source: str) -> list[tuple[str, str, str]]:
    """(kind, module path, name) of every cache declared in one module's source: the decorated function's name
    for memo / shared / lru_cache, the store's own name for a BoundedStore (its first argument)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for dec in node.decorator_list:
                last = _dotted(dec).split(".")[-1]
                if last in ("memo", "shared", "lru_cache") or _dotted(dec) == "functools.cache":
                    found.append((last, path, node.name))
        elif isinstance(node, ast.Call) and _dotted(node).split(".")[-1] == "BoundedStore":
            name = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "name"), None)
            label = name.value if isinstance(name, ast.Constant) and isinstance(name.value, str) else None
            found.append(("BoundedStore", path, label or f"<not a string literal: {ast.unparse(name) if name else ''}>"))
    return found


def tree_caches(root: Path = ROOT) -> list[tuple[str, str, str]]:
    out = []
    for folder in ("engine", "ui"):
        for p in sorted((root / folder).rglob("*.py")):
            rel = p.relative_to(root).as_posix()
            if rel == "engine/store.py":  # the class itself
                continue
            out += caches_in(rel, p.read_text(encoding="utf-8"))
    return out


def cache_rows(doc: str) -> list[str]:
    """The table rows of the cache section (from its heading to the next ``## ``)."""
    start = doc.index(SECTION)
    end = doc.find("\n## ", start + len(SECTION))
    section = doc[start:end if end != -1 else None]
    return [line for line in section.splitlines() if line.startswith("|")]


def _named(row: str, name: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", row) is not None


def unlisted(caches, doc: str) -> list[str]:
    rows = cache_rows(doc)
    return [f"{kind} {name!r} in {path} is not in {ARCHITECTURE.name}'s cache section (a row naming {path} and it)"
            for kind, path, name in caches if not any(path in row and _named(row, name) for row in rows)]


def stale_memo_rows(caches, doc: str) -> list[str]:
    """Functions the st.cache_data table names (module | functions) that are no longer memo functions there."""
    memo = {(path, name) for kind, path, name in caches if kind == "memo"}
    out = []
    for row in cache_rows(doc):
        cells = [c.strip() for c in row.strip("|").split("|")]
        if len(cells) != 2 or not re.fullmatch(r"`[\w/]+\.py`", cells[0]):
            continue
        path = cells[0].strip("`")
        for name in re.findall(r"`(\w+)`", cells[1]):
            if (path, name) not in memo:
                out.append(f"{path}: `{name}` is in the st.cache_data table but is no @memo function there")
    return out


def test_the_scan_reads_the_real_tree():
    caches = tree_caches()
    kinds = {kind for kind, _, _ in caches}
    assert {"memo", "shared", "lru_cache", "BoundedStore"} <= kinds, kinds
    assert ("memo", "ui/frame/runs.py", "_analysis") in caches
    assert ("BoundedStore", "ui/frame/runs.py", "generations") in caches
    assert ("lru_cache", "ui/frame/lessons.py", "sections") in caches
    assert len([c for c in caches if c[0] == "memo"]) >= 30


def test_every_cache_is_listed_in_the_architecture_doc():
    doc = ARCHITECTURE.read_text(encoding="utf-8")
    caches = tree_caches()
    assert unlisted(caches, doc) == []
    assert stale_memo_rows(caches, doc) == []


def test_a_planted_unlisted_cache_is_reported():
    doc = ARCHITECTURE.read_text(encoding="utf-8")
    planted = caches_in("ui/frame/runs.py", (
        "from functools import lru_cache\nimport functools\n"
        "from engine.store import BoundedStore\nfrom ui.frame.cache import memo, shared\n\n"
        "@memo(4)\ndef fresh_for(model):\n    return model\n\n"
        "@shared(2)\ndef _fresh_model(name):\n    return name\n\n"
        "@lru_cache(maxsize=2)\ndef fresh_table():\n    return 1\n\n"
        "@functools.cache\ndef fresh_words():\n    return 1\n\n"
        "_FRESH = BoundedStore('fresh answers', 8)\n_NAMED = BoundedStore(name=STORE_NAME, max_entries=2)\n"
        "_LISTED_ELSEWHERE = BoundedStore('quiet measurements', 2)\n"))
    assert [m.split(" in ")[0] for m in unlisted(planted, doc)] == [
        "memo 'fresh_for'", "shared '_fresh_model'", "lru_cache 'fresh_table'", "cache 'fresh_words'",
        "BoundedStore 'fresh answers'", "BoundedStore '<not a string literal: STORE_NAME>'",
        "BoundedStore 'quiet measurements'"]  # named in the doc, but on ui/frame/measured.py's row
    assert unlisted([("memo", "ui/frame/runs.py", "_analysis")], doc) == []  # and a listed one is not


def test_a_planted_stale_memo_row_is_reported():
    doc = ARCHITECTURE.read_text(encoding="utf-8")
    caches = tree_caches()
    row = "| `ui/frame/runs.py` | `_analysis` (24), "
    assert row in doc
    stale = doc.replace(row, row + "`_gone_for` (8), ", 1)
    assert stale_memo_rows(caches, stale) == [
        "ui/frame/runs.py: `_gone_for` is in the st.cache_data table but is no @memo function there"]
