"""One run of the model as a person asked for it: the ``RunRequest`` record, carried whole from the sidebar to the
engine worker (as vLLM's ``Request`` carries its ``sampling_params``), never a tuple sliced by index.

A new sampling knob is a field of ``SamplingSettings`` (engine/core/sampling.py): it travels inside ``sampling``
and needs no change here, in the run's key, or anywhere the request is passed along.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

from engine.core.loaded import ModelRef
from engine.core.sampling import SamplingSettings


@dataclass(frozen=True)
class RunRequest:
    """Which model, what prompt (with the chat template or as raw text), how many new tokens at most, how they are
    drawn, and the draw's seed. Plain values: it is hashed by its fields (st.cache_data, the worker's job keys)."""

    model: ModelRef
    prompt: str
    chat: bool = True  # the model's chat template around the prompt
    max_new_tokens: int = 16
    sampling: SamplingSettings = SamplingSettings()
    seed: int = 0

    def canonical(self) -> "RunRequest":
        """The same run with what cannot change a token left out. Greedy decoding (temperature 0) takes the
        argmax: the filters and the seed cannot change a token, so they are reset (changing them reuses a kept
        run)."""
        s = self.sampling
        sampling = SamplingSettings() if s.greedy else SamplingSettings(
            **{name: type(default)(getattr(s, name)) for name, default in _DEFAULTS.items()})
        return replace(self, chat=bool(self.chat), max_new_tokens=int(self.max_new_tokens), sampling=sampling,
                       seed=0 if s.greedy else int(self.seed))

    def key(self, scope: str) -> tuple:
        """What a generation depends on, and whose it is (``scope``: ui/frame/runs.answer_scope)."""
        return (scope, self.canonical())


# each knob's default gives its type (float or int): a value from a widget or a link is forced into it for the key
_DEFAULTS = {f.name: f.default for f in fields(SamplingSettings)}
