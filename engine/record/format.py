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
then consistency checks between fields (lengths that must agree, probabilities that must follow from the logits,
attention rows that must sum to 1 and be causal, the timing summary recomputed from the steps).
Every refusal is a ``RecordError`` with one line for the person who handed the file in.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
from functools import lru_cache
from itertools import islice
from pathlib import Path

import numpy as np

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
DTYPES = {"float16": "<f2", "float32": "<f4"}
PROB_LOGIT_TOLERANCE = 1e-3  # |log(p_j / p_0) - (logit_j - logit_0)|: softmax in float32 keeps this to ~1e-6
ROW_SUM_TOLERANCE = 0.02  # attention rows stored in float16 sum to 1 within this


class RecordError(ValueError):
    """A file that is not a usable saved run; the message says why, in one line."""


# ------------------------------------------------------------------------------------------------ writing


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
    return json.loads((Path(__file__).with_name("schema.json")).read_text(encoding="utf-8"))


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


# ------------------------------------------------------------------------------------------------ consistency


def _fail(where: str, what: str):
    raise RecordError(f"This saved run does not hold together at {where}: {what}")


def check_steps(steps: list, vocab: int, where: str, greedy: bool) -> None:
    """Step records: indices in order, ids in the vocabulary, top-k sorted, probabilities that follow from the
    logits (softmax: p_j / p_0 = exp(l_j - l_0)), a greedy choice that is the most likely token, a KV cache that
    never shrinks."""
    kv = 0
    for i, s in enumerate(steps):
        at = f"{where}/{i}"
        if s["index"] != i or s["phase"] != ("prefill" if i == 0 else "decode"):
            _fail(at, "the steps are not in order (prefill first, then one decode step each)")
        ids, probs, logits = s["top_ids"], s["top_probs"], s["top_logits"]
        if not len(ids) == len(s["top_tokens"]) == len(probs) == len(logits):
            _fail(at, "its top-k lists differ in length")
        if max(ids + [s["token_id"]]) >= vocab:
            _fail(at, f"a token id is outside the model's vocabulary of {vocab:,}")
        if any(b > a for a, b in zip(probs, probs[1:])) or any(b > a for a, b in zip(logits, logits[1:])):
            _fail(at, "its top-k is not sorted from the most likely down")
        for p, lg in zip(probs[1:], logits[1:]):
            if p > 1e-30 and probs[0] > 0 and abs(math.log(p / probs[0]) - (lg - logits[0])) > PROB_LOGIT_TOLERANCE:
                _fail(at, "its probabilities do not follow from its logits (softmax)")
        if greedy and not (s["token_id"] in ids and logits[ids.index(s["token_id"])] == logits[0]):
            _fail(at, "a greedy run chose a token that was not the most likely one")
        if s["kv_bytes"] < kv:
            _fail(at, "the KV cache shrank between steps")
        kv = s["kv_bytes"]


def _check_prompt(p: dict, vocab: int, where: str) -> None:
    if len(p["ids"]) != len(p["tokens"]):
        _fail(where, "the prompt's ids and token strings differ in length")
    if max(p["ids"]) >= vocab:
        _fail(where, f"a prompt id is outside the model's vocabulary of {vocab:,}")


def _check_analysis(a: dict, n_layers: int, n_heads: int, n: int, where: str) -> None:
    att = a["attentions"]
    layers, heads = att["shape"][:2] if len(att["shape"]) == 4 else (-1, -1)
    m = att["shape"][2] if len(att["shape"]) == 4 else -1
    if len(att["shape"]) != 4 or att["shape"][3] != m or m > n or (layers, heads) not in ((n_layers, n_heads), (0, 0)):
        _fail(f"{where}/attentions", f"shape {att['shape']} is not [layers={n_layers}, heads={n_heads}, m, m] with m "
                                     f"at most the {n} prompt tokens")
    w = decode_array(att, f"{where}/attentions")  # [layers, heads, m, m]
    if w.size:
        if w.min() < 0 or w.max() > 1.001:
            _fail(f"{where}/attentions", "an attention weight is outside 0..1")
        if np.abs(w.sum(-1) - 1).max() > ROW_SUM_TOLERANCE:
            _fail(f"{where}/attentions", "an attention row does not sum to 1")
        if np.triu(w, 1).max() > 0:  # causal: a position never attends to a later one
            _fail(f"{where}/attentions", "a position attends to a later one (not causal)")
    norms = a["residual_norms"]["shape"]
    if norms != [n_layers + 1, n]:
        _fail(f"{where}/residual_norms", f"shape {norms}, expected [{n_layers + 1}, {n}]")
    decode_array(a["residual_norms"], f"{where}/residual_norms")
    emb = a["embedding_preview"]["shape"]
    if len(emb) != 2 or emb[0] != n:
        _fail(f"{where}/embedding_preview", f"shape {emb}, expected [{n}, width]")
    decode_array(a["embedding_preview"], f"{where}/embedding_preview")
    lens = a["lens"]
    if len(lens["ids"]) not in (0, n_layers + 1):
        _fail(f"{where}/lens", f"{len(lens['ids'])} rows, expected {n_layers + 1} (embeddings and each block)")
    for key in ("lens", "positions"):
        t = a[key]
        if not len(t["ids"]) == len(t["tokens"]) == len(t["probs"]) or any(
                not len(i) == len(s) == len(p) for i, s, p in zip(t["ids"], t["tokens"], t["probs"])):
            _fail(f"{where}/{key}", "its ids, tokens and probabilities differ in length")
    if len(a["positions"]["ids"]) != n:
        _fail(f"{where}/positions", f"{len(a['positions']['ids'])} rows, expected one per prompt token ({n})")


