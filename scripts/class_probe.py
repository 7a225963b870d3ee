"""The class probe: a student's whole home page through the served app, alone and beside hostile or careless use of
the room (issue 49), on a class server started as scripts/start.sh starts one.

    python scripts/class_probe.py [--model embedded] [--scenarios none,hostile,pastes,classmate,gemma3]
                                  [--json docs/benchmarks/served-hostile-DATE.json] [--url URL --log FILE]

What it does:

- starts the app in class mode with the start's settings (a fresh teacher token and warm-up secret, scripts/warm.py
  run beside it) and this machine named as the room's proxy (``ILE_TRUSTED_PROXIES=127.0.0.1``, which the start
  hands the web server as ``FORWARDED_ALLOW_IPS``), so each simulated computer is the ``X-Forwarded-For`` address
  its tabs send, as the server would trust a real proxy's; ``--url`` probes a server already running instead
  (started that way: its log, ``--log``, gives the waits);
- the student's page is the home page asked over Streamlit's websocket (scripts/class_tabs.py): the answer, then the
  prompt's analysis and the walk through block 0 that the page asks the engine worker for; its time runs from the
  tab's opening to the end of its first run (what a person waits for the whole page), and its answer is read from
  the page;
- the others, started first and running when the student asks (as in ``python -m engine bench hostile``):
  ``hostile`` one computer's 34 sessions, each a long paste asking 256 tokens; ``pastes`` two computers' pastes;
  ``classmate`` one classmate's 256-token answer; ``gemma3`` three tabs on Gemma 3 270M asking 256 tokens (its
  answers run alone: sliding-window layers);
- reads the server's log line of every job of the student's computer (``waited`` and ``ran``, engine/jobs/report.py).

The goal the class server keeps: the whole page beside others in at most 2x its time alone + 5 s, the same answer.
Writes one JSON (``--json``) and prints a summary; the exit status is 1 when a scenario missed the goal. The machine
may be shared: the load average is written with the numbers.
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import re
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from engine.batching.bench_hostile import PAGE_GOAL, PAGES, paste  # noqa: E402  (no torch)
from engine.batching.bench_classroom import CLASS_PROMPTS  # noqa: E402
from scripts.class_tabs import Tab  # noqa: E402

SCENARIOS = ("none", "hostile", "pastes", "classmate", "gemma3")
GEMMA = "gemma3-270m"
LONG = "Tell me a long story about the sea, with many chapters."
LINE = re.compile(r"worker: (\w[\w ]*?)(?: \(warm-up\))? (\w+) session=\S+ submitted_at=([\d.]+) ready_at=([\d.]+) "
                  r"\(waited ([\d.]+) s, ran ([\d.]+) s[^)]*\) client=(\S+)")
assert set(SCENARIOS) - {"gemma3"} <= set(PAGES), "the served scenarios follow bench hostile's"


def tag(client: str) -> str:
    """The log's tag of a client (engine/jobs/job.py's session_tag, computed here without importing the engine's
    job module)."""
    return hashlib.sha1(client.encode()).hexdigest()[:6]


class Server:
    """The app served in class mode on a free local port, started as scripts/start.sh starts it, or one running."""

    def __init__(self, url: str | None, log: str | None, models: str):
        self.proc = None
        if url:
            self.url, self.log, self.stats = url.rstrip("/"), log, None
            return
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        folder = Path(tempfile.mkdtemp(prefix="class-probe-"))
        self.log, self.stats = str(folder / "server.log"), str(folder / "worker.json")
        env = dict(os.environ, PYTHONUNBUFFERED="1", ILE_CLASS_MODE="on", ILE_MODELS=models,
                   ILE_TEACHER_TOKEN=secrets.token_urlsafe(9), ILE_WARM_SECRET=secrets.token_urlsafe(18),
                   ILE_TRUSTED_PROXIES="127.0.0.1", FORWARDED_ALLOW_IPS="127.0.0.1", ILE_WORKER_STATS=self.stats)
        env.pop("OMP_WAIT_POLICY", None)  # the server sets its own, as a start from a terminal does
        args = ["--server.address", "127.0.0.1", "--server.port", str(port), "--server.headless", "true"]
        self.proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", *args], cwd=ROOT, env=env,
                                     stdout=open(self.log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
        end = time.monotonic() + 120
        while not self.healthy():
            if time.monotonic() > end or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"the app did not start (its log: {self.log})")
            time.sleep(0.5)
        # the start's warm-up: the home page once, known to the server by the start's secret
        subprocess.run([sys.executable, "scripts/warm.py", "--url", self.url, "--timeout", "600"], cwd=ROOT, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=700)

    def healthy(self) -> bool:
        try:
            return urllib.request.urlopen(self.url + "/_stcore/health", timeout=2).read() == b"ok"
        except OSError:
            return False

    def worker(self) -> dict:
        try:
            return json.loads(Path(self.stats).read_text()) if self.stats else {}
        except (OSError, ValueError):
            return {}

    def jobs(self, client: str, since: float) -> list[dict]:
        """The server's log lines of ``client``'s jobs submitted after ``since`` (epoch seconds)."""
        if not self.log:
            return []
        out = []
        for kind, state, sub, ready, waited, ran, who in LINE.findall(Path(self.log).read_text(errors="replace")):
            if who == tag(client) and float(sub) >= since:
                out.append({"kind": kind, "state": state, "waited_s": float(waited), "ran_s": float(ran),
                            "ready_after_s": round(float(ready) - since, 3)})
        return out

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def _query(model: str, prompt: str, tokens: int) -> dict:
    return {"model": model, "prompt": prompt, "max_new_tokens": str(tokens), "temperature": "0"}


def _answer(tab: Tab) -> str | None:
    return next((body.split("**Answer ready:**", 1)[1].strip() for _, body in tab.texts if "**Answer ready:**" in body),
                None)


async def _page(server: Server, args, client: str) -> dict:
    """The student's whole page: (seconds from opening the tab to the end of its run, the answer, errors)."""
    since = time.time()
    tab = Tab(server.url, "", _query(args.model, args.question, args.question_tokens),
              headers={"X-Forwarded-For": client})
    await tab.open()
    try:
        await tab.wait_run(args.timeout)
        seconds = tab.first_run_at - tab.opened_at
    except asyncio.TimeoutError:
        seconds = float("inf")
    finally:
        await tab.close()
    await asyncio.sleep(0.5)  # the last job's log line
    return {"seconds": round(seconds, 3), "answer": _answer(tab), "errors": tab.errors,
            "jobs": server.jobs(client, since)}


