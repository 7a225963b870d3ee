"""Drafters for speculative decoding: cheap guessers of the target's next k tokens.

Letters follow Leviathan et al. 2023: p is the target's distribution, q the draft's. Every drafter has one
small interface, the ``Drafter`` protocol (as Hugging Face's CandidateGenerator is for ``generate``):

- ``start(prompt_ids, settings, generator)`` before a run;
- ``propose(context, k) -> (tokens, q)``: up to k guessed tokens after ``context``; ``q`` is a float tensor
  [len(tokens), vocab] with the draft distribution each token was drawn from, or ``None`` when the drafter
  is deterministic (its q is one-hot at the proposed token: prompt lookup, or any model drafter at
  temperature 0);
- ``update(accepted)``: how many of the proposed tokens the target kept (rolls back the draft's KV cache).

Three kinds: a separate draft model that shares the target's tokenizer (``model:NAME``), prompt lookup
(``lookup``: continue the longest n-gram match found earlier in the context, no model at all) and early exit
(``early-exit:L``: the target's own first L blocks, then its final norm and output head; self-speculative).
"""
from __future__ import annotations

import copy
from typing import Callable, Protocol

import numpy as np
import torch

from engine.core import arch
from engine.core.loop import crop, forward, new_cache
from engine.core.loaded import LoadedModel, ModelLoadError, ModelRef
from engine.models.loading import check_size, estimate_params, load_model
from engine.core.sampling import SamplingSettings, sampling_probs
from engine.store import BoundedStore

LOOKUP_MAX_NGRAM = 3
LOOKUP_MIN_NGRAM = 2


class Drafter(Protocol):
    """What speculative decoding asks of a drafter (engine.speculative.decoding.speculative_generate)."""

    name: str  # the spec it was built from, as shown on the page ("lookup", "early-exit:8", "model:NAME")
    deterministic: bool  # q is one-hot at each proposed token (propose returns q = None)
    cost_layers: int  # transformer blocks one draft token costs (0: no model)

    def start(self, prompt_ids, settings: SamplingSettings, generator) -> None:
        """Before a run: the prompt ids, the sampling settings and the run's random generator."""

    def propose(self, context: list[int], k: int) -> tuple[list[int], torch.Tensor | None]:
        """Up to k guessed token ids after ``context``, and q [len(tokens), vocab] they were drawn from (None
        when deterministic)."""

    def update(self, accepted: int) -> None:
        """How many of the proposed tokens the target kept (a model drafter rolls its KV cache back)."""


class DrafterError(ValueError):
    """A drafter cannot be built; the message is written for the person who asked for it."""


class LookupDrafter:
    """Prompt lookup (Saxena 2023): find the first earlier occurrence of the context's last n tokens (longest n
    first, n = max_ngram .. min_ngram) and propose the tokens that followed it. q is one-hot.

    The first occurrence is usually the source text in the prompt (what extractive answers copy). A single
    repeated token ("the", ",") is a weak clue: with min_ngram = 2 such rounds draft nothing and cost one
    ordinary decode step, instead of a wider verify pass that is almost always rejected (on a CPU, checking
    k + 1 tokens costs noticeably more than checking one; measured in ``bench specdec``)."""

    deterministic = True

    def __init__(self, max_ngram: int = LOOKUP_MAX_NGRAM, min_ngram: int = LOOKUP_MIN_NGRAM):
        self.max_ngram = max(1, int(max_ngram))
        self.min_ngram = min(max(1, int(min_ngram)), self.max_ngram)
        default = (self.max_ngram, self.min_ngram) == (LOOKUP_MAX_NGRAM, LOOKUP_MIN_NGRAM)
        self.name = "lookup" if default else f"lookup:{self.min_ngram}-{self.max_ngram}"
        self.cost_layers = 0

    def start(self, prompt_ids, settings: SamplingSettings, generator) -> None:
        pass

    def propose(self, context: list[int], k: int):
        if k <= 0 or len(context) < 2:
            return [], None
        arr = np.asarray(context, dtype=np.int64)
        for n in range(min(self.max_ngram, len(arr) - 1), self.min_ngram - 1, -1):
            windows = np.lib.stride_tricks.sliding_window_view(arr[:-1], n)  # [len-n, n]; never the suffix itself
            hits = np.flatnonzero((windows == arr[-n:]).all(1))
            if hits.size:
                j = int(hits[0]) + n
                return arr[j:j + k].tolist(), None
        return [], None

    def update(self, accepted: int) -> None:
        pass


