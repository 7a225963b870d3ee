"""What a saved run derives from its token ids and the model, derived again here and compared, for ``verify``.

The content hash is not a signature, so nothing a record shows is taken from it where this machine can compute it:
- every token string from its id, through this tokenizer (``token_text``: each id decoded alone), the prompt's
  ``input_text`` from its text (the chat template), the answer's text from its ids: exactly;
- every step's numbers from the teacher-forced logits here (``forced_steps``): the top-k ids (each within the
  tolerance of the logit ranked there here), their probabilities, the chosen token's probability under the
  recorded settings, the entropy, and all the vocabulary's first-step logits;
- the prompt's analysis from ``analyse_prompt`` here: residual norms, embedding and hidden previews, the logit lens
  and the next-token table at every position (the attention weights are compared in verify.py);
- the KV bytes after each step, measured here and by the per-layer formula (where the record's dtype is this
  model's: another precision stores other bytes);
- a race's rounds, where they drafted and kept the same: the target's probabilities of the drafts and its top-k.

The first difference is named by its path in the record (``trace.steps[3].token``). Timings are measurements and
are not compared here (their summaries are recomputed from the steps on load: engine.record.format).
"""
from __future__ import annotations

import math

import numpy as np

from engine.core.prompt import encode_prompt, token_text
from engine.record.values import RecordError, decode_array

SHOWN = 60  # characters of a differing value quoted in the verdict


def _quote(v) -> str:
    text = repr(v) if isinstance(v, str) else (f"{v:.6g}" if isinstance(v, float) else repr(v))
    return text if len(text) <= SHOWN else text[: SHOWN - 3] + "..."


class Findings:
    """The values compared, and the first that differs (its path, recorded, here)."""

    def __init__(self):
        self.checked, self.differ, self.first = 0, 0, None
        self.paths: list[str] = []  # the first few that differ
        self.skipped: list[str] = []

    def _saw(self, path: str, same: bool, recorded, here) -> None:
        self.checked += 1
        if not same:
            self.differ += 1
            if len(self.paths) < 10:
                self.paths.append(path)
            if self.first is None:
                self.first = {"path": path, "recorded": _quote(recorded), "here": _quote(here)}

    def same(self, path: str, recorded, here) -> None:
        self._saw(path, recorded == here, recorded, here)

    def near(self, path: str, recorded, here, atol: float, rtol: float = 0.0) -> None:
        a, b = (None if recorded is None else float(recorded)), float(here)
        same = (a is None and not math.isfinite(b)) or (a is not None and abs(a - b) <= atol + rtol * abs(b))
        self._saw(path, same, recorded, b if math.isfinite(b) else None)

    def texts(self, path: str, recorded: list, here: list) -> None:
        if len(recorded) != len(here):
            self._saw(f"{path} (length)", False, len(recorded), len(here))
        for i, (a, b) in enumerate(zip(recorded, here)):
            self.same(f"{path}[{i}]", a, b)

    def to_dict(self) -> dict:
        return {"checked": self.checked, "differ": self.differ, "first": self.first, "paths": self.paths,
                "not_compared": self.skipped}


# ------------------------------------------------------------------------------------------------ ids


def record_ids(kind: str, body: dict):
    """Every token id the record holds (each one is decoded or looked up here)."""
    yield from body["prompt"]["ids"]
    if kind == "trace":
        yield from body["generated_ids"]
        yield from body["first_logits"]["top_ids"]
        steps = body["steps"]
        if body["analysis"] is not None:
            for key in ("lens", "positions"):
                for row in body["analysis"][key]["ids"]:
                    yield from row
    else:
        yield from body["plain"]["ids"]
        yield from body["speculative"]["ids"]
        for r in body["speculative"]["rounds"]:
            yield from r["drafted"]
            yield from r["target_top_ids"]
            yield r["token"]
        steps = body["plain"]["steps"]
    for s in steps:
        yield s["token_id"]
        yield from s["top_ids"]


def check_ids(kind: str, body: dict, vocab: int) -> None:
    """Refuse, in one line, a record with an id past this model's vocabulary (the record's own vocabulary size was
    checked on load; this model's may be smaller): nothing could look it up."""
    top = max(record_ids(kind, body))
    if top >= vocab:
        raise RecordError(f"This saved run holds the token id {top:,}, past this model's vocabulary of {vocab:,}: it "
                          "was recorded with another model (or edited), and cannot be run here.")


# ------------------------------------------------------------------------------------------------ strings


