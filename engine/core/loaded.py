"""What a load produces, apart from the loader: the LoadedModel record, its facts (ModelInfo), the loader's error,
and the rule that picks a family's attention implementation. Everything that receives a loaded model (the loop,
load-time precision, the tiny models, the analyses) imports this module, not the loader (engine.models.loading),
so the loader can import them without a cycle.

It imports no torch (torch comes in where a value needs it): the command line builds its help from the names here
(MODES, PRECISIONS) without the seconds torch takes to import.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from engine.mode import DEFAULT_MODE, MODES, Mode

if TYPE_CHECKING:
    import torch

# The vocabulary of a ModelRef's precision and mode (the modes: engine/mode.py): engine.models.precision casts or
# quantizes to a precision, engine.core.compiled runs a mode; both re-export these names.
PRECISIONS = ("float32", "bfloat16", "float16", "int8")


@dataclass(frozen=True)
class ModelRef:
    """Which loaded model: its canonical name (a built-in name, an allow-list label, a folder or a hub id; never
    with a precision or a mode in it), its precision ("" = the device's default, the weights as loaded; else a
    copy cast or quantized once, engine.models.precision) and its engine mode (engine.core.compiled). Plain
    values, so it is the key of anything kept per model: st.cache_data hashes a dataclass by its fields, the
    worker's job keys and the class batch's groups compare it by value.

    ``path``: where the weights are when ``name`` is a label that names them (a class server's allow-list: the
    label is shown, the folder or hub id behind it never). Not part of the identity: one label means one path."""

    name: str
    precision: str = ""
    mode: Mode = DEFAULT_MODE
    path: str = field(default="", compare=False, repr=False)

    def __post_init__(self):
        if not isinstance(self.mode, Mode):  # text from a link or the command line: one member, or one line
            if self.mode not in MODES:
                raise ModelLoadError(f"'{str(self.mode)[:40]}' is not an engine mode; choose one of "
                                     f"{', '.join(MODES)}.")
            object.__setattr__(self, "mode", Mode(self.mode))

    def at(self, precision: str | None = None, mode: str | None = None) -> "ModelRef":
        """The same model at another precision and/or engine mode (None keeps this one's)."""
        return replace(self, precision=self.precision if precision is None else precision,
                       mode=self.mode if mode is None else mode)

    def label(self) -> str:
        """'embedded', 'embedded (int8, compiled)': for logs and captions, never parsed back."""
        extra = [x for x in (self.precision, "" if self.mode == DEFAULT_MODE else self.mode) if x]
        return f"{self.name} ({', '.join(extra)})" if extra else self.name


class ModelLoadError(RuntimeError):
    """A model could not be loaded; the message is written for the person who asked for it."""


@dataclass(frozen=True)
class ModelInfo:
    """Facts about a loaded model, read at load. Which model it is (name, precision, engine mode) is its
    ``LoadedModel.ref``, held once: ``described`` joins the two for a person or a record."""

    source: str
    device: str
    dtype: str
    n_params: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    max_positions: int
    model_type: str
    tied_embeddings: bool
    has_chat_template: bool
    position_encoding: str  # "rope" | "learned" | "alibi" | "none" (engine.core.archfacts, read from the model)
    rope_theta: float | None
    arch: object = None  # engine.core.archfacts.ArchFacts: per-layer attention kinds, KV heads, refusals, ...
    int8_float: tuple = ()  # int8 only: linear layer types left in float, and why (engine.models.precision)

    def refused(self, feature: str) -> str | None:
        """The one-line reason a page cannot show ``feature`` for this architecture, or None."""
        return self.arch.refused(feature) if self.arch is not None else None

    @property
    def bytes_per_value(self) -> int:
        import torch

        return torch.empty((), dtype=getattr(torch, self.dtype)).element_size()

    def to_dict(self) -> dict:
        return asdict(self)


def described(ref: ModelRef, info: ModelInfo) -> dict:
    """A model's identity and facts as one dict, for ``python -m engine info`` and a trace's record: the name first,
    then the facts, the precision ("" = the dtype's own) before the architecture, the engine mode last."""
    d = info.to_dict()
    facts = {k: v for k, v in d.items() if k not in ("arch", "int8_float")}
    return {"name": ref.name, **facts, "precision": ref.precision, "arch": d["arch"], "int8_float": d["int8_float"],
            "mode": ref.mode}


@dataclass
class LoadedModel:
    """A model, its tokenizer and facts about it. Shared by every browser session and never changed by a
    request; its forward passes all run on the one engine worker (engine/jobs/worker.py), one at a time."""

    ref: ModelRef
    model: torch.nn.Module
    tokenizer: object
    info: ModelInfo
    decode_graph: object = None  # compiled mode only: its engine.core.compiled.DecodeGraph (same weights as eager)

    @property
    def name(self) -> str:
        """The model's name, for people (captions, logs, a saved run's file name): the same at every precision and
        mode, so never a key: key anything kept per model by ``ref``."""
        return self.ref.name

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


def attention_implementation(path_or_config, **kw) -> str:
    """"sdpa" for a family whose attention goes through transformers' AttentionInterface (the app's measuring
    attention is installed there, engine.core.instrument); "eager" for one with its own attention code (Falcon):
    its SDPA branch cannot record weights, and its weights-recording branch is its eager one."""
    from transformers import MODEL_FOR_CAUSAL_LM_MAPPING, AutoConfig

    try:
        cfg = path_or_config if not isinstance(path_or_config, (str, Path)) else AutoConfig.from_pretrained(
            str(path_or_config), trust_remote_code=False, **kw)
        cls = MODEL_FOR_CAUSAL_LM_MAPPING[type(cfg)]
    except Exception:  # noqa: BLE001 - unknown here: the load itself says what is wrong
        return "sdpa"
    return "sdpa" if getattr(cls, "_supports_attention_backend", True) else "eager"
