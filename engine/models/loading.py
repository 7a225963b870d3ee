"""Loading a model by name: a packaged model (engine.models.catalog) from its converted copy (engine.models.packaged,
converted first when missing), a tiny random model for tests (engine.models.tiny), a local directory, or a Hugging
Face hub id; at a precision (engine.models.precision) and in an engine mode (engine.core.compiled).

Safety: ``trust_remote_code`` is never enabled and only safetensors weights are read. Names are checked before any
file is touched, and a model's size is estimated from its configuration and refused before anything is allocated
if it would not fit.
"""
from __future__ import annotations

import logging
import json
import os
import re
import shutil
from pathlib import Path

import torch

import engine.settings as settings
from engine.core.loaded import LoadedModel, ModelInfo, ModelLoadError, ModelRef, attention_implementation
from engine.models import catalog, packaged
from engine.models.catalog import Packaged
from engine.models.convert import Progress
from engine.models.names import EMBEDDED, TINY
from engine.store import BoundedStore

logger = logging.getLogger(__name__)

MAX_NAME_BYTES = 255  # a file name on Linux, macOS and Windows; also plenty for a hub id
# A model may take at most this share of the memory available when it is asked for: a random draft of 3000
# layers or a folder whose config.json claims billions of parameters is refused before anything is allocated.
MEMORY_SHARE = 0.5
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}(/[\w.-]{1,96})?$")


def short(name: str, limit: int = 60) -> str:
    """A user-supplied name cut to a length that fits in a message."""
    return name if len(name) <= limit else name[: limit - 1] + "…"


def check_name(name: str) -> str:
    """The name, or ModelLoadError if no file system or hub could hold it (before any file is touched)."""
    size = len(name.encode("utf-8", "surrogatepass"))
    if size > MAX_NAME_BYTES:
        raise ModelLoadError(f"That model name is too long ({size:,} bytes; at most {MAX_NAME_BYTES}).")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise ModelLoadError("That model name contains control characters; type a plain model name.")
    return name


