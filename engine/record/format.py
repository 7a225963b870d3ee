"""The saved-run file: one JSON document, versioned, sealed with a content hash, and checked before it is trusted.

Layout (docs/record-format.md describes every field; ``schema.json`` beside this module is its JSON Schema):
``{"format", "version", "kind": "trace" | "race", "saved_at", "saved_by", "model", "machine", "trace" | "race",
"content_sha256"}``. Numeric tensors (attention weights, the first step's logits, ...) are ``{"dtype", "shape",
"base64"}``: little-endian values, row-major.

``content_sha256`` is the SHA-256 of the canonical JSON of everything else (keys sorted, no spaces, UTF-8). It
catches a file changed after it was saved, by hand or by a broken copy. It is not a signature: whoever edits a
record can recompute it. What the model computed (tokens, logits, attention, the prompt's ids) is checked again by
re-running it (``engine.record.verify``); timings cannot be recomputed and are taken as measured, but every summary
of them is recomputed from the steps here.

Loading is strict and never runs code from the file: plain ``json`` (no pickle, no eval), a size cap, duplicate keys,
NaN and infinities refused, bounded sizes and nesting before anything walks it, the schema (types, bounds, lengths),
then consistency checks between fields (engine/record/consistency.py: lengths that must agree, probabilities that
must follow from the logits, attention rows that must sum to 1 and be causal, the timing summary recomputed from the
steps). Every refusal is a ``RecordError`` (engine/record/values.py, with the arrays' codec) with one line for the
person who handed the file in.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import fields
from functools import lru_cache
from itertools import islice
from pathlib import Path

from engine.record.consistency import check_consistency
from engine.record.values import RecordError, strict

FORMAT = "inference-loop-explorer/run"
VERSION = 1
MAX_BYTES = 64 * 2**20  # a 512-token prompt on SmolLM2 is ~19 MB (its attention weights, kept for 160 positions)
# Counted in the raw bytes before parsing: a 4096-token race (the schema's longest run) has ~0.4 million commas (each
# of its steps keeps four top-10 lists), a trace under 0.1 million; the base64 of the arrays has none. A file of
# small numbers that fills MAX_BYTES would have ~30 million: parsed, each is a Python object, and each one the schema
# refuses was an error object of its own (a million bad ids took 124 s and +3.4 GB to refuse).
MAX_VALUES = 1_000_000
MAX_DEPTH = 32  # a record nests 8 deep; JSON nested ~1000 deep ran Python's recursion out in json.dumps
MAX_SCHEMA_ERRORS = 8  # the schema's errors looked at: the shallowest of the first few is said, the rest never built


# ------------------------------------------------------------------------------------------------ writing


def canonical(record: dict) -> bytes:
    """The bytes the content hash covers: every field but ``content_sha256``, keys sorted, no whitespace."""
    body = {k: v for k, v in record.items() if k != "content_sha256"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def content_hash(record: dict) -> str:
    return hashlib.sha256(canonical(record)).hexdigest()


def seal(record: dict) -> dict:
    """The record with its content hash (the last thing done before it is written)."""
    record = strict(record)
    return {**record, "content_sha256": content_hash(record)}


def dumps(record: dict) -> bytes:
    """The file's bytes: the sealed record as compact JSON (``python -m json.tool`` prints it readably)."""
    return json.dumps(seal(record), ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")


def save(record: dict, path: str | Path) -> int:
    """Write the record to ``path``; returns its size in bytes."""
    data = dumps(record)
    Path(path).write_bytes(data)
    return len(data)


# ------------------------------------------------------------------------------------------------ reading


def _no_duplicates(pairs):
    seen = {}
    for k, v in pairs:
        if k in seen:
            raise RecordError(f"the key {k[:40]!r} appears twice in one object: an edited or broken file")
        seen[k] = v
    return seen


def _finite(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise RecordError(f"the number {text[:40]} is too large to be a measurement: an edited or broken file")
    return v


def _refuse_constant(name: str):
    raise RecordError(f"the file contains {name}, which JSON does not allow: an edited or broken file")


def parse(data: bytes) -> dict:
    """JSON bytes -> dict, refusing what no saved run contains (over MAX_BYTES, not UTF-8, not JSON, truncated,
    duplicate keys, NaN or infinity, not an object)."""
    if len(data) > MAX_BYTES:
        raise RecordError(f"This file is {len(data) / 2**20:,.1f} MB; a saved run is at most {MAX_BYTES // 2**20} MB.")
    if data.count(b",") > MAX_VALUES:
        raise RecordError(f"This file holds over {MAX_VALUES:,} values, far more than any saved run: it is not read.")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise RecordError("This file is not text (not UTF-8): it is not a saved run.") from None
    try:
        doc = json.loads(text, object_pairs_hook=_no_duplicates, parse_float=_finite, parse_constant=_refuse_constant)
    except RecordError as exc:
        raise RecordError(f"This file is not a usable saved run: {exc}.") from None
    except RecursionError:
        raise RecordError("This file is not a saved run: its JSON is nested far too deep.") from None
    except json.JSONDecodeError as exc:
        ends = exc.pos >= len(text.rstrip()) - 1 or exc.msg.startswith("Unterminated")
        why = "it ends early (a truncated or partly copied file)" if ends else \
            f"it is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
        raise RecordError(f"This file is not a usable saved run: {why}.") from None
    if not isinstance(doc, dict):
        raise RecordError("This file is JSON but not a saved run (not a JSON object).")
    check_sizes(doc)
    return doc


@lru_cache(maxsize=2)
def _largest(keyword: str) -> int:
    """The largest value of ``keyword`` (maxItems, maxProperties) anywhere in the schema."""
    found, stack = [], [schema()]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get(keyword), int):
                found.append(node[keyword])
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return max(found)


def check_sizes(doc) -> None:
    """Refuse, before the schema looks at anything, an array longer or an object wider than any the schema allows
    anywhere, or nesting deeper than MAX_DEPTH: one walk without recursion, and the schema's work (and its errors)
    after it stay bounded by the format's own sizes."""
    items, keys = _largest("maxItems"), _largest("maxProperties")  # wider than any object with fixed fields
    stack = [(doc, ())]
    while stack:
        node, path = stack.pop()
        if len(path) > MAX_DEPTH:
            raise RecordError(f"This file is not a saved run: its JSON is nested far too deep (a saved run "
                              f"nests at most {MAX_DEPTH} levels).")
        if isinstance(node, list):
            if len(node) > items:
                raise RecordError(f"This saved run is not valid at {_where(path)}: {len(node):,} items (no list in "
                                  f"this format has more than {items:,}).")
            stack.extend((v, (*path, i)) for i, v in enumerate(node))
        elif isinstance(node, dict):
            if len(node) > keys:
                raise RecordError(f"This saved run is not valid at {_where(path)}: {len(node):,} fields (no object in "
                                  f"this format has more than {keys:,}).")
            stack.extend((v, (*path, k)) for k, v in node.items())


def _where(path) -> str:
    return "/".join(str(p)[:40] for p in path) or "the top level"


@lru_cache(maxsize=1)
def schema() -> dict:
    """schema.json with its ``settings`` filled in from the sampling record (``settings_schema``)."""
    doc = json.loads((Path(__file__).with_name("schema.json")).read_text(encoding="utf-8"))
    doc["$defs"]["settings"] = settings_schema()
    return doc


def settings_schema(record: type | None = None) -> dict:
    """What a saved run's ``settings`` must be: every knob of the run's sampling record (``record``, by default
    engine.core.sampling.SamplingSettings, whose ``asdict`` the run saved), each a JSON number (an integer for an
    int knob) within the range the record clamps it into, all of them present and no other name. A knob is declared
    once, in the record, and a saved run is still checked against it before it is trusted."""
    if record is None:
        from engine.core.sampling import SamplingSettings as record  # torch: imported once a file is read, not before

    knobs = {}
    for f in fields(record):
        low, high = f.metadata["range"]
        knobs[f.name] = {"type": "integer" if isinstance(f.default, int) else "number", "minimum": low, "maximum": high}
    return {"type": "object", "additionalProperties": False, "required": list(knobs), "properties": knobs}


def _said(error) -> str:
    """A schema error in words that never repeat the offending text (it may be long, or markup)."""
    kind, want, value = error.validator, error.validator_value, error.instance
    if kind == "type":
        return f"expected {want if isinstance(want, str) else ' or '.join(want)}, found {type(value).__name__}"
    if kind in ("maxLength", "minLength"):
        return f"a text of {len(value):,} characters ({'at most' if kind == 'maxLength' else 'at least'} {want:,})"
    if kind in ("maxItems", "minItems", "maxProperties"):
        return f"{len(value):,} items ({'at least' if kind == 'minItems' else 'at most'} {want:,})"
    if kind in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        bound = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}[kind]
        return f"{value!r} is out of bounds (must be {bound} {want:g})"
    if kind in ("enum", "const"):
        return "not one of the values this format allows"
    if kind == "pattern":
        return "not in the form this format expects"
    if kind == "additionalProperties":
        extra = sorted(set(value) - set(error.schema.get("properties", {})))
        return f"a field this format does not have ({str(extra[0])[:40]!r})" if extra else "an unexpected field"
    if kind == "required":
        return error.message[:120]
    if kind in ("oneOf", "anyOf"):
        return "it has none of the shapes this format allows here"
    return f"it breaks the rule {kind!r}"


