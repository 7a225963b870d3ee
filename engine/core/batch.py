"""A padded batch of sequences on one KV cache, through the one door (engine.core.loop): left padding, an attention
mask and per-row positions, so every row computes what it would alone; rows join (their caches merged) and leave
between steps. Keys are stored after RoPE, so left-padding a cache never changes a stored key.

The Batching lesson's scheduler (engine/batching/experiment.py) and the class batcher (engine/jobs/classbatch.py)
both run their batches on these: one implementation for the lesson and the class.
"""
from __future__ import annotations

from typing import Callable

import torch
from transformers import DynamicCache

from engine.core.compiled import announce, compiling, shaped_of
from engine.core.static_cache import is_static, rewind
from engine.core.compile_record import BATCH_SIZES, batch_name, cache_length, padded_batch
from engine.core.loaded import LoadedModel
from engine.core.loop import forward, new_cache, prefill
from engine.core.prefill_buckets import PrefillMode, bucket_beats_eager, joiner_cache


class Batch:
    """The running batch: one KV cache with a row per request, left-padded to a common length."""

    def __init__(self, lm: LoadedModel):
        self.lm = lm
        self.cache = None  # a DynamicCache; compiled mode: a static cache of rows padded up to a batch size
        self.mask: torch.Tensor | None = None  # [B, L] 1 = real cached position, 0 = padding
        self.rows: list = []  # one per row, the caller's own record (the lesson's slot, the class batcher's request)

    def kv(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        if is_static(self.cache):  # its real rows and filled positions
            b, n = self.mask.shape
            return [(layer.keys[:b, :, :n], layer.values[:b, :, :n]) for layer in self.cache.layers]
        return [(layer.keys, layer.values) for layer in self.cache.layers]  # each [B, kv_heads, L, head_dim]

    def set_kv(self, kv, mask: torch.Tensor) -> None:
        """The batch's cache becomes ``kv`` (per layer (keys, values), each [B, kv_heads, L, head_dim]; copies,
        never views of the batch's own static cache) with ``mask`` [B, L]."""
        self.mask = mask
        self.cache = (into_static(self.lm, kv, mask.shape[1]) if kv else None) or (
            DynamicCache(ddp_cache_data=kv, config=self.lm.model.config) if kv else None)

    def merge(self, kv_new, mask_new: torch.Tensor, rows: list) -> None:
        """Append rows: left-pad the shorter side with zeros (masked out) to a common length."""
        if self.cache is None:
            self.set_kv(kv_new, mask_new)
        else:
            length = max(self.mask.shape[1], mask_new.shape[1])
            kv = [(torch.cat([lpad(k, length), lpad(k2, length)]), torch.cat([lpad(v, length), lpad(v2, length)]))
                  for (k, v), (k2, v2) in zip(self.kv(), kv_new)]
            self.set_kv(kv, torch.cat([lpad(self.mask, length), lpad(mask_new, length)]))
        self.rows += rows

    def keep(self, rows: list[int]) -> None:
        """Drop the other rows, then the leading columns that are padding in every remaining row."""
        if not rows:
            self.cache, self.mask, self.rows = None, None, []
            return
        idx = torch.tensor(rows, device=self.mask.device)
        mask = self.mask[idx]
        start = int(mask.any(0).nonzero()[0])
        self.set_kv([(k[idx, :, start:], v[idx, :, start:]) for k, v in self.kv()], mask[:, start:])
        self.rows = [self.rows[i] for i in rows]

    def leave(self, gone) -> list:
        """The rows for which ``gone(row)`` is true leave the batch (``keep`` the others); returns them."""
        leaving = [bool(gone(s)) for s in self.rows]  # asked once per row: a job can stop meanwhile
        if any(leaving):
            out = [s for s, x in zip(self.rows, leaving) if x]
            self.keep([i for i, x in enumerate(leaving) if not x])
            return out
        return []

    def kv_real_tokens(self) -> int:
        return int(self.mask.sum()) if self.mask is not None else 0


def lpad(t: torch.Tensor, length: int) -> torch.Tensor:
    """Left-pad dim -2 of a cache tensor [B, H, L, D] (or dim -1 of a mask [B, L]) with zeros to ``length``."""
    dim = -1 if t.dim() == 2 else -2
    missing = length - t.shape[dim]
    if missing <= 0:
        return t
    shape = list(t.shape)
    shape[dim] = missing
    return torch.cat([t.new_zeros(shape), t], dim=dim)


def left_padded(lm: LoadedModel, prompts: list[tuple[int, ...]]):
    """Several prompts left-padded to the longest, on the model's device: ids [g, P], mask [g, P] (1 = a real
    token) and positions [g, P]."""
    dev = lm.device
    length = max(len(p) for p in prompts)
    pad = lm.tokenizer.pad_token_id or 0
    ids = torch.tensor([[pad] * (length - len(p)) + list(p) for p in prompts], device=dev)  # [g, P]
    mask = torch.tensor([[0] * (length - len(p)) + [1] * len(p) for p in prompts], device=dev)  # [g, P]
    pos = (mask.cumsum(-1) - 1).clamp(min=0)  # [g, P] each row counts from 0 at its first real token
    return ids, mask, pos


@torch.inference_mode()
def prefill_slice(lm: LoadedModel, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor, cache,
                  start: int, end: int) -> torch.Tensor:
    """Positions [start, end) of left-padded prompts (``left_padded``) on top of ``cache``, which holds their
    positions [0, start) and is extended: one slice of a chunked prefill (the whole prompt when start = 0 and
    end = P). Returns the logits after position end - 1 [g, vocab] on the model's device."""
    return forward(lm, ids[:, start:end], cache, attention_mask=mask[:, :end],
                   position_ids=pos[:, start:end])[:, -1]  # [g, vocab]


@torch.inference_mode()
def prefill_alone(lm: LoadedModel, prompts: list[tuple[int, ...]], modes: list[PrefillMode], tokens: list[int]):
    """Compiled mode: each of ``prompts`` prefilled alone through its bucket's graph (``modes``, each compiled:
    engine.core.prefill_buckets.joiner_mode) on its one-row static cache (``joiner_cache``, for a run of
    ``tokens[i]``), its keys and values copied out and laid out as ``left_padded`` lays out a group: left-padded to
    the longest prompt with zeros that the mask hides. What one ``prefill_slice`` over the whole group gives, row by
    row. Returns (per layer (keys, values) [g, kv_heads, P, head_dim], logits [g, vocab] on the model's device)."""
    length = max(len(p) for p in prompts)
    rows, logits = [], []
    for p, mode, t in zip(prompts, modes, tokens):
        cache = joiner_cache(lm, len(p), t)  # emptied: the rows before used it
        logits.append(prefill(lm, torch.tensor([list(p)], device=lm.device), cache, mode)[0])  # [vocab]
        rows.append([(lpad(layer.keys[:, :, :len(p)].clone(), length),  # [1, kv_heads, P, head_dim]
                      lpad(layer.values[:, :, :len(p)].clone(), length)) for layer in cache.layers])
    kv = [(torch.cat([r[i][0] for r in rows]), torch.cat([r[i][1] for r in rows])) for i in range(len(rows[0]))]
    return kv, torch.stack(logits)  # [g, vocab]


def prefill_logits(lm: LoadedModel, prompts: list[tuple[int, ...]]):
    """One pass over several prompts, left-padded to the longest. Returns (per-layer (keys, values),
    mask [g, P], next-token logits [g, vocab] on the model's device, padded positions). The experiments here
    take the argmax; the class batcher (engine/jobs/classbatch.py) prefills in slices with ``prefill_slice``."""
    ids, mask, pos = left_padded(lm, prompts)
    cache = new_cache(lm)
    logits = prefill_slice(lm, ids, mask, pos, cache, 0, ids.shape[1])  # [g, vocab]
    kv = [(layer.keys, layer.values) for layer in cache.layers]
    return kv, mask, logits, int((mask == 0).sum())


@torch.inference_mode()
def decode_logits(lm: LoadedModel, batch: Batch, tokens: list[int]) -> torch.Tensor:
    """One decode step for every row: the new token sits at position = that row's real cached tokens.
    Returns the logits [B, vocab] on the model's device."""
    if is_static(batch.cache):
        return _static_decode(lm, batch, tokens)
    dev = lm.device
    x = torch.tensor(tokens, device=dev)[:, None]  # [B, 1]
    pos = batch.mask.sum(-1, keepdim=True)  # [B, 1]
    mask = torch.cat([batch.mask, batch.mask.new_ones(len(tokens), 1)], dim=-1)  # [B, L + 1]
    logits = forward(lm, x, batch.cache, attention_mask=mask, position_ids=pos)[:, -1]  # [B, vocab]
    batch.mask = mask
    return logits


# ------------------------------------------------------------------------------------------------ compiled mode
# A compiled model's batch lives in a static cache (engine.core.compiled.ShapedGraphs.cache) of its rows padded up
# to a size in BATCH_SIZES and a power-of-two length: the rows stay left-padded to a common length L, so every row's
# new key goes to column L and the cache's one length counter serves them all. The padding rows decode a pad token
# that attends to itself only, and their logits are dropped. A step whose graph is compiled runs compiled; until then
# (``prepare_step`` compiles it, untimed), or past 32 rows or the longest cache, eager, with the same numbers.


def into_static(lm: LoadedModel, kv, length: int):
    """A static cache of ``lm`` (compiled mode) holding ``kv`` (per layer (keys, values) [B, kv_heads, length,
    head_dim]) in its first rows and positions, with room for the next step; None in eager mode, past the largest
    batch size, or past the longest cache (the caller keeps a DynamicCache)."""
    shaped = shaped_of(lm)
    rows = padded_batch(kv[0][0].shape[0]) if shaped is not None else None
    size = cache_length(int(length) + 1, shaped.graph.max_positions) if rows else None
    if size is None:
        return None
    cache = shaped.cache(rows, size)
    with torch.inference_mode():
        for layer, (k, v) in zip(cache.layers, kv):
            layer.keys[: k.shape[0], :, : k.shape[2]].copy_(k)  # [B, kv_heads, length, head_dim]
            layer.values[: v.shape[0], :, : v.shape[2]].copy_(v)
            layer.cumulative_length.fill_(int(length))
    return cache


def _step_inputs(lm: LoadedModel, batch: Batch, tokens: list[int]):
    """The padded step's inputs: ids [R, 1], attention mask [R, cache length], positions [R, 1] (R = padded rows)."""
    cache = batch.cache
    rows, size = cache.layers[0].keys.shape[0], cache.layers[0].max_cache_len
    b, n = batch.mask.shape
    dev = batch.mask.device
    x = torch.full((rows, 1), lm.tokenizer.pad_token_id or 0, dtype=torch.long, device=dev)  # [R, 1]
    x[:b, 0] = torch.tensor(tokens, device=dev)
    mask = batch.mask.new_zeros(rows, size)  # [R, size] the positions each row attends to
    mask[:b, :n] = batch.mask
    mask[:, n] = 1  # every row's new token, a padding row's only one
    pos = batch.mask.new_zeros(rows, 1)  # [R, 1]
    pos[:b] = batch.mask.sum(-1, keepdim=True)
    return x, mask, pos


def step_graph(lm: LoadedModel, batch: Batch) -> str | None:
    """The compiled graph the batch's next step needs (its name), or None when that step runs eager whatever is
    compiled (eager mode, too many rows, too long)."""
    shaped = shaped_of(lm)
    if shaped is None or not is_static(batch.cache) or shaped.failure:
        return None
    first = batch.cache.layers[0]
    n = batch.mask.shape[1]
    if n + 1 > first.max_cache_len:
        return None  # _static_decode moves it to a longer cache first; asked again after that step
    return batch_name(first.keys.shape[0], first.max_cache_len)


def prepare_step(lm: LoadedModel, batch: Batch, progress=None) -> bool:
    """Before a timed batch step: compile its graph if it is not yet (a few passes on the batch's own cache, each
    rolled back, so nothing changes; on CUDA the second records the CUDA graph, the third replays it). Returns
    whether the step will run compiled."""
    name = step_graph(lm, batch)
    if name is None:
        return False
    shaped = shaped_of(lm)
    if shaped.ready(name):
        return True
    tokens = [lm.tokenizer.pad_token_id or 0] * len(batch.rows)
    n = batch.mask.shape[1]
    with compiling(lm, name, progress), torch.inference_mode():
        x, mask, pos = _step_inputs(lm, batch, tokens)
        for _ in range(3 if shaped.graph.cuda_graphs else 1):
            forward(lm, x, batch.cache, attention_mask=mask, position_ids=pos)
            rewind(batch.cache, n)
    return shaped.ready(name)


def _static_decode(lm: LoadedModel, batch: Batch, tokens: list[int]) -> torch.Tensor:
    n = batch.mask.shape[1]
    if n + 1 > batch.cache.layers[0].max_cache_len:  # full: into a longer static cache, or a DynamicCache
        batch.set_kv([(k.clone(), v.clone()) for k, v in batch.kv()], batch.mask)
        if not is_static(batch.cache):
            return decode_logits(lm, batch, tokens)
    x, mask, pos = _step_inputs(lm, batch, tokens)
    logits = forward(lm, x, batch.cache, attention_mask=mask, position_ids=pos)[: len(tokens), -1]  # [B, vocab]
    batch.mask = torch.cat([batch.mask, batch.mask.new_ones(len(tokens), 1)], dim=-1)  # [B, L + 1]
    return logits


def warm_batches(lm: LoadedModel, rows: int, prompt_tokens: int, progress=None) -> list[str]:
    """Compile, ahead of a class, the batch step graphs of every padded size up to ``rows`` rows (BATCH_SIZES) on
    the static cache that holds prompts of ``prompt_tokens`` tokens, so no student waits for a compile mid-answer
    (each graph otherwise compiles the first time a batch reaches its size). Untimed; announced first, so
    ``compile_status`` shows done and to do. Returns the graphs that are compiled; empty in eager mode."""
    shaped = shaped_of(lm)
    length = cache_length(int(prompt_tokens) + 1, shaped.graph.max_positions) if shaped is not None else None
    top = padded_batch(rows) or BATCH_SIZES[-1]
    sizes = [b for b in BATCH_SIZES if b <= top]
    if length is None:
        return []
    announce(lm, [batch_name(b, length) for b in sizes])
    return [batch_name(b, length) for b in sizes if warm_batch(lm, b, length, progress)]


def warm_batch(lm: LoadedModel, rows: int, length: int, progress=None) -> bool:
    """Compile the batch step graph of ``rows`` padded rows on a static cache of ``length`` positions (a warm-up of
    zeros that nobody reads); returns whether it is compiled."""
    shaped = shaped_of(lm)
    batch = Batch(lm)  # rows of one cached position each
    batch.cache, batch.mask = shaped.cache(rows, length), torch.ones((rows, 1), device=lm.device)
    batch.rows = [None] * rows
    rewind(batch.cache, 1)
    return prepare_step(lm, batch, progress)


def batch_graphs(lm: LoadedModel, prompt_tokens: int, tokens: int, rows: int = 1) -> list[tuple]:
    """Compiled mode: the batch step graphs a class batch of ``rows`` rows (padded: BATCH_SIZES) whose prompts hold
    ``prompt_tokens`` tokens needs to decode to ``tokens`` tokens and does not have yet, one per static cache length
    it moves through (``into_static``, ``_static_decode``), as (graph name, ``warm_batch``, args) for the background
    compiler: a page whose answer the class batcher serves asks for them before its run, as it asks for the run's
    own graphs (engine.core.background_compile.run_graphs)."""
    shaped, size = shaped_of(lm), padded_batch(rows)
    if shaped is None or shaped.failure or size is None:
        return []
    out, length = [], cache_length(int(prompt_tokens) + 1, shaped.graph.max_positions)
    while length is not None:
        if not shaped.ready(batch_name(size, length)):
            out.append((batch_name(size, length), warm_batch, (lm, size, length)))
        if length >= int(tokens) - 1:  # the last decode step writes position tokens - 2
            break
        length = cache_length(length + 1, shaped.graph.max_positions)
    return out


def step_compiled(lm: LoadedModel, batch: Batch) -> bool:
    """A class batch's next step (compiled mode): does it run as its compiled graph? A graph not compiled yet is
    compiled in the background (engine.core.background_compile) while this step and the next run eager on the same
    static cache, with the same numbers: a class never waits for a compile."""
    from engine.core.background_compile import COMPILER

    name = step_graph(lm, batch)
    if name is None:
        return False
    shaped = shaped_of(lm)
    if shaped.ready(name) and not shaped.graph.elsewhere():
        return True
    first = batch.cache.layers[0]
    COMPILER.submit(lm, name, warm_batch, lm, int(first.keys.shape[0]), int(first.max_cache_len))
    return False


def page_graphs(lm, prompt_tokens: int, tokens: int, batched: bool, alone: bool) -> list[tuple[str, Callable, tuple]]:
    """The graphs a page that draws the sidebar's run asks for, in the order they compile: the run's decode step;
    where the class batcher serves its answer (``batched``), the batcher's step next (``batch_graphs``); then the
    prompt's prefill bucket, where a run alone uses it (not ``batched``, or ``alone``: a page that times its
    run alone) or the batcher does (``bucket_beats_eager``, a GPU). On a CPU the batcher prefills eager, so the home
    page does not compile a bucket graph that its answer never runs, beside the answers (a minute of both cores)."""
    from engine.core.background_compile import run_graphs  # the compiler's module, imported as step_compiled does
    from engine.core.compile_watch import compile_warm_up

    graphs = run_graphs(lm, prompt_tokens, tokens)
    if not batched:
        return graphs
    decode = [g for g in graphs if g[1] is compile_warm_up]
    bucket = [g for g in graphs if g not in decode] if alone or bucket_beats_eager(lm) else []
    return decode + batch_graphs(lm, prompt_tokens, tokens) + bucket
