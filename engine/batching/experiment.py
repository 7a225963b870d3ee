"""Serving many users with one model: batched decoding, and a small real scheduler with two policies.

* ``decode_sweep``: one decode step for B sequences at once, timed for several batch sizes B. A step streams
  every weight once whatever B is, so the step time grows slowly while the tokens per step grow with B.
* ``serve``: a list of requests (arrival time, prompt, tokens to generate) served greedily on the real model
  under one of two policies, on the real wall clock (a request is not scheduled before it has arrived):

  - ``static``: wait until ``max_batch`` requests are queued (or the oldest has waited ``batch_timeout_s``),
    run that batch until its longest request is done; rows whose request is already done keep decoding as
    wasted (padded) slots, and later arrivals wait for the whole batch.
  - ``continuous`` (iteration-level scheduling, Yu et al. 2022, "Orca"): after every decode step, finished
    requests leave the batch and queued ones join it (their prompts prefilled in one pass, their keys and
    values merged into the batch cache).

Variable lengths share one batch by left padding: an attention mask marks padded cache positions and
explicit ``position_ids`` give each row its own positions, so every request gets the tokens it would get
alone. Keys are stored after RoPE, so left-padding a cache never changes a stored key.

The request trace is engine/batching/workload.py; what a run measured, engine/batching/records.py.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

import numpy as np
import torch

from engine.batching.records import LoadPoint, RequestRecord, ServeResult, StepEvent, SweepPoint
from engine.batching.workload import POLICIES, PROMPTS, Request, WorkloadSettings, make_workload
from engine.core.kv import kv_bytes, kv_bytes_for
from engine.core.loaded import LoadedModel
from engine.core.prompt import encode_prompt
from engine.measure.timing import now
from engine.core.batch import Batch, decode_logits, prefill_logits
from engine.core.loop import warm_up

Progress = Callable[[float, str], None]


# ----------------------------------------------------------------------------------------------- batch state


class _Slot:
    __slots__ = ("req", "tokens", "admitted", "first", "done")

    def __init__(self, req: Request, admitted: float):
        self.req, self.tokens, self.admitted, self.first, self.done = req, [], admitted, 0.0, 0.0

    @property
    def finished(self) -> bool:
        return len(self.tokens) >= self.req.max_new_tokens


def prefill_rows(lm: LoadedModel, prompts: list[tuple[int, ...]]):
    """``prefill_logits`` with the greedy next token of each row [g] instead of the logits."""
    kv, mask, logits, pad = prefill_logits(lm, prompts)
    return kv, mask, logits.argmax(-1).cpu(), pad


def decode_rows(lm: LoadedModel, batch: Batch, tokens: list[int]) -> torch.Tensor:
    """``decode_logits`` with the greedy next token of each row [B]."""
    return decode_logits(lm, batch, tokens).argmax(-1).cpu()


# ----------------------------------------------------------------------------------------------- scheduler


class _Server:
    def __init__(self, lm: LoadedModel, reqs, policy: str, max_batch: int, batch_timeout_s: float,
                 progress: Progress | None):
        self.lm, self.policy, self.max_batch, self.timeout = lm, policy, max_batch, batch_timeout_s
        self.pending = sorted(reqs, key=lambda r: (r.arrival_s, r.rid))
        self.queue: list[Request] = []
        self.records: list[RequestRecord] = []
        self.steps: list[StepEvent] = []
        self.total = sum(r.max_new_tokens for r in reqs)
        self.made = 0
        self.progress = progress
        self.t0 = now(lm.device)

    def clock(self) -> float:
        return now(self.lm.device) - self.t0

    def admit_arrivals(self) -> None:
        t = self.clock()
        while self.pending and self.pending[0].arrival_s <= t:
            self.queue.append(self.pending.pop(0))

    def wait_until(self, t: float) -> None:
        delay = t - self.clock()
        if delay > 0:
            time.sleep(delay)

    def tick(self, n: int) -> None:
        self.made += n
        if self.progress is not None:
            self.progress(self.made / self.total, f"{self.policy}: {self.made}/{self.total} tokens")

    def prefill(self, batch: Batch, reqs: list[Request]) -> None:
        start = self.clock()
        kv, mask, first, pad = prefill_rows(self.lm, [r.prompt_ids for r in reqs])
        slots = [_Slot(r, start) for r in reqs]
        batch.merge(kv, mask, slots)
        end = self.clock()
        for s, tok in zip(slots, first.tolist()):
            s.tokens.append(tok)
            s.first = s.done = end
        self.steps.append(StepEvent("prefill", start, end, tuple(r.rid for r in reqs), len(reqs),
                                    int(mask.numel()), pad, kv_bytes(batch.cache), batch.kv_real_tokens()))
        self.tick(len(reqs))

    def decode(self, batch: Batch) -> None:
        start = self.clock()
        useful = [not s.finished for s in batch.rows]
        nxt = decode_rows(self.lm, batch, [s.tokens[-1] for s in batch.rows])
        end = self.clock()
        for s, tok, u in zip(batch.rows, nxt.tolist(), useful):
            if u:
                s.tokens.append(tok)
                s.done = end
        self.steps.append(StepEvent("decode", start, end, tuple(s.req.rid for s in batch.rows), sum(useful),
                                    len(useful), useful.count(False), kv_bytes(batch.cache), batch.kv_real_tokens()))
        self.tick(sum(useful))

    def release(self, slots: list[_Slot], at: float | None = None) -> None:
        """Free the slots at ``at`` (static: the batch's end), or each as soon as its last token is ready."""
        for s in slots:
            r = s.req
            self.records.append(RequestRecord(r.rid, r.prompt, len(r.prompt_ids), r.max_new_tokens, r.arrival_s,
                                              s.admitted, s.first, s.done, s.done if at is None else at,
                                              tuple(s.tokens)))

    def run_static(self) -> None:
        while self.pending or self.queue:
            self.admit_arrivals()
            if not self.queue:
                self.wait_until(self.pending[0].arrival_s)
                continue
            if len(self.queue) < self.max_batch and self.pending:
                deadline = self.queue[0].arrival_s + self.timeout
                if self.clock() < deadline:  # wait for a fuller batch, up to the timeout
                    self.wait_until(min(deadline, self.pending[0].arrival_s))
                    continue
            group, self.queue = self.queue[: self.max_batch], self.queue[self.max_batch:]
            batch = Batch(self.lm)
            self.prefill(batch, group)
            while not all(s.finished for s in batch.rows):
                self.decode(batch)
            self.release(batch.rows, max(s.done for s in batch.rows))

    def run_continuous(self) -> None:
        batch = Batch(self.lm)
        while self.pending or self.queue or batch.rows:
            self.admit_arrivals()
            if not batch.rows and not self.queue:
                self.wait_until(self.pending[0].arrival_s)
                continue
            room = self.max_batch - len(batch.rows)
            if self.queue and room > 0:  # joiners are prefilled, then everyone takes the round's decode step,
                join, self.queue = self.queue[:room], self.queue[room:]  # as the class batcher does
                self.prefill(batch, join)  # (engine/jobs/classbatch.py): arrivals never stall the rows decoding
                self.leave_done(batch)
            if batch.rows:
                self.decode(batch)
                self.leave_done(batch)

    def leave_done(self, batch: Batch) -> None:
        done = batch.leave(lambda s: s.finished)
        if done:
            self.release(done)


def serve(lm: LoadedModel, reqs: tuple[Request, ...], policy: str = "continuous", max_batch: int = 4,
          batch_timeout_s: float = 0.5, progress: Progress | None = None) -> ServeResult:
    """Serve ``reqs`` greedily with real forward passes on the real wall clock (see the module docstring)."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}")
    if max_batch < 1:
        raise ValueError("max_batch must be at least 1")
    if not reqs:
        raise ValueError("no requests")
    warm_up(lm)
    srv = _Server(lm, reqs, policy, int(max_batch), float(batch_timeout_s), progress)
    srv.run_static() if policy == "static" else srv.run_continuous()
    wall = srv.clock()
    return ServeResult(policy, lm.name, int(max_batch), float(batch_timeout_s),
                       tuple(sorted(srv.records, key=lambda r: r.rid)), tuple(srv.steps), wall,
                       kv_bytes_for(lm.info, 1))


# ----------------------------------------------------------------------------------------------- decode sweep


def decode_sweep(lm: LoadedModel, batch_sizes=(1, 2, 4, 8, 16), prompt: str = PROMPTS[0], steps: int = 6,
                 warmup: int = 2, progress: Progress | None = None) -> tuple[SweepPoint, ...]:
    """Time ``steps`` decode steps (after ``warmup`` untimed ones) with B copies of one prompt, for each B.

    Rows are identical (no padding), so the only thing that changes with B is how many tokens a step makes.
    """
    sizes = sorted({int(b) for b in batch_sizes if int(b) >= 1})
    if not sizes:
        raise ValueError("no batch sizes")
    ids = encode_prompt(lm.tokenizer, prompt).ids
    out = []
    warm_up(lm)
    for n, b in enumerate(sizes):
        batch = Batch(lm)
        kv, mask, first, _ = prefill_rows(lm, [ids] * b)
        batch.merge(kv, mask, [])
        tok = first.tolist()
        times = []
        for i in range(warmup + steps):
            t0 = now(lm.device)
            tok = decode_rows(lm, batch, tok).tolist()
            if i >= warmup:
                times.append(now(lm.device) - t0)
        out.append(SweepPoint(b, np.array(times), len(ids) + warmup, kv_bytes(batch.cache), len(times)))
        if progress is not None:
            progress((n + 1) / len(sizes), f"batch {b}: {statistics.median(times) * 1000:.0f} ms per step")
    return tuple(out)


def solo_tokens(lm: LoadedModel, req: Request) -> list[int]:
    """The tokens this request gets when it runs alone (greedy, unbatched): the reference for batching."""
    from engine.core.sampling import SamplingSettings
    from engine.core.trace import generate_tokens

    out, *_ = generate_tokens(lm, list(req.prompt_ids), SamplingSettings(temperature=0.0), req.max_new_tokens, 0,
                              stop_at_eos=False, record=False)
    return out


# ----------------------------------------------------------------------------------------------- load


def load_sweep(lm: LoadedModel, base: WorkloadSettings, rates=(0.0, 2.0, 8.0), probe_tokens: int = 12,
               probe_prompt: str = PROMPTS[4], max_batch: int = 4, progress: Progress | None = None
               ) -> tuple[LoadPoint, ...]:
    """The same request, alone and amid busier traffic, under continuous batching.

    Background requests come from ``base`` with its rate replaced; the probe arrives at the median background
    arrival time (in the thick of the traffic), or at t = 0 when it is alone (rate 0).
    """
    out = []
    rates = [float(r) for r in rates]
    ids = encode_prompt(lm.tokenizer, probe_prompt, use_chat_template=base.chat).ids
    for n, rate in enumerate(rates):
        bg = () if rate <= 0 else make_workload(
            lm.tokenizer, WorkloadSettings(base.n_requests, rate, base.min_new_tokens, base.max_new_tokens,
                                           base.seed, base.chat))
        at = float(np.median([r.arrival_s for r in bg])) if bg else 0.0
        probe = Request(len(bg), at, probe_prompt, ids, int(probe_tokens))

        def sub(frac, msg, n=n):
            if progress is not None:
                progress((n + frac) / len(rates), f"rate {rate:g}/s: {msg}")

        res = serve(lm, bg + (probe,), "continuous", max_batch, progress=sub)
        rec = next(r for r in res.requests if r.rid == probe.rid)
        during = [s for s in res.steps if s.phase == "decode" and probe.rid in s.rids]
        out.append(LoadPoint(rate, len(bg), rec,
                             float(np.mean([len(s.rids) for s in during])) if during else 0.0,
                             float(np.median([s.end_s - s.start_s for s in during]) * 1e3) if during else float("nan")))
    return tuple(out)
