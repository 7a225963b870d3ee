"""The engine: PyTorch + transformers only (see ARCHITECTURE.md).

Importing the package imports torch, the transformers names the engine uses, and every engine module, once,
in the importing thread. A served app runs each browser session's script in a thread of its own; right after a
server start several sessions import the same modules at the same moment, and concurrent first imports of
transformers' lazy submodules (and of modules that import them) can hand a thread a partially initialised module:
"cannot import name 'DynamicCache' from 'transformers'", "cannot import name 'Trace' from 'engine.trace'". Python
holds this package's import lock while this file runs, so any other thread importing anything under ``engine``
waits here until all of it is ready.
"""
import importlib
import pkgutil
import sys

import torch  # noqa: F401
from transformers import (AutoConfig, AutoModelForCausalLM, AutoTokenizer, DynamicCache,  # noqa: F401
                          PreTrainedTokenizerFast)

_SKIP = {"__main__", "bench"}  # the command line and its benchmarks load on demand


def _import_all(package: str, path) -> None:
    for mod in pkgutil.iter_modules(path):
        if mod.name in _SKIP:
            continue
        name = f"{package}.{mod.name}"
        try:
            module = importlib.import_module(name)
        except ImportError as exc:  # an optional dependency is missing: that module's own import will say so
            print(f"[engine] {name} not preloaded: {exc}", file=sys.stderr)
            continue
        if mod.ispkg:
            _import_all(name, module.__path__)


_import_all(__name__, __path__)
