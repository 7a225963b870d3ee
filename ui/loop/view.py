"""The home page's "loop at a glance": display values for every stage of one pass, for the token on view.

``glance(trace, t, last)`` turns a Trace (and, for a token after the first, the extra values of
engine.loop.glance.last_position) into short strings and numbers the picture draws; no st.* here.
Token t is the t-th generated token: pass t reads the prompt (t = 0, prefill) or the previous token plus the
KV cache (t > 0, decode) and chooses generated token t.
"""
from __future__ import annotations

from dataclasses import dataclass

from ui.frame.figures import percent_text
from ui.frame.html import visible

# Stage keys in loop order, their box titles and the page each box links to (url path).
STAGES = ("text", "ids", "embeddings", "blocks", "hidden", "logits", "softmax", "sampled", "appended")
TITLES = {"text": "Text", "ids": "Token ids", "embeddings": "Embeddings", "blocks": "{n} blocks",
          "hidden": "Last hidden state", "logits": "Logits", "softmax": "Softmax (T = 1)", "sampled": "Sampled token",
          "appended": "Appended"}
LINKS = {"text": "tokenization", "ids": "tokenization", "embeddings": "embeddings", "blocks": "attention",
         "hidden": "attention", "logits": "sampling", "softmax": "sampling", "sampled": "sampling",
         "appended": "kv_cache"}
# A decode pass starts from the new token's id: the text box belongs to the prompt's first pass only.
DECODE_START = STAGES.index("ids")


@dataclass(frozen=True)
class Glance:
    t: int  # which generated token this pass chooses (0 = first, from prefill)
    n_tokens: int  # generated tokens in the trace
    phase: str  # "prefill" | "decode"
    lines: dict  # stage -> list[str] shown in its box
    top_tokens: tuple[str, ...]  # softmax box: top-5 under plain softmax
    top_probs: tuple[float, ...]
    chosen: str  # the sampled token, whitespace made visible
    chosen_raw: str  # the sampled token as decoded
    context_tail: str  # appended box: text before the new token (visible whitespace)
    traveller: str  # what enters this pass: the prompt (t = 0) or the previous new token


def _how(ss) -> str:
    return "greedy (T = 0)" if ss.greedy else f"T {ss.temperature:g}, k {ss.top_k or 'off'}, p {ss.top_p:g}"


def softmax_note(ss) -> str | None:
    """One line saying why the softmax box (the model's own distribution, temperature 1) and the sampled token's
    p (under the sidebar's sampling settings) differ; None when they are the same distribution."""
    if not ss.greedy and ss.temperature == 1.0 and ss.top_k == 0 and ss.top_p >= 1.0 and ss.min_p <= 0.0:
        return None
    if ss.greedy:
        return ("Why the percentages differ: the softmax box shows the model's own distribution (temperature 1); "
                "greedy decoding (T = 0) then puts all the probability on its top token, so the sampled token's "
                "p is 100%.")
    shape = ("sharpens it" if ss.temperature < 1 else "flattens it" if ss.temperature > 1 else "keeps its shape")
    cut = " and top-k / top-p cut its tail (the rest is renormalised)" if ss.top_k or ss.top_p < 1.0 else ""
    return (f"Why the percentages differ: the softmax box shows the model's own distribution (temperature 1); "
            f"the token is drawn from it reshaped by your settings ({_how(ss)}): T {ss.temperature:g} {shape}{cut}, "
            "so the sampled token's p is its probability after that.")


def _vec(values, n: int = 4) -> list[str]:
    vals = [f"{float(v):+.2f}" for v in list(values)[:n]]
    return [" ".join(vals[:2]), " ".join(vals[2:]) + " \u2026"]


def _tail(text: str, n: int) -> str:
    return text if len(text) <= n else "\u2026" + text[-(n - 1):]


def glance(trace, t: int, last=None) -> Glance:
    """Display values of pass ``t``; ``last`` is last_position(...) over prompt + generated[:t] (needed for t > 0)."""
    t = max(0, min(int(t), len(trace.steps) - 1))
    step, info, a = trace.steps[t], trace.info, trace.analysis
    ids = list(trace.prompt_ids) + list(trace.generated_ids[:t])
    if t == 0:  # the trace's own untimed look at the prompt pass
        emb, hidden = a.embedding_preview[-1], a.hidden_preview
        lo, hi = float(trace.first_logits.min()), float(trace.first_logits.max())
    else:
        emb, hidden, (lo, hi) = last.embedding, last.hidden, last.logit_range
    top_tok = step.top_tokens[0]  # softmax keeps the order of the logits
    prompt_text = trace.encoded.text
    so_far = "".join(trace.generated_tokens[:t])
    fed = len(ids) if t == 0 else 1
    cached = 0 if t == 0 else len(ids) - 1
    lines = {
        "text": [_tail(visible(prompt_text + so_far), 28), f"{len(prompt_text) + len(so_far):,} characters"],
        "ids": ["\u2026 " + " ".join(str(i) for i in ids[-3:]), f"{len(ids)} so far, this pass reads {fed}"],
        "embeddings": [f"[{fed} \u00d7 {info.hidden_size}]", *_vec(emb)],
        "blocks": [f"{step.tokens_in} in + {cached} cached" if t else f"{step.tokens_in} tokens in one pass",
                   f"{step.seconds * 1000:.0f} ms measured" + (f" in a batch of {step.batch_size}" if step.batch_size > 1 else ""),
                   f"cache after: {step.kv_tokens}"],
        "hidden": [f"[{info.hidden_size}], last position", *_vec(hidden)],
        "logits": [f"{info.vocab_size:,} scores", f"{lo:.1f} to {hi:.1f}", f"top {visible(top_tok)!r}"],
        "sampled": [f"id {step.token_id}", f"p = {percent_text(step.prob)}", _how(trace.settings)],
        "appended": [f"new token {t + 1} of {len(trace.generated_ids)}"],
    }
    return Glance(t=t, n_tokens=len(trace.generated_ids), phase=step.phase, lines=lines,
                  top_tokens=tuple(visible(x) for x in step.top_tokens[:5]), top_probs=tuple(step.top_probs[:5]),
                  chosen=visible(step.token), chosen_raw=step.token,
                  context_tail=_tail(visible(so_far), 14) if so_far else "\u2026",
                  traveller=f"{len(ids)} prompt tokens" if t == 0 else visible(trace.generated_tokens[t - 1]))


def title(stage: str, n_layers: int) -> str:
    return TITLES[stage].format(n=n_layers)


def next_position(t: int, stage: int, n_tokens: int) -> tuple[int, int]:
    """One stage further round the loop: after "appended" the new token's id enters the next pass."""
    if stage < len(STAGES) - 1:
        return t, stage + 1
    if t + 1 < n_tokens:
        return t + 1, DECODE_START
    return t, stage


def previous_position(t: int, stage: int) -> tuple[int, int]:
    if t > 0 and stage <= DECODE_START:
        return t - 1, len(STAGES) - 1
    return t, max(0, stage - 1)
