"""Shared by the saved-run tests of every tier: hand edits a forger makes to a record, and every string in one."""
from __future__ import annotations

import numpy as np

from engine.record.values import decode_array, encode_array


def claim_twice_the_vocabulary(r: dict) -> None:
    """Edit record ``r`` to claim a vocabulary twice this model's (its first-step logits padded to match) and put a
    prompt id past this model's vocabulary: valid for the record, out of range here."""
    vocab = r["model"]["vocab_size"]
    values = decode_array(r["trace"]["first_logits"]["values"], "v")
    r["trace"]["first_logits"]["values"] = encode_array(np.concatenate([values, np.full(vocab, -100.0)]), "float32")
    r["model"]["vocab_size"] = 2 * vocab
    r["trace"]["prompt"]["ids"][1] = 2 * vocab - 1


def strings(node):
    """Every string anywhere in a nested JSON-like value (a record, a figure's dict)."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for v in node.values():
            yield from strings(v)
    elif isinstance(node, (list, tuple)):
        for v in node:
            yield from strings(v)
