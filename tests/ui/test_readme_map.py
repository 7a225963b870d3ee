"""The README and docs/architecture.md map the tree; this keeps the maps true (read from the files, instant).

- Every repository path they name in backticks exists (`engine/core/loop.py`, `ui/frame/`, `app.py`, ...).
- Every link and image in the README and in docs/*.md resolves: the file exists and a `#heading` anchor is a
  heading of that file.
- Every page of ui/frame/nav.py has a row in the README's page table (by title) and in the README's topic map and
  the architecture grid (by path).
- docs/architecture.md's topic grid names every module of every `ui/<topic>/` and `engine/<topic>/` folder, and its
  table of shared floors names every module of those folders (`ui/frame/`, `engine/core/`, ...): a module added
  without a line in the map fails here, as does a folder that is neither a topic nor a floor.

A failure lists each stale entry with the file it is in: after code moves (issue 39's split of engine/core), the
list is what the maps need. Each check is shown failing on a planted bad example at the end of this file.
"""
from __future__ import annotations

import ast
import re
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = "README.md"
ARCHITECTURE = "docs/architecture.md"

# What a backticked token must start with to be read as a path of this repository.
TOP = ("app.py", "pages/", "ui/", "engine/", "assets/", "tests/", "scripts/", "docs/", ".ci/", ".streamlit/",
       "requirements.txt", "requirements-dev.txt", "pytest.ini")
# Paths a doc names that the tests or the start make (git ignores them), so a checkout need not have them.
MADE = {"tests/browser/screenshots/": "the browser tests' pictures (ILE_SCREENSHOTS)"}
# Links to pages another branch of issue 39 adds (the settings table generated from the settings module): missing
# here is a warning, not a failure; once the page exists it is checked like any other.
PENDING: dict[str, str] = {}  # a doc a link may name before it lands: path -> why it is not here yet
TIERS = ("engine", "ui", "app", "browser")
NONE = {"–", "-", ""}


# -- reading the maps

def _code_spans(text: str) -> list[tuple[int, str]]:
    """(line number, text) of every `inline code` span outside fenced blocks."""
    out, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            out += [(n, m) for m in re.findall(r"`([^`\n]+)`", line)]
    return out


def repo_path(token: str) -> str | None:
    """The repository path a code span names, or None when it is not one (a command, a placeholder, a glob)."""
    token = token.strip()
    if not token.startswith(TOP) or any(c in token for c in " <>*{}|$") or "..." in token:
        return None
    return token.split(":")[0]  # `engine/models/convert.py:_VERIFIED` names the file


def _rows(text: str, begin: str, end: str) -> list[list[str]]:
    """The data rows of the markdown table between two marker comments, as lists of stripped cells."""
    body = text.split(begin, 1)[1].split(end, 1)[0]
    rows = [ln for ln in body.splitlines() if ln.startswith("|")]
    return [[c.strip() for c in r.strip().strip("|").split("|")] for r in rows[2:]]


def _section_rows(text: str, heading: str) -> list[list[str]] | None:
    """The data rows of the first table under a `## heading` (None: no such heading)."""
    if f"\n## {heading}\n" not in text:
        return None
    body = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in body.splitlines() if ln.startswith("|")]
    return [[c.strip() for c in r.strip().strip("|").split("|")] for r in rows[2:]]


def _names(cell: str) -> list[str]:
    return [n.strip().strip("`") for n in cell.split(",") if n.strip().strip("`") not in NONE]


def nav_pages(root: Path) -> list[tuple[str, str]]:
    """(path, title) of every PageSpec in ui/frame/nav.py, read from its source."""
    tree = ast.parse((root / "ui/frame/nav.py").read_text(encoding="utf-8"))
    return [(c.args[0].value, c.args[1].value) for c in ast.walk(tree)
            if isinstance(c, ast.Call) and getattr(c.func, "id", None) == "PageSpec"]


