"""A saved run's fields checked against each other, after the schema has checked each one alone: lengths that must
agree, probabilities that must follow from the logits, attention rows that must sum to 1 and be causal, the timing
summary recomputed from the steps, a race's rounds adding up to its tokens. Every refusal is a ``RecordError``."""
from __future__ import annotations

import math

import numpy as np

from engine.record.values import RecordError, decode_array, strict

PROB_LOGIT_TOLERANCE = 1e-3  # |log(p_j / p_0) - (logit_j - logit_0)|: softmax in float32 keeps this to ~1e-6
ROW_SUM_TOLERANCE = 0.02  # attention rows stored in float16 sum to 1 within this


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
