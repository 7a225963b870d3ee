"""Every page through AppTest with its buttons pressed, and the race page against `python -m engine race` on the same
prompt and settings (scripts/gpu_check.sh runs both on a lent GPU; they run on a CPU too, more slowly).

    python scripts/gpu_pages.py pages OUT.json [--model embedded] [--modes eager,compiled]
    python scripts/gpu_pages.py race OUT.json [--model embedded] [--tokens 16,64]"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import engine  # noqa: E402,F401  before torch: the engine's thread policy
from streamlit.testing.v1 import AppTest  # noqa: E402

from engine.core.loaded import Mode  # noqa: E402
from ui.frame import nav  # noqa: E402

SKIP = {"compile_cancel", "present_prev", "present_next"}  # would leave the page or the mode under test
MAX_PRESSES = 12
# Pages whose own runs use the engine mode (the others run eager in both modes and say so): visited compiled too.
COMPILED_PAGES = ("pages/loop.py", "pages/timeline.py", "pages/kv_cache.py")


def open_page(path: str, timeout: int = 600, **query) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=timeout)
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    at.switch_page(path)  # see tests/app/test_pages.py: run through the router, with its sidebar
    at.run()
    return at


def problems(at: AppTest) -> list[str]:
    out = [f"exception: {e.value}"[:400] for e in at.exception]
    out += [f"error box: {e.value}"[:400] for e in at.error if "Something went wrong" in e.value]
    return out


def press_all(at: AppTest) -> tuple[list[str], list[str]]:
    """Press every button once (new ones that appear too, up to MAX_PRESSES); (pressed keys, problems)."""
    pressed, found = [], problems(at)
    while len(pressed) < MAX_PRESSES:
        todo = [b for b in at.button if b.key and b.key not in SKIP and b.key not in pressed and not b.disabled]
        if not todo:
            break
        pressed.append(todo[0].key)
        todo[0].click().run()
        found += [p for p in problems(at) if p not in found]
    return pressed, found


def pages(args) -> dict:
    rows = []
    for spec in nav.available():
        for mode in args.modes.split(","):
            if mode != Mode.EAGER and spec.path not in COMPILED_PAGES:
                continue
            t0 = time.perf_counter()
            try:
                at = open_page(spec.path, model=args.model, mode=mode, max_new_tokens="8")
                pressed, found = press_all(at)
                said = [e.value[:300] for e in at.error]
            except Exception as exc:  # noqa: BLE001 - a page that cannot even be driven is a result
                pressed, found, said = [], [f"driver: {type(exc).__name__}: {str(exc)[:300]}"], []
            rows.append({"page": spec.path, "mode": mode, "seconds": round(time.perf_counter() - t0, 1),
                         "buttons_pressed": pressed, "problems": found, "error_boxes": said})
            print(json.dumps(rows[-1])[:400], flush=True)
    return {"check": "pages", "model": args.model, "rows": rows, "ok": not any(r["problems"] for r in rows)}


def _cli(prompt: str, tokens: int, model: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "engine", "race", "--json", "--model", model, "--prompt", prompt,
                          "--drafter", "lookup", "--k", "4", "--max-new-tokens", str(tokens)],
                         cwd=ROOT, capture_output=True, text=True, timeout=600, check=True)
    d = json.loads(out.stdout)
    return {"speedup": d["measured_speedup"], "decode_speedup": d["decode_speedup"],
            "plain_tokens_per_s": d["plain"]["tokens_per_second"], "identical": d["identical_output"]}


def _page(tokens: int, model: str) -> dict:
    at = open_page("pages/speculative.py", model=model, temperature="0", max_new_tokens=str(tokens),
                   race_prompt="quote", race_drafter="lookup", race_k="4")
    at.button(key="speculative_go").click().run()
    m = {x.label: x.value for x in at.metric}
    num = lambda v: float(str(v).rstrip("x").split()[0]) if v not in (None, "n/a") else None  # noqa: E731
    return {"speedup": num(m.get("Measured speedup")), "decode_speedup": num(m.get("Decode-only speedup")),
            "identical": m.get("Identical output"), "problems": problems(at)}


def race(args) -> dict:
    from engine.speculative import PROMPTS

    prompt = next(text for name, _, text in PROMPTS if name == "quote")
    rows = []
    for n in (int(t) for t in args.tokens.split(",")):
        before, page, after = _cli(prompt, n, args.model), _page(n, args.model), _cli(prompt, n, args.model)
        cli = (before["speedup"] + after["speedup"]) / 2
        rows.append({"new_tokens": n, "cli_before": before, "page": page, "cli_after": after,
                     "page_vs_cli": page["speedup"] / cli if page["speedup"] else None})
        print(json.dumps(rows[-1])[:600], flush=True)
    return {"check": "race page vs CLI", "prompt": "quote", "drafter": "lookup", "k": 4, "rows": rows,
            "ok": all(r["page_vs_cli"] and 0.85 <= r["page_vs_cli"] <= 1.15 for r in rows)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["pages", "race"])
    ap.add_argument("out")
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--modes", default="eager,compiled")
    ap.add_argument("--tokens", default="16,64")
    args = ap.parse_args(argv)
    result = pages(args) if args.what == "pages" else race(args)
    Path(args.out).write_text(json.dumps(result, indent=1))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
