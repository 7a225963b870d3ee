"""A saved run as one self-contained HTML page: no server, no network, opened from a USB stick in any browser.

The page holds the record itself (the JSON of docs/record-format.md), plotly.js from the installed plotly package,
and its own script and style (``page/``, beside this module: the page is the UI's, the engine keeps only the
record), all inline. The script draws the run stage by stage as the app's home and
race pages do; sliders re-sample the recorded logits in the browser. A Content-Security-Policy in the page allows
no network request at all, so the page provably works offline.
"""
from __future__ import annotations

import html
import json
import sys
from pathlib import Path

from engine.record.cli import REFUSED, load_or_say, replay_parser

PAGE = Path(__file__).with_name("page")


def _inline_json(record: dict) -> str:
    """The record as JSON that cannot end the <script> element holding it: every <, > and & written as a JSON
    escape (a recorded prompt holding "</script>" stays data), and the two line separators JavaScript once
    treated as line ends."""
    text = json.dumps(record, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def plotly_js() -> str:
    """plotly.js as the installed plotly package ships it (no CDN), read as a data file from the package's folder
    (found without importing plotly: ``python -m engine replay`` starts in a second or so)."""
    import importlib.util

    spec = importlib.util.find_spec("plotly")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    found = [Path(f) / "package_data" / "plotly.min.js" for f in folders]
    found = [f for f in found if f.is_file()]
    if not found:
        raise FileNotFoundError("plotly.js was not found: the replay page inlines it from the plotly package "
                                "(pip install -r requirements.txt)")
    js = found[0].read_text(encoding="utf-8")
    if "</script" in js.lower():  # would end its <script> element early; plotly.js has none today
        js = js.replace("</script", "<\\/script").replace("</SCRIPT", "<\\/SCRIPT")
    return js


def replay_html(record: dict) -> str:
    """The page for a loaded, checked record (engine.record.format.load)."""
    page = (PAGE / "replay.html").read_text(encoding="utf-8")
    title = f"{record['model']['name']}: a recorded {record['kind']}, {record['saved_at']}"
    parts = {"<!--TITLE-->": html.escape(title), "<!--STYLE-->": (PAGE / "replay.css").read_text(encoding="utf-8"),
             "<!--SCRIPT-->": (PAGE / "replay.js").read_text(encoding="utf-8"), "<!--DATA-->": _inline_json(record)}
    for marker, text in parts.items():
        before, sep, after = page.partition(marker)
        page = before + text + after
    before, _, after = page.partition("<!--PLOTLY-->")  # last: nothing is searched inside its 4.8 MB afterwards
    return before + plotly_js() + after


def main(argv) -> int:
    """Write the page of the saved run ``argv`` names (``python -m engine replay`` runs this)."""
    args = replay_parser().parse_args(argv)
    record = load_or_say(args.record)
    if record is None:
        return REFUSED
    try:
        page = replay_html(record)
    except FileNotFoundError as exc:  # plotly.js, inlined into the page, is not installed
        print(f"error: {exc}", file=sys.stderr)
        return REFUSED
    try:
        Path(args.html).write_text(page, encoding="utf-8")
    except OSError as exc:
        print(f"error: cannot write {args.html}: {exc.strerror or exc}", file=sys.stderr)
        return REFUSED
    size = Path(args.html).stat().st_size
    print(f"wrote {args.html} ({size / 2**20:.2f} MB): open it in any browser, no server or network needed",
          file=sys.stderr)
    return 0


if __name__ == "__main__":  # python -m engine replay runs this (engine.record.cli.replay_main)
    sys.exit(main(sys.argv[1:]))
