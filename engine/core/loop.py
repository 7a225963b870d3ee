"""The inference loop's stages in loop order, as gpt-fast's generate.py writes them: a new KV cache, prefill
over the prompt, one decode step per new token, ``decode`` for n steps with a callback, rolling the cache back
(``crop``), warm-up, and the end-of-sequence ids that stop it.

Two engine modes run behind this door (engine.core.compiled): eager, and compiled, where a decode step of a compiled
model on the static cache that ``new_cache(lm, tokens=...)`` made for it runs as one compiled graph (a CUDA graph on
a GPU), and so do a verify pass, a padded batch step and a one-sequence prefill (padded to its bucket:
engine.core.prefill_buckets) on a static cache whose graph is compiled (``engine.core.compiled.ShapedGraphs``).
Every other pass of a compiled model (analyses, the stepper, anything on the eager loop's cache) runs eager.

This is the one door to the model. It is the only module that passes a KV cache (``past_key_values=``) to a
model: trace, timeline, KV snapshots, the stepper, speculative decoding and the batching scheduler all call it;
and a pass with no cache (an analysis, the logit lens, timing without a cache, calibration) is ``full_pass``.
Every forward pass here first asks ``engine.core.cancel.check_cancelled()``, so a job whose session went away
stops within one step, and follows the thread rule (``engine.measure.threads.pass_threads``).
``through_door()`` tells a hook whether the pass running now came through here (tests count the ones that
did not).
"""
from __future__ import annotations

import contextvars
import time
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

import torch
from transformers import DynamicCache

from engine.core.compiled import compiling, graph_of, shaped_of
from engine.core.compile_record import (cache_length, decode_name, expected_line, prefill_bucket, prefill_name,
                                         record_compile_s)
from engine.core.device_sampling import draw, knobs, noise
from engine.core.fused import fuse
from engine.core.sampling import SamplingSettings
from engine.core.loaded import LoadedModel
from engine.core.prefill_buckets import PrefillMode, prefill_mode
from engine.core.static_cache import is_static, rewind
from engine.measure.threads import compiled_pass_threads, pass_threads
from engine.measure.timing import now
from engine.core.cancel import Cancelled, check_cancelled, pause_point

# Models that have had their warm-up pass. Kept here, not as an attribute on the shared model: a request never
# changes the model object (see tests/engine/test_model_state.py).
_WARMED: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()
# Widths of passes on a cache (k + 1 tokens: a speculative verify pass) each model has already run once.
_WARMED_WIDTHS: "weakref.WeakKeyDictionary[torch.nn.Module, set[int]]" = weakref.WeakKeyDictionary()


_DOOR: contextvars.ContextVar[bool] = contextvars.ContextVar("ile_through_the_door", default=False)


def _module(m) -> torch.nn.Module:
    return m.model if isinstance(m, LoadedModel) else m


def through_door() -> bool:
    """True while a forward pass made by this module runs (on this thread)."""
    return _DOOR.get()


@contextmanager
def _door():
    token = _DOOR.set(True)
    try:
        yield
    finally:
        _DOOR.reset(token)


def eos_ids(lm: LoadedModel) -> set[int]:
    ids: set[int] = set()
    gen = getattr(lm.model, "generation_config", None)
    for src in (getattr(gen, "eos_token_id", None), lm.tokenizer.eos_token_id):
        if isinstance(src, int):
            ids.add(src)
        elif src:
            ids.update(int(i) for i in src)
    return ids


def new_cache(lm, rollback: bool = False, tokens: int | None = None):
    """An empty KV cache for ``lm`` (a LoadedModel or a bare model, e.g. a draft or an early-exit view): the
    cache ``model.generate`` builds, with a sliding-window layer for each windowed layer.

    ``rollback=True`` (speculative decoding): sliding-window layers keep the keys fed since the last ``crop``
    (transformers' ``activate_past_recording``), so rejected drafts can be dropped past the window; every
    ``crop`` trims them back to the window.

    ``tokens``: the run will feed at most this many tokens, one sequence. A compiled model then gets its static
    cache (engine.core.compiled), on which its decode steps run compiled; without ``tokens``, with ``rollback``, or
    when the run is longer than any static cache, the eager loop's cache."""
    graph = graph_of(lm)
    if graph is not None and tokens is not None and not rollback:
        static = graph.cache(tokens)
        if static is not None:
            return static
    cache = DynamicCache(config=_module(lm).config)
    if rollback:
        cache.activate_past_recording()  # its sliding-window layers; the others have nothing to record
    return cache


