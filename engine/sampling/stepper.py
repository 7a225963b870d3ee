"""Generation one decode step at a time, driven by a person: append a token, take one forward pass with the
KV cache, look at the new distribution; go back to any step by cropping the cache.

A ``Stepper`` is deliberately mutable (it owns a KV cache); the UI keeps one per session. It never samples:
the caller chooses the token (``engine.sampling.stages.draw_at`` reproduces the loop's choice).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
import torch

from engine.core.loaded import LoadedModel
from engine.core.sampling import entropy_bits
from engine.core.loop import crop, decode_step, new_cache, prefill

MAX_STEPS = 64


@dataclass(frozen=True)
class StepSummary:
    step: int
    token_id: int  # the token appended at this step
    prob: float  # its probability at temperature 1
    top_id: int  # the most likely token at this step
    top_prob: float
    entropy_bits: float  # of the temperature-1 distribution


class Stepper:
    """logits[k] is the next-token distribution after the prompt and the first k appended tokens; the cache
    (created on the first append) holds keys/values for prompt + tokens, or for a prefix of them."""

    def __init__(self, prompt_ids, first_logits=None):
        self.prompt_ids: tuple[int, ...] = tuple(int(i) for i in prompt_ids)
        self.tokens: list[int] = []
        self.logits: list[np.ndarray] = []  # [vocab] float32 each
        self.cache = None
        self.forward_passes = 0
        # Streamlit may start a rerun (and its button callback) while the previous one is still inside a
        # forward pass; without this lock two appends read the same cache length and feed tokens twice.
        self._lock = threading.RLock()
        if first_logits is not None:  # from the trace: step 0 needs no pass of its own
            self.logits.append(np.asarray(first_logits, dtype=np.float32).reshape(-1))

    @property
    def step(self) -> int:
        """Index of the newest distribution (= tokens appended so far)."""
        return len(self.tokens)

    @property
    def full(self) -> bool:
        return len(self.tokens) >= MAX_STEPS

    def cached_tokens(self) -> int:
        return 0 if self.cache is None else int(self.cache.get_seq_length())

    @torch.inference_mode()
    def _forward(self, lm: LoadedModel) -> np.ndarray:
        """Feed every token not yet in the cache: the whole sequence on the first call (prefill), then one
        token per call (a decode step). Returns the logits after the last token."""
        seq = list(self.prompt_ids) + self.tokens
        if self.cache is None:
            self.cache = new_cache(lm)
        new = seq[self.cached_tokens():]
        x = torch.tensor([new], device=lm.device)  # [1, new]
        out = (decode_step if len(new) == 1 else prefill)(lm, x, self.cache)  # [1, vocab]
        self.forward_passes += 1
        return out[0].float().cpu().numpy()

    def start(self, lm: LoadedModel) -> np.ndarray:
        """The distribution after the prompt (one prefill), unless it was given at construction."""
        if not self.logits:
            self.logits.append(self._forward(lm))
        return self.logits[0]

    def append(self, lm: LoadedModel, token_id: int, at_step: int | None = None) -> np.ndarray | None:
        """Append ``token_id`` to the text and take one forward pass: returns the next distribution.
        With ``at_step``, a request made when the stepper was at another step (a stale or repeated
        click) is ignored and returns None."""
        with self._lock:
            if at_step is not None and at_step != self.step:
                return None
            if not self.logits:
                self.start(lm)
            if self.full:
                raise ValueError(f"at most {MAX_STEPS} steps")
            self.tokens.append(int(token_id))
            try:
                self.logits.append(self._forward(lm))
            except Exception:  # a half-updated cache cannot be trusted: drop it, the next pass re-prefills
                self.tokens.pop()
                self.cache = None
                raise
            return self.logits[-1]

    def restart(self, step: int) -> None:
        """Go back to ``step``: keep the first ``step`` tokens and crop the cache to match."""
        with self._lock:
            self._restart(step)

    def _restart(self, step: int) -> None:
        step = int(min(max(step, 0), len(self.tokens)))
        self.tokens = self.tokens[:step]
        self.logits = self.logits[: step + 1]
        if self.cache is not None:
            keep = len(self.prompt_ids) + step
            if not crop(self.cache, keep):  # a sliding window dropped keys it would need: the next pass re-prefills
                self.cache = None

    def summaries(self) -> list[StepSummary]:
        """One line per appended token, read from the temperature-1 distribution it was drawn from."""
        out = []
        for k, tok in enumerate(self.tokens):
            probs = torch.from_numpy(self.logits[k]).softmax(-1)  # [vocab]
            top = int(probs.argmax())
            out.append(StepSummary(k, tok, float(probs[tok]), top, float(probs[top]), entropy_bits(probs)))
        return out
