"""Benchmark: a short question's answer time on the class batcher beside hostile traffic, against it alone.

Both are measured in the same run (what the seat bounds of engine/jobs/seats.py are for).

- **alone**: the short questions, nothing else on the worker.
- **beside N hostile sessions**: one client (one address) opens N sessions, each a long paste (cut to the app's
  512-token prompt budget) asking for many new tokens, and keeps them; once their first rows are decoding, one
  student (another address) asks the first short question.
- **beside a paste**: one student pastes a long prompt asking for many new tokens at the moment the others ask
  their short questions (the paste first), each from its own address: they reach the worker together.

- **the whole page** (the home page's three asks in its order: the answer, then the prompt's analysis and the walk
  through block 0), alone and beside each of: the N hostile sessions, two pastes, a classmate's long answer,
  three long answers that cannot be batched (they run alone, as a sliding-window model's do), and the teacher's
  compile of compiled mode's decode step (in the background, engine/core/background_compile.py; cancelled when
  the page is done). The goal the class server keeps: at most 2x the page alone + 5 s.

Answer time = from the moment the requests reach the worker together (or the question's submit, beside the
hostile sessions) to its last token, on the worker's own clock; greedy, chat template, no analysis pass (the home
page asks for the analysis as a job of its own). Every answer is checked against the same
question's answer alone (token for token). The machine may be shared: compare the ratios to "alone".
"""
from __future__ import annotations

import os
import time

from engine.bench import Bench
from engine.core.loaded import LoadedModel
from engine.batching.bench_classroom import CLASS_PROMPTS, own_worker, submitted_together

PASTE = ("The committee met again on Thursday to review the budget, the timetable and the list of rooms; "
         "nothing was decided and the minutes run on for pages. ")  # repeated to the paste's length
# put first (the app keeps a prompt's first 512 tokens): a request that copies its paste runs for its whole token
# budget, the worst case for everyone else
ASK = "Repeat all of the text below, word for word."
PAGES = ("none", "hostile", "pastes", "classmate", "alone3", "compile")


def add_arguments(p) -> None:
    p.add_argument("--hostile", type=int, default=34, help="sessions the hostile client opens")
    p.add_argument("--paste-chars", type=int, default=12_000, help="characters of each pasted prompt")
    p.add_argument("--paste-tokens", type=int, default=256, help="new tokens each paste asks for")
    p.add_argument("--questions", type=int, default=8, help="short questions beside a paste")
    p.add_argument("--question-tokens", type=int, default=24, help="new tokens each short question asks for")
    p.add_argument("--max-batch", type=int, default=32)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for a question's answer")
    p.add_argument("--long-tokens", type=int, default=256, help="new tokens of a classmate's long answer")
    p.add_argument("--no-page", action="store_true", help="skip the whole-page scenarios")
    p.add_argument("--pages", default=",".join(PAGES), help=f"the whole-page scenarios to run, of {', '.join(PAGES)}")
    p.add_argument("--page-only", action="store_true", help="only the whole-page scenarios (not the questions)")


