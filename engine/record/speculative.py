"""A saved race and the engine's SpecRun (engine/speculative/records.py): the derived numbers a record keeps, and the
way back from a record to a SpecRun, so a saved race's numbers are the engine's own properties."""
from __future__ import annotations

import numpy as np


def race_summary(run) -> dict:
    """The race's derived numbers (SpecRun's properties), kept readable in the file and checked on load."""
    predicted = run.predicted.to_dict()
    values = {"speedup": run.speedup, "decode_speedup": run.decode_speedup, "acceptance_rate": run.acceptance_rate,
              "tokens_per_pass": run.tokens_per_pass, "c": run.c, "expected_speedup": predicted["expected_speedup"],
              "expected_speedup_drafted": predicted["expected_speedup_drafted"],
              "expected_speedup_as_run": predicted["expected_speedup_as_run"],
              "verify_cost_ratio": run.verify_cost_ratio, "plain_seconds": run.plain_seconds,
              "spec_seconds": run.spec_seconds, "target_passes": run.target_passes, "drafted": run.drafted,
              "accepted": run.accepted, "identical": run.identical}
    return {k: v if isinstance(v, (bool, int)) or v is None else (float(v) if np.isfinite(v) else None)
            for k, v in values.items()}


def spec_run(race: dict, model: str):
    """A saved race back as the engine's SpecRun, so its derived numbers are the engine's own properties."""
    from engine.core.sampling import SamplingSettings
    from engine.speculative.records import SpecRound, SpecRun

    rounds = tuple(SpecRound(
        r["index"], tuple(r["drafted"]), tuple(r["q"]), tuple(r["p"]), r["accepted"], r["token"], r["kind"],
        r["source"], tuple(r["target_top_ids"]), tuple(r["target_top_probs"]), r["draft_seconds"], r["verify_seconds"],
        bool(r.get("compiled", False))) for r in race["speculative"]["rounds"])
    s = race["settings"]
    return SpecRun(model=model, drafter=race["drafter"], k=race["k"],
                   settings=SamplingSettings(s["temperature"], s["top_k"], s["top_p"], s["min_p"]), seed=race["seed"],
                   max_new_tokens=race["max_new_tokens"], threads=race["threads"],
                   prompt_ids=tuple(race["prompt"]["ids"]), plain_ids=tuple(race["plain"]["ids"]),
                   plain_step_seconds=tuple(race["plain"]["step_seconds"]), spec_ids=tuple(race["speculative"]["ids"]),
                   spec_prefill_seconds=race["speculative"]["prefill_seconds"], rounds=rounds,
                   plain_tokens=tuple(race["plain"]["tokens"]), spec_tokens=tuple(race["speculative"]["tokens"]))