def available_memory() -> int:
    """Bytes of memory the system can still hand out (Linux MemAvailable; else physical memory)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 8 * 2**30


def _size(cfg: dict, *keys: str, default: int = 0) -> int:
    for k in keys:
        v = cfg.get(k)
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v < 0 or v == float("inf"):
                raise ModelLoadError(f"Its config.json gives {k} = {str(v)[:40]!r}, not a size.")
            return int(v)
    return default


def estimate_params(cfg: dict) -> int:
    """Parameters a decoder-only transformer with this config.json would allocate, from the sizes alone:
    per block q/o (hidden x heads*head_dim each), k/v (hidden x kv_heads*head_dim each), a gated MLP
    (3 x hidden x intermediate, times the experts of a mixture), two norms; plus the embedding table and an
    untied output head. Close for Llama-style models, an upper bound for GPT-2-style ones (2-matrix MLP)."""
    if isinstance(cfg.get("text_config"), dict):  # multimodal configs nest the language model
        cfg = {**cfg, **cfg["text_config"]}
    hidden = _size(cfg, "hidden_size", "n_embd", "d_model", "dim")
    layers = _size(cfg, "num_hidden_layers", "n_layer", "num_layers", "n_layers")
    vocab = _size(cfg, "vocab_size")
    heads = max(1, _size(cfg, "num_attention_heads", "n_head", "n_heads", default=1))
    kv_heads = _size(cfg, "num_key_value_heads", "n_kv_heads", default=heads) or heads
    head_dim = _size(cfg, "head_dim", default=hidden // heads) or hidden // heads
    inter = _size(cfg, "intermediate_size", "n_inner", "ffn_dim", default=4 * hidden) or 4 * hidden
    experts = max(1, _size(cfg, "num_local_experts", "num_experts", "n_routed_experts", default=1))
    attn = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    per_layer = attn + 3 * hidden * inter * experts + 2 * hidden
    tied = cfg.get("tie_word_embeddings", True) is not False
    return layers * per_layer + vocab * hidden * (1 if tied else 2) + hidden


def check_size(n_params: int, bytes_per_value: int, what: str) -> None:
    """Refuse a model bigger than MEMORY_SHARE of the memory available now (before allocating it)."""
    need, avail = n_params * bytes_per_value, available_memory()
    limit = int(avail * MEMORY_SHARE)
    if need > limit:
        raise ModelLoadError(
            f"{what} would need about {need / 1e9:,.1f} GB ({n_params / 1e9:,.2f} billion parameters at "
            f"{bytes_per_value} bytes each, estimated from its configuration). This server loads a model only if "
            f"it fits in half of the memory now available ({limit / 1e9:,.1f} GB).")


def default_device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def default_dtype(device: torch.device) -> torch.dtype:
    """float32 on CPU (bf16 matmuls are slow on most CPUs); bf16 on GPUs that support it, else fp16."""
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def describe(name: str, source: str, model, tokenizer) -> ModelInfo:
    """Facts about a loaded model, read from the model and its config (engine.core.archfacts), never assumed."""
    from engine.core import archfacts

    facts = archfacts.facts_and_checks(model)
    cfg = archfacts.arch.text_config(model)
    hidden = getattr(cfg, "hidden_size", None) or getattr(cfg, "n_embd", None) or getattr(cfg, "d_model", 0)
    inter = (getattr(cfg, "intermediate_size", None) or getattr(cfg, "n_inner", None) or getattr(cfg, "ffn_dim", None)
             or getattr(cfg, "ffn_hidden_size", None) or 4 * hidden)
    in_emb = model.get_input_embeddings()
    theta = next((b for b in facts.rope_bases if b), None)
    p = next(model.parameters())
    max_pos = (getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
               or getattr(cfg, "max_seq_len", None) or 2048)
    return ModelInfo(
        name=name,
        source=source,
        device=str(p.device),
        dtype=str(p.dtype).replace("torch.", ""),
        n_params=sum(t.numel() for t in model.parameters()),
        n_layers=facts.n_blocks,
        n_heads=facts.n_heads,
        n_kv_heads=max(facts.kv_heads),
        head_dim=facts.head_dim,
        hidden_size=int(hidden),
        intermediate_size=int(inter),
        vocab_size=in_emb.weight.shape[0],
        max_positions=int(max_pos),
        model_type=facts.family,
        tied_embeddings=facts.tied_embeddings,
        has_chat_template=bool(getattr(tokenizer, "chat_template", None)),
        position_encoding=facts.position,
        rope_theta=theta,
        arch=facts,
    )


def finish_load(name: str, source: str, model, tokenizer, device: torch.device) -> LoadedModel:
    """The LoadedModel of a model already built: set up for inference on ``device``, its measuring hooks installed
    (switched on per job), its facts read (engine.core.archfacts); a model this app cannot show raises
    ModelLoadError in one line."""
    from engine.core import instrument

    model.eval()
    model.requires_grad_(False)
    model.to(device)
    try:
        instrument.install(model)  # measuring attention and residual hooks: installed now, switched on per job
        if tokenizer.pad_token_id is None and tokenizer.eos_token_id is not None:
            tokenizer.pad_token = tokenizer.eos_token
        info = describe(name, source, model, tokenizer)
    except ModelLoadError:
        raise
    except Exception as exc:  # an architecture whose parts cannot be found: one line, not a traceback
        raise ModelLoadError(f"'{short(name)}' ({type(model).__name__}) cannot be shown by this app: "
                             f"{str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}") from exc
    return LoadedModel(ModelRef(name), model, tokenizer, info)


_HUB_CHECK = BoundedStore("hub reachability", 1, ttl_s=60)  # host -> reachable, asked again after a minute


def hub_reachable(timeout: float = 3.0) -> bool:
    """Can this machine open a connection to the Hugging Face hub? Checked once a minute, quickly, so an
    offline machine says so at once instead of waiting through the hub client's retries."""
    import socket

    host = settings.HF_ENDPOINT.get().split("://")[-1].split("/")[0]
    if settings.HF_HUB_OFFLINE.get():
        return False

    def connects() -> bool:
        try:
            socket.create_connection((host, 443), timeout=timeout).close()
            return True
        except OSError:
            return False

    return _HUB_CHECK.get_or_put(host, connects)


def _from_dir(path: Path, dtype: torch.dtype, **kw):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path), trust_remote_code=False, **kw)
    impl = attention_implementation(path, **kw)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            str(path), dtype=dtype, use_safetensors=True, trust_remote_code=False, attn_implementation=impl, **kw
        )
    except ValueError as exc:  # a family without PyTorch SDPA support (Gemma 2, GPT-J, Bloom, ...) runs eager
        if "sdpa" not in str(exc).lower() and "scaled_dot_product" not in str(exc).lower():
            raise
        model = AutoModelForCausalLM.from_pretrained(
            str(path), dtype=dtype, use_safetensors=True, trust_remote_code=False, attn_implementation="eager", **kw
        )
    return model, tok


def load_packaged(r: Packaged, device=None, progress: Progress = logger.info) -> LoadedModel:
    """A packaged model from its converted copy in the user cache (converted first when missing: seconds to a
    minute, once per machine; a copy that cannot be read is rebuilt once rather than failing)."""
    device = torch.device(device) if device is not None else default_device()
    if not packaged.is_converted(r):
        packaged.prepare(r, progress)
    folder = packaged.copy_dir(r)
    try:
        model, tok = _from_dir(folder, default_dtype(device))
    except Exception as exc:  # a corrupt or partial cache: rebuild it once rather than fail
        progress(f"The converted copy of {r.label} could not be read ({type(exc).__name__}); rebuilding it.")
        shutil.rmtree(folder, ignore_errors=True)
        packaged.prepare(r, progress)
        model, tok = _from_dir(folder, default_dtype(device))
    return finish_load(r.name, r.label, model, tok, device)


def _config_json(path: Path) -> dict:
    try:
        if (path / "config.json").stat().st_size > 2**20:
            raise ModelLoadError("Its config.json is larger than 1 MB; that is not a model configuration.")
        cfg = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"Its config.json cannot be read ({type(exc).__name__}).") from exc
    if not isinstance(cfg, dict):
        raise ModelLoadError("Its config.json is not a JSON object.")
    return cfg