def _modules(folder: Path) -> set[str]:
    return {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    s = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", s).replace(" ", "-")


def _anchors(text: str) -> set[str]:
    out, fenced = set(), False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            out.add(_slug(line.lstrip("#")))
    return out


# -- the checks: each returns the stale entries it found, in words

def missing_paths(doc: str, text: str, root: Path) -> list[str]:
    out = []
    for n, span in _code_spans(text):
        path = repo_path(span)
        if path and path not in MADE and not (root / path).exists():
            out.append(f"{doc}:{n}: `{path}` does not exist")
    return out


def broken_links(doc: str, text: str, root: Path) -> list[str]:
    out = []
    base = (root / doc).parent
    for n, line in enumerate(text.splitlines(), 1):
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if re.match(r"[a-z]+:", target):  # http(s), mailto: not checked offline
                continue
            file, _, anchor = target.partition("#")
            where = (base / file).resolve() if file else root / doc
            rel = where.relative_to(root).as_posix() if where.is_relative_to(root) else str(where)
            if file and not where.exists():
                if rel in PENDING:
                    warnings.warn(f"{doc}:{n} links {rel}, not here yet: {PENDING[rel]}")
                else:
                    out.append(f"{doc}:{n}: link to {target} does not resolve")
                continue
            if anchor and where.suffix == ".md" and anchor not in _anchors(where.read_text(encoding="utf-8")):
                out.append(f"{doc}:{n}: link to {target}: no heading '#{anchor}' in {rel}")
    return out


def ragged_tables(doc: str, text: str) -> list[str]:
    """Table rows whose cell count differs from their header's (a `|` inside a cell breaks the rendered table)."""
    out, fenced, header = [], False, None
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if fenced or not line.startswith("|"):
            header = None
            continue
        cells = len(re.split(r"(?<!\\)\|", line.strip().strip("|")))
        if header is None:
            header = cells
        elif cells != header:
            out.append(f"{doc}:{n}: {cells} cells in a table of {header} columns")
    return out


def grid_problems(text: str, root: Path) -> list[str]:
    """docs/architecture.md's topic grid and floors against the tree."""
    out = []
    topics: set[str] = set()
    pages: set[str] = set()
    for cells in _rows(text, "<!-- topic-grid:begin -->", "<!-- topic-grid:end -->"):
        topic, page, _lesson, ui, engine, *tests = cells
        topic = topic.split()[0]
        topics.add(topic)
        pages.add(page.strip("`"))
        named_ui, named_engine = set(_names(ui)), set(_names(engine))
        for kind, named in (("ui", named_ui), ("engine", named_engine)):
            for name in named:  # a module, or a data file or folder of the topic (schema.json, page/)
                rel = name if ("." in name or name.endswith("/")) else f"{name}.py"
                if not (root / kind / topic / rel).exists():
                    out.append(f"{ARCHITECTURE}: topic {topic}: {kind}/{topic}/{rel} does not exist")
        for kind, named in (("ui", named_ui), ("engine", named_engine)):
            folder = root / kind / topic
            for mod in sorted(_modules(folder) - named) if folder.is_dir() else ():
                out.append(f"{ARCHITECTURE}: topic {topic}: {kind}/{topic}/{mod}.py is not in its row")
        for tier, cell in zip(TIERS, tests):
            for name in _names(cell):
                if not (root / "tests" / tier / f"{name}.py").is_file():
                    out.append(f"{ARCHITECTURE}: topic {topic}: tests/{tier}/{name}.py does not exist")
    floors: set[Path] = set()
    floor_files: set[Path] = set()
    for cells in _rows(text, "<!-- floors:begin -->", "<!-- floors:end -->"):
        path = Path(cells[0].strip("`"))
        floor_files.add(path)
        floors.add(path.parent)
    for floor in sorted(floors):
        if floor == Path("engine"):
            continue  # the package's own modules (__main__, cli_args) are checked below
        for mod in sorted(_modules(root / floor)):
            if floor / f"{mod}.py" not in floor_files:
                out.append(f"{ARCHITECTURE}: {floor}/{mod}.py is not in the table of shared floors")
    for path in (Path("engine/__main__.py"), Path("engine/cli_args.py")):
        if (root / path).exists() and path not in floor_files:
            out.append(f"{ARCHITECTURE}: {path} is not in the table of shared floors")
    for kind in ("ui", "engine"):
        for folder in sorted(p for p in (root / kind).iterdir() if p.is_dir() and p.name != "__pycache__"):
            if folder.name not in topics and Path(kind, folder.name) not in floors:
                out.append(f"{ARCHITECTURE}: {kind}/{folder.name}/ is neither a topic row nor a shared floor")
    for path, title in nav_pages(root):
        if path not in pages:
            out.append(f"{ARCHITECTURE}: page {path} ({title}) has no row in the topic grid")
    return out


def readme_problems(text: str, root: Path) -> list[str]:
    """The README's page table and topic map against ui/frame/nav.py and the tests."""
    page_rows, map_rows = _section_rows(text, "The pages"), _section_rows(text, "Where the code lives")
    out = [f"{README}: no '## {h}' section" for h, rows in (("The pages", page_rows), ("Where the code lives", map_rows))
           if rows is None]
    page_rows, map_rows = page_rows or [], map_rows or []
    titles = {re.sub(r"\*\*(.+?)\*\*.*", r"\1", cells[0]) for cells in page_rows}
    mapped = {cells[1].split()[0].strip("`") for cells in map_rows}
    for path, title in nav_pages(root):
        if title not in titles:
            out.append(f"{README}: page '{title}' ({path}) has no row in the page table")
        if path not in mapped:
            out.append(f"{README}: page {path} has no row in the topic map")
    for cells in map_rows:
        for name in _names(cells[-1]):
            if not any((root / "tests" / tier / f"{name}.py").is_file() for tier in TIERS):
                out.append(f"{README}: topic {cells[0]}: no tests/*/{name}.py")
    return out


def _docs(root: Path) -> list[str]:
    return [README] + sorted(p.relative_to(root).as_posix() for p in (root / "docs").glob("*.md"))


# -- the tests on this repository

def _text(doc: str) -> str:
    return (ROOT / doc).read_text(encoding="utf-8")


@pytest.mark.parametrize("doc", [README, ARCHITECTURE])
def test_every_path_the_maps_name_exists(doc):
    assert missing_paths(doc, _text(doc), ROOT) == []


@pytest.mark.parametrize("doc", _docs(ROOT))
def test_every_link_and_image_resolves(doc):
    assert broken_links(doc, _text(doc), ROOT) == []


@pytest.mark.parametrize("doc", _docs(ROOT))
def test_every_table_renders(doc):
    assert ragged_tables(doc, _text(doc)) == []


def test_the_architecture_grid_and_floors_match_the_tree():
    assert grid_problems(_text(ARCHITECTURE), ROOT) == []


def test_the_readme_has_every_page_and_its_tests():
    assert readme_problems(_text(README), ROOT) == []


def test_the_readme_is_short():
    assert len(_text(README).splitlines()) <= 250, "the README is for people: depth goes to docs/"


# -- each check fails on a planted bad example

def test_a_planted_stale_path_is_reported():
    text = _text(README) + "\nThe worker lives in `engine/core/nowhere.py:submit`.\n"
    assert missing_paths(README, text, ROOT) == [f"{README}:{len(text.splitlines())}: `engine/core/nowhere.py` does not exist"]
    assert missing_paths(README, "`bash scripts/start.sh` and `ui/<topic>/`", ROOT) == []  # commands, placeholders


def test_a_planted_broken_link_or_anchor_is_reported():
    text = "[gone](docs/nowhere.md) [bad anchor](docs/architecture.md#no-such-heading) ![pic](docs/screenshots/x.png)"
    found = broken_links(README, text, ROOT)
    assert len(found) == 3 and "no heading '#no-such-heading'" in found[1]
    assert broken_links(README, "[ok](docs/architecture.md#the-engine-worker) [web](https://example.org)", ROOT) == []


def test_a_pending_page_warns_until_it_exists(tmp_path, monkeypatch):
    monkeypatch.setitem(PENDING, "docs/later.md", "a planted page not written yet")
    (tmp_path / "docs").mkdir()
    with pytest.warns(UserWarning, match="later.md, not here yet"):
        assert broken_links(ARCHITECTURE, "[later](later.md)", tmp_path) == []
    (tmp_path / "docs/later.md").write_text("# Later\n")
    assert broken_links(ARCHITECTURE, "[later](later.md#later) [no](later.md#nope)", tmp_path) == [
        f"{ARCHITECTURE}:1: link to later.md#nope: no heading '#nope' in docs/later.md"]
    assert broken_links(ARCHITECTURE, "[gone](gone.md)", tmp_path) == [
        f"{ARCHITECTURE}:1: link to gone.md does not resolve"]


def test_a_planted_ragged_table_is_reported():
    text = "| a | b |\n| --- | --- |\n| `x|y` | z |\n| \\| escaped | fine |\n"
    assert ragged_tables(README, text) == [f"{README}:3: 3 cells in a table of 2 columns"]


def test_a_page_missing_from_the_readme_is_reported():
    text = _text(README)
    cut = "\n".join(ln for ln in text.splitlines() if not ln.startswith(("| **Batching**", "| batching ")))
    found = readme_problems(cut, ROOT)
    assert any("page 'Batching'" in f for f in found) and any("pages/batching.py has no row" in f for f in found)


def test_a_module_or_folder_missing_from_the_grid_is_reported(tmp_path):
    # A copy of the tree's layout (file names only) with one module and one folder the map does not know.
    for p in ROOT.glob("*/**/*.py"):
        rel = p.relative_to(ROOT)
        if rel.parts[0] in ("ui", "engine", "tests", "pages") and "__pycache__" not in rel.parts:
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / rel).write_text("")
    for p in ("engine/record/schema.json",):
        (tmp_path / p).write_text("{}")
    (tmp_path / "ui/record/page").mkdir(parents=True)
    (tmp_path / "ui/frame/nav.py").write_text((ROOT / "ui/frame/nav.py").read_text(encoding="utf-8"))
    text = _text(ARCHITECTURE)
    assert grid_problems(text, tmp_path) == []
    (tmp_path / "ui/attention/extra.py").write_text("")
    (tmp_path / "engine/core/newthing.py").write_text("")
    (tmp_path / "engine/newfloor").mkdir()
    (tmp_path / "engine/newfloor/thing.py").write_text("")
    (tmp_path / "engine/timeline/bench_decode.py").unlink()
    assert sorted(grid_problems(text, tmp_path)) == sorted([
        f"{ARCHITECTURE}: topic attention: ui/attention/extra.py is not in its row",
        f"{ARCHITECTURE}: topic timeline: engine/timeline/bench_decode.py does not exist",
        f"{ARCHITECTURE}: engine/core/newthing.py is not in the table of shared floors",
        f"{ARCHITECTURE}: engine/newfloor/ is neither a topic row nor a shared floor",
    ])