def can_crop(cache, n: int) -> bool:
    """Can ``crop(cache, n)`` restore exactly the cache of the first ``n`` tokens? Not when a sliding-window
    layer has already dropped keys it would need (past its window, without past recording)."""
    extra = cache.get_seq_length() - int(n)
    if extra <= 0:
        return True
    for layer in getattr(cache, "layers", ()):
        if getattr(layer, "is_sliding", False) and layer.get_seq_length() >= getattr(layer, "sliding_window", 0):
            if not getattr(layer, "record_past", False):
                return False
            remaining = layer.get_seq_length() - extra
            if layer.keys.shape[-2] - extra < min(layer.sliding_window - 1, remaining):
                return False  # the keys the window still needs before the dropped ones are gone
    return True


def crop(cache, n: int) -> bool:
    """Roll the cache back to its first ``n`` tokens (speculative rejections, the stepper's "go back").
    transformers 5: ``DynamicCache.crop(-k)`` drops the last k. Returns False, changing nothing, when that
    cannot be exact (``can_crop``); the caller then rebuilds the cache from the kept tokens."""
    if is_static(cache):  # compiled mode's static cache: only its length moves back
        rewind(cache, n)
        return True
    extra = cache.get_seq_length() - int(n)
    if not can_crop(cache, n):
        return False
    layers = getattr(cache, "layers", None)
    if layers is None:
        if extra > 0:
            cache.crop(-extra)
        return True
    for layer in layers:
        if getattr(layer, "is_sliding", False) and getattr(layer, "record_past", False):
            if layer.get_seq_length() >= layer.sliding_window or extra > 0:
                layer.crop(-extra if extra > 0 else 0)  # also trims the recorded past back to the window
        elif extra > 0:
            layer.crop(-extra)
    return True


def served_compiled(lm, cache) -> bool:
    """Do ``lm``'s decode steps on ``cache`` run as its compiled graph?"""
    graph = graph_of(lm)
    return graph is not None and graph.owns(cache) and not graph.elsewhere()


def _on_model(model, t: torch.Tensor) -> torch.Tensor:
    """``t`` on the model's device: token ids built on the CPU reach a model on a GPU (found on an H100: a caller
    that built them on the CPU failed with a device mismatch)."""
    dev = getattr(model, "device", None)
    return t.to(dev) if isinstance(dev, torch.device) and t.device != dev else t


def _cache_pass(model):
    """The plain pass that compiled mode compiles for a verify pass or a padded batch step
    (engine.core.compiled.ShapedGraphs)."""

    def cache_pass(ids, cache, attention_mask, position_ids, keep: int):  # ids [rows, n] -> [rows, keep, vocab]
        return model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=keep,
                     attention_mask=attention_mask, position_ids=position_ids).logits

    return cache_pass


def _decode_call(model):
    """The plain decode step that compiled mode compiles (engine.core.compiled.DecodeGraph), the next token's draw
    included (engine.core.device_sampling): the whole step is one graph."""

    def decode_call(ids, cache, knobs, q):  # ids [1, 1], knobs [4], q [1, vocab]
        logits = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1).logits  # [1, 1, V]
        return logits, draw(logits[:, -1], knobs, q)[:, None]  # [1, 1, vocab], next id [1, 1]

    return decode_call


@dataclass(frozen=True)
class DeviceDraw:
    """What a compiled decode step needs to draw the next token itself: the settings as a tensor and the noise of
    the draw, each step's from the run's generator (engine.core.device_sampling)."""

    knobs: torch.Tensor  # [4]
    greedy: bool
    generator: torch.Generator | None
    vocab: int
    device: torch.device
    ones: torch.Tensor  # [1, vocab]: a greedy step's noise (unused by its argmax)

    def noise(self) -> torch.Tensor:
        return self.ones if self.greedy else noise((1, self.vocab), self.generator, self.device)  # [1, vocab]


@torch.inference_mode()
def device_draw(lm, settings: SamplingSettings = SamplingSettings(), generator: torch.Generator | None = None
                ) -> DeviceDraw:
    """The draw of a run with ``settings`` and ``generator`` (None: greedy), on ``lm``'s device."""
    model = _module(lm)
    dev = next(model.parameters()).device
    head = model.get_output_embeddings()
    weight = getattr(head, "weight", None)  # an int8 copy's head is a quantized module: no plain weight tensor
    vocab = int(weight.shape[0]) if isinstance(weight, torch.Tensor) else \
        int(model.config.get_text_config(decoder=True).vocab_size)
    s = settings.clamp()
    return DeviceDraw(knobs(s, dev), s.greedy or generator is None, generator, vocab, dev,
                      torch.ones(1, vocab, device=dev))