def paste(i: int, chars: int) -> str:
    text = f"Session {i}. {ASK}\n\n" + PASTE * (chars // len(PASTE) + 1)
    return text[:chars]


def _ask(w, lm, prompt: str, n: int, session: str, client: str):
    from engine.core.request import RunRequest
    from engine.jobs.classbatch import ANSWER, AnswerRequest
    from engine.core.sampling import SamplingSettings

    return w.ask(ANSWER, AnswerRequest(lm, RunRequest(lm.ref, prompt, True, n, SamplingSettings(0.0), 0),
                                       analyse=False),
                 session=session, client=client, key=("bench", session))


def _answer(job, timeout: float) -> tuple[float, list[int] | None]:
    """(seconds from submit to its last token, its tokens); (inf, None) when it was not answered in time."""
    try:
        t = job.result(timeout)
    except TimeoutError:
        job.cancel()
        return float("inf"), None
    return job.finished_at - job.submitted_at, list(t.generated_ids)


def _cancel(jobs) -> None:
    """Cancel the jobs and wait until they have left the worker (the next scenario starts on a quiet machine, and
    the process never exits in the middle of a forward pass)."""
    for j in jobs:
        j.cancel()
    for j in jobs:
        j.wait(120)


def _wait(pred, timeout: float) -> None:
    end = time.monotonic() + timeout
    while not pred() and time.monotonic() < end:
        time.sleep(0.01)


def _answers(t0: float, jobs, timeout: float) -> list[tuple[float, list[int] | None]]:
    out = []
    for j in jobs:
        s, ids = _answer(j, timeout)
        out.append((j.finished_at - t0 if ids is not None else s, ids))
    return out


def alone(lm: LoadedModel, questions: list[str], n: int, args) -> list[tuple[float, list[int] | None]]:
    with own_worker(max_batch=args.max_batch) as w:
        t0, jobs = submitted_together(w, lambda: [_ask(w, lm, q, n, f"student-{i}", f"10.0.0.{10 + i}")
                                         for i, q in enumerate(questions)])
        return _answers(t0, jobs, args.timeout)


def beside_hostile(lm: LoadedModel, question: str, n: int, args) -> dict:
    with own_worker(max_batch=args.max_batch) as w:
        hostile = [_ask(w, lm, paste(i, args.paste_chars), args.paste_tokens, f"h{i}", "10.0.0.66")
                   for i in range(args.hostile)]
        _wait(lambda: any(h.first_token_at for h in hostile), args.timeout)  # the hostile rows are decoding
        q = _ask(w, lm, question, n, "student", "10.0.0.7")
        seconds, ids = _answer(q, args.timeout)
        held = sum(1 for h in hostile if h.started_at is not None and not h.done)
        tokens = max(h.tokens for h in hostile)
        _cancel(hostile)
    return {"seconds": seconds, "ids": ids, "hostile_rows_held": held, "hostile_tokens": tokens}


def beside_paste(lm: LoadedModel, questions: list[str], n: int, args) -> list[tuple[float, list[int] | None]]:
    with own_worker(max_batch=args.max_batch) as w:
        box = []

        def submit():
            box.append(_ask(w, lm, paste(0, args.paste_chars), args.paste_tokens, "paste", "10.0.0.66"))
            return [_ask(w, lm, q, n, f"student-{i}", f"10.0.0.{10 + i}") for i, q in enumerate(questions)]

        t0, jobs = submitted_together(w, submit)
        out = _answers(t0, jobs, args.timeout)
        _cancel(box)
    return out


PAGE_GOAL = (2.0, 5.0)  # the whole page beside others: at most 2x its time alone + 5 s


def _page(w, lm, question: str, n: int, timeout: float) -> tuple[float, list[int] | None]:
    """The home page's three asks, in its order (the analysis and the block walk after the answer, as its sections
    ask them): (seconds from the answer's submit to the walk's end, the answer's tokens)."""
    from engine.jobs.prompt_passes import ANALYSIS, PromptRequest
    from engine.loop.inspect import BLOCK_WALK, BlockWalkRequest

    answer = _ask(w, lm, question, n, "student", "10.0.0.7")
    seconds, ids = _answer(answer, timeout)
    if ids is None:
        return seconds, None
    prompt = tuple(answer.result().prompt_ids)
    for kind, request in ((ANALYSIS, PromptRequest(lm, prompt)), (BLOCK_WALK, BlockWalkRequest(lm, prompt, 0))):
        job = w.ask(kind, request, session="student", client="10.0.0.7", key=("bench", kind.name))
        if not job.wait(timeout):
            job.cancel()
            return float("inf"), None
        job.result()  # a failure is raised here
        last = job
    return last.finished_at - answer.submitted_at, ids


def _alone_kind():
    """Answers of a kind that never batches: how a sliding-window model's answers are served (each alone, taking
    turns), on this model."""
    from engine.jobs.classbatch import answer_alone, answer_weight
    from engine.jobs.kinds import JobKind

    return JobKind("answer", alone=answer_alone, weight=answer_weight)


def page_beside(lm: LoadedModel, question: str, n: int, args, others: str) -> dict:
    """The whole page alone (``others`` "none") or beside other traffic, started first and running when the
    student asks: "hostile" (N long sessions of one client), "pastes" (two pastes of two clients), "classmate"
    (a classmate's long answer), "alone3" (three long answers that run alone), "compile" (compiled mode's decode
    step compiling in the background: ``compiling`` says whether it still was when the page was done)."""
    from engine.core.request import RunRequest
    from engine.jobs.classbatch import ANSWER, AnswerRequest
    from engine.core.sampling import SamplingSettings

    def long(i, prompt, tokens, client, kind=ANSWER):
        return w.ask(kind, AnswerRequest(lm, RunRequest(lm.ref, prompt, True, tokens, SamplingSettings(0.0), 0),
                                         analyse=False),
                     session=f"o{i}", client=client, key=("bench-other", i))

    with own_worker(max_batch=args.max_batch) as w:
        if others == "hostile":
            busy = [long(i, paste(i, args.paste_chars), args.paste_tokens, "10.0.0.66") for i in range(args.hostile)]
        elif others == "pastes":
            busy = [long(i, paste(i, args.paste_chars), args.paste_tokens, f"10.0.0.{60 + i}") for i in range(2)]
        elif others == "classmate":
            busy = [long(0, "Tell me a long story about the sea, with many chapters.", args.long_tokens, "10.0.0.5")]
        elif others == "alone3":
            kind = _alone_kind()
            busy = [long(i, f"Tell me a long story number {i}.", args.long_tokens, f"10.0.1.{i}", kind)
                    for i in range(3)]
        else:
            busy = []
        if busy:
            _wait(lambda: any(j.started_at for j in busy), args.timeout)  # the others are running
        job = _compile(lm, args.timeout) if others == "compile" else None
        seconds, ids = _page(w, lm, question, n, args.timeout)
        _cancel(busy)
        if job is not None:
            from engine.core.background_compile import COMPILER

            compiling, said = job.active, job.line()
            COMPILER.cancel(job.ref)
            return {"seconds": seconds, "ids": ids, "compiling": compiling, "compile": said}
    return {"seconds": seconds, "ids": ids}


def _compile(lm: LoadedModel, timeout: float):
    """Compiled mode's decode step for a short run, compiling in the background (its own compiled twin of ``lm``:
    a real compile in a fresh process), once its compile step has begun; None where compiled mode is refused."""
    from engine.core.background_compile import COMPILER
    from engine.core.compile_watch import compile_warm_up
    from engine.core.compiled import ModeError, to_mode
    from engine.core.compile_record import cache_length, decode_name

    try:
        twin = to_mode(lm, "compiled")
    except ModeError:
        return None
    tokens = 64
    job = COMPILER.submit(twin, decode_name(cache_length(tokens, twin.info.max_positions)), compile_warm_up, twin,
                          tokens)
    _wait(lambda: job.step.startswith("Step 1") or job.done.is_set(), timeout)
    return job


def run(lm: LoadedModel, args) -> dict:
    from engine.core.loop import warm_up

    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    warm_up(lm)
    n = int(args.question_tokens)
    questions = [CLASS_PROMPTS[i % len(CLASS_PROMPTS)] for i in range(max(1, int(args.questions)))]
    page = {}
    if not getattr(args, "no_page", False):
        wanted = [k.strip() for k in str(getattr(args, "pages", ",".join(PAGES))).split(",") if k.strip()]
        unknown = [k for k in wanted if k not in PAGES]
        if unknown:
            raise ValueError(f"unknown page scenario {unknown[0][:40]!r}; choose from {', '.join(PAGES)}")
        page = {k: page_beside(lm, questions[0], n, args, k) for k in ["none", *[k for k in wanted if k != "none"]]}
    if getattr(args, "page_only", False):
        return _page_only(lm, page)
    solo = alone(lm, questions[:1], n, args)[0]
    hostile = beside_hostile(lm, questions[0], n, args)
    together = alone(lm, questions, n, args)
    pasted = beside_paste(lm, questions, n, args)
    same = hostile["ids"] in (None, solo[1]) and all(p[1] in (None, a[1]) for p, a in zip(pasted, together)) and \
        all(v["ids"] in (None, solo[1]) for v in page.values())
    base = page.get("none", {}).get("seconds")
    page_s = {k: round(v["seconds"], 4) for k, v in page.items()}
    within = {k: v["seconds"] <= PAGE_GOAL[0] * base + PAGE_GOAL[1] for k, v in page.items() if k != "none"} \
        if base else {}
    # to 0.1 ms: a short answer on a small model can take under 5 ms, which two decimals wrote as 0.0 s
    secs = lambda rs: [round(s, 4) for s, _ in rs]  # noqa: E731
    return {
        "benchmark": "hostile", "model": lm.name, "device": lm.info.device, "dtype": lm.info.dtype,
        "max_batch": int(args.max_batch), "hostile_sessions": int(args.hostile), "paste_chars": int(args.paste_chars),
        "paste_new_tokens": int(args.paste_tokens), "question_new_tokens": n,
        "question_alone_s": round(solo[0], 4), "question_beside_hostile_s": round(hostile["seconds"], 4),
        "hostile_rows_held": hostile["hostile_rows_held"], "hostile_most_tokens": hostile["hostile_tokens"],
        "ratio_hostile_vs_alone": hostile["seconds"] / solo[0],
        "questions_alone_s": secs(together), "questions_beside_paste_s": secs(pasted),
        "ratio_paste_vs_alone_worst": max(s for s, _ in pasted) / max(s for s, _ in together),
        "page_s": page_s, "page_goal": f"<= {PAGE_GOAL[0]:g}x alone + {PAGE_GOAL[1]:g} s", "page_within_goal": within,
        "same_answers": same,
        "load_average_1min": [load_before, os.getloadavg()[0] if load_before is not None else None],  # before, after
        "cpus": os.cpu_count(),
        "note": "answer time = submit to last token on the worker's clock; inf = not answered within --timeout; "
                "hostile_rows_held = hostile requests in the batch when the question was answered; "
                "hostile_most_tokens = the most tokens one of them had by then",
    }


def _page_only(lm: LoadedModel, page: dict) -> dict:
    base = page["none"]["seconds"]
    same = all(v["ids"] in (None, page["none"]["ids"]) for v in page.values())
    return {"benchmark": "hostile", "model": lm.name, "device": lm.info.device, "dtype": lm.info.dtype,
            "page_s": {k: round(v["seconds"], 4) for k, v in page.items()},
            "page_goal": f"<= {PAGE_GOAL[0]:g}x alone + {PAGE_GOAL[1]:g} s",
            "page_within_goal": {k: v["seconds"] <= PAGE_GOAL[0] * base + PAGE_GOAL[1]
                                 for k, v in page.items() if k != "none"},
            "compiling_throughout": page.get("compile", {}).get("compiling"),
            "compile_when_the_page_was_done": page.get("compile", {}).get("compile"),
            "same_answers": same, "cpus": os.cpu_count(),
            "load_average_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None}


def _page_line(r: dict) -> str:
    return ("the whole page (answer, analysis, block walk): alone " + f"{r['page_s']['none']:.2f} s; "
            + "; ".join(f"beside {k} {v:.2f} s ({'within' if r['page_within_goal'][k] else 'OVER'} the goal)"
                        for k, v in r["page_s"].items() if k != "none") + f" [goal {r['page_goal']}]"
            + ("" if r.get("compiling_throughout") is None else
               f"; the compile was {'still' if r['compiling_throughout'] else 'no longer'} running when the page "
               "was done"))


def _seconds(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.2f}" for v in values) + "]"


def summary(r: dict) -> str:
    if "question_alone_s" not in r:  # --page-only
        return "\n".join([f"{r['model']} ({r['device']})", _page_line(r), f"same answers as alone: {r['same_answers']}"])
    return "\n".join([
        f"{r['model']} ({r['device']}), batch of {r['max_batch']}; short questions of {r['question_new_tokens']} "
        f"new tokens; pastes of {r['paste_chars']} characters asking {r['paste_new_tokens']} tokens",
        f"one question alone:                 {r['question_alone_s']:.2f} s",
        f"beside {r['hostile_sessions']} hostile sessions:        {r['question_beside_hostile_s']:.2f} s "
        f"({r['ratio_hostile_vs_alone']:.1f}x; the hostile client held {r['hostile_rows_held']} rows)",
        f"{len(r['questions_alone_s'])} questions together, alone:   {_seconds(r['questions_alone_s'])}",
        f"the same beside a paste:            {_seconds(r['questions_beside_paste_s'])} "
        f"(slowest {r['ratio_paste_vs_alone_worst']:.1f}x)",
        *([_page_line(r)] if r.get("page_s") else []),
        f"same answers as alone: {r['same_answers']}",
    ])


BENCH = Bench("hostile", run, add_arguments, summary)
