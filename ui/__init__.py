"""The UI layer (see ARCHITECTURE.md). Importing the package imports the engine and every ui module once, in the
importing thread, for the same reason as ``engine/__init__.py``: right after a server start several browser
sessions run their first script at the same moment, each in its own thread, and concurrent first imports (of
transformers' and plotly's lazy submodules, and of the modules that import them) can see partially initialised
modules. Python holds this package's import lock while this runs, so other threads wait until all is ready."""
import importlib
import pkgutil
import sys

import engine  # noqa: F401  (torch, transformers and every engine module)
import numpy  # noqa: F401
import pandas  # noqa: F401
import plotly.graph_objects  # noqa: F401

for _mod in pkgutil.iter_modules(__path__):
    try:
        importlib.import_module(f"{__name__}.{_mod.name}")
    except ImportError as _exc:  # an optional dependency is missing: that module's own import will say so
        print(f"[ui] ui.{_mod.name} not preloaded: {_exc}", file=sys.stderr)
