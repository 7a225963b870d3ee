"""Benchmark: a class of requests on the batched engine worker vs the serial one, measured in the same run.

N different prompts (a class of students opening the home page at once: chat template, greedy, the app's full
record with the untimed analysis pass) are submitted together to a worker that batches them (engine/jobs/classbatch.py)
and to one that serves them one at a time (``batching=False``: the serial worker, ``ILE_BATCHING=off``), in the order
serial, batched, serial, batched... Both give the same answers (checked); what differs is when each is ready.
Compare the ratios: the machine may be shared.
"""
from __future__ import annotations

import contextlib
import statistics
import threading
import time

import numpy as np

from engine.bench import Bench
from engine.core.loaded import LoadedModel


CLASS_PROMPTS = ("What is the capital of France?", "Name a primary colour.", "What is 2 + 3?",
                 "Say hello in Spanish.", "What animal says moo?", "Name a planet.", "What is the opposite of hot?",
                 "Name a fruit that is yellow.", "How many legs does a spider have?", "What colour is the sky?",
                 "Name a day of the week.", "What do bees make?", "What is frozen water called?",
                 "Name a musical instrument.", "What is the largest ocean?", "Which month comes after May?",
                 "What is the capital of Japan?", "Name a shape with three sides.", "What do cows drink?",
                 "What gas do plants breathe in?")


def add_arguments(p) -> None:
    p.add_argument("--sessions", type=int, default=20, help="requests submitted at once, one per session")
    p.add_argument("--new-tokens", type=int, default=6)
    p.add_argument("--repeats", type=int, default=1, help="serial/batched pairs")
    p.add_argument("--no-analysis", action="store_true", help="skip the untimed analysis pass of each request")
    p.add_argument("--no-serial", action="store_true",
                   help="time the batched worker alone (a peer for another run's batch, e.g. the eager batch beside "
                        "--mode compiled's: the serial worker is the slow half); no batched/serial ratio")


def _prompts(n: int) -> list[str]:
    return [CLASS_PROMPTS[i % len(CLASS_PROMPTS)] + ("" if i < len(CLASS_PROMPTS) else f" ({i})") for i in range(n)]


@contextlib.contextmanager
def own_worker(**kwargs):
    """A worker of the benchmark's own (``engine.jobs.worker.Worker(**kwargs)``, no log line per job), its thread up
    and configured before any clock starts, closed when the block ends (``Worker.close`` says why)."""
    from engine.jobs.worker import Worker
    from engine.measure.timing import configure_worker_threads

    w = Worker(configure=configure_worker_threads, publish=False, **kwargs)
    try:
        w.submit(lambda: None).result(60)
        yield w
    finally:
        w.close()


def submitted_together(w, submit) -> tuple[float, list]:
    """Run ``submit`` (it submits jobs to worker ``w``) while the worker is held, then let the jobs reach it
    together: (that moment, the jobs). Submitted one by one to a free worker, the first jobs started before the last
    were in: a batch of 4 of 5 on a busy machine."""
    started, release = threading.Event(), threading.Event()
    w.submit(lambda: (started.set(), release.wait(60)), session="hold", client="hold")
    started.wait(60)
    jobs = submit()
    t0 = time.monotonic()
    release.set()
    return t0, jobs


def serve_class(lm: LoadedModel, prompts: list[str], new_tokens: int, batching: bool, analyse: bool = True) -> dict:
    """Submit every prompt at once (one session each) to a fresh worker; wait for all; when each was ready."""
    from engine.core.request import RunRequest
    from engine.jobs.classbatch import ANSWER, AnswerRequest
    from engine.core.sampling import SamplingSettings

    with own_worker(batching=batching) as w:
        t0, jobs = submitted_together(w, lambda: [
            w.ask(ANSWER, AnswerRequest(lm, RunRequest(lm.ref, p, True, new_tokens, SamplingSettings(0.0), 0),
                                        analyse=analyse),
                  session=f"student-{i}") for i, p in enumerate(prompts)])
        traces = [j.result(3600) for j in jobs]
    ready = np.array([j.finished_at - t0 for j in jobs])
    first = np.array([(j.first_token_at or j.finished_at) - t0 for j in jobs])
    tokens = sum(len(t.generated_ids) for t in traces)
    # counted per answer: a batched step is a record in each answer that shared it
    decode = [s for t in traces for s in t.steps[1:]]
    compiled = sum(s.compiled for s in decode)
    return {"batching": batching, "mode": "compiled" if decode and compiled == len(decode) else
            "eager" if not compiled else "mixed", "decode_step_records": len(decode),
            "decode_step_records_compiled": int(compiled),
            "last_ready_s": float(ready.max()), "first_ready_s": float(ready.min()),
            "p50_ready_s": float(np.percentile(ready, 50)), "p90_ready_s": float(np.percentile(ready, 90)),
            "mean_time_to_first_token_s": float(first.mean()), "tokens": tokens,
            "throughput_tok_s": tokens / float(ready.max()), "largest_batch": max(t.largest_batch for t in traces),
            "ids": [list(t.generated_ids) for t in traces]}