def _check_config_size(name: str, cfg: dict, device: torch.device) -> None:
    bpv = torch.empty((), dtype=default_dtype(device)).element_size()
    try:
        n = estimate_params(cfg)
    except ModelLoadError as exc:
        raise ModelLoadError(f"'{short(name)}' cannot be loaded. {exc}") from None
    check_size(n, bpv, f"'{short(name)}'")


def load_model(name: str = EMBEDDED, device=None, progress: Progress = logger.info, precision: str | None = None,
               mode: str = "eager") -> LoadedModel:
    """Load a causal LM by name: "embedded", "tiny-random", a local directory, or a hub id; at ``precision``
    (engine.models.precision: float32, bfloat16, float16 on CUDA, int8; default: the device's), in engine ``mode``
    (engine.core.compiled: "eager" or "compiled"). An unsupported precision raises PrecisionError, a mode this
    model cannot run ModeError (both ModelLoadError), the precision's before anything is loaded.

    Names are checked before any file is touched, and a model's size is estimated from its configuration
    and refused before anything is allocated if it would not fit (see ``check_size``)."""
    from engine.core.compiled import to_mode

    name = check_name((name or "").strip())
    device = torch.device(device) if device is not None else default_device()
    if precision is not None:
        from engine.models.precision import PrecisionError, to_precision, unsupported_reason

        reason = unsupported_reason(precision, device)
        if reason:
            raise PrecisionError(reason)
        return to_mode(to_precision(_load_default(name, device, progress), precision), mode)
    return to_mode(_load_default(name, device, progress), mode)


def _load_default(name: str, device: torch.device, progress: Progress) -> LoadedModel:
    name = (name or "").strip() or EMBEDDED
    if catalog.row(name) is not None:
        return load_packaged(catalog.row(name), device, progress)
    if name == TINY:
        from engine.models.tiny import make_tiny

        model, tok = make_tiny()
        return finish_load(TINY, "tiny random model (random weights, built from a config)", model, tok, device)
    try:
        path = Path(name).expanduser()
        exists = path.exists()
    except (OSError, ValueError, RuntimeError):  # e.g. a path component too long, ~nosuchuser
        raise ModelLoadError(f"'{short(name)}' is neither a local model folder nor a valid Hugging Face model id."
                             ) from None
    if exists:
        if not path.is_dir() or not (path / "config.json").is_file():
            raise ModelLoadError(f"'{short(name)}' exists but is not a model folder (no config.json in it).")
        if not any(path.glob("*.safetensors")):
            raise ModelLoadError(f"'{short(name)}' has no .safetensors weights; only safetensors files are loaded.")
        _check_config_size(name, _config_json(path), device)
        source = f"local folder {path}"
    elif _HUB_ID.match(name) and ".." not in name:
        source = f"Hugging Face hub: {name}"
    else:
        raise ModelLoadError(f"'{short(name)}' is neither a local model folder nor a valid Hugging Face model id.")
    progress(f"Loading {name} ...")
    kw = {}
    if not exists and not hub_reachable():
        kw["local_files_only"] = True  # offline: only a copy already in the Hugging Face cache can load
    if not exists:
        try:  # the configuration alone first (a small file), so a huge model is refused before its weights
            from transformers import AutoConfig

            cfg = AutoConfig.from_pretrained(name, trust_remote_code=False, **kw).to_dict()
        except Exception:  # noqa: BLE001 - the full load below says what is wrong, in its own words
            cfg = None
        if cfg is not None:
            _check_config_size(name, cfg, device)
    try:
        model, tok = _from_dir(path if exists else name, default_dtype(device), **kw)
    except ValueError as exc:
        raise ModelLoadError(f"'{short(name)}' is not a causal language model this app can run: "
                             f"{str(exc).splitlines()[0][:200]}") from exc
    except (OSError, EnvironmentError) as exc:
        if kw.get("local_files_only"):
            raise ModelLoadError(
                f"Could not load '{short(name)}': it is not a local model folder, it is not in the Hugging Face "
                "cache, and the Hugging Face hub cannot be reached from this machine."
            ) from exc
        raise ModelLoadError(
            f"Could not load '{short(name)}': it is not a local model folder, and the Hugging Face hub could not "
            f"be reached or has no such model with safetensors weights. ({str(exc).splitlines()[0][:200]})"
        ) from exc
    except Exception as exc:
        raise ModelLoadError(f"Could not load '{short(name)}': {type(exc).__name__}: {str(exc)[:300]}") from exc
    return finish_load(name, source, model, tok, device)


def load_tiny_arch(arch: str, seed: int = 0, device: str = "cpu"):
    """A LoadedModel of ``make_tiny_arch(arch)``, instrumented and described as the loader does it."""
    from engine.models.tiny import make_tiny_arch

    model, tok = make_tiny_arch(arch, seed)
    return finish_load(f"tiny-{arch}", f"tiny random {arch} model (random weights, built from its config class)", model,
                   tok, torch.device(device))
