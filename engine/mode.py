"""The engine modes: which loop runs a model's decode steps. Below every folder (it imports nothing), so the settings
(``ILE_CLASS_ENGINE``) and the ground floor (engine.core.loaded's ModelRef) both read the one enum."""
from __future__ import annotations

from enum import StrEnum


class Mode(StrEnum):
    """An engine mode: the loop that runs a model's decode steps (engine.core.compiled decides, at the step, whether
    a compiled graph serves it). A str enum: the text in a link, a setting or a record compares equal to it, and
    JSON writes it as that text. A third mode is a member here and its runner in engine/core: no page names one."""

    EAGER = "eager"  # PyTorch runs each operator as Python calls it
    COMPILED = "compiled"  # a static KV cache and torch.compile around the decode step


MODES = tuple(Mode)
DEFAULT_MODE = Mode.EAGER