def _one_of(validator, subschemas, instance, schema):
    """``oneOf`` that builds no error it does not report: jsonschema's own lists every error of every failing
    branch (and the instance's repr), so a large wrong branch cost memory in proportion to its size. Where only one
    branch is not plain ``null``, its errors are said lazily (they name the field); otherwise one error."""
    from jsonschema import ValidationError

    fits = [s for s in subschemas if validator.evolve(schema=s).is_valid(instance)]
    if len(fits) == 1:
        return
    others = [s for s in subschemas if s != {"type": "null"}]
    if not fits and instance is not None and len(others) == 1:
        yield from validator.descend(instance, others[0])
    else:
        yield ValidationError("none or several of the shapes allowed", validator="oneOf", validator_value=subschemas,
                              instance=None, schema=schema)


@lru_cache(maxsize=1)
def _validator():
    from jsonschema import Draft202012Validator, validators

    lazy = validators.extend(Draft202012Validator, {"oneOf": _one_of})
    return lazy(schema())


def _check_schema(doc: dict) -> None:
    first = list(islice(_validator().iter_errors(doc), MAX_SCHEMA_ERRORS))
    if first:
        error = min(first, key=lambda e: len(e.absolute_path))
        raise RecordError(f"This saved run is not valid at {_where(error.absolute_path)}: {_said(error)}.")