def lookup_drafter(arg: str) -> LookupDrafter:
    """``lookup`` (n-grams of 3 down to 2 tokens), ``lookup:N`` (N down to min(2, N)), ``lookup:M-N`` (N down to M)."""
    arg = arg.strip()
    try:
        if not arg:
            return LookupDrafter()
        lo, dash, hi = arg.partition("-")
        if dash:
            if int(lo) > int(hi):
                raise ValueError
            return LookupDrafter(int(hi), int(lo))
        return LookupDrafter(int(arg), min(LOOKUP_MIN_NGRAM, int(arg)))
    except ValueError:
        raise DrafterError(f"lookup needs n-gram sizes: lookup:N (longest N) or lookup:M-N (M <= N), not {arg!r}."
                           ) from None


class ModelDrafter:
    """Any causal LM as the draft: it decodes k tokens one at a time with its own KV cache, sampling each from
    q = sampling_probs(draft logits) under the same settings as the target (so p and q are comparable)."""

    def __init__(self, model: torch.nn.Module, name: str, vocab_size: int | None = None):
        self.model, self.name = model, name
        self.vocab_size = vocab_size
        self.deterministic = False
        self.cost_layers = model.config.num_hidden_layers

    def start(self, prompt_ids, settings: SamplingSettings, generator) -> None:
        self.cache = new_cache(self.model, rollback=True)
        self.fed = 0  # context tokens whose keys/values are in self.cache
        self.settings, self.gen = settings, generator
        self.deterministic = settings.greedy
        self._base = 0
        self._fed_drafts = 0

    @torch.inference_mode()
    def _forward(self, ids: list[int]) -> torch.Tensor:
        dev = next(self.model.parameters()).device
        x = torch.tensor([ids], device=dev)  # [1, n]
        out = forward(self.model, x, self.cache)[0, -1].float().cpu()  # [vocab]
        return out[: self.vocab_size] if self.vocab_size else out

    def propose(self, context: list[int], k: int):
        if k <= 0:
            return [], None
        logits = self._forward(list(context[self.fed:]))
        self._base = self.fed = len(context)
        tokens, qs = [], []
        for i in range(k):
            if self.settings.greedy:
                tok = int(logits.argmax())
            else:
                q = sampling_probs(logits, self.settings)  # [vocab]
                tok = int(torch.multinomial(q, 1, generator=self.gen))
                qs.append(q)
            tokens.append(tok)
            if i < k - 1:
                logits = self._forward([tok])
        self._fed_drafts = k - 1
        return tokens, (torch.stack(qs) if qs else None)

    def update(self, accepted: int) -> None:
        """Keep the context and the accepted drafts that were fed; drop the rest (DynamicCache.crop)."""
        keep = self._base + min(int(accepted), self._fed_drafts)
        if not crop(self.cache, keep):  # a draft model's window was crossed: rebuild its cache on the next pass
            self.cache, keep = new_cache(self.model, rollback=True), 0
        self.fed = keep
        self._fed_drafts = 0


def _shallow(module: torch.nn.Module) -> torch.nn.Module:
    """A new module object that shares every parameter with ``module`` but has its own child table: a child set
    on it (``setattr``) must not land in the target's table. nn.Module has no public copy of that table."""
    new = copy.copy(module)
    new._modules = dict(module._modules)
    return new


def early_exit_model(model: torch.nn.Module, layers: int) -> torch.nn.Module:
    """The target's first ``layers`` blocks, its final norm and its output head, as a model of its own.

    No weight is copied: the view shares tensors with the target. Its config says ``layers`` blocks, so its
    KV cache has only those layers (the target's cache is left alone)."""
    total = len(arch.blocks(model))
    if not 1 <= layers < total:
        raise DrafterError(f"early-exit needs 1 to {total - 1} layers for this {total}-block model, not {layers}.")
    cfg = copy.deepcopy(model.config)
    cfg.num_hidden_layers = layers
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = list(cfg.layer_types)[:layers]
    blocks = arch.blocks(model)
    path = next(n for n, m in model.named_modules() if m is blocks).split(".")  # e.g. model.decoder.layers
    view = _shallow(model)
    parent = view
    for name in path[:-1]:  # a shallow copy of every module on the way to the blocks
        child = _shallow(getattr(parent, name))
        if hasattr(child, "config"):
            child.config = cfg
        setattr(parent, name, child)
        parent = child
    setattr(parent, path[-1], torch.nn.ModuleList(list(blocks)[:layers]))
    view.config = cfg
    return view


# (target name, dtype, device, layers, seed) -> (target, draft); each draft is at most the target's size (the layers
# are capped at the target's depth), so two at most
_RANDOM_DRAFTS = BoundedStore("random draft models", 2)


