"""Display values for the sampling page: the position strip, the drawn token and its sentence, the steps
table, and the every-position predictions (the page only lays them out)."""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from engine.core.prompt import token_text
from engine.sampling.stages import Stages
from ui.frame.figures import percent_text, prob_text
from ui.frame.html import chips, visible
from ui.sampling.figures import position_probs, step_chart

SHOW = 15  # tokens shown in the stage panels
SHOW_PRESENTING = 10  # in presenter view, whose larger rows must all fit a projector's screen


def token_strings(lm, ids) -> list[str]:
    return token_text(lm.tokenizer, [int(i) for i in ids])


def md_code(text: str) -> str:
    """Model text as an inline code span in markdown (nothing inside is read as markup or LaTeX)."""
    text = visible(text)
    fence = "``" if "`" in text else "`"
    return f"{fence} {text} {fence}" if fence == "``" else f"`{text}`"


def position_strip(lm, tr, stp) -> tuple[str, str]:
    """The last prompt tokens and the tokens appended here (HTML chips), and the caption under them."""
    tail = min(len(tr.prompt_ids), 12)
    ids = list(tr.prompt_ids[-tail:]) + stp.tokens
    toks = list(tr.prompt_tokens[-tail:]) + token_strings(lm, stp.tokens)
    html = chips(toks, ids, highlight=set(range(tail, len(ids))))
    if stp.step:
        return html, (f"The last {tail} prompt tokens, then the **{stp.step} token(s) you appended** (red). KV cache: "
                      f"{stp.cached_tokens()} tokens; forward passes taken here: {stp.forward_passes}.")
    return html, (f"The last {tail} of the prompt's {len(tr.prompt_ids)} tokens. The distribution below is for the "
                  "token after them, taken from the run of the sidebar's settings (no extra pass).")


@dataclass(frozen=True)
class Choice:
    sg: Stages
    token: int
    text: str  # the drawn token as text
    top_texts: list  # the SHOW most likely tokens as text
    sentence: str  # "Sampled token: ..." for the page


def choice(lm, sg: Stages, chosen: int, settings, seed: int, step: int) -> Choice:
    """The drawn token and its sentence, from the stages and the draw computed on the worker (controls.stages_of)."""
    text, *tops = token_strings(lm, [chosen, *sg.ids])
    p = float(sg.final[list(sg.ids).index(chosen)]) if chosen in sg.ids else None
    how = "greedy: the argmax" if settings.greedy else f"seed {seed}, draw number {step} of that seed's generator, as the loop does"
    prob = f"probability **{percent_text(p)}**" if p is not None else "a probability outside the top shown"
    return Choice(sg, chosen, text, tops, f"**Sampled token:** {md_code(text)} (id {chosen}), {prob} under these "
                                          f"settings ({how}).")


def metrics(sg: Stages, vocab: int) -> list[tuple]:
    """(label, value, help, delta) for the four entropy / survivor metrics."""
    return [("Entropy at T = 1", f"{sg.entropy_raw_bits:.2f} bits", "The model's own uncertainty: softmax of the raw logits.", None),
            ("After temperature", f"{sg.entropy_scaled_bits:.2f} bits", None,
             f"{sg.entropy_scaled_bits - sg.entropy_raw_bits:+.2f} bits"),
            ("Entropy drawn from", f"{sg.entropy_final_bits:.2f} bits",
             "After temperature and all filters (0 bits = one certain token).", None),
            ("Tokens left", f"{sg.survivors[3]:,}", f"Of {vocab:,} in the vocabulary. After top-k: {sg.survivors[1]:,}; "
             f"after top-p: {sg.survivors[2]:,}; after min-p: {sg.survivors[3]:,}.", None)]


def steps(lm, stp):
    """The chart and the table of the steps taken here."""
    rows = stp.summaries()
    toks = token_strings(lm, [r.token_id for r in rows])
    tops = token_strings(lm, [r.top_id for r in rows])
    fig = step_chart(toks, [r.prob for r in rows], [r.top_prob for r in rows], [r.entropy_bits for r in rows])
    df = pd.DataFrame([{"step": r.step, "appended": visible(t), "p(appended)": prob_text(r.prob),
                        "top token": visible(tt), "p(top)": prob_text(r.top_prob),
                        "entropy (bits)": round(r.entropy_bits, 2)}
                       for r, t, tt in zip(rows, toks, tops)])
    return fig, df, min(400, 38 + 35 * len(rows))


def every_position(lm, tr, pp, guesses):
    """The chart, its caption, the table (with its column formats) of every prompt position's prediction;
    ``pp, guesses``: controls.predictions_of(lm, tr)."""
    toks = list(tr.prompt_tokens)
    fig = position_probs(toks[:-1], toks[1:], pp.actual_probs, pp.actual_ranks)
    caption = (f"One forward pass over the {len(toks)} prompt tokens (temperature 1). The model's top guess was right "
               f"at {int((pp.actual_ranks == 1).sum())} of {len(toks) - 1} positions.")
    table = pd.DataFrame({
        "position": range(len(toks)), "token": [visible(t) for t in toks],
        "model's top guess for the next": [visible(g) for g in guesses],
        "p(top guess)": pp.top_probs[:, 0],
        "token that came next": [visible(t) for t in toks[1:]] + ["(the token you generate)"],
        "p(that token)": list(pp.actual_probs) + [None],
        "its rank": [int(r) for r in pp.actual_ranks] + [None],
    })
    # probability columns drawn as bars, their format: unrounded, so a rank-791 token's 1.3e-05 is not shown as 0
    bars = {"p(top guess)": "%.3g", "p(that token)": "%.3g"}
    return fig, caption, table, bars, min(420, 38 + 35 * len(toks))
