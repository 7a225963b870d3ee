"""The packaged models (engine.models.catalog) on this machine: whether each is installed, the state of its converted
copy, and ``prepare``, the one path that converts any of them (the CLI's ``python -m engine prepare``, the app's
first start on the engine worker, the background child process of engine.models.background), under one file lock
per model: two processes, or two threads of one, never convert the same model at once; the second finds the copy
ready and returns.
"""
from __future__ import annotations

import logging
import base64
import importlib
import importlib.util
import json
import shutil
import time
from importlib import metadata
from pathlib import Path

from filelock import FileLock, Timeout

from engine.core.loaded import ModelLoadError
from engine.models import convert
from engine.models.catalog import Packaged, row
from engine.models.convert import CONVERTED_MARKER, Progress
from engine.settings import cache_dir

logger = logging.getLogger(__name__)


def copy_dir(r: Packaged) -> Path:
    """Where the converted copy of ``r`` lives in the user cache."""
    return cache_dir() / r.folder


def lock_path(r: Packaged) -> Path:
    """The one lock of ``r``'s conversion, beside its copy (the path the hand-written lock used, so an older checkout
    sharing the cache takes turns with this one: filelock's Unix lock is the same flock)."""
    return copy_dir(r).with_name(r.folder + ".lock")


def gguf_path(r: Packaged) -> Path | None:
    """Where pip put the GGUF of a model shipped whole in one package (None: not installed, or split over chunk
    packages). The package itself is not imported: its own dependencies are absent."""
    if r.assembled:
        return None
    spec = importlib.util.find_spec(r.module)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / r.gguf
    return path if path.is_file() else None


def package(r: Packaged):
    """The chunk-assembling package of a split GGUF (standard library only, so importing it is safe), or None."""
    if not r.assembled or importlib.util.find_spec(r.module) is None:
        return None
    try:
        return importlib.import_module(r.module)
    except Exception:  # noqa: BLE001 - a broken install reads as not installed; the message says how to install
        return None


def installed(r: Packaged) -> bool:
    return (package(r) if r.assembled else gguf_path(r)) is not None


def _installed_sha256(r: Packaged, f: Path) -> str:
    """The sha256 pip recorded when it installed ``f`` (its RECORD), else computed once."""
    try:
        for rec in metadata.distribution(r.module).files or ():
            if rec.name == f.name and rec.hash is not None and rec.hash.mode == "sha256" and \
                    Path(rec.locate()).resolve() == f.resolve():
                return base64.urlsafe_b64decode(rec.hash.value + "=" * (-len(rec.hash.value) % 4)).hex()
    except (metadata.PackageNotFoundError, OSError, ValueError):
        pass
    return convert.sha256(f)


def stamp(r: Packaged) -> dict:
    """What the converted copy is made from, by content rather than by place: each checkout has its own environment
    (.venv), so its own path to the same GGUF, and a path in the stamp made two checkouts sharing one user cache
    convert each other's copy again, in turn. A split GGUF: its name and the sha256 its package checks when it
    reassembles it; a whole one: its name, size and sha256."""
    if r.assembled:
        pkg = package(r)
        return {"gguf": pkg.MODEL_NAME, "sha256": pkg.EXPECTED_SHA256}
    gguf = gguf_path(r)
    return {"gguf": gguf.name, "size": gguf.stat().st_size, "sha256": _installed_sha256(r, gguf)}


def place_stamp(gguf: Path) -> dict:
    """The stamp of copies converted before the content stamp: still accepted for the same file in the same place
    (never rewritten, so an older checkout sharing the cache accepts the copy too)."""
    st = gguf.stat()
    return {"gguf": str(gguf), "size": st.st_size, "mtime": int(st.st_mtime)}


def copy_state(r: Packaged) -> str:
    """The state of ``r``'s converted copy: "ready"; "missing" (not installed, never converted, or a conversion
    that did not finish); "outdated" (made from another GGUF: the package was updated); "damaged" (its files do not
    match their checksum, or its record cannot be read)."""
    folder = copy_dir(r)
    if not installed(r) or not (folder / CONVERTED_MARKER).is_file():
        return "missing"
    try:
        made_from = json.loads((folder / CONVERTED_MARKER).read_text())
    except (OSError, ValueError):
        return "damaged"
    accepted = [stamp(r)] + ([] if r.assembled else [place_stamp(gguf_path(r))])
    if made_from not in accepted:
        return "outdated"
    if not convert.weights_intact(folder):
        logger.info(f"the converted copy of {r.title} (weights, config or tokenizer) does not match its checksum; "
            "converting again")
        return "damaged"
    return "ready"