def random_draft_layers(lm: LoadedModel, arg: str) -> int:
    """The L of ``model:random:L`` (default 2), refused unless 1 <= L <= the target's depth: a draft with
    more blocks than the target is never cheaper, and a huge L would allocate without bound."""
    try:
        layers = int(arg or 2)
    except ValueError:
        raise DrafterError(f"model:random:L needs a number of layers L, not {arg[:40]!r}.") from None
    if not 1 <= layers <= lm.info.n_layers:
        raise DrafterError(f"model:random:L takes L from 1 to {lm.info.n_layers} (the target's own depth), not "
                           f"{str(layers)[:40]}: a draft with more blocks than the target is never cheaper.")
    return layers


def random_draft_model(lm: LoadedModel, layers: int, seed: int = 0) -> torch.nn.Module:
    """A random-weight model built from the target's config with fewer blocks (same tokenizer): a draft
    that is almost always wrong, for tests and for the lesson that a poor draft costs more than it saves.
    Its size is estimated and checked against the free memory before it is built; it is built once per
    process (the same target, L and seed return the same model)."""
    from transformers import AutoModelForCausalLM

    cfg = copy.deepcopy(lm.model.config)
    cfg.num_hidden_layers = int(layers)
    if cfg.num_hidden_layers < 1:
        raise DrafterError(f"A random draft needs at least 1 layer, not {layers}.")
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = list(cfg.layer_types)[: cfg.num_hidden_layers]
    p = next(lm.model.parameters())
    key = (lm.ref, str(p.dtype), str(p.device), cfg.num_hidden_layers, seed)

    def build() -> tuple:
        try:
            check_size(estimate_params(cfg.to_dict()), p.element_size(), f"A random draft of {layers} layers")
        except ModelLoadError as exc:
            raise DrafterError(str(exc)) from None
        torch.manual_seed(seed)
        m = AutoModelForCausalLM.from_config(cfg)
        return lm.model, m.to(device=p.device, dtype=p.dtype).eval().requires_grad_(False)

    target, draft = _RANDOM_DRAFTS.get_or_put(key, build)
    if target is not lm.model:  # kept beside an earlier load of this name, since replaced: build for this one
        target, draft = _RANDOM_DRAFTS.put(key, build())
    return draft


def same_vocabulary(tok_a, tok_b) -> bool:
    return len(tok_a) == len(tok_b) and tok_a.get_vocab() == tok_b.get_vocab()


def _load_named(name: str) -> LoadedModel:
    return load_model(ModelRef(name))


def make_drafter(lm: LoadedModel, spec: str, loader: Callable[[str], LoadedModel] = _load_named) -> Drafter:
    """Build a drafter from a short spec: ``lookup[:N | :M-N]``, ``early-exit:L``, ``model:NAME``.

    ``model:self`` (or the target's own name) drafts with the target itself; ``model:random:L`` with a
    random-weight model of L blocks built from the target's config; any other NAME is loaded with ``loader``
    and refused unless its tokenizer has exactly the target's vocabulary."""
    spec = (spec or "").strip()
    kind, _, arg = spec.partition(":")
    kind = kind.strip().lower()
    if kind == "lookup":
        return lookup_drafter(arg)
    if kind in ("early-exit", "early_exit", "earlyexit"):
        try:
            layers = int(arg)
        except ValueError:
            raise DrafterError(f"early-exit:L needs a number of layers L, not {arg!r}.") from None
        d = ModelDrafter(early_exit_model(lm.model, layers), f"early-exit:{layers}")
        d.cost_layers = layers
        return d
    if kind == "model":
        name = arg.strip()
        if not name:
            raise DrafterError("model:NAME needs a model name, e.g. model:self or model:random:2.")
        if name in ("self", "target") or (name == lm.ref.name and not lm.ref.precision):  # the same weights
            return ModelDrafter(lm.model, f"model:{lm.name}")
        if name.startswith("random"):
            layers = random_draft_layers(lm, name.partition(":")[2].strip())
            return ModelDrafter(random_draft_model(lm, layers), f"model:random:{layers}")
        draft = loader(name)
        if not same_vocabulary(draft.tokenizer, lm.tokenizer):
            raise DrafterError(
                f"The draft model '{name}' uses a different tokenizer ({len(draft.tokenizer):,} tokens) from the "
                f"target '{lm.name}' ({len(lm.tokenizer):,} tokens). A draft must share the target's vocabulary: "
                f"its token ids are checked against the target's one by one.")
        if draft.model.get_output_embeddings().weight.shape[0] < len(lm.tokenizer):
            raise DrafterError(f"The draft model '{name}' has a smaller output head than the vocabulary.")
        return ModelDrafter(draft.model, f"model:{name}", vocab_size=lm.info.vocab_size)
    raise DrafterError(f"Unknown drafter {spec!r}: use lookup, early-exit:L or model:NAME.")