def run(lm: LoadedModel, args) -> dict:
    from engine.core.compiled import graph_of, mode_of
    from engine.core.loop import warm_up

    prompts = _prompts(int(args.sessions))
    workers = (True,) if getattr(args, "no_serial", False) else (False, True)
    warm_up(lm)
    if graph_of(lm) is not None:  # compiled: every graph both workers need is compiled before any clock starts
        from engine.core.background_compile import COMPILER

        for _ in range(2):  # a batch size met first compiles in the background while that pass runs eager
            for batching in workers:
                serve_class(lm, prompts, int(args.new_tokens), batching, analyse=False)
            COMPILER.wait_idle(lm.ref)
    runs = []
    for _ in range(max(1, int(args.repeats))):
        for batching in workers:
            runs.append(serve_class(lm, prompts, int(args.new_tokens), batching, not args.no_analysis))
    serial = [r for r in runs if not r["batching"]]
    batched = [r for r in runs if r["batching"]]
    same = all(r["ids"] == runs[0]["ids"] for r in runs)
    for r in runs:
        r.pop("ids")
    med = lambda rs, k: statistics.median(r[k] for r in rs) if rs else None  # noqa: E731
    return {
        "benchmark": "classroom", "model": lm.name, "device": lm.info.device, "dtype": lm.info.dtype,
        "sessions": len(prompts), "new_tokens": int(args.new_tokens), "runs": runs,
        "serial_throughput_tok_s": med(serial, "throughput_tok_s"),
        "batched_throughput_tok_s": med(batched, "throughput_tok_s"),
        "throughput_ratio_batched_vs_serial": med(batched, "throughput_tok_s") / med(serial, "throughput_tok_s")
        if serial else None,
        "serial_last_ready_s": med(serial, "last_ready_s"), "batched_last_ready_s": med(batched, "last_ready_s"),
        "same_answers": same, "engine_mode": mode_of(lm), "batched_mode": batched[0]["mode"],
        "serial_mode": serial[0]["mode"] if serial else None,
        "note": "every request submitted at t = 0, one session each; greedy, chat template; ready = its Trace done "
                "(analysis pass included unless --no-analysis); serial = the worker with batching off (none with "
                "--no-serial: same_answers then compares the batched runs)",
    }


def summary(r: dict) -> str:
    lines = [f"{r['sessions']} sessions x {r['new_tokens']} new tokens on {r['model']} ({r['device']})",
             "worker    last ready s  p50 ready s  tokens/s  largest batch  answers' decode steps"]
    for x in r["runs"]:
        how = f"{x['mode']} ({x['decode_step_records_compiled']} of {x['decode_step_records']} compiled)"
        lines.append(f"{'batched' if x['batching'] else 'serial':8s}  {x['last_ready_s']:11.2f}  {x['p50_ready_s']:11.2f}"
                     f"  {x['throughput_tok_s']:8.1f}  {x['largest_batch']:13d}  {how}")
    ratio = r["throughput_ratio_batched_vs_serial"]
    lines.append((f"batched / serial throughput: {ratio:.2f}x; " if ratio is not None else "batched worker only; ")
                 + f"same answers: {r['same_answers']}")
    return "\n".join(lines)


BENCH = Bench("classroom", run, add_arguments, summary)
