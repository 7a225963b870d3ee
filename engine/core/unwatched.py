"""The decode loop of a run no one watches token by token (a benchmark, a reference answer): compiled, each drawn id
stays on the device as the next step's input and the ids are read once a chunk (``decode_unwatched``), so on a GPU
the host queues steps ahead of the device instead of waiting for each id; elsewhere it is engine.core.loop's
``decode``. Every pass goes through engine.core.loop (``drawn_step``), the one door to the model."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from engine.core.cancel import pause_point
from engine.core.device_sampling import noise
from engine.core.loaded import LoadedModel
from engine.core.loop import (DeviceDraw, decode, device_draw, drawn_step, greedy, new_cache, prefill,
                              served_compiled, warm_up)
from engine.core.prefill_buckets import prefill_mode
from engine.measure.timing import now

# Steps between two reads of the drawn ids in ``decode_unwatched``: each read waits for the device to finish the
# steps queued so far, and at most this many minus one steps run past an end of sequence before it is seen.
UNWATCHED_CHUNK = 16


@dataclass(frozen=True)
class Unwatched:
    """What ``decode_unwatched`` did: its tokens, why it stopped, how many times it read ids back from the device
    (a step-by-step loop reads once per step) and whether the ids stayed on the device between steps."""

    tokens: list[int]
    reason: str  # "max_new_tokens" | "eos"
    reads: int
    on_device: bool


def decode_unwatched(lm: LoadedModel, token: int, cache, n: int, draw_with: DeviceDraw,
                     pick: Callable[[torch.Tensor], int] = greedy, stops=frozenset(),
                     chunk: int = UNWATCHED_CHUNK) -> Unwatched:
    """``decode`` for a run no one watches token by token (a benchmark, a reference answer): the same tokens, seed
    for seed, with no per-step callback.

    On a cache the compiled graph serves, each step's drawn id [1, 1] stays on the device and is the next step's
    input: the host reads the ids (and checks them for an end of sequence) once every ``chunk`` steps, not once per
    step, so on a GPU it queues steps ahead of the device instead of waiting for each id. A sampled run's noise is
    drawn for a chunk at once (the same numbers as step by step: engine.core.device_sampling.noise). The steps a
    chunk ran after an end of sequence are dropped. A job that takes turns may pause between any two steps, as in
    ``decode``; ``timed_unwatched``'s clock, which spans the steps, is used where no job takes turns. Anywhere else
    (eager, a cache the graph does not serve) this is ``decode``, one read per step."""
    if not served_compiled(lm, cache):
        out, reason = decode(lm, token, cache, n, pick=pick, stops=stops, on_device=draw_with, logits=False)
        return Unwatched(out, reason, len(out), False)
    ids = torch.tensor([[int(token)]], device=draw_with.device)  # [1, 1]
    out: list[int] = []
    reads, n, chunk = 0, int(n), max(1, int(chunk))
    while len(out) < n:
        m = min(chunk, n - len(out))
        q = None
        if not draw_with.greedy:
            with torch.inference_mode():  # an inference tensor, as each step's own noise is: dynamo guards on it
                q = noise((m, draw_with.vocab), draw_with.generator, draw_with.device)
        drawn = []
        for i in range(m):
            ids = drawn_step(lm, ids, cache, draw_with, None if q is None else q[i:i + 1])[1]  # [1, 1], on the device
            drawn.append(ids)
            # a job that takes turns lets the next in the fair order run here, as often as ``decode`` does; the ids
            # queued so far are the step's own copies (DecodeGraph.step), which no other job's pass overwrites
            pause_point()
        got = torch.cat(drawn).view(-1).tolist()  # the one read of this chunk
        reads += 1
        for t in got:
            out.append(int(t))
            if t in stops:
                return Unwatched(out, "eos", reads, True)
    return Unwatched(out, "max_new_tokens", reads, True)


def timed_unwatched(lm, ids: list[int], n: int) -> tuple[list[int], float, Unwatched]:
    """``timed_greedy``'s run with no one watching token by token: greedy prefill, then ``decode_unwatched`` to ``n``
    tokens in all (EOS ignored), its steps timed together after a device sync: (token ids, decode seconds, how the
    decode ran)."""
    d = device_draw(lm)  # greedy
    dev = d.device
    tokens = len(ids) + int(n)
    warm_up(lm, tokens)
    cache = new_cache(lm, tokens=tokens)
    first = greedy(prefill(lm, torch.tensor([list(ids)], device=dev), cache, prefill_mode(lm, len(ids), cache))[0])
    t0 = now(dev)
    how = decode_unwatched(lm, first, cache, max(0, int(n) - 1), d)
    return [first, *how.tokens], now(dev) - t0, how