_GREEDY_DRAWS: "weakref.WeakKeyDictionary[torch.nn.Module, DeviceDraw]" = weakref.WeakKeyDictionary()


def _greedy_draw(lm) -> DeviceDraw:
    model = _module(lm)
    if model not in _GREEDY_DRAWS:
        _GREEDY_DRAWS[model] = device_draw(lm)
    return _GREEDY_DRAWS[model]


@torch.inference_mode()
def forward(lm, ids: torch.Tensor, cache, keep: int = 1, attention_mask: torch.Tensor | None = None,
            position_ids: torch.Tensor | None = None) -> torch.Tensor:
    """One forward pass of ``ids`` [batch, n] on top of ``cache`` (which it extends); returns the logits of the
    last ``keep`` positions [batch, keep, vocab]. Prefill, a decode step, a speculative verify pass (keep = k+1)
    and a padded batch step (mask, positions) are all this call."""
    check_cancelled()
    model = _module(lm)
    ids = _on_model(model, ids)
    if (keep == 1 and attention_mask is None and position_ids is None and tuple(ids.shape) == (1, 1)
            and served_compiled(lm, cache)):
        return drawn_step(lm, ids, cache, _greedy_draw(lm))[0]  # [1, 1, vocab]
    shaped = shaped_of(lm)
    if shaped is not None and shaped.serves(ids, cache, keep, attention_mask):
        _fused(graph_of(lm))
        with compiled_pass_threads(ids.numel(), ids.device), _door():  # a verify pass, batch step or prefill bucket
            return shaped.run(_cache_pass, ids, cache, keep, attention_mask, position_ids)  # [rows, keep, vocab]
    kw = {}
    if attention_mask is not None:
        kw["attention_mask"] = _on_model(model, attention_mask)
    if position_ids is not None:
        kw["position_ids"] = _on_model(model, position_ids)
    with pass_threads(ids.numel(), ids.device), _door():  # a small pass: one CPU thread (engine/measure/threads.py)
        return model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=int(keep), **kw).logits