def _others(server: Server, args, scenario: str) -> list[Tab]:
    def tab(client: str, query: dict) -> Tab:
        return Tab(server.url, "", query, headers={"X-Forwarded-For": client})

    if scenario == "hostile":
        return [tab("10.0.0.66", _query(args.model, paste(i, args.paste_chars), args.paste_tokens))
                for i in range(args.hostile)]
    if scenario == "pastes":
        return [tab(f"10.0.0.{60 + i}", _query(args.model, paste(i, args.paste_chars), args.paste_tokens))
                for i in range(2)]
    if scenario == "classmate":
        return [tab("10.0.0.5", _query(args.model, LONG, args.long_tokens))]
    if scenario == "gemma3":
        return [tab(f"10.0.1.{i + 1}", _query(GEMMA, f"{LONG} Story number {i}.", args.long_tokens))
                for i in range(3)]
    return []


async def _until(check, timeout: float, step: float = 0.1) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return True
        await asyncio.sleep(step)
    return False


async def _idle(server: Server, timeout: float) -> None:
    """Until the engine worker has nothing running or queued (the next scenario starts on a quiet engine)."""
    if server.stats is None:
        await asyncio.sleep(5)
        return
    await _until(lambda: (w := server.worker()) and not w.get("running_jobs") and not w.get("queued"), timeout, 0.25)


async def _scenario(server: Server, args, scenario: str, client: str) -> dict:
    others = _others(server, args, scenario)
    try:
        await asyncio.gather(*(t.open() for t in others))
        if others:  # the others are running on the engine when the student asks
            started = await _until(lambda: (server.worker().get("running_jobs") or 0) >= 1, args.timeout)
            await asyncio.sleep(args.settle)
            done = sum(t.first_run_at is not None for t in others)
        page = await _page(server, args, client)
        if others:
            page["others_running_when_asked"] = started
            page["others_done_when_asked"] = done  # their pages had ended before the student opened theirs
            page["others_done_before_the_page"] = sum(t.first_run_at is not None for t in others)
    finally:
        await asyncio.gather(*(t.close() for t in others), return_exceptions=True)
        await _idle(server, args.timeout)
    return page


async def _warm_gemma(server: Server, args) -> None:
    """Gemma loaded before its scenario, so the scenario measures the room, not the model's load."""
    tab = Tab(server.url, "", _query(GEMMA, "Hello", 1), headers={"X-Forwarded-For": "10.0.2.1"})
    await tab.open()
    try:
        await tab.wait_run(args.timeout)
    finally:
        await tab.close()


