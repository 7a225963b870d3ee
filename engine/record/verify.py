"""Check a saved run on this machine: run it again and compare what the model computed, and set the timings side
by side.

What is compared, and what it shows:
- the weights and tokenizer, file by file, by SHA-256 (the same model, or not);
- the prompt: this tokenizer must give the recorded ids from the recorded text (an edited prompt does not);
- the tokens of a fresh run with the recorded settings and seed (for a race: both lanes);
- the logits, step by step: the recorded tokens are fed through the same loop stages as generation (prefill, then
  one cached decode step each: teacher forcing, so a run that went another way is still compared where it was) and
  the recorded top-k logits of each step are compared with this machine's at the same token ids;
- the prompt's attention weights (a trace saved with its analysis);
- everything else the record derives from its ids and the model (engine.record.derived: every token string, each
  step's top-k, probabilities and entropy, the first step's logits, the analysis, the KV bytes), the first
  difference named by its path;
- every timing, recorded and here, as a ratio (here / recorded). Timings are measurements of that machine at that
  moment: they are set side by side, never "verified".

Tolerances depend on what differs between the two runs (``tolerance``): the same precision, device kind, engine mode
and library versions compute the same logits up to the order of float sums (thread counts, CPU kernels); another
precision rounds every product differently. Where tokens differ, the record's own top-2 margin at the first
different step tells a near tie (within the tolerance: rounding may break it) from a real difference.
"""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from engine.core.loop import decode_step, new_cache, prefill
from engine.core.prompt import encode_prompt, token_text
from engine.core.sampling import SamplingSettings
from engine.measure import noise
from engine.record.build import calibration_dict, engine_mode, is_tokenizer, is_weights, machine_facts, \
    model_identity
from engine.record import derived
from engine.record.values import decode_array

# Largest |logit difference| accepted, by the coarser precision of the two runs (logit units). "same": the same
# precision, device kind, engine mode and torch / transformers versions; "other": any of those differ.
# Measured on SmolLM2-135M, a 40-token prompt and 16 new tokens, 2-core CPU, torch 2.13 (docs/record-format.md):
# - the same setup re-run, float32, bfloat16 and int8, at 2 and at 1 torch threads: 0 (the same kernels sum in the
#   same order); the tolerance leaves room for another CPU's kernels reordering sums;
# - a float32 record checked in bfloat16: largest difference 0.36 (tokens parted at a 0.039 near tie), attention
#   0.042; in int8: 1.32 (a 0.044 near tie), attention 0.22. float16 runs only on a GPU and was not measured here:
#   its 3 more mantissa bits than bfloat16 give it a quarter of bfloat16's tolerance.
TOLERANCE_SAME = {"float32": 1e-3, "bfloat16": 0.05, "float16": 0.05, "int8": 0.05}
TOLERANCE_OTHER = {"float32": 2e-2, "float16": 0.25, "bfloat16": 1.0, "int8": 3.0}
COARSER = ("float32", "float16", "bfloat16", "int8")  # in order of rounding error
ATTENTION_TOLERANCE = {"float32": 2e-3, "float16": 0.03, "bfloat16": 0.1, "int8": 0.5}  # stored in float16: 2^-11


@dataclass(frozen=True)
class Tolerance:
    logit: float  # largest |logit difference| that is still the same computation
    attention: float  # largest |attention weight difference|
    same_setup: bool  # same precision, device kind, engine mode and torch / transformers versions
    why: str


@dataclass(frozen=True)
class Timing:
    what: str
    recorded_s: float
    here_s: float

    @property
    def ratio(self) -> float:
        """Here / recorded: 0.5 means this machine took half the recorded time."""
        return self.here_s / self.recorded_s if self.recorded_s > 0 else float("nan")

    def to_dict(self) -> dict:
        return {"what": self.what, "recorded_s": self.recorded_s, "here_s": self.here_s, "ratio": self.ratio}


