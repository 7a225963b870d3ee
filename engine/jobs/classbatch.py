"""The class is the batch: the engine worker serves concurrent generation requests of many sessions together.

``ANSWER`` is the worker's kind of a generation request (engine/jobs/kinds.py): an ``AnswerRequest`` holds a
``RunRequest`` (engine/core/request.py) and the model that serves it, and run alone it *is* ``run_trace``. Asked of
the worker (``Worker.ask(ANSWER, request)``), it is handed to ``serve_batch`` with every other queued request of its
``group`` (the same model object, so the same precision): continuous batching, as the batching page teaches it.
The prompts' untimed analysis passes (``ANALYSIS``) are served together too, in right-padded passes:
engine/jobs/prompt_passes.py.

- Requests join between decode steps, within the share of the batch their client and session may hold
  (engine/jobs/seats.py, asked by the worker's ``admit``; a request weighs more for a long prompt or many new
  tokens: ``answer_weight``). A request leaves when it picks end-of-sequence or reaches its token count,
  and its row is dropped from the cache.
- Chunked prefill (as vLLM and SGLang do it): joiners are grouped with prompts of similar length (left-padded to
  the group's longest, so a short question is never padded to a paste). A group of short prompts (at most
  ``SHORT_PROMPT_TOKENS``) is prefilled whole in the round it arrives; a long prompt is read in slices of at most
  ``PREFILL_SLICE_TOKENS`` padded positions (the long groups together, oldest first), between decode steps. While
  rows are decoding, a long slice of s seconds is followed by at least ``DECODE_SHARE`` x s seconds of decode
  steps before the next one (stall-free batching, as Sarathi-Serve names it): a pasted 512-token prompt never
  stalls the others for its whole prefill, the answers decoding keep about two thirds of the worker, and a
  paste costs its owner more time the busier the batch is. A request cancelled mid-prefill leaves within one
  slice. A group joins the running batch (its KV cache merged) when its last slice is done.
- A newcomer's prefill runs as a prompt alone would, on a cache the size of its group's prompts: eager, or in
  compiled mode where that is faster on the device (a GPU; engine.core.prefill_buckets.joiner_mode), each prompt
  alone through its bucket's compiled graph, its keys and values then copied into its row of the batch's static
  cache. Its trace says which (``Trace.prefill_mode``, the words of a run alone).
- The batch mechanics (left padding, attention mask, per-row positions, merging and dropping rows) are the
  batching experiment's own (engine/batching/experiment.py): one implementation for the lesson and the class.
- Each request samples from its own row's logits with its own generator (``make_generator(seed)``), in the same
  order as alone: greedy output is the solo output token for token, and a sampled one draws from the same
  distribution with the same seed semantics (tests/engine/test_classbatch.py).
- Each request still gets its own ``Trace``: its tokens, top-k, KV bytes (its own rows of the cache) and, after its
  last token, the untimed analysis pass over its prompt (requests that finish in the same step share one pass).
  A step's ``seconds`` is the time of the whole batched pass (its prefill's: the sum of its group's slices); its
  ``batch_size`` says how many requests shared it ("measured in a batch of 7"): not a solo step time.
- A request whose session went away (tab closed, page left) leaves the batch before the next step.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from transformers import DynamicCache

from engine.core.batch import Batch, decode_logits, left_padded, prefill_alone, prefill_slice, step_compiled
from engine.jobs import seats
from engine.jobs.kinds import BatchHost, JobKind, JobState
from engine.jobs.job import relay
from engine.jobs.prompt_passes import ANALYSIS_CHUNK_TOKENS, cancelled, chunks
from engine.core.kv import cache_tensors
from engine.core.loop import eos_ids, new_cache, warm_up
from engine.core.loaded import LoadedModel
from engine.core.prefill_buckets import PrefillMode, PrefillWhy, joiner_mode
from engine.core.prompt import MAX_PROMPT_TOKENS, encode_prompt
from engine.core.request import RunRequest
from engine.core.sampling import make_generator, sample
from engine.measure.timing import now
from engine.core.trace import (MAX_NEW_TOKENS, Trace, analyse_prompts, build_trace, run_trace, step_record,
                               step_stats)

PREFILL_SLICE_TOKENS = 256  # padded positions of long prompts prefilled in one round (chunked prefill)
SHORT_PROMPT_TOKENS = 128  # a group whose prompts are all this short is prefilled whole when it arrives
DECODE_SHARE = 2.0  # decode seconds the rows decoding get after each second of long prefill
GROUP_TOKENS = 2048  # padded positions of one group filling together (rows x its longest prompt)
SIMILAR = 1.25  # a group's longest prompt is at most this times its shortest, plus SIMILAR_SLACK tokens
SIMILAR_SLACK = 16


@dataclass(frozen=True)
class AnswerRequest:
    """One generation request: the person's ``RunRequest`` whole, on the loaded model that serves it (``lm``, loaded
    for ``run.model``). ``stream``: each step's record is posted to the request's job as a ``("step", (record,))``
    event (what ``engine.jobs.job.relay("step")`` posts), alone or in a batch, so its page draws its progress
    token by token either way."""

    lm: LoadedModel = field(repr=False)
    run: RunRequest
    analyse: bool = True  # the untimed analysis pass over the prompt, after the last token
    stream: bool = False


def answer_alone(r: AnswerRequest) -> Trace:
    """The request run by itself: ``run_trace``."""
    q = r.run
    return run_trace(r.lm, q.prompt, q.sampling, q.max_new_tokens, q.seed, q.chat,
                     on_step=relay("step") if r.stream else None, analyse=r.analyse)


def answer_weight(r: AnswerRequest) -> float:
    """What a request weighs in its client's share of the batch (engine.jobs.seats.weight): its prompt tokens as
    the model receives them and the tokens it asks for."""
    enc = encode_prompt(r.lm.tokenizer, r.run.prompt, r.run.chat, max_tokens=MAX_PROMPT_TOKENS)
    return seats.weight(len(enc.ids), min(max(int(r.run.max_new_tokens), 1), MAX_NEW_TOKENS))


def group(lm: LoadedModel) -> tuple | None:
    """Requests batch together only on the same loaded model object: same weights, same precision. A model with
    sliding-window layers runs each request alone (None): a left-padded batch whose rows joined at different
    times changed a tiny Mistral's greedy tokens against its solo run (tests/engine/test_architectures.py), and
    an answer that differs from running alone is worse than a slower one. int8 runs alone too (its activation
    scale spans the batch's rows). Half precisions batch: their batched sums round differently, which can tip a
    near tie (the answer's note says so; ui/loop/details.py). A compiled model batches too: its batch steps run as
    compiled graphs of padded batch sizes (engine.core.batch, compiled mode)."""
    facts = getattr(lm.info, "arch", None)
    if facts is not None and facts.has_windows:
        return None
    if lm.ref.precision == "int8":
        # int8 quantizes each pass's activations with one scale over all its rows: another request's row moves
        # yours (a batch of 7 on the tiny model: 1 answer of 7 differed from its solo run). Alone, as above.
        return None
    return ("trace", lm.ref, id(lm))


def how_served(lm: LoadedModel, batching: bool | None = None) -> str:
    """How answers on ``lm`` as loaded (its precision and engine mode) are served, in words for the sidebar: read
    from ``group``, the one place that decides, so the words follow the decision wherever it moves."""
    import engine.settings as settings

    if not (settings.BATCHING.get() if batching is None else batching):
        return "answers run one request at a time (batching is off on this server)"
    if group(lm) is None:
        return "answers on this model run one request at a time, not batched with other sessions'"
    return "answers of several sessions on this model run together in one batch"


class _Row:
    """One request in the batch: its settings, generator, tokens and raw step records."""

    def __init__(self, job, lm: LoadedModel):
        a: AnswerRequest = job.request
        if a.lm is not lm:
            raise ValueError("a batch serves one model")
        r = a.run
        self.job, self.prompt, self.analyse = job, r.prompt, bool(a.analyse)
        self.stream = bool(a.stream)
        self.max_new = int(min(max(int(r.max_new_tokens), 1), MAX_NEW_TOKENS))
        self.settings = r.sampling.clamp()
        self.seed = int(r.seed)
        self.lm = lm
        self.enc = encode_prompt(lm.tokenizer, self.prompt, r.chat, max_tokens=MAX_PROMPT_TOKENS)
        self.ids = tuple(self.enc.ids)
        self.gen = make_generator(self.seed)
        self.tokens: list[int] = []
        self.raw: list[tuple] = []
        self.first_logits: torch.Tensor | None = None
        self.reason: str | None = None
        self.prefill: PrefillMode | None = None  # how its prefill ran (``_slice`` decides)

    @property
    def run_tokens(self) -> int:
        return len(self.ids) + self.max_new

    def pick(self, logits: torch.Tensor) -> int:
        return int(sample(logits, self.settings, self.gen))

    def keep(self, logits: torch.Tensor, tok: int, seconds: float, tokens_in: int, kv: tuple[int, int], rows: int,
             stops: set[int], compiled: bool = False) -> None:
        if self.first_logits is None:
            self.first_logits = logits
        self.raw.append((len(self.tokens), tokens_in, seconds, kv, tok, step_stats(logits, tok, self.settings), rows,
                         compiled))
        self.tokens.append(tok)
        self.job.tokens = len(self.tokens)
        if self.stream:
            self.job.post("step", (step_record(self.lm, *self.raw[-1]),))
        if tok in stops:
            self.reason = "eos"
        elif len(self.tokens) >= self.max_new:
            self.reason = "max_new_tokens"


def _row_kv(batch: Batch, i: int) -> tuple[int, int]:
    """(bytes, tokens) of row ``i``'s real cached positions, layer by layer: each layer's bytes per position times
    the row's real tokens it holds. Rows are left-padded, so a sliding-window layer that keeps its last positions
    holds min(real tokens, its length) of them, as the row's own cache would alone (engine.core.kv's per-layer
    formula)."""
    real = int(batch.mask[i].sum())
    held = 0
    for _, k, v in cache_tensors(batch.cache):  # k, v: [batch, kv_heads, positions, head_dim]
        b, positions = k.shape[0], k.shape[-2]
        if positions:
            per_position = (k.numel() * k.element_size() + v.numel() * v.element_size()) // (b * positions)
            held += per_position * min(real, positions)
    return held, real




def _groups(rows: list) -> list[list]:
    """Joiners grouped with prompts of similar length (sorted by length; a group's longest is at most SIMILAR
    times its shortest plus SIMILAR_SLACK tokens, and rows x longest at most GROUP_TOKENS): a short question is
    never padded to the length of a paste."""
    out: list[list] = []
    for r in sorted(rows, key=lambda r: len(r.ids)):
        g = out[-1] if out else None
        n = len(r.ids)
        if g and n <= SIMILAR * len(g[0].ids) + SIMILAR_SLACK and (len(g) + 1) * n <= GROUP_TOKENS:
            g.append(r)
        else:
            out.append([r])
    return out


class _Filling:
    """A group of joiners whose prompts are being prefilled, slice by slice, into a KV cache of their own."""

    def __init__(self, lm: LoadedModel, rows: list[_Row]):
        self.lm, self.rows = lm, rows
        self.ids, self.mask, self.pos = left_padded(lm, [r.ids for r in rows])  # each [g, P]
        self.cache = new_cache(lm)
        self.done = 0  # prompt positions prefilled so far
        self.seconds = 0.0  # its slices' time, summed
        self.toks: list[int] = []
        self.logits: torch.Tensor | None = None  # [g, vocab] after the last slice

    @property
    def left(self) -> int:
        return self.ids.shape[1] - self.done

    @property
    def work(self) -> int:
        return len(self.rows) * self.left

    @property
    def short(self) -> bool:
        return self.ids.shape[1] <= SHORT_PROMPT_TOKENS

    def drop(self, gone) -> list[_Row]:
        """The rows for which ``gone(row)`` is true leave the group (asked once per row); returns them."""
        leaving = [bool(gone(r)) for r in self.rows]
        if not any(leaving):
            return []
        out = [r for r, x in zip(self.rows, leaving) if x]
        keep = [i for i, x in enumerate(leaving) if not x]
        self.rows = [self.rows[i] for i in keep]
        if keep:
            idx = torch.tensor(keep, device=self.ids.device)
            self.ids, self.mask, self.pos = self.ids[idx], self.mask[idx], self.pos[idx]
            if self.done:
                kv = [(layer.keys[idx], layer.values[idx]) for layer in self.cache.layers]
                self.cache = DynamicCache(ddp_cache_data=kv, config=self.lm.model.config)
        return out


def _prefill_round(w, lm: LoadedModel, filling: list[_Filling], dev, long_ok: bool) -> float:
    """One round's prefill: every group of short prompts whole; then, when ``long_ok``, one slice of at most
    PREFILL_SLICE_TOKENS padded positions over the long groups, oldest first. Returns the seconds the long
    slices took (what the rows decoding are owed: DECODE_SHARE times that)."""
    for g in sorted((g for g in filling if g.short), key=lambda g: g.work):
        _slice(w, lm, g, g.left, dev)
    spent, budget = 0.0, PREFILL_SLICE_TOKENS
    for g in filling if long_ok else ():
        if g.short or not g.left:
            continue
        if budget <= 0:
            break
        n = min(g.left, max(1, budget // len(g.rows)))
        spent += _slice(w, lm, g, n, dev)
        budget -= len(g.rows) * n
    return spent


def _prefill_modes(lm: LoadedModel, g: _Filling, whole: bool) -> None:
    """How each row of a group about to be prefilled runs (engine.core.prefill_buckets.joiner_mode), kept on its row:
    each alone through its bucket's graph where all of them can, else the group eager in one padded pass."""
    modes = [joiner_mode(lm, len(r.ids), r.run_tokens, len(g.rows), whole) for r in g.rows]
    if not all(m.compiled for m in modes):
        modes = [PrefillMode(PrefillWhy.GROUP, m.tokens, m.bucket) if m.compiled else m for m in modes]
    for r, m in zip(g.rows, modes):
        r.prefill = m


def _slice(w, lm: LoadedModel, g: _Filling, n: int, dev) -> float:
    """Prefill the next ``n`` positions of group ``g``; returns the pass's seconds."""
    if not g.done:  # decided once, at its first slice, off the clock
        _prefill_modes(lm, g, whole=n == g.left)
    start, t0 = time.monotonic(), now(dev)
    if g.rows[0].prefill.compiled:  # the whole group, row by row; its keys and values laid out as one pass's
        kv, logits = prefill_alone(lm, [r.ids for r in g.rows], [r.prefill for r in g.rows],
                                   [r.run_tokens for r in g.rows])  # [g, vocab]
        g.cache = DynamicCache(ddp_cache_data=kv, config=lm.model.config)
    else:
        logits = prefill_slice(lm, g.ids, g.mask, g.pos, g.cache, g.done, g.done + n)  # [g, vocab]
    g.done += n
    if not g.left:
        g.logits = logits.float().cpu()
        g.toks = [r.pick(g.logits[i]) for i, r in enumerate(g.rows)]
    seconds = now(dev) - t0
    g.seconds += seconds
    w.note_step("prefill", start, time.monotonic(), len(g.rows))
    return seconds


def _join(batch: Batch, g: _Filling, stops) -> None:
    """A group whose prompts are all read joins the running batch with its first tokens."""
    base = len(batch.rows)
    batch.merge([(layer.keys, layer.values) for layer in g.cache.layers], g.mask, g.rows)
    t = time.monotonic()
    for i, (r, tok) in enumerate(zip(g.rows, g.toks)):
        r.job.first_token_at = t
        r.job.rows = max(r.job.rows, len(g.rows))
        r.keep(g.logits[i], tok, g.seconds, len(r.ids), _row_kv(batch, base + i), len(g.rows), stops,
               r.prefill.compiled)


def serve_batch(w: BatchHost, first) -> None:
    """Run ``first`` and every request of its group the worker admits, until the batch is empty (see the module
    docstring): ``ANSWER``'s ``together``."""
    lm = first.request.lm
    stops = eos_ids(lm)
    dev = lm.device
    batch = Batch(lm)
    filling: list[_Filling] = []  # oldest first
    joiners = [first]
    owed = 0.0  # decode seconds the rows decoding are owed before the next long prefill slice
    warm_up(lm)
    while True:
        for r in batch.leave(lambda r: r.job.should_stop()):
            w.complete(r.job, JobState.CANCELLED, error=cancelled(r.job))
        for g in filling:  # a request cancelled mid-prefill leaves within one slice
            for r in g.drop(lambda r: r.job.should_stop()):
                w.complete(r.job, JobState.CANCELLED, error=cancelled(r.job))
        filling = [g for g in filling if g.rows]
        room = w.max_batch - len(batch.rows) - sum(len(g.rows) for g in filling) - len(joiners)
        if room > 0:
            joiners += w.admit(first.batch, room)
        new: list[_Row] = []
        for job in joiners:
            if job.should_stop():
                w.complete(job, JobState.CANCELLED, error=cancelled(job))
                continue
            try:
                new.append(_Row(job, lm))
            except Exception as exc:  # an unusable prompt fails its own request only
                w.complete(job, JobState.FAILED, error=exc)
        joiners = []
        filling += [_Filling(lm, g) for g in _groups(new)]
        if not filling and not batch.rows:
            return
        # short prompts whole, a long prompt's slice unless the rows decoding are owed time, then every row
        # already decoding takes its step: neither a stream of arrivals nor a paste stalls them
        if not batch.rows:
            owed = 0.0
        if filling:
            owed += DECODE_SHARE * _prefill_round(w, lm, filling, dev, long_ok=owed <= 0)
        for g in [g for g in filling if not g.left]:
            _join(batch, g, stops)
        filling = [g for g in filling if g.left]
        _leave_done(w, lm, batch)
        if batch.rows:
            owed -= _decode(w, lm, batch, stops, dev)
            _leave_done(w, lm, batch)
        w.pause()  # between rounds, off the clock: other work takes its turn; the batch never holds the engine


def _leave_done(w, lm, batch: Batch) -> None:
    """Rows that have their last token leave the batch and get their Trace."""
    for chunk in chunks(batch.leave(lambda r: r.reason is not None), ANALYSIS_CHUNK_TOKENS):
        _finish(w, lm, chunk)


def _decode(w, lm, batch: Batch, stops, dev) -> float:
    """One decode step for every row of the batch; returns its seconds."""
    rows = list(batch.rows)
    compiled = step_compiled(lm, batch)  # compiled mode: a graph not ready yet compiles in the background
    start, t0 = time.monotonic(), now(dev)
    logits = decode_logits(lm, batch, [r.tokens[-1] for r in rows]).float().cpu()  # [B, vocab]
    toks = [r.pick(logits[i]) for i, r in enumerate(rows)]
    seconds = now(dev) - t0
    w.note_step("decode", start, time.monotonic(), len(rows))
    for i, (r, tok) in enumerate(zip(rows, toks)):
        r.job.rows = max(r.job.rows, len(rows))
        r.keep(logits[i], tok, seconds, 1, _row_kv(batch, i), len(rows), stops, compiled)
    return seconds


def _finish(w, lm, rows: list[_Row]) -> None:
    """Requests that finished in the same step: their untimed analysis passes run as one (right-padded, so each
    row computes what its prompt alone computes: engine.core.trace.analyse_prompts), then each gets its Trace."""
    want = [r for r in rows if r.analyse]
    try:
        found = dict(zip(map(id, want), analyse_prompts(lm, [list(r.ids) for r in want]))) if want else {}
    except Exception as exc:
        for r in rows:
            w.complete(r.job, JobState.FAILED, error=exc)
        return
    for r in rows:
        try:
            steps = [step_record(lm, *raw) for raw in r.raw]
            trace = build_trace(lm, r.prompt, r.enc, r.settings, r.seed, r.max_new, r.tokens, steps, r.first_logits,
                                r.reason, found.get(id(r)), timed_in_batcher=True, prefill_mode=r.prefill.line)
        except Exception as exc:
            w.complete(r.job, JobState.FAILED, error=exc)
            continue
        w.complete(r.job, JobState.DONE, result=trace)


ANSWER = JobKind("answer", alone=answer_alone, together=serve_batch, group=lambda r: group(r.lm),
                 weight=answer_weight)