def _strings(f: Findings, lm, kind: str, body: dict, where: str) -> None:
    tok = lm.tokenizer
    ids = sorted(set(record_ids(kind, body)))
    text = dict(zip(ids, token_text(tok, ids)))
    words = lambda xs: [text[int(i)] for i in xs]  # noqa: E731
    p = body["prompt"]
    f.texts(f"{where}.prompt.tokens", p["tokens"], words(p["ids"]))
    try:
        f.same(f"{where}.prompt.input_text", p["input_text"],
               encode_prompt(tok, p["text"], p["chat_template_applied"]).text)
    except ValueError as exc:  # an empty prompt: the prompt check in verify says so
        f.skipped.append(f"{where}.prompt.input_text ({str(exc)[:80]})")
    steps = body["steps"] if kind == "trace" else body["plain"]["steps"]
    at = f"{where}.steps" if kind == "trace" else f"{where}.plain.steps"
    for i, s in enumerate(steps):
        f.same(f"{at}[{i}].token", s["token"], text[s["token_id"]])
        f.texts(f"{at}[{i}].top_tokens", s["top_tokens"], words(s["top_ids"]))
    if kind == "trace":
        f.texts(f"{where}.generated_tokens", body["generated_tokens"], words(body["generated_ids"]))
        f.same(f"{where}.generated_text", body["generated_text"],
               tok.decode(body["generated_ids"], clean_up_tokenization_spaces=False))
        f.texts(f"{where}.first_logits.top_tokens", body["first_logits"]["top_tokens"],
                words(body["first_logits"]["top_ids"]))
        if body["analysis"] is not None:
            for key in ("lens", "positions"):
                t = body["analysis"][key]
                for r, (row_ids, row_tokens) in enumerate(zip(t["ids"], t["tokens"])):
                    f.texts(f"{where}.analysis.{key}.tokens[{r}]", row_tokens, words(row_ids))
    else:
        f.texts(f"{where}.plain.tokens", body["plain"]["tokens"], words(body["plain"]["ids"]))
        f.texts(f"{where}.speculative.tokens", body["speculative"]["tokens"], words(body["speculative"]["ids"]))
        for i, r in enumerate(body["speculative"]["rounds"]):
            f.texts(f"{where}.speculative.rounds[{i}].drafted_tokens", r["drafted_tokens"], words(r["drafted"]))
            f.same(f"{where}.speculative.rounds[{i}].token_text", r["token_text"], text[r["token"]])


# ------------------------------------------------------------------------------------------------ numbers


def _top_ids(f: Findings, path: str, recorded_ids, here_logit_at, here_sorted, tol: float) -> None:
    """Slot j's recorded id must be as likely here as the id ranked j here, within the tolerance (a near tie may
    swap two ids; an id that was never there may not stand in)."""
    for j, (i, want) in enumerate(zip(recorded_ids, here_sorted)):
        f._saw(f"{path}[{j}]", abs(float(here_logit_at(i)) - float(want)) <= tol, i, f"an id whose logit here is "
               f"{float(here_logit_at(i)):.4g}, the top {j + 1} here {float(want):.4g}")


def _steps(f: Findings, at: str, steps: list[dict], here: list[dict], tol, greedy: bool) -> None:
    """``here``: per step, from ``forced_steps`` (the logits at the recorded top ids, and step_stats here). A greedy
    step's probability is 1 for the argmax and 0 for the rest: where the chosen token's logit here is within the
    tolerance of the largest (a near tie another setup may break), it is 1 as the record's argmax."""
    for i, (s, h) in enumerate(zip(steps, here)):
        top_ids, top_probs, chosen_p, entropy, top_logits = h["stats"]
        logit_at = dict(zip(s["top_ids"], h["picks"]))
        _top_ids(f, f"{at}[{i}].top_ids", s["top_ids"], logit_at.get, top_logits, tol.logit)
        for j, (p, q) in enumerate(zip(s["top_probs"], h["probs_at_recorded"])):
            f.near(f"{at}[{i}].top_probs[{j}]", p, q, tol.attention)
        chosen = logit_at.get(s["token_id"])
        tie = greedy and chosen is not None and top_logits[0] - float(chosen) <= tol.logit
        f.near(f"{at}[{i}].prob", s["prob"], 1.0 if tie else chosen_p, tol.attention)
        f.near(f"{at}[{i}].entropy_bits", s["entropy_bits"], entropy, tol.logit)


def _first_logits(f: Findings, t: dict, first_here: np.ndarray, tol) -> None:
    rec = decode_array(t["first_logits"]["values"], "trace/first_logits/values")  # [vocab]
    diff = np.abs(rec - first_here)  # [vocab]
    worst = int(np.argmax(diff))
    f._saw(f"trace.first_logits.values[{worst}]", bool(diff[worst] <= tol.logit), float(rec[worst]),
           float(first_here[worst]))
    order = np.argsort(-rec, kind="stable")[: len(t["first_logits"]["top_ids"])]  # derived from the values
    f.same("trace.first_logits.top_ids", list(t["first_logits"]["top_ids"]), order.astype(int).tolist())


