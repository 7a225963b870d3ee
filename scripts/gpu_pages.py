"""Every page through AppTest with its buttons pressed, and the race page against `python -m engine race` on the same
prompt and settings (scripts/gpu_check.sh runs both on a lent GPU, and in its CPU dry run on the tiny model).

    python scripts/gpu_pages.py pages OUT.json [--model embedded] [--modes eager,compiled] [--jobs 12] [--limit 200]
                                               [--deadline 240] [--only loop,timeline]
    python scripts/gpu_pages.py page pages/loop.py OUT.json [--model embedded] [--modes eager,compiled]
    python scripts/gpu_pages.py race OUT.json [--model embedded] [--mode compiled] [--tokens 16,64] [--repeats 5]

``pages`` runs each page in a process of its own (``page``: every mode in turn, one model load), ``--jobs`` at a time,
each stopped after ``--limit`` seconds and all of them by ``--deadline``; a page that did not finish is a row that
says so. Every file is written as rows arrive, so a check stopped from outside keeps what it did."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.store import BoundedStore  # noqa: E402  the engine first: its thread policy, before anything imports torch

SKIP = {"compile_cancel", "present_prev", "present_next"}  # would leave the page or the mode under test
MAX_PRESSES = 12
RACE_PRESET = "quote"  # the race page's default preset, an extractive one (engine.speculative.PROMPTS)
COMPILE_WAIT_S = 300  # a page's background compiles, waited for before it is drawn again compiled


def write(path: str, result: dict) -> None:
    Path(path).write_text(json.dumps(result, indent=1))


def open_page(path: str, timeout: int = 600, **query):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=timeout)
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    at.switch_page(path)  # see tests/app/test_pages.py: run through the router, with its sidebar
    at.run()
    return at


def problems(at) -> list[str]:
    out = [f"exception: {e.value}"[:400] for e in at.exception]
    out += [f"error box: {e.value}"[:400] for e in at.error if "Something went wrong" in e.value]
    return out


def compiles_done(model: str, wait_s: float = COMPILE_WAIT_S) -> bool:
    """Wait up to ``wait_s`` for the model's background compiles at any precision; whether any was running."""
    from engine.core.background_compile import COMPILER
    from engine.core.loaded import PRECISIONS, Mode, ModelRef

    refs = [ModelRef(model, p, Mode.COMPILED) for p in ("", *PRECISIONS)]
    t0, waited = time.perf_counter(), False
    while any(COMPILER.busy(r) for r in refs) and time.perf_counter() - t0 < wait_s:
        for r in refs:
            waited = COMPILER.wait_idle(r, timeout=max(1.0, wait_s - (time.perf_counter() - t0))) or waited
    return waited


def compiled_again(at, model: str) -> float:
    """A compiled page answers eager until its graphs are ready: wait for them, then draw the page again so it runs
    compiled; the seconds waited."""
    t0 = time.perf_counter()
    if compiles_done(model):
        at.run()
    return round(time.perf_counter() - t0, 1)


def settle(model: str) -> None:
    """Before the process ends: let a background compile finish, else cancel it (a compile thread still running at
    exit aborts the interpreter)."""
    from engine.core.background_compile import COMPILER
    from engine.core.loaded import PRECISIONS, Mode, ModelRef

    if compiles_done(model, 60):
        return
    for p in ("", *PRECISIONS):
        COMPILER.cancel(ModelRef(model, p, Mode.COMPILED))
    compiles_done(model, 10)


def press_all(at, model: str, compiled: bool) -> tuple[list[str], list[str]]:
    """Press every button once (new ones that appear too, up to MAX_PRESSES); (pressed keys, problems)."""
    pressed, found = [], problems(at)
    while len(pressed) < MAX_PRESSES:
        todo = [b for b in at.button if b.key and b.key not in SKIP and b.key not in pressed and not b.disabled]
        if not todo:
            break
        pressed.append(todo[0].key)
        todo[0].click().run()
        if compiled:
            compiled_again(at, model)
        found += [p for p in problems(at) if p not in found]
    return pressed, found


