"""Lesson texts live in assets/lessons/<page>.md so a teacher can edit or translate them without code.

A file is a list of sections, each starting with a line "## <name>". A page asks for a section by name and
fills its {placeholders} with the run's numbers (str.format); write {{ and }} for literal braces.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

LESSONS = Path(__file__).resolve().parents[2] / "assets" / "lessons"


@lru_cache(maxsize=32)
def sections(page: str) -> dict[str, str]:
    """Section name -> text for one page's lesson file (stripped; names compared in lower case)."""
    out: dict[str, list[str]] = {}
    name = None
    for line in (LESSONS / f"{page}.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            name = line[3:].strip().lower()
            out[name] = []
        elif name is not None:
            out[name].append(line)
    return {k: "\n".join(v).strip() for k, v in out.items()}


def lesson(page: str, name: str, **values) -> str:
    """The text of section ``name`` of ``page``'s lesson file with ``values`` filled in."""
    text = sections(page)[name.lower()]
    return text.format(**values) if values else text.replace("{{", "{").replace("}}", "}")