def is_converted(r: Packaged) -> bool:
    return copy_state(r) == "ready"


def tokenizer_ready(r: Packaged) -> bool:
    """Has ``r``'s conversion finished (its marker is written last, after the tokenizer files)? Its weights are not
    hashed: enough to cut text into tokens."""
    folder = copy_dir(r)
    return (folder / CONVERTED_MARKER).is_file() and (folder / "tokenizer.json").is_file()


def model_folder(name: str) -> Path | None:
    """The folder the loader reads ``name`` (a plain name, no precision) from: the converted copy of a packaged
    model, or a local folder; None for the tiny model and a hub id."""
    from engine.models.catalog import rows

    name = (name or "").strip() or rows()[0].name
    if row(name) is not None:
        return copy_dir(row(name))
    try:
        path = Path(name).expanduser()
        return path if path.is_dir() and (path / "config.json").is_file() else None
    except (OSError, ValueError, RuntimeError):
        return None


def prepare(r: Packaged, progress: Progress = logger.info) -> Path:
    """Convert ``r`` into its float32 safetensors copy in the user cache, once per machine (SmolLM2 about 15 s on 2
    cores; Gemma about 45 s and 2.5 GB of memory at the peak). The cache folder is checked before the lock is taken;
    under the lock a copy another process or thread finished meanwhile is returned as it is."""
    if not installed(r):
        raise ModelLoadError(f"{r.sentence} is not installed. Run: {r.install}")
    target = copy_dir(r)
    convert.prepare_cache(target, r.needs_mb * 2**20).rmdir()  # the folder checks, before taking the lock
    lock = FileLock(str(lock_path(r)))
    try:
        lock.acquire()
    except OSError as exc:
        raise convert.cache_fault(exc, target.parent) from exc
    try:
        if is_converted(r):
            return target
        return convert_copy(r, target, progress)
    finally:
        lock.release()


def convert_copy(r: Packaged, target: Path, progress: Progress) -> Path:
    """The conversion itself, into a temporary folder renamed into place (a crash never leaves a half copy that looks
    whole). A base model keeps no chat template: the app feeds it plain text, the format it was trained on."""
    tmp = convert.prepare_cache(target, r.needs_mb * 2**20)
    with convert.cleaned_on_failure(tmp, target):
        t0 = time.perf_counter()
        progress(f"Converting {r.title} to safetensors (one time per machine: {r.takes} on 2 cores, longer on a "
                 "busy laptop)...")
        if r.assembled:
            pkg = package(r)
            try:
                gguf = pkg.assemble(tmp / "gguf" / pkg.MODEL_NAME)
            except (FileNotFoundError, ValueError, FileExistsError) as exc:
                raise ModelLoadError(f"The {r.title} package is incomplete or damaged ({exc}). Reinstall it: "
                                     f"{r.install}") from None
            progress("GGUF reassembled and its sha256 checked.")
        else:
            gguf = gguf_path(r)
        tok = convert.convert_gguf(gguf, tmp, progress, r.title, str(r.tensors))
        if not r.instruct and getattr(tok, "chat_template", None):
            tok.chat_template = None
        tok.save_pretrained(tmp)
        if not r.instruct:
            for f in tmp.glob("chat_template*"):
                f.unlink()
        shutil.rmtree(tmp / "gguf", ignore_errors=True)  # the reassembled GGUF: the copy is what is loaded
        convert.finish_conversion(tmp, target, stamp(r))
    progress(f"{r.title} converted in {time.perf_counter() - t0:.0f} s -> {target}")
    return target


def converting(r: Packaged) -> bool:
    """Is some process or thread converting ``r`` now (holding its lock)? A probe: the lock is released at once."""
    lock = FileLock(str(lock_path(r)), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        return True
    except OSError:
        return False  # a cache that cannot be written: prepare says so in its own words
    lock.release()
    return False