def one_page(args) -> dict:
    """One page in every mode asked for, in this process; the JSON is rewritten after each mode."""
    rows = []
    for mode in args.modes.split(","):
        t0, waited = time.perf_counter(), 0.0
        try:
            at = open_page(args.path, model=args.model, mode=mode, max_new_tokens="8")
            if mode == "compiled":
                waited = compiled_again(at, args.model)
            pressed, found = press_all(at, args.model, mode == "compiled")
            said = [e.value[:300] for e in at.error]
        except Exception as exc:  # noqa: BLE001 - a page that cannot even be driven is a result
            pressed, found, said = [], [f"driver: {type(exc).__name__}: {str(exc)[:300]}"], []
        rows.append({"page": args.path, "mode": mode, "seconds": round(time.perf_counter() - t0, 1),
                     "compile_wait_s": waited, "buttons_pressed": pressed, "problems": found, "error_boxes": said})
        write(args.out, {"check": "page", "model": args.model, "rows": rows})
        print(json.dumps(rows[-1])[:400], flush=True)
    settle(args.model)
    return {"check": "page", "model": args.model, "rows": rows, "ok": not any(r["problems"] for r in rows)}


def pages(args) -> dict:
    """Every page (or --only's) in its own process, --jobs at a time, each within --limit, all within --deadline."""
    from ui.frame import nav

    only = {x.strip() for x in args.only.split(",") if x.strip()}
    todo = [p.path for p in nav.available() if not only or Path(p.path).stem in only]
    modes = args.modes.split(",")
    tmp = Path(args.out).with_suffix(".parts")
    tmp.mkdir(exist_ok=True)
    end = time.monotonic() + args.deadline
    running: dict[str, tuple[subprocess.Popen, float]] = {}
    finished: dict[str, str] = {}  # page -> "" (exited) or why it was stopped

    def part(path: str) -> Path:
        return tmp / f"{Path(path).stem}.json"

    def result() -> dict:
        rows = []
        for path in todo:
            try:
                got = json.loads(part(path).read_text())["rows"]
            except (OSError, ValueError, KeyError):
                got = []
            rows += got
            why = finished.get(path, "not started when the check ended" if path not in running else
                               "still running when the check ended")
            rows += [{"page": path, "mode": m, "problems": [], "not_run": why}
                     for m in modes[len(got):] if why]
        bad = [r for r in rows if r["problems"]]
        return {"check": "pages", "model": args.model, "modes": modes, "jobs": args.jobs, "limit_s": args.limit,
                "deadline_s": args.deadline, "rows": rows,
                "ok": not bad and not any(r.get("not_run") for r in rows)}

    queue = list(todo)
    while queue or running:
        now = time.monotonic()
        while queue and len(running) < args.jobs and now < end - 10:
            path = queue.pop(0)
            cmd = [sys.executable, __file__, "page", path, str(part(path)), "--model", args.model,
                   "--modes", args.modes]
            running[path] = (subprocess.Popen(cmd, cwd=ROOT, stdout=sys.stdout, stderr=subprocess.STDOUT), now)
        for path, (proc, started) in list(running.items()):
            over = now - started > args.limit or now > end
            if proc.poll() is None and not over:
                continue
            if proc.poll() is None:
                proc.kill()
                proc.wait()
                finished[path] = (f"stopped after {now - started:.0f} s (its limit {args.limit} s)"
                                  if now - started > args.limit else "stopped at the check's deadline")
            else:
                finished[path] = "" if proc.returncode in (0, 1) else f"exited {proc.returncode}"
            del running[path]
            write(args.out, result())
        if not queue and not running:
            break
        if queue and time.monotonic() >= end - 10:
            for path in queue:
                finished[path] = "not started: the deadline came first"
            queue = []
        time.sleep(0.5)
    out = result()
    write(args.out, out)
    return out


def _cli(prompt: str, tokens: int, args) -> dict:
    cmd = [sys.executable, "-m", "engine", "race", "--json", "--model", args.model, "--mode", args.mode,
           "--prompt", prompt, "--drafter", "lookup", "--k", "4", "--max-new-tokens", str(tokens), "--temperature", "0",
           "--repeats", str(args.repeats)] + (["--precision", args.precision] if args.precision else [])
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=args.cli_limit)
    if out.returncode != 0:
        return {"error": f"exit {out.returncode}: {out.stderr.strip()[-400:]}"}
    d = json.loads(out.stdout)
    rep = d["repeats"]
    return {"speedup": rep["wall_speedup_shared_prefill"]["median"], "decode_speedup": rep["decode_speedup"]["median"],
            "runs": rep["n"], "noise": rep["noise"], "flags": d.get("flags", []),
            "plain_mode": d["plain"]["mode"], "spec_mode": d["speculative"]["mode"],
            "plain_tokens_per_s": d["plain"]["tokens_per_second"], "identical": d["identical_output"]}