@dataclass(frozen=True)
class Verification:
    """What a re-run on this machine found. ``status``: "identical" (same tokens, logits within the same-setup
    tolerance), "within tolerance" (another setup: within its stated tolerance, or tokens parted at a near tie),
    "different" (not the same computation), "not comparable" (another model)."""

    kind: str
    status: str
    verdict: str
    tolerance: Tolerance
    weights: dict  # {"compared", "same", "files": {name: "same" | "differs" | "missing here" | "not recorded"}}
    prompt: dict  # {"same_ids", "same_token_strings"}
    tokens: dict  # {"same", "first_difference", "recorded", "here", "margin", "near_tie"} (a race: per lane)
    logits: dict  # {"per_step", "largest", "at_step", "within"}
    attention: dict | None
    kv: dict
    timings: tuple[Timing, ...]
    recorded_machine: dict
    here_machine: dict
    notes: tuple[str, ...] = field(default=())
    derived: dict = field(default_factory=dict)  # {"checked", "differ", "first": {"path", "recorded", "here"}, ...}

    @property
    def ok(self) -> bool:
        return self.status in ("identical", "within tolerance")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["timings"] = [t.to_dict() for t in self.timings]
        d["ok"] = self.ok
        return d


# ------------------------------------------------------------------------------------------------ pieces


def _minor(version: str | None) -> str:
    return ".".join((version or "?").split("+")[0].split(".")[:2])


def tolerance(recorded_model: dict, recorded_machine: dict, here_model: dict, here_machine: dict) -> Tolerance:
    """The largest logit (and attention weight) difference that still counts as the same computation."""
    precs = (recorded_model["precision"], here_model["precision"])
    coarse = max(precs, key=lambda p: COARSER.index(p) if p in COARSER else len(COARSER))
    differs = []
    if precs[0] != precs[1]:
        differs.append(f"precision {precs[0]} here {precs[1]}")
    if recorded_machine["device"] != here_machine["device"]:
        differs.append(f"device {recorded_machine['device']} here {here_machine['device']}")
    if recorded_model["engine_mode"] != here_model["engine_mode"]:
        differs.append(f"engine mode {recorded_model['engine_mode']} here {here_model['engine_mode']}")
    for lib in ("torch", "transformers"):
        a, b = recorded_machine["libraries"].get(lib), here_machine["libraries"].get(lib)
        if _minor(a) != _minor(b):
            differs.append(f"{lib} {a} here {b}")
    table = TOLERANCE_OTHER if differs else TOLERANCE_SAME
    logit = table.get(coarse, TOLERANCE_OTHER["int8"])
    why = (f"another setup ({'; '.join(differs)}): {coarse} rounding allows logits to differ by up to {logit:g}"
           if differs else f"the same setup ({coarse}, {here_machine['device']}, {here_model['engine_mode']}, torch "
                           f"{_minor(here_machine['libraries'].get('torch'))}): only the order of sums may differ, "
                           f"up to {logit:g}")
    return Tolerance(logit, ATTENTION_TOLERANCE.get(coarse, 0.1), not differs, why)


def compare_files(recorded: dict, here: dict) -> dict:
    """Per file: "same", "differs", "missing here" or "not recorded"; ``same`` over the weights and tokenizer files
    (None when either side has no hashes)."""
    rf, hf = recorded.get("files") or {}, here.get("files") or {}
    files = {}
    for name in sorted(set(rf) | set(hf)):
        if name not in hf:
            files[name] = "missing here"
        elif name not in rf:
            files[name] = "not recorded"
        else:
            files[name] = "same" if rf[name]["sha256"] == hf[name]["sha256"] else "differs"
    key = [n for n in files if is_weights(n) or is_tokenizer(n)]
    compared = bool(rf) and bool(hf) and bool(key)
    same = all(files[n] == "same" for n in key) if compared else None
    return {"compared": compared, "same": same, "files": files}


@torch.inference_mode()
def _forced(lm, prompt_ids, tokens, n: int):
    """Teacher forcing through the loop's own stages: the prompt's prefill, then one cached decode step per
    recorded token; yields the logits after each of the ``n`` steps."""
    dev = lm.device
    cache = new_cache(lm)
    yield prefill(lm, torch.tensor([list(prompt_ids)], device=dev), cache)[0].float().cpu()  # [vocab]
    for i in range(1, n):
        yield decode_step(lm, torch.tensor([[int(tokens[i - 1])]], device=dev), cache)[0].float().cpu()  # [vocab]


def forced_logits(lm, prompt_ids, tokens, pick_ids) -> list[np.ndarray]:
    """After teacher-forced step i, the logits at ``pick_ids[i]`` (the ids the record kept for that step)."""
    return [lg[list(pick_ids[i])].numpy() for i, lg in enumerate(_forced(lm, prompt_ids, tokens, len(pick_ids)))]


