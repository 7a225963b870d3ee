"""The worker's contract is explicit: a request is a typed record asked of a ``JobKind`` (engine/jobs/kinds.py), and
the worker serves a group only through its kind's ``together``. Nothing in the engine hangs the contract on a
function object (``fn.kind = ...``, ``fn.batched = ...``, ``setattr(fn, ...)``) or rebinds a job's arguments with
``inspect``; each rule is shown failing on a planted example."""
from __future__ import annotations

import ast
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from engine.jobs.kinds import JobKind
from engine.jobs.worker import Worker

ROOT = Path(__file__).resolve().parents[2]
CONTRACT_ATTRS = {"kind", "batched", "weight"}  # what the worker once read off a function


def function_attributes(source: str, reads: bool = True) -> list[str]:
    """Where a source hangs something on one of its own functions: ``f.x = ...``, ``f.x += ...``, ``setattr(f,
    ...)`` (dunders aside: ``f.__name__`` is Python's own); with ``reads``, also where it reads a contract
    attribute by name (``getattr(x, "batched")``: only the job server is held to that, a module's ``weight`` is a
    layer's weight elsewhere)."""
    tree = ast.parse(source)
    functions = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    found = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for t in targets:
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id in functions and \
                    not t.attr.startswith("__"):
                found.append(f"line {node.lineno}: {t.value.id}.{t.attr} =")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
            first = node.args[0]
            if node.func.id == "setattr" and isinstance(first, ast.Name) and first.id in functions:
                found.append(f"line {node.lineno}: setattr({first.id}, ...)")
            if reads and node.func.id in ("getattr", "hasattr") and len(node.args) > 1 and \
                    isinstance(node.args[1], ast.Constant) and node.args[1].value in CONTRACT_ATTRS:
                found.append(f"line {node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
    return found


def imports_inspect(source: str) -> bool:
    return any(isinstance(n, ast.Import) and any(a.name == "inspect" for a in n.names) or
               isinstance(n, ast.ImportFrom) and n.module == "inspect" for n in ast.walk(ast.parse(source)))


def test_no_function_carries_the_workers_contract():
    offenders = {}
    for p in sorted((ROOT / "engine").rglob("*.py")) + sorted((ROOT / "ui").rglob("*.py")):
        if (bad := function_attributes(p.read_text("utf-8"), reads=p.parent.name == "jobs")):
            offenders[p.relative_to(ROOT).as_posix()] = bad
    assert offenders == {}, f"{offenders}: say it with a JobKind (engine/jobs/kinds.py)"
    assert function_attributes("def batched_trace(lm):\n    pass\n\n\nbatched_trace.kind = 'answer'\n")
    assert function_attributes("def f():\n    pass\n\n\ndef serve(w, j):\n    pass\n\n\nf.batched = serve\n")
    assert function_attributes("def f():\n    pass\n\n\nsetattr(f, 'weight', len)\n")
    assert function_attributes("def run(job):\n    return getattr(job.fn, 'batched', None)\n")
    assert not function_attributes("def f(x):\n    x.kind = 1\n    return getattr(x, 'arch', None)\n")
    assert not function_attributes("def f(m):\n    return getattr(m, 'weight')\n", reads=False)
    assert not function_attributes("def f():\n    pass\n\n\nf.__name__ = 'g'\n")


def test_the_job_server_rebinds_no_arguments():
    for p in sorted((ROOT / "engine" / "jobs").glob("*.py")):
        assert not imports_inspect(p.read_text("utf-8")), f"{p.name} imports inspect: read job.request instead"
    assert imports_inspect("import inspect\n") and imports_inspect("from inspect import signature\n")


@dataclass(frozen=True)
class Say:
    text: str
    room: str = "a"


def _toy_kind(served: list):
    """A kind that batches by room: ``together`` serves the first job and every queued one of its room."""

    def together(w, first):
        jobs = [first] + w.admit(first.batch, w.max_batch - 1)
        served.append(sorted(j.request.text for j in jobs))
        w.note_step("toy", 0.0, 0.0, len(jobs))
        for j in jobs:
            j.rows = len(jobs)
            w.complete(j, "done", result=j.request.text.upper())

    return JobKind("toy", alone=lambda r: r.text.upper(), together=together, group=lambda r: ("room", r.room))


def _behind_a_blocker(w):
    started, release = threading.Event(), threading.Event()
    w.submit(lambda: (started.set(), release.wait(10)), session="teacher")
    started.wait(10)
    return release


def test_a_kind_serves_its_group_together_and_other_groups_apart():
    """Queued requests of one group are served by one ``together`` call, all of them, whatever their place among
    another group's requests (the other group takes its turn between this one's steps: engine/jobs/worker.py)."""
    served: list = []
    kind = _toy_kind(served)
    w = Worker(publish=False)
    release = _behind_a_blocker(w)
    jobs = [w.ask(kind, Say(t, room), session=f"s{i}") for i, (t, room) in
            enumerate([("x", "a"), ("y", "a"), ("z", "b"), ("w", "a")])]
    release.set()
    assert [j.result(10) for j in jobs] == ["X", "Y", "Z", "W"]
    assert served == [["w", "x", "y"], ["z"]]
    assert [j.rows for j in jobs] == [3, 3, 1, 3] and {j.kind for j in jobs} == {"toy"}
    snap = w.snapshot()
    assert all(h["batchable"] for h in snap["finished"] if h["kind"] == "toy")
    assert not any(h["batchable"] for h in snap["finished"] if h["kind"] == "<lambda>")


def test_without_batching_or_without_a_group_each_request_runs_alone():
    served: list = []
    kind = _toy_kind(served)
    w = Worker(publish=False, batching=False)
    release = _behind_a_blocker(w)
    jobs = [w.ask(kind, Say(t), session=f"s{i}") for i, t in enumerate("abc")]
    release.set()
    assert [j.result(10) for j in jobs] == ["A", "B", "C"] and served == [], "batching off: alone, one at a time"
    w = Worker(publish=False)
    lone = JobKind("lone", alone=lambda r: r.text * 2)  # a kind that never batches
    job = w.ask(lone, Say("ab"), session="s")
    assert job.result(10) == "abab" and job.batch is None and job.kind == "lone"
    assert w.snapshot()["finished"][-1]["batchable"] is False


def test_a_kind_that_groups_must_say_how_to_serve_a_group():
    with pytest.raises(ValueError, match="together"):
        JobKind("half", alone=str, group=lambda r: "g")
    with pytest.raises(ValueError):
        JobKind("", alone=str)


def test_a_requests_weight_is_its_kinds_and_at_least_one():
    def boom(r):
        raise RuntimeError("unusable")

    assert JobKind("k", alone=str).weight_of(Say("x")) == 1.0
    assert JobKind("k", alone=str, weight=lambda r: 0.2).weight_of(Say("x")) == 1.0
    assert JobKind("k", alone=str, weight=lambda r: len(r.text)).weight_of(Say("xxxx")) == 4.0
    assert JobKind("k", alone=str, weight=boom).weight_of(Say("x")) == 1.0  # it fails when it runs, not here


def test_a_plain_job_is_its_own_kind_and_runs_alone():
    def decode_sweep(n):
        return n + 1

    w = Worker(publish=False)
    job = w.submit(decode_sweep, 1, session="s")
    assert job.result(10) == 2 and job.kind == "decode_sweep" and job.batch is None and job.request is None