async def probe(server: Server, args) -> dict:
    wanted = [s for s in args.scenarios.split(",") if s and s != "none"]
    out: dict = {}
    await _idle(server, args.timeout)
    await _page(server, args, "10.0.2.2")  # the page's first run in this process (its caches, its model) untimed
    await _idle(server, args.timeout)
    alone = [await _scenario(server, args, "none", "10.0.0.7")]  # each scenario's student: a computer of its own
    for i, scenario in enumerate(wanted):
        if scenario == "gemma3":
            await _warm_gemma(server, args)
            await _idle(server, args.timeout)
        out[scenario] = await _scenario(server, args, scenario, f"10.0.0.{8 + i}")
    alone.append(await _scenario(server, args, "none", "10.0.0.30"))
    base = sum(a["seconds"] for a in alone) / len(alone)
    goal = PAGE_GOAL[0] * base + PAGE_GOAL[1]
    for r in out.values():
        r["within_goal"] = r["seconds"] <= goal
        r["same_answer"] = r["answer"] == alone[0]["answer"]
    return {"alone": alone, "page_alone_s": round(base, 3), "goal_s": round(goal, 3), "beside": out}


def arguments(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default="embedded", help="the student's model (a label the server offers)")
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"of {', '.join(SCENARIOS)}")
    p.add_argument("--question", default=CLASS_PROMPTS[0])
    p.add_argument("--question-tokens", type=int, default=24)
    p.add_argument("--hostile", type=int, default=34, help="sessions the hostile computer opens")
    p.add_argument("--paste-chars", type=int, default=12_000)
    p.add_argument("--paste-tokens", type=int, default=256)
    p.add_argument("--long-tokens", type=int, default=256, help="new tokens of a classmate's (and Gemma's) answers")
    p.add_argument("--settle", type=float, default=2.0, help="seconds the others run before the student asks")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--url", help="probe this running server (started as scripts/start.sh does) instead of one's own")
    p.add_argument("--log", help="with --url: the server's log, for the waits")
    p.add_argument("--json", help="write the result here (e.g. docs/benchmarks/served-hostile-DATE.json)")
    args = p.parse_args(argv)
    unknown = [s for s in args.scenarios.split(",") if s and s not in SCENARIOS]
    if unknown:
        p.error(f"unknown scenario {unknown[0][:40]!r}; choose from {', '.join(SCENARIOS)}")
    return args


def main(argv=None) -> int:
    args = arguments(argv)
    load_before = os.getloadavg()[0]
    t0 = time.monotonic()
    server = Server(args.url, args.log, ",".join(dict.fromkeys([args.model, GEMMA, "tiny-random"])))
    print(f"[probe] the server: {server.url}, its log: {server.log}", file=sys.stderr, flush=True)
    try:
        result = asyncio.run(probe(server, args))
    finally:
        server.stop()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    result.update({
        "benchmark": "hostile-served", "model": args.model, "goal": f"<= {PAGE_GOAL[0]:g}x alone + {PAGE_GOAL[1]:g} s",
        "settings": {k: v for k, v in vars(args).items() if k not in ("json", "log", "url")},
        "load_average_1min": [load_before, os.getloadavg()[0]], "cpus": os.cpu_count(),
        "commit": commit.stdout.strip(), "wall_s": round(time.monotonic() - t0, 1),
        "note": "page = opening the tab to the end of its first run (answer, analysis, block walk), through the "
                "served app in class mode; jobs = the server's log lines of the student's computer",
    })
    print(summary(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0 if all(r["within_goal"] and r["same_answer"] for r in result["beside"].values()) else 1


def summary(r: dict) -> str:
    lines = [f"{r['model']}, through the served app: the whole page alone "
             f"{', '.join(format(a['seconds'], '.2f') for a in r['alone'])} s (goal beside others: <= {r['goal_s']:.1f} s)"]
    for name, v in r["beside"].items():
        waits = ", ".join(f"{j['kind']} waited {j['waited_s']:.2f} s ran {j['ran_s']:.2f} s" for j in v["jobs"])
        lines.append(f"beside {name}: {v['seconds']:.2f} s ({'within' if v['within_goal'] else 'OVER'} the goal; "
                     f"{'same' if v['same_answer'] else 'ANOTHER'} answer) [{waits}]")
    lines.append(f"load {r['load_average_1min'][0]:.1f} -> {r['load_average_1min'][1]:.1f} on {r['cpus']} cores")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