def forced_steps(lm, prompt_ids, steps: list[dict], settings: SamplingSettings) -> tuple[list[dict], np.ndarray]:
    """Each recorded step computed again by teacher forcing: the logits and softmax probabilities at its recorded
    top ids, and what the loop keeps of a step (``step_stats``: the top-k here, the chosen token's probability under
    ``settings``, the entropy); and the first step's logits over the whole vocabulary."""
    from engine.core.trace import step_stats

    out, first = [], None
    for s, lg in zip(steps, _forced(lm, prompt_ids, [s["token_id"] for s in steps], len(steps))):  # lg: [vocab]
        first = lg.numpy() if first is None else first
        ids = list(s["top_ids"])
        out.append({"picks": lg[ids].numpy(), "probs_at_recorded": lg.softmax(-1)[ids].numpy(),
                    "stats": step_stats(lg, s["token_id"], settings)})
    return out, first


def logit_differences(steps: list[dict], here: list[dict], tol: Tolerance) -> dict:
    """Largest |recorded - here| over each step's recorded top-k logits (``here``: ``forced_steps``)."""
    if not steps:
        return {"per_step": [], "largest": None, "at_step": None, "within": None}
    per = [float(np.abs(np.asarray(s["top_logits"], dtype=np.float64) - h["picks"]).max()) for s, h in zip(steps, here)]
    at = int(np.argmax(per))
    return {"per_step": per, "largest": per[at], "at_step": at, "within": per[at] <= tol.logit}


def token_comparison(recorded: list[int], here: list[int], steps: list[dict], tol: Tolerance, recorded_tokens,
                     tok) -> dict:
    """Same tokens? Where they part: the record's top-2 margin there, and whether that is a near tie."""
    first = next((i for i, (a, b) in enumerate(zip(recorded, here)) if a != b), None)
    if first is None and len(recorded) != len(here):
        first = min(len(recorded), len(here))
    out = {"same": first is None, "first_difference": first, "count_recorded": len(recorded), "count_here": len(here),
           "here": token_text(tok, here), "recorded_token": None, "here_token": None, "margin": None,
           "near_tie": None}
    if first is not None:
        out["recorded_token"] = recorded_tokens[first] if first < len(recorded_tokens) else None
        out["here_token"] = token_text(tok, [here[first]])[0] if first < len(here) else None
        if first < len(steps) and len(steps[first]["top_logits"]) > 1:
            lg = steps[first]["top_logits"]
            out["margin"] = float(lg[0] - lg[1])
            out["near_tie"] = out["margin"] <= tol.logit
    return out


def _check_prompt(lm, p: dict) -> tuple[dict, list[int]]:
    try:
        ids = list(encode_prompt(lm.tokenizer, p["text"], p["chat_template_applied"]).ids)
    except Exception as exc:  # noqa: BLE001 - a prompt this tokenizer refuses is a finding, not a crash
        return {"same_ids": False, "same_token_strings": False, "note": f"{type(exc).__name__}: {exc}"[:200]}, []
    strings = token_text(lm.tokenizer, p["ids"])
    return {"same_ids": ids == p["ids"], "same_token_strings": strings == p["tokens"]}, ids


# ------------------------------------------------------------------------------------------------ the re-runs


def _rerun_trace(lm, record: dict, tol: Tolerance, probe, drafter=None) -> tuple:
    from engine.core.trace import analyse_prompt, generate_tokens

    t = record["trace"]
    s = SamplingSettings(**t["settings"])
    ids = t["prompt"]["ids"]
    with noise.calibrated(probe) as cal:
        gen, steps, _, _ = generate_tokens(lm, list(ids), s, t["max_new_tokens"], t["seed"])
    rec_steps = t["steps"]
    tokens = token_comparison(t["generated_ids"], gen, rec_steps, tol, t["generated_tokens"], lm.tokenizer)
    forced, first = forced_steps(lm, ids, rec_steps, s.clamp())
    logits = logit_differences(rec_steps, forced, tol)
    attention = analysis = None
    if t["analysis"] is not None:
        rec = decode_array(t["analysis"]["attentions"], "trace/analysis/attentions")
        analysis = analyse_prompt(lm, list(ids))
        here = analysis.attentions.astype(np.float32)
        if rec.shape == here.shape and rec.size:
            diff = float(np.abs(rec - here).max())
            attention = {"largest": diff, "within": diff <= tol.attention, "shape": list(rec.shape)}
        else:
            attention = {"largest": None, "within": None, "shape": list(rec.shape),
                         "note": f"not comparable: recorded shape {list(rec.shape)}, here {list(here.shape)}"}
    kv_same = [a["kv_bytes"] == b.kv_bytes for a, b in zip(rec_steps, steps)]
    kv = {"same": bool(kv_same) and all(kv_same) and len(rec_steps) == len(steps),
          "recorded_last": rec_steps[-1]["kv_bytes"], "here_last": steps[-1].kv_bytes if steps else None}
    times = [Timing("prefill (time to first token)", rec_steps[0]["seconds"], steps[0].seconds)]
    times += [Timing(f"decode step {i}", a["seconds"], b.seconds)
              for i, (a, b) in enumerate(zip(rec_steps[1:], steps[1:]), start=1)]
    rd, hd = [a["seconds"] for a in rec_steps[1:]], [b.seconds for b in steps[1:]]
    if rd and hd:
        times.append(Timing("median decode step", statistics.median(rd), statistics.median(hd)))
    times.append(Timing("whole run", sum(a["seconds"] for a in rec_steps), sum(b.seconds for b in steps)))
    found = derived.compare_trace(lm, record, forced, first, analysis, steps, tol)
    return tokens, logits, attention, kv, tuple(times), cal.result, found


