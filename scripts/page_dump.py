"""Dump every page's AppTest element tree as text, digits masked: compare the dump before and after a refactor
that must change nothing a user sees.  python scripts/page_dump.py OUT.txt [--model tiny-random]"""
import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import engine  # noqa: E402,F401  before torch (OpenMP wait policy)
from streamlit.testing.v1 import AppTest  # noqa: E402

_DIGITS = re.compile(r"\d+")
_IDS = re.compile(r"\$\$ID-[0-9a-f]+-")
_BLOBS = re.compile(r"[A-Za-z0-9+/=\\#]{24,}")  # base64 arrays, arrow bytes: measured values, not shape


def _mask(text: str) -> str:
    return _BLOBS.sub("~", _DIGITS.sub("#", _IDS.sub("$$ID-", text)))


def _walk(node, depth: int, out: list[str]) -> None:
    proto = getattr(node, "proto", None)
    label = type(node).__name__
    body = ""
    if proto is not None:
        body = _mask(" ".join(str(proto).split()))
        if len(body) > 600:  # plotly JSON: keep its shape, not every point
            body = body[:600] + " ..."
    out.append("  " * depth + label + " " + body)
    for child in getattr(node, "children", {}).values() if isinstance(getattr(node, "children", None), dict) else []:
        _walk(child, depth + 1, out)


def dump_page(path: str, model: str) -> str:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params["model"] = model
    at.query_params["max_new_tokens"] = "6"
    at.run()
    at.switch_page(path)
    at.run()
    out: list[str] = [f"=== {path} ({model})"]
    _walk(at._tree, 0, out)
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--model", default="tiny-random")
    args = parser.parse_args()
    from ui.frame import nav
    dumps = [dump_page(p.path, args.model) for p in nav.available()]
    Path(args.out).write_text("\n".join(dumps) + "\n")


if __name__ == "__main__":
    main()
