"""Which model a name means, and which names a server accepts.

Every spelling of one model (" embedded", "Embedded ", "./models/x/", "~/models/x") maps to one canonical name
before anything is loaded, so a cache of loaded models keeps one copy per model however it was typed: otherwise
a few people typing variants can make a server load and evict copies of the same model in a loop.

Class mode is for a teacher serving the app to a room: only the models on an allow-list can be chosen, by their
listed name; no free paths or hub ids; and a refusal says nothing about the server's file system (it never
says whether a path exists). Off by default for one person on their own machine.

Settings (environment variables, read when asked, so a test or a restart picks up a change):

- ``ILE_CLASS_MODE``: ``on`` / ``off``, or ``auto`` (default): on when the server listens beyond this machine
  (an address other than 127.0.0.x, ::1 or localhost; Streamlit with no address listens on every interface).
- ``ILE_MODELS``: the allow-list in class mode, comma-separated; ``label=target`` offers a local folder or hub
  id under a label (the target is never shown). Default: every packaged model and ``tiny-random``.
"""
from __future__ import annotations

import os
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import engine.settings as settings
from engine.models import catalog
from engine.core.loaded import ModelLoadError

EMBEDDED = catalog.EMBEDDED  # the default model: the first packaged one (engine.models.catalog)
TINY = catalog.TINY  # a tiny model with random weights, built from a config (engine.models.tiny)


def builtin() -> tuple[str, ...]:
    """The models that ship with the app: every packaged one (engine.models.catalog), then the tiny test model."""
    return catalog.names() + (TINY,)


def default_allowed() -> str:
    return ",".join(builtin())

LOOPBACK = ("localhost", "::1", "[::1]")


SUFFIX_SEP = "@"  # how a link or a typed name may carry a precision or a mode: dropped by plain_name


def plain_name(text: str) -> str:
    """The model name in ``text`` that a person typed or a link carried, without any ``@<precision>`` or ``@<mode>``
    suffix ("embedded@int8@compiled" -> "embedded"; "someone/model@v2" stays as it is). Such text never chooses a
    precision or a mode (only the settings do), or ``?model=embedded@int8`` would load an int8 copy that the pages
    label with the setting's precision. The one place a model name is ever taken apart: everywhere else a model is
    an engine.core.loaded.ModelRef."""
    from engine.core.compiled import MODES
    from engine.models.precision import PRECISIONS

    name = text
    while True:
        base, sep, tail = name.rpartition(SUFFIX_SEP)
        if not (sep and (tail in PRECISIONS or tail in MODES)):
            return name
        name = base


class ModelNotAllowed(ModelLoadError):
    """A name refused by the class server's allow-list (the message names the allowed models only)."""


def clean_name(name: str) -> str:
    """NFKC, invisible format characters (zero-width spaces, direction marks) removed, outer space stripped."""
    text = unicodedata.normalize("NFKC", name or "")
    return "".join(ch for ch in text if unicodedata.category(ch) != "Cf").strip()


def match_key(name: str) -> str:
    """What two spellings of a listed name must share to be the same name (case does not count)."""
    return clean_name(name).casefold()


def normalise(name: str) -> str:
    """The canonical name of what ``name`` asks for in open mode: a built-in name in its own spelling, an
    existing local folder as its absolute resolved path, a hub id without a trailing slash. Empty means the
    embedded model."""
    text = clean_name(name)
    if not text:
        return EMBEDDED
    for known in builtin():
        if text.casefold() == known:
            return known
    path = Path(text).expanduser()
    try:
        if path.exists():
            return str(path.resolve())
    except (OSError, ValueError):  # a name too long or odd for the file system is not a folder
        pass
    return text.rstrip("/") or text


def is_loopback(address: str | None) -> bool:
    a = (address or "").strip().lower()
    return a.startswith("127.") or a in LOOPBACK


@dataclass(frozen=True)
class ModelPolicy:
    """Open mode: any name (normalised). Class mode: only ``allowed`` labels, each mapped to what is loaded."""

    class_mode: bool = False
    allowed: tuple[tuple[str, str], ...] = field(default_factory=lambda: tuple((n, n) for n in builtin()))
    # (label shown, target loaded)

    @property
    def labels(self) -> list[str]:
        return [label for label, _ in self.allowed]

    def resolve(self, name: str) -> tuple[str, str]:
        """(canonical name, what to load) for ``name``; in class mode a name off the list raises
        ModelNotAllowed. In class mode the file system is never consulted about what was typed."""
        if not self.class_mode:
            canon = normalise(name)
            return canon, canon
        key = match_key(name) or EMBEDDED
        for label, target in self.allowed:
            if match_key(label) == key:
                return label, target
        raise ModelNotAllowed(
            "This server offers only these models: " + ", ".join(self.labels) + ". Choose one of them.")

    def target_of(self, canonical: str) -> str:
        return dict(self.allowed).get(canonical, canonical) if self.class_mode else canonical


def parse_allowed(text: str) -> tuple[tuple[str, str], ...]:
    """``"embedded, tiny-random, smol360=/models/SmolLM2-360M"`` -> ((label, target), ...); duplicates (in
    any spelling) are kept once; built-in names keep their own spelling."""
    out, seen = [], set()
    for item in (text or "").split(","):
        label, eq, target = item.partition("=")
        label = clean_name(label)
        for known in builtin():
            if label.casefold() == known:
                label = known
        target = clean_name(target) if eq else label
        if not label or not target or match_key(label) in seen:
            continue
        seen.add(match_key(label))
        out.append((label, os.path.expanduser(target) if target.startswith("~") else target))
    return tuple(out)


def policy_from_env(environ: Mapping[str, str] | None = None, server_address: str | None = "127.0.0.1"
                    ) -> ModelPolicy:
    """The policy the settings ask for (see the module docstring). A class server with an empty or
    unreadable allow-list offers the built-in models rather than nothing."""
    allowed = parse_allowed(settings.MODELS.get(environ)) or parse_allowed(default_allowed())
    return ModelPolicy(class_mode_from_env(environ, server_address), allowed)


def class_mode_from_env(environ: Mapping[str, str] | None = None, server_address: str | None = "127.0.0.1") -> bool:
    """Is this a class server? ``ILE_CLASS_MODE`` on/off, or auto: on when it listens beyond this machine."""
    mode = settings.CLASS_MODE.get(environ)
    if mode != "auto":
        return mode == "on"
    return not is_loopback(server_address)  # auto (or anything unrecognised: errs on the safe side)