def _check_trace(t: dict, model: dict) -> None:
    from engine.record.summaries import timings

    vocab, n = model["vocab_size"], len(t["prompt"]["ids"])
    _check_prompt(t["prompt"], vocab, "trace/prompt")
    steps, gen = t["steps"], t["generated_ids"]
    if not len(steps) == len(gen) == len(t["generated_tokens"]):
        _fail("trace/steps", "the steps, generated ids and generated tokens differ in number")
    if len(gen) > t["max_new_tokens"]:
        _fail("trace/steps", "more tokens were generated than max_new_tokens allows")
    if any(s["token_id"] != g for s, g in zip(steps, gen)):
        _fail("trace/steps", "a step's chosen token is not the generated token")
    if steps[0]["tokens_in"] != n or any(s["tokens_in"] != 1 for s in steps[1:]):
        _fail("trace/steps", "the prefill did not read the whole prompt, or a decode step read more than one token")
    check_steps(steps, vocab, "trace/steps", t["settings"]["temperature"] == 0)
    if len(t["kv_formula_bytes"]) != len(steps):
        _fail("trace/kv_formula_bytes", "one value per step is expected")
    first = t["first_logits"]
    logits = decode_array(first["values"], "trace/first_logits/values", (vocab,))
    if len(first["top_ids"]) != len(first["top_tokens"]) or max(first["top_ids"]) >= vocab:
        _fail("trace/first_logits", "its top ids and tokens do not match the vocabulary")
    s0 = steps[0]
    if np.abs(logits[s0["top_ids"]] - np.asarray(s0["top_logits"], dtype=np.float32)).max() > 1e-4:
        _fail("trace/first_logits", "the first step's logits are not the ones its top-k was taken from")
    _check_summary(t["timings"], strict(timings([s["seconds"] for s in steps])), "trace/timings")
    if t["analysis"] is not None:
        _check_analysis(t["analysis"], model["n_layers"], model["n_heads"], n, "trace/analysis")


def _check_summary(recorded: dict, derived: dict, where: str) -> None:
    """A summary derived from the record's own numbers (engine.record.build.timings): every value as they give it."""
    for key, want in derived.items():
        value = recorded.get(key, "missing")
        if isinstance(want, dict):
            _check_summary(value if isinstance(value, dict) else {}, want, f"{where}/{key}")
        elif not (value == want or (isinstance(value, float) and isinstance(want, float)
                                    and math.isclose(value, want, rel_tol=1e-9, abs_tol=1e-12))):
            _fail(f"{where}/{key}", "it is not what the steps' own times give")


def _check_race(r: dict, model: dict) -> None:
    from engine.record.speculative import race_summary, spec_run

    vocab = model["vocab_size"]
    _check_prompt(r["prompt"], vocab, "race/prompt")
    plain, spec = r["plain"], r["speculative"]
    if not len(plain["ids"]) == len(plain["tokens"]) == len(plain["step_seconds"]):
        _fail("race/plain", "its ids, tokens and step times differ in number")
    if plain["steps"]:
        if [s["token_id"] for s in plain["steps"]] != plain["ids"]:
            _fail("race/plain/steps", "a step's chosen token is not the plain lane's token")
        if [s["seconds"] for s in plain["steps"]] != plain["step_seconds"]:
            _fail("race/plain/steps", "the step records' times are not the lane's step times")
        check_steps(plain["steps"], vocab, "race/plain/steps", r["settings"]["temperature"] == 0)
    if len(spec["ids"]) != len(spec["tokens"]) or not spec["ids"]:
        _fail("race/speculative", "its ids and tokens differ in number")
    emitted = spec["ids"][:1]
    for i, rnd in enumerate(spec["rounds"]):
        if rnd["index"] != i or rnd["accepted"] > len(rnd["drafted"]) or len(rnd["p"]) != len(rnd["q"]) \
                or len(rnd["p"]) > len(rnd["drafted"]) or len(rnd["drafted"]) != len(rnd["drafted_tokens"]) \
                or len(rnd["drafted"]) > r["k"]:
            _fail(f"race/speculative/rounds/{i}", "its drafted, accepted and judged tokens do not add up")
        emitted += rnd["drafted"][: rnd["accepted"]] + [rnd["token"]]
    if emitted[: len(spec["ids"])] != spec["ids"]:
        _fail("race/speculative", "the rounds' accepted and added tokens are not the speculative lane's tokens")
    if max(plain["ids"] + spec["ids"]) >= vocab:
        _fail("race", f"a token id is outside the model's vocabulary of {vocab:,}")
    again = race_summary(spec_run(r, model["name"]))
    for key, value in r["summary"].items():
        want = again.get(key, "missing")
        same = (value == want) if not isinstance(value, float) or not isinstance(want, float) else \
            math.isclose(value, want, rel_tol=1e-9, abs_tol=1e-12)
        if not same:
            _fail(f"race/summary/{key}", "it is not what the race's own numbers give")


def check_consistency(doc: dict) -> None:
    """Fields that must agree with each other (the schema checks each one alone)."""
    model = doc["model"]
    if doc["kind"] == "trace":
        _check_trace(doc["trace"], model)
    else:
        _check_race(doc["race"], model)
