"""Display values for the home page's detailed sections (tables as DataFrames, numbers as strings)."""
from __future__ import annotations

from statistics import median

import pandas as pd

from engine.core.loaded import Mode
from ui.frame.figures import prob_text
from ui.frame.html import visible


def embedding_table(trace) -> pd.DataFrame:
    a = trace.analysis
    df = pd.DataFrame(a.embedding_preview, columns=[f"dim {i}" for i in range(a.embedding_preview.shape[1])])
    df.insert(0, "token", [visible(t) for t in trace.prompt_tokens])
    df["L2 norm"] = a.residual_norms[0]
    return df.round(4)


def block_table(walk) -> pd.DataFrame | None:
    if walk is None:
        return None
    return pd.DataFrame([{"stage": s.name, "shape": str(list(s.shape)), "norm at last position": round(s.norm, 3),
                          "first values at last position": ", ".join(f"{v:+.3f}" for v in s.preview)} for s in walk])


def top_logits_table(trace) -> pd.DataFrame:
    first = trace.steps[0]
    top5 = list(first.top_ids[:5])  # softmax keeps the order of the logits
    return pd.DataFrame({"token": [visible(t) for t in first.top_tokens[:5]], "token id": top5,
                         "logit": [round(float(trace.first_logits[i]), 3) for i in top5]})


def steps_table(trace) -> pd.DataFrame:
    batched = trace.batched
    return pd.DataFrame([{"step": s.index, "phase": s.phase, "tokens in": s.tokens_in, "chosen": visible(s.token),
                          "p(chosen)": prob_text(s.prob), "ms": round(s.seconds * 1000, 1),
                          **({"requests in the pass": s.batch_size} if batched else {}),
                          "KV cache (KiB)": round(s.kv_bytes / 1024, 1)} for s in trace.steps])


def batch_note(trace) -> str:
    """For a run the engine served in a batch with other sessions' requests: what its step times mean."""
    if not trace.batched:
        return ""
    return (f" Measured in a batch of up to {trace.largest_batch}: other people on this server asked at the same "
            "time, and the engine served your request together with theirs (continuous batching, see the Batching "
            "page). Each bar is one pass that made a token for every request in it, so it is not the time of a "
            "step alone; the Timeline page measures steps alone." + _rounding_note(trace))


def engine_note(trace) -> str:
    """Compiled mode: how this run's decode steps ran (its compiled graph, eager, or some of each) and how its prefill
    ran (its bucket's compiled graph, or eager and why, in the class batch too: engine.jobs.classbatch): a teacher who
    switched modes sees what ran compiled."""
    if trace.model.mode == Mode.EAGER:
        return ""
    decode = [s for s in trace.steps if s.phase == "decode"]
    ran = sum(1 for s in decode if s.compiled)
    steps = ("" if not decode else " Decode steps: compiled (torch.compile graph)." if ran == len(decode) else
             " Decode steps: eager." if ran == 0 else f" Decode steps: {ran} of {len(decode)} compiled, the rest eager.")
    return steps + (f" Prefill: {trace.prefill_mode}." if trace.prefill_mode else "")


def _rounding_note(trace) -> str:
    """Batched answers equal solo ones in float32 (tested); in a half precision a batched pass sums in another order
    and rounds differently, so a near tie can go the other way (seen on a GPU in bfloat16: some of 20 batched
    answers of a random-weight model were not the solo ones). int8 never batches (engine.jobs.classbatch.group)."""
    kind = trace.model.precision or trace.info.dtype
    if kind in ("", "float32"):
        return ""
    return (f" In {kind} a pass over a batch rounds its sums in another order than a pass alone, so it does not "
            "compute exactly what a pass alone computes: where two tokens were nearly tied, your answer can differ "
            "from the one you would get alone.")


def numbers(trace) -> dict:
    """Every number the page's lesson texts fill in."""
    info, first, a, ss = trace.info, trace.steps[0], trace.analysis, trace.settings
    how = ("greedy (temperature 0): the most likely token is taken" if ss.greedy else
           f"temperature {ss.temperature:g}, top-k {ss.top_k or 'off'}, top-p {ss.top_p:g}"
           + (f", min-p {ss.min_p:g}" if ss.min_p > 0 else "") + f", seed {trace.seed}")
    return dict(
        source=info.source, params=f"{info.n_params / 1e6:.0f}", layers=info.n_layers, device=info.device,
        dtype=info.dtype, vocab=info.vocab_size, hidden=info.hidden_size, n=len(trace.prompt_ids),
        template_note=("The chat template wraps it in role markers first; this is the exact text it receives:"
                       if trace.encoded.chat_applied else "This is the exact text it receives:"),
        preview=", ".join(f"{v:+.3f}" for v in a.hidden_preview),
        tied=" It is the embedding table reused (tied weights)." if info.tied_embeddings else "",
        lo=float(trace.first_logits.min()), hi=float(trace.first_logits.max()), entropy=first.entropy_bits,
        how=how, token=visible(first.token), token_id=first.token_id, prob=first.prob,
        count=len(trace.generated_ids),
        reason="the end-of-turn token" if trace.stop_reason == "eos" else "the max-new-tokens limit",
        pos_note={"rope": "Position is not added here: this model rotates queries and keys by position (RoPE) inside "
                          "attention.",
                  "learned": "This model adds a learned position vector to each embedding: the rows above are what "
                             "block 0 receives, the token's row plus its position's row.",
                  "alibi": "Position is not added here: this model (ALiBi) lowers each attention score in proportion "
                           "to the distance between the two tokens."}.get(
            info.position_encoding, "This model adds no position vector to the embedding.")
        + (f" The rows are the table's rows times {info.arch.embedding_scale:.3g}: this model scales its embeddings "
           "before block 0." if getattr(info.arch, "embedding_scale", None) else ""),
        ttft_ms=trace.ttft * 1000,
        decode_ms=median(trace.decode_seconds) * 1000 if trace.decode_seconds else float("nan"),
    )