@torch.inference_mode()
def drawn_step(lm, ids: torch.Tensor, cache, d: DeviceDraw, q: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """One compiled decode step that also draws the next token on the device: ids [1, 1] -> (logits [1, 1, vocab],
    next id [1, 1]). Only for a cache the compiled graph serves (``served_compiled``). ``q`` [1, vocab]: this step's
    noise, drawn before (default: ``d.noise()``, drawn now)."""
    check_cancelled()
    ids = _on_model(_module(lm), ids)
    graph = _fused(graph_of(lm))
    with pass_threads(1, ids.device), _door():
        return graph.step(ids, cache, _decode_call, d.knobs, d.noise() if q is None else q)


def _fused(graph):
    """``graph`` with its fused tree made (engine.core.fused), here on the worker before its first compiled pass
    (it concatenates the fused weights once): every compiled pass of a model (decode step, verify, batch step) runs it."""
    if graph.fusion is None:
        graph.fusion = fuse(graph.model, check=lambda m, x: full_pass(m, x).logits)
    return graph


def full_pass(lm, ids: torch.Tensor, params: dict | None = None, **kw):
    """One forward pass over the whole of ``ids`` [batch, n] with no KV cache; returns the model's output
    (``.logits`` [batch, n or logits_to_keep, vocab]; hidden states or attentions where ``kw`` asks for them).
    ``params``: run with these tensors in place of the model's own (``torch.func.functional_call``: the training
    pass of the memory measurement). The same cancellation check and thread rule as ``forward``; the caller
    chooses inference or grad mode."""
    check_cancelled()
    model = _module(lm)
    ids = _on_model(model, ids)
    with pass_threads(ids.numel(), ids.device), _door():
        if params is not None:
            return torch.func.functional_call(model, params, (), {"input_ids": ids, "use_cache": False, **kw})
        return model(input_ids=ids, use_cache=False, **kw)


def prefill(lm, ids: torch.Tensor, cache, mode: PrefillMode | None = None) -> torch.Tensor:
    """One forward pass over the whole prompt; fills the cache. ids: [batch, n] -> logits [batch, vocab].
    ``mode``: how it runs (``engine.core.prefill_buckets.prefill_mode``, decided by a caller that reports it, else
    here): compiled mode runs one sequence on its static cache as its bucket's compiled graph when that graph is
    ready, padded on the right, and rolls the padding's positions back."""
    mode = mode or prefill_mode(lm, ids.shape[1], cache, ids.shape[0])
    if mode.compiled:
        n, past = ids.shape[1], int(cache.get_seq_length())
        with torch.inference_mode():  # inference tensors, as the warm-up's: dynamo guards on a tensor's kind
            x = torch.cat([ids, ids[:, -1:].expand(1, mode.bucket - n)], dim=1)  # [1, bucket] right-padded
            keep = torch.tensor([n - 1], device=x.device)
        logits = forward(lm, x, cache, keep=keep)  # [1, 1, vocab]
        rewind(cache, past + n)
        return logits[:, -1]
    return forward(lm, ids, cache)[:, -1]


def warm_prefill(lm, n: int, tokens: int, progress: Callable[[str], None] | None = None) -> bool:
    """Compiled mode: compile the graph of the bucket that holds ``n`` prompt tokens (engine.core.prefill_buckets) on
    the static cache of a run of ``tokens`` tokens (untimed; three passes on CUDA to record and replay its CUDA
    graph). Returns whether that graph is ready; False in eager mode, past the largest bucket or the longest static
    cache, or when it failed. On the background compiler's thread it runs on a static cache of its own: the engine
    may be using the kept one meanwhile (engine.core.compiled.ShapedGraphs.cache)."""
    shaped, bucket = shaped_of(lm), prefill_bucket(n)
    length = cache_length(tokens, shaped.graph.max_positions) if shaped is not None else None
    if bucket is None or length is None or bucket > length or shaped.failure:
        return False
    name, runs = prefill_name(bucket, length), 3 if shaped.graph.cuda_graphs else 1
    if shaped.ready(name):
        return True
    cache, say = shaped.cache(1, length), progress or (lambda msg: None)
    ids = torch.zeros((1, bucket), dtype=torch.long, device=next(_module(lm).parameters()).device)  # [1, bucket]
    with compiling(lm, name, progress), torch.inference_mode():
        for i in range(runs):
            say(f"Step {i + 1} of {runs}: " + ("compiling the prefill (dynamo traces it, inductor builds its kernels)"
                                                if i == 0 else "running it again"))
            forward(lm, ids, cache, keep=torch.tensor([bucket - 1], device=ids.device))  # [1, 1, vocab]
            rewind(cache, 0)
    return shaped.ready(name)


def decode_step(lm, token: torch.Tensor, cache) -> torch.Tensor:
    """One forward pass for one new token per sequence, reading past keys/values from the cache.
    token: [batch, 1] -> logits [batch, vocab]."""
    return forward(lm, token, cache)[:, -1]


def greedy(logits: torch.Tensor) -> int:
    return int(logits.argmax())


StepCallback = Callable[[int, int, torch.Tensor, float], None]


def decode(lm: LoadedModel, token: int, cache, n: int, on_step: StepCallback | None = None,
           pick: Callable[[torch.Tensor], int] = greedy, stops=frozenset(), on_device: DeviceDraw | None = None,
           logits: bool = True) -> tuple[list[int], str]:
    """Up to ``n`` decode steps after ``token`` (already chosen, not yet in the cache), one token per pass.

    Each step feeds the last token, picks the next from its logits (``pick``, greedy by default) and calls
    ``on_step(i, token, logits [vocab] on CPU, seconds)``; seconds cover the pass and the pick, measured after a
    device sync, and the callback's own time is not counted. Stops early when a token in ``stops`` (EOS) is
    picked. Between two steps, off the clock, a job that takes turns may let other work run
    (``engine.core.cancel.pause_point``). Returns (new tokens, stop reason: "max_new_tokens" | "eos").

    ``on_device``: on a cache the compiled graph serves, the step draws the token itself with these settings and
    generator (the same token ``pick`` would give for the same seed: engine.core.device_sampling) and one token id
    is read per step; ``logits=False``: the logits stay on the device and ``on_step`` gets None for them."""
    dev = next(_module(lm).parameters()).device
    drawn = on_device is not None and served_compiled(lm, cache)
    out: list[int] = []
    for i in range(int(n)):
        t0 = now(dev)
        ids = torch.tensor([[int(token)]], device=dev)  # [1, 1]
        if drawn:
            step_logits, nxt = drawn_step(lm, ids, cache, on_device)  # [1, 1, vocab], [1, 1]
            token = int(nxt)
            step_logits = step_logits[0, -1].float().cpu() if logits else None  # [vocab]
        else:
            step_logits = decode_step(lm, ids, cache)[0].float().cpu()  # [vocab]
            token = int(pick(step_logits))
        seconds = now(dev) - t0
        out.append(token)
        if on_step is not None:
            on_step(i, token, step_logits, seconds)
        if token in stops:
            return out, "eos"
        pause_point()  # off the clock: a job that takes turns lets the next in the fair order run here
    return out, "max_new_tokens"


def timed_greedy(lm, ids: list[int], n: int, reserve: int = 0,
                 on_prefill: Callable[[PrefillMode], None] | None = None) -> tuple[list[int], float, list[float]]:
    """Greedy prefill then ``decode`` to ``n`` tokens in all (EOS ignored), each pass timed after a device sync:
    (token ids, prefill seconds, decode step seconds). The timed greedy loop of the timeline, precision and
    thread benchmarks. ``reserve``: a compiled model's static cache holds at least this many tokens (a sweep keeps
    one length, one compiled graph, for all its prompts); compiled, the step is warmed up first (no compile timed),
    and the prefill runs as its bucket's graph where that is compiled (``prefill``). ``on_prefill(mode)`` hears how
    the prefill ran, off the clock."""
    dev = next(_module(lm).parameters()).device
    tokens = max(len(ids) + int(n), int(reserve))
    warm_up(lm, tokens)
    cache = new_cache(lm, tokens=tokens)
    how = prefill_mode(lm, len(ids), cache)
    t0 = now(dev)
    first = greedy(prefill(lm, torch.tensor([list(ids)], device=dev), cache, how)[0])  # [1, n] -> [vocab] -> id
    t_prefill = now(dev) - t0
    if on_prefill is not None:
        on_prefill(how)
    steps: list[float] = []
    out, _ = decode(lm, first, cache, max(0, int(n) - 1), on_step=lambda i, tok, logits, s: steps.append(s),
                    on_device=_greedy_draw(lm), logits=False)
    return [first, *out], t_prefill, steps


def warm_up(lm, tokens: int | None = None, progress: Callable[[str], None] | None = None, width: int = 1) -> None:
    """One small pass so the first timed step does not pay for one-off allocations (once per model).

    ``width`` > 1: also one pass of that many tokens on a cache (a speculative verify pass of k + 1 tokens), once
    per model and width: the first pass of a new shape picks and loads its kernels (on a GPU, each kernel's module
    is loaded on its first launch), and a race of a few rounds would otherwise time that in its first round only.

    Compiled mode (engine.core.compiled), with ``tokens``: the decode graph for the static cache that holds
    ``tokens`` is compiled here, once per length, by running a few steps on it (on CUDA the first compiles, the
    second records the CUDA graph, the third replays it), so no measured step ever compiles. A compile that fails
    is recorded on the graph in one line and the model's runs are eager from then on. ``progress(message)`` hears
    each phase."""
    model = _module(lm)
    tok = getattr(getattr(lm, "tokenizer", None), "eos_token_id", None) or 0
    ids = torch.tensor([[tok] * 4], device=next(model.parameters()).device)
    if model not in _WARMED:
        cache = new_cache(model)
        prefill(model, ids, cache)
        decode_step(model, ids[:, :1], cache)
        _WARMED.add(model)
    width = int(width)
    if width > 1 and width not in _WARMED_WIDTHS.setdefault(model, set()):
        cache = new_cache(model, rollback=True)
        prefill(model, ids, cache)
        forward(model, torch.tensor([[tok] * width], device=ids.device), cache, keep=width)
        crop(cache, ids.shape[1])
        _WARMED_WIDTHS[model].add(width)
    graph = graph_of(lm)
    if graph is None or tokens is None or graph.failure or graph.ready(tokens):
        return
    cache = new_cache(lm, tokens=tokens)
    if not served_compiled(lm, cache):
        return  # longer than any static cache: this run is eager
    say = progress or (lambda msg: None)
    name = decode_name(cache.layers[0].max_cache_len)
    say(expected_line(lm, name))  # before it starts: the last measured time, or that it is unknown
    t0 = time.perf_counter()
    say(f"Prefill into a static cache of {cache.layers[0].max_cache_len} positions (eager)")
    prefill(lm, ids, cache)
    for i, what in enumerate(("compiling the decode step (dynamo traces it, inductor writes and builds its kernels)",
                              "running it again" + (" (recording the CUDA graph)" if graph.cuda_graphs else ""),
                              "replaying it")):
        say(f"Step {i + 1} of 3: {what}")
        try:
            decode_step(lm, ids[:, :1], cache)
        except Cancelled:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure to compile: one line, and eager from now on
            say(graph.fail(exc))
            return
    graph.record_warm(tokens, time.perf_counter() - t0)
    record_compile_s(lm, name, time.perf_counter() - t0)
