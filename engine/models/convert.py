"""How a packaged model's GGUF becomes a float32 safetensors copy in the user cache, and how that copy is checked: the
cache folder checked before the work starts, the copy written to a temporary folder and renamed into place, stamped
with what it was made from and checksummed, so a copy whose files no longer match is converted again. Which models
are packaged, and the one path that prepares each under one lock, are engine.models.catalog and
engine.models.packaged.
"""
from __future__ import annotations

import logging
import contextlib
import errno
import hashlib
import json
import os
import shutil
import threading
from pathlib import Path
from typing import Callable

import torch

from engine.core.loaded import ModelLoadError
from engine.store import BoundedStore

logger = logging.getLogger(__name__)

CONVERTED_MARKER = "converted.json"
# beside the marker, not in it: an older checkout sharing the cache compares the marker with its stamp exactly
CHECKSUM_FILE = "checksum.json"
CONVERT_NEEDS_BYTES = 700 * 2**20  # the embedded model's float32 copy (538 MB) + tokenizer, with room to spare
CACHE_ADVICE = ("Set ILE_CACHE_DIR to a writable folder with at least 1 GB free (or fix this one), then start "
                "again.")

Progress = Callable[[str], None]


def _checked_files(folder: Path) -> list[Path]:
    """Every file the loader reads from a converted copy: weights, config.json, generation config, tokenizer
    files, chat template (all but the checksum record, the conversion marker and temporary files)."""
    return sorted(f for f in folder.iterdir()
                  if f.is_file() and f.name not in (CHECKSUM_FILE, CONVERTED_MARKER) and ".tmp" not in f.name)