def _page(tokens: int, args) -> dict:
    """The race page's figures at these settings: the medians of the race it keeps (the metric shows "no gain" or
    "n/a" where the CLI's JSON has a number), how each lane ran, and the metrics as shown."""
    at = open_page("pages/speculative.py", model=args.model, mode=args.mode, temperature="0",
                   max_new_tokens=str(tokens), race_prompt=RACE_PRESET, race_drafter="lookup", race_k="4",
                   **({"precision": args.precision} if args.precision else {}))
    if args.mode == "compiled":
        compiled_again(at, args.model)  # the page's own run compiles in the background, and a page routes eager then
    at.button(key="speculative_go").click().run()
    if args.mode == "compiled" and compiles_done(args.model):  # a lane's graph was still compiling: race again
        at.run()
        at.button(key="speculative_again").click().run()
    # the page keeps its race in the session's one store of results, under a key that starts with its name
    kept = [v for store in at.session_state.values() if isinstance(store, BoundedStore)
            for k, v in store.items() if isinstance(k, tuple) and k[:1] == ("speculative race",)]
    shown = {x.label: x.value for x in at.metric}
    if not kept:
        return {"error": f"the page kept no race; it showed {shown}; problems {problems(at)}"[:400]}
    series, run = kept[-1].series, kept[-1].run
    return {"speedup": series.speedup.median, "decode_speedup": series.decode_speedup.median, "runs": series.n,
            "plain_mode": run.plain_mode, "spec_mode": run.spec_mode, "identical": run.identical,
            "shown": {k: shown.get(k) for k in ("Measured speedup", "Decode-only speedup")},
            "problems": problems(at)}


def race(args) -> dict:
    """The CLI at each length (a process each), then the page at each length (one process, AppTest here)."""
    from engine.speculative import PROMPTS

    prompt = next(text for name, _, text in PROMPTS if name == RACE_PRESET)
    lengths = [int(t) for t in args.tokens.split(",")]
    base = {"check": "race page vs CLI", "prompt": RACE_PRESET, "drafter": "lookup", "k": 4, "mode": args.mode,
            "precision": args.precision or "the device's default"}
    rows = [{"new_tokens": n, "cli": _cli(prompt, n, args)} for n in lengths]
    write(args.out, {**base, "rows": rows})
    for r in rows:
        try:
            r["page"] = _page(r["new_tokens"], args)
        except Exception as exc:  # noqa: BLE001 - the CLI's figures stand without the page
            r["page"] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        cli, page = r["cli"].get("speedup"), r["page"].get("speedup")
        r["page_vs_cli"] = page / cli if cli and page else None
        write(args.out, {**base, "rows": rows})
        print(json.dumps(r)[:600], flush=True)
    settle(args.model)
    return {**base, "rows": rows,
            "ok": all(r["page_vs_cli"] and 0.85 <= r["page_vs_cli"] <= 1.15 for r in rows)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="what", required=True)
    for name in ("pages", "page", "race"):
        p = sub.add_parser(name)
        if name == "page":
            p.add_argument("path")
        p.add_argument("out")
        p.add_argument("--model", default="embedded")
        if name != "race":
            p.add_argument("--modes", default="eager,compiled")
    pg = sub.choices["pages"]
    pg.add_argument("--jobs", type=int, default=12, help="pages at once, a process each")
    pg.add_argument("--limit", type=int, default=200, help="seconds one page's process may run")
    pg.add_argument("--deadline", type=int, default=240, help="seconds for them all")
    pg.add_argument("--only", default="", help="page names (file stems), comma-separated; default: every page")
    rc = sub.choices["race"]
    rc.add_argument("--mode", default="compiled")
    rc.add_argument("--precision", default="", help="default: the device's")
    rc.add_argument("--tokens", default="16,64")
    rc.add_argument("--repeats", type=int, default=5, help="races timed after the warm-up race (the CLI's)")
    rc.add_argument("--cli-limit", type=int, default=300, help="seconds one CLI race may run")
    args = ap.parse_args(argv)
    result = {"pages": pages, "page": one_page, "race": race}[args.what](args)
    if args.what != "page":
        write(args.out, result)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