def _rerun_race(lm, record: dict, tol: Tolerance, probe, drafter=None) -> tuple:
    from engine.speculative.decoding import race

    r = record["race"]
    s = SamplingSettings(**r["settings"])
    ids = r["prompt"]["ids"]
    with noise.calibrated(probe) as cal:
        run = race(lm, list(ids), r["drafter"], r["k"], s, r["max_new_tokens"], r["seed"], drafter=drafter)
    plain, spec = r["plain"], r["speculative"]
    tokens = {
        "plain": token_comparison(plain["ids"], list(run.plain_ids), plain["steps"], tol, plain["tokens"],
                                  lm.tokenizer),
        "speculative": token_comparison(spec["ids"], list(run.spec_ids), [], tol, spec["tokens"],
                                        lm.tokenizer),
        "same_rounds": [(x["drafted"], x["accepted"]) for x in spec["rounds"]]
        == [(list(x.drafted), x.accepted) for x in run.rounds],
    }
    tokens["same"] = tokens["plain"]["same"] and tokens["speculative"]["same"]
    tokens["first_difference"] = tokens["plain"]["first_difference"]
    tokens["near_tie"] = tokens["plain"]["near_tie"]
    forced, _ = forced_steps(lm, ids, plain["steps"], s.clamp())
    logits = logit_differences(plain["steps"], forced, tol)
    kv_same = [a["kv_bytes"] == b.kv_bytes for a, b in zip(plain["steps"], run.plain_steps)]
    kv = {"same": bool(kv_same) and all(kv_same), "recorded_last": plain["steps"][-1]["kv_bytes"] if plain["steps"]
          else None, "here_last": run.plain_steps[-1].kv_bytes if run.plain_steps else None}
    times = [Timing("plain lane (wall clock)", sum(plain["step_seconds"]), run.plain_seconds),
             Timing("speculative lane (wall clock)", r["summary"]["spec_seconds"], run.spec_seconds),
             Timing("plain prefill", plain["step_seconds"][0], run.plain_step_seconds[0]),
             Timing("speculative prefill", spec["prefill_seconds"], run.spec_prefill_seconds)]
    times += [Timing(f"plain decode step {i}", a, b)
              for i, (a, b) in enumerate(zip(plain["step_seconds"][1:], run.plain_step_seconds[1:]), start=1)]
    times += [Timing(f"round {i + 1}: draft + verify", a["draft_seconds"] + a["verify_seconds"],
                     b.draft_seconds + b.verify_seconds) for i, (a, b) in enumerate(zip(spec["rounds"], run.rounds))]
    extra = {"speedup_recorded": r["summary"]["speedup"], "speedup_here": run.speedup}
    found = derived.compare_race(lm, record, forced, run, tol)
    return tokens, logits, None, {**kv, **extra}, tuple(times), cal.result, found


# ------------------------------------------------------------------------------------------------ the verdict