def _table(f: Findings, path: str, rec: dict, here_ids, here_probs, tol: float, exact: bool) -> None:
    """A [rows, k] table of ids and probabilities (the lens, the next-token table), ranked. The same setup computes
    the same table: every id exactly. Another setup's rounding may reorder near ties, or push an id in the last
    slots out of the top k: an id there only needs its recorded probability within the tolerance of the one ranked
    there here (the table keeps no other probability to compare)."""
    for r, (ids, probs) in enumerate(zip(rec["ids"], rec["probs"])):
        h_ids, h_probs = [int(x) for x in here_ids[r]], [float(x) for x in here_probs[r]]
        for j, (i, p) in enumerate(zip(ids, probs)):
            f._saw(f"{path}.ids[{r}][{j}]", i == h_ids[j] or (not exact and abs(p - h_probs[j]) <= tol), i, h_ids[j])
            f.near(f"{path}.probs[{r}][{j}]", p, h_probs[j], tol)


def _analysis(f: Findings, a: dict, here, tol) -> None:
    t = tol.attention
    for key, values in (("residual_norms", here.residual_norms), ("embedding_preview", here.embedding_preview)):
        rec = decode_array(a[key], f"trace/analysis/{key}")
        if rec.shape != values.shape:
            f._saw(f"trace.analysis.{key} (shape)", False, list(rec.shape), list(values.shape))
            continue
        diff = np.abs(rec - values) - t * np.abs(values)
        worst = np.unravel_index(int(np.argmax(diff)), diff.shape)
        f.near(f"trace.analysis.{key}{list(map(int, worst))}", float(rec[worst]), float(values[worst]), t, t)
    for j, (v, h) in enumerate(zip(a["hidden_preview"], here.hidden_preview)):
        f.near(f"trace.analysis.hidden_preview[{j}]", v, float(h), t, t)
    _table(f, "trace.analysis.lens", a["lens"], here.lens_ids, here.lens_probs, t, tol.same_setup)
    _table(f, "trace.analysis.positions", a["positions"], here.top_ids, here.top_probs, t, tol.same_setup)


def _kv(f: Findings, lm, at: str, steps: list[dict], here_steps, record_dtype: str, formula=None) -> None:
    from engine.core.kv import layer_bytes_formula

    if record_dtype != lm.info.dtype:
        f.skipped.append(f"{at}[*].kv_bytes (recorded in {record_dtype}, this model's cache holds {lm.info.dtype})")
        return
    for i, (s, h) in enumerate(zip(steps, here_steps)):
        f.same(f"{at}[{i}].kv_tokens", s["kv_tokens"], h.kv_tokens)
        f.same(f"{at}[{i}].kv_bytes", s["kv_bytes"], h.kv_bytes)
    for i, (b, s) in enumerate(zip(formula or [], steps)):
        f.same(f"trace.kv_formula_bytes[{i}]", b, int(sum(layer_bytes_formula(lm.info, s["kv_tokens"]))))


# ------------------------------------------------------------------------------------------------ the two kinds


def compare_trace(lm, record: dict, forced: list[dict], first_here: np.ndarray, analysis_here, here_steps,
                  tol) -> dict:
    """Everything a trace derives, here against the record (``forced``: ``forced_steps``; ``here_steps``: the
    re-run's StepRecords; ``analysis_here``: analyse_prompt here, or None when the record has no analysis)."""
    t, f = record["trace"], Findings()
    _strings(f, lm, "trace", t, "trace")
    _steps(f, "trace.steps", t["steps"], forced, tol, t["settings"]["temperature"] == 0)
    _first_logits(f, t, first_here, tol)
    if t["analysis"] is not None and analysis_here is not None:
        _analysis(f, t["analysis"], analysis_here, tol)
    _kv(f, lm, "trace.steps", t["steps"], here_steps, record["model"]["dtype"], t["kv_formula_bytes"])
    return f.to_dict()


def compare_race(lm, record: dict, forced: list[dict], run, tol) -> dict:
    """Everything a race derives: its strings, its plain lane's steps, and (where the rounds drafted and kept the
    same) the target's probabilities of each round's drafts and its top-k."""
    r, f = record["race"], Findings()
    _strings(f, lm, "race", r, "race")
    _steps(f, "race.plain.steps", r["plain"]["steps"], forced, tol, r["settings"]["temperature"] == 0)
    _kv(f, lm, "race.plain.steps", r["plain"]["steps"], run.plain_steps, record["model"]["dtype"])
    rounds = r["speculative"]["rounds"]
    if [(x["drafted"], x["accepted"]) for x in rounds] == [(list(x.drafted), x.accepted) for x in run.rounds]:
        for i, (a, b) in enumerate(zip(rounds, run.rounds)):
            at = f"race.speculative.rounds[{i}]"
            for j, (p, q) in enumerate(zip(a["p"], b.p)):
                f.near(f"{at}.p[{j}]", p, q, tol.attention)
            for j, (p, q) in enumerate(zip(a["target_top_probs"], b.target_top_probs)):
                f.near(f"{at}.target_top_probs[{j}]", p, q, tol.attention)
            if tol.same_setup:  # another setup's rounding may swap a near tie in the target's top-k
                f.same(f"{at}.target_top_ids", list(a["target_top_ids"]), list(b.target_top_ids))
    else:
        f.skipped.append("race.speculative.rounds (the rounds here drafted or kept other tokens)")
    return f.to_dict()
