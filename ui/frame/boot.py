"""Imported FIRST by app.py and by every page file: imports torch, transformers' names, every engine and ui module
once, in one thread, before any of them is imported anywhere else.

Streamlit runs each browser session's script in a thread of its own. Right after a server start, sessions opening
at the same moment import the same modules at the same moment; Python takes one lock per module, child before
parent for ``import a.b`` and parent before child while a package's ``__init__`` runs, and transformers imports its
submodules lazily from inside attribute look-ups. Those orders cross, Python detects a "deadlock" and hands one
thread a partially initialised module: "cannot import name 'Trace' from 'engine.core.trace'", "cannot import name
'DynamicCache' from 'transformers'". Here the only lock another session can hold while it waits is this module's
own, so every first import happens in one thread, in one order.
"""
import engine  # noqa: F401  before torch: engine/__init__ sets OpenMP's wait policy, read once when torch loads
import importlib
import pkgutil

import numpy  # noqa: F401
import pandas  # noqa: F401
import plotly.graph_objects  # noqa: F401
import torch  # noqa: F401
from transformers import (AutoConfig, AutoModelForCausalLM, AutoTokenizer, DynamicCache,  # noqa: F401
                          PreTrainedTokenizerFast)

from transformers.utils import logging as hf_logging

import logging

logger = logging.getLogger(__name__)

# A server's log is read line by line: a loading bar is redrawn with carriage returns and ends its line only when
# done, so another thread's line lands on it. The pages draw their own progress.
hf_logging.disable_progress_bar()

_SKIP = {"__main__", "boot"}  # the command line loads on demand; this module


def _skipped(name: str) -> bool:
    """The command line, the benchmarks (``bench``, ``bench_*``: they load on demand) and this module."""
    return name in _SKIP or name == "bench" or name.startswith("bench_")


def _import_all(package: str) -> None:
    pkg = importlib.import_module(package)
    for mod in pkgutil.iter_modules(pkg.__path__):
        if _skipped(mod.name):
            continue
        name = f"{package}.{mod.name}"
        try:
            importlib.import_module(name)
        except ImportError as exc:  # an optional dependency is missing: that module's own import will say so
            logger.info(f"{name} not preloaded: {exc}", extra={"channel": "boot"})
            continue
        if mod.ispkg:
            _import_all(name)


_import_all("engine")
_import_all("ui")