def load(data: bytes | str | Path) -> dict:
    """A saved run, checked before it is trusted: bytes (an upload) or a path. Raises RecordError, never another
    exception, for anything that is not an intact record of a format version this code reads."""
    if isinstance(data, (str, Path)):
        path = Path(data)
        try:
            size = path.stat().st_size
            if size > MAX_BYTES:
                raise RecordError(f"This file is {size / 2**20:,.1f} MB; a saved run is at most {MAX_BYTES // 2**20} "
                                  "MB.")
            data = path.read_bytes()
        except OSError as exc:
            raise RecordError(f"The file {str(path)[:200]} cannot be read: {exc.strerror or type(exc).__name__}.") \
                from None
    doc = parse(data)
    if doc.get("format") != FORMAT:
        raise RecordError("This JSON file is not a saved run of the Inference Loop Explorer (its \"format\" is not "
                          f"{FORMAT!r}).")
    version = doc.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise RecordError("This saved run has no valid format version.")
    if version > VERSION:
        raise RecordError(f"This saved run is format version {version}, newer than this app reads (version "
                          f"{VERSION}): update the app to open it.")
    claimed = doc.get("content_sha256")
    if not isinstance(claimed, str) or claimed != content_hash(doc):
        raise RecordError("This saved run was changed after it was saved (its content hash does not match): it is "
                          "not shown or checked. Save the run again from the app or `python -m engine`.")
    _check_schema(doc)
    try:
        check_consistency(doc)
    except RecordError:
        raise
    except (ValueError, TypeError, KeyError, IndexError) as exc:  # a shape the schema allows but the data cannot have
        raise RecordError(f"This saved run does not hold together: {type(exc).__name__}: {str(exc)[:160]}") from None
    return doc
