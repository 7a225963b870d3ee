"""How a saved run's values are stored and read back: numeric arrays as ``{"dtype", "shape", "base64"}``
(little-endian, row-major; checked when decoded), JSON with no NaN or infinity, and ``RecordError``, the one error a
refused file raises (engine/record/format.py reads the file, engine/record/consistency.py checks its fields agree)."""
from __future__ import annotations

import base64
import binascii
import math

import numpy as np

DTYPES = {"float16": "<f2", "float32": "<f4"}


class RecordError(ValueError):
    """A file that is not a usable saved run; the message says why, in one line."""



def encode_array(values, dtype: str) -> dict:
    """A numeric array as the record stores it: ``{"dtype", "shape", "base64"}`` (little-endian, row-major)."""
    a = np.ascontiguousarray(np.asarray(values, dtype=DTYPES[dtype]))
    return {"dtype": dtype, "shape": list(a.shape), "base64": base64.b64encode(a.tobytes()).decode("ascii")}


def strict(x):
    """JSON has no NaN or infinity: write them as null (a median of no decode steps, say)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: strict(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [strict(v) for v in x]
    if isinstance(x, np.generic):
        return strict(x.item())
    return x


def decode_array(d: dict, where: str, shape: tuple | None = None) -> np.ndarray:
    """A stored array back as numpy (float32), its byte length, shape and values checked."""
    try:
        raw = base64.b64decode(d["base64"], validate=True)
    except (binascii.Error, ValueError):
        raise RecordError(f"This saved run is not valid at {where}: its base64 data is damaged.") from None
    dt = np.dtype(DTYPES[d["dtype"]])
    n = int(np.prod(d["shape"], dtype=np.int64)) if d["shape"] else 1
    if len(raw) != n * dt.itemsize:
        raise RecordError(f"This saved run is not valid at {where}: shape {d['shape']} needs {n * dt.itemsize:,} bytes, "
                          f"the data has {len(raw):,}.")
    if shape is not None and tuple(d["shape"]) != tuple(shape):
        raise RecordError(f"This saved run is not valid at {where}: shape {d['shape']}, expected {list(shape)}.")
    a = np.frombuffer(raw, dtype=dt).reshape(d["shape"]).astype(np.float32)
    if not np.isfinite(a).all():
        raise RecordError(f"This saved run is not valid at {where}: it holds NaN or infinite values.")
    return a
