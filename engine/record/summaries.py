"""The timing summary a saved trace keeps, derived from its steps' times: written by engine.record.build and computed
again on load (engine.record.format), so a summary that is not what its steps give is refused. Imports nothing of
engine.record, so both can use it."""
from __future__ import annotations


def timings(step_seconds) -> dict:
    """Prefill, and the decode steps as a median with its spread (engine.measure.noise.summarize)."""
    from engine.measure.noise import summarize

    decode = summarize(step_seconds[1:], "the decode steps")
    total = float(sum(step_seconds))
    return {"prefill_seconds": float(step_seconds[0]),
            "decode_seconds": {k: getattr(decode, k) for k in ("median", "lo", "hi", "q1", "q3", "n")},
            "tokens_per_second": len(step_seconds) / total if total > 0 else 0.0, "total_seconds": total}