def sha256(f: Path) -> str:
    with open(f, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def weights_checksum(folder: Path) -> dict:
    """Size and SHA-256 of every file of the converted copy (``_checked_files``): about 1.5 s for the embedded
    model's 538 MB of weights, a few ms for its config and tokenizer."""
    return {f.name: {"size": f.stat().st_size, "sha256": sha256(f)} for f in _checked_files(folder)}


# (file, size, mtime_ns, inode) of files whose full hash matched, in this process. Bounded (a file rewritten is a new
# key); 256 is many times the files of every model the app converts, and one dropped is only hashed again
_VERIFIED = BoundedStore("verified file hashes", 256)


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
    if sha256(f) != want["sha256"]:
        return False
    _VERIFIED.put(key, True)
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
                logger.info(f"recorded a checksum of the converted model in {record}")
            except OSError as exc:  # a read-only cache still loads; it just cannot be checked later
                logger.info(f"could not record a checksum in {record}: {exc}")
            return True
        want = json.loads(record.read_text())
        if "config.json" not in want and all(n.endswith(".safetensors") for n in want):  # weights-only record
            weights = [f for f in files if f.suffix == ".safetensors"]
            if sorted(want) != [f.name for f in weights] or not all(_matches(f, want[f.name]) for f in weights):
                return False
            try:
                _write_json(record, {**weights_checksum(folder), **want})
                logger.info(f"extended the checksum in {record} to the config and tokenizer files")
            except OSError as exc:
                logger.info(f"could not extend the checksum in {record}: {exc}")
            return True
        if sorted(want) != [f.name for f in files]:
            return False
        return all(_matches(f, want[f.name]) for f in files)
    except (OSError, ValueError, KeyError, TypeError):
        return False


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


def cache_fault(exc: OSError, where: Path) -> ModelLoadError:
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
        raise cache_fault(exc, root) from exc
    if target.exists() and not target.is_dir():
        raise cache_fault(OSError(errno.ENOTDIR, "Not a directory"), target)
    _remove_stale_tmp(target)
    try:
        free = shutil.disk_usage(root).free
    except OSError as exc:
        raise cache_fault(exc, root) from exc
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
        raise cache_fault(exc, root) from exc
    return tmp


class _ParsedOnce:
    """While a conversion runs, one parse of each GGUF file and one tensor-name table per (architecture, layers).

    transformers reads a GGUF's metadata three times (for the config, the tokenizer and the weights), and maps the
    weights' names with a table it builds again for every submodule (about 400 times for SmolLM2): most of a
    conversion's time (SmolLM2, 2 cores: 3 parses of 6-7 s and 7 s of tables, out of 44 s under a profiler). Both
    come from names of the gguf package that transformers looks up at each call (``from gguf import GGUFReader``
    inside ``load_gguf_checkpoint``), so they are swapped there for memoized ones while a conversion runs. The swap
    is process-wide, so conversions in one process take turns (the app converts the embedded model on its engine
    worker and Gemma in a child process, so none waits in practice); the one that ends restores the package's names
    and drops the parsed files. ``tests/engine/test_conversion.py`` counts the parses and fails the day transformers
    stops looking the names up at each call."""

    def __init__(self):
        self._turn = threading.Lock()
        self._readers: dict = {}
        self._tables: dict = {}
        self._real: tuple = ()

    def __enter__(self):
        import gguf

        self._turn.acquire()
        self._real = (gguf.GGUFReader, gguf.get_tensor_name_map)
        gguf.GGUFReader, gguf.get_tensor_name_map = self._reader, self._table
        return self

    def __exit__(self, *exc):
        import gguf

        gguf.GGUFReader, gguf.get_tensor_name_map = self._real
        self._readers.clear()
        self._tables.clear()
        self._turn.release()

    def _reader(self, path, mode="r"):
        key = (os.path.realpath(path), mode)
        if key not in self._readers:
            self._readers[key] = self._real[0](path, mode)
        return self._readers[key]

    def _table(self, arch, n_blocks):
        if (arch, n_blocks) not in self._tables:
            self._tables[arch, n_blocks] = self._real[1](arch, n_blocks)
        return self._tables[arch, n_blocks]


_PARSED_ONCE = _ParsedOnce()


def convert_gguf(gguf: Path, tmp: Path, progress: Progress, what: str, n_tensors: str):
    """Dequantize ``gguf`` to float32 and write the safetensors copy into ``tmp``; returns the tokenizer built from
    the GGUF (the caller saves it beside the weights, so later loads take seconds, not the minute a 262k-entry
    vocabulary takes to build from a GGUF).

    The model's config and weights share one parse of the file (``_PARSED_ONCE``); the tokenizer is built after the
    weights are written and freed, from a parse of its own. Sharing that third parse as well saves a few seconds
    more but keeps a parsed file (about 300 MB of Python objects for Gemma's vocabulary) alive through the
    dequantization, the conversion's memory peak: measured on Gemma, 3.2 GB instead of 2.5."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    progress(f"Dequantizing {n_tensors} weight tensors of {what}...")
    with _PARSED_ONCE:
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    progress("Writing the safetensors copy...")
    write_plain_copy(model, tmp)
    del model
    progress("Weights written; building the tokenizer from the GGUF...")
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


def write_plain_copy(model, folder: Path) -> None:
    """Write a dequantized model as a plain transformers folder: ``model.safetensors`` (a tensor shared by two
    names, tied embeddings, stored once under the first name of the state dict, the input embedding), the config
    without the GGUF's ``quantization_config`` (the weights are plain float now) and the generation config.
    Not ``save_pretrained``: it refuses a model that a quantizer loaded."""
    import copy

    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    tensors, seen = {}, set()
    for name, t in model.state_dict().items():
        where = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))
        if where not in seen:
            seen.add(where)
            tensors[name] = t.detach().contiguous()
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.architectures = [type(model).__name__]
    config.save_pretrained(folder)
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(folder)


def finish_conversion(tmp: Path, target: Path, stamp: dict) -> None:
    (tmp / CHECKSUM_FILE).write_text(json.dumps(weights_checksum(tmp)))
    (tmp / CONVERTED_MARKER).write_text(json.dumps(stamp))
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)


@contextlib.contextmanager
def cleaned_on_failure(tmp: Path, target: Path):
    """A conversion into ``tmp``: on any failure the temporary folder goes, and a file-system error becomes the
    cache fault message (what to do about the folder) instead of a bare OSError."""
    try:
        yield
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        logger.info(f"conversion failed: {exc!r}")
        raise cache_fault(exc, target.parent) from exc
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