def _verdict(kind: str, weights: dict, prompt: dict, tokens: dict, logits: dict, attention, tol: Tolerance,
             times: tuple, found: dict) -> tuple[str, str]:
    """(status, one-line verdict): the weights first (another model confirms nothing), then the prompt, every value
    derived again here (engine.record.derived: the first that differs, by its path), the tokens, the logits and the
    attention weights."""
    same_setup = tol.same_setup
    whole = next((t for t in times if t.what in ("whole run", "plain lane (wall clock)")), None)
    pace = f" This machine took {whole.ratio:.2f}x the recorded time." if whole and whole.ratio == whole.ratio else ""
    if weights["same"] is False:
        return "not comparable", ("Not the same model: its weights or tokenizer files differ from the recorded ones "
                                  "(by SHA-256), so nothing here can confirm the record." + pace)
    if not prompt["same_ids"]:
        return "different", ("Not reproduced: this tokenizer does not turn the recorded prompt text into the "
                             "recorded ids (an edited prompt or another tokenizer)." + pace)
    if found.get("first"):
        d = found["first"]
        return "different", (f"Not reproduced: the record's {d['path']} is {d['recorded']}, but derived here from its "
                             f"token ids and this model it is {d['here']} ({found['differ']:,} of {found['checked']:,} "
                             f"derived values differ)." + pace)
    largest = logits["largest"]
    worst = (f"largest logit difference {largest:.2g} at step {logits['at_step']}, tolerance {tol.logit:g}"
             if largest is not None else "no logits recorded")
    att_bad = attention is not None and attention.get("within") is False
    if tokens["same"] and logits["within"] is not False and not att_bad:
        status = "identical" if same_setup else "within tolerance"
        what = "identical tokens" if same_setup else "the same tokens"
        return status, f"Reproduced: {what} on this machine; {worst}.{pace}"
    if tokens["same"]:
        part = "attention weights" if att_bad and logits["within"] is not False else "logits"
        return "different", f"Not reproduced: the same tokens, but the {part} differ beyond tolerance ({worst}).{pace}"
    first = tokens["first_difference"]
    if tokens.get("near_tie") and logits["within"] is not False and not att_bad:
        return "within tolerance", (f"Within tolerance: the tokens part at step {first}, where the record's top two "
                                    f"logits were {tokens['plain']['margin'] if kind == 'race' else tokens['margin']:.2g}"
                                    f" apart (a near tie that rounding may break); {worst}.{pace}")
    lane = "" if kind == "trace" else (" (plain lane)" if not tokens["plain"]["same"] else " (speculative lane)")
    return "different", f"Not reproduced: the tokens differ from step {first}{lane}; {worst}.{pace}"


def verify(record: dict, lm, probe=noise.probe_seconds, source_name: str | None = None, drafter=None
           ) -> Verification:
    """Re-run ``record`` (a loaded, checked saved run: engine.record.format.load) on ``lm`` and compare. Raises
    RecordError for a record this model cannot run (a token id past its vocabulary).
    ``source_name``: what the loader was given for ``lm`` (its files are hashed from there); ``drafter``: a race's
    drafter already built (the app builds a draft model under its own model policy)."""
    from engine.models.precision import lm_precision

    here_machine = machine_facts(str(lm.device), torch.get_num_threads())
    here_model = {"precision": lm_precision(lm), "engine_mode": engine_mode(lm.ref)}
    tol = tolerance(record["model"], record["machine"], here_model, here_machine)
    weights = compare_files(record["model"]["identity"], model_identity(lm, source_name))
    kind = record["kind"]
    body = record[kind]
    derived.check_ids(kind, body, lm.info.vocab_size)
    prompt, _ = _check_prompt(lm, body["prompt"])
    rerun = _rerun_trace if kind == "trace" else _rerun_race
    tokens, logits, attention, kv, times, cal, found = rerun(lm, record, tol, probe, drafter)
    status, verdict = _verdict(kind, weights, prompt, tokens, logits, attention, tol, times, found)
    notes = []
    if record["machine"]["calibration"] and record["machine"]["calibration"]["flags"]:
        notes.append("The recorded machine was busy while the run was measured: "
                     + " ".join(record["machine"]["calibration"]["flags"]))
    if cal is not None and cal.flags:
        notes.append("This machine was busy during the re-run: " + " ".join(cal.flags))
    if kind == "trace" and body["timed_in_batcher"]:
        notes.append("The recorded steps were timed in a class batch; the re-run here ran alone.")
    here_machine = {**here_machine, "calibration": calibration_dict(cal)}
    if found["not_compared"]:
        notes.append("Not compared here: " + "; ".join(found["not_compared"]) + ".")
    return Verification(kind, status, verdict, tol, weights, prompt, tokens, logits, attention, kv, times,
                        record["machine"], here_machine, tuple(notes), found)
