"""Logits & sampling: from the model's scores to one chosen token, stage by stage, and the loop one step at a time."""
import ui.boot  # noqa: F401  first: every module imported once, in one thread (see ui/boot.py)
import pandas as pd
import streamlit as st

from engine.stages.sampling_stages import draw_at, draw_counts, stages, total_variation
from engine.experiments.stepper import MAX_STEPS
from ui import nav
from ui.html import chips, visible
from ui.layout import chart, notes, try_this, what_you_see
from ui.models import current_model
from ui.runs import current_trace
from ui.sampling_controls import (
    actions, histogram_rows, local_settings, md_code, predictions_of, stepper, token_strings, view_step,
)
from ui.sampling_figures import cumulative_curve, draws_vs_probs, position_probs, stage_bars, step_chart

SHOW = 15

nav.through_router()
st.title("Logits & sampling: rolling the model's dice")
st.markdown("The model does not pick a word. It scores every token in its vocabulary, and a small, separate "
            "piece of code turns those scores into one choice. This page opens that piece of code.")
lm = current_model()
tr = current_trace()
notes(tr)
V = lm.info.vocab_size

what_you_see(
    f"The real logits of **{lm.info.source}** for the next token, followed through each stage: divide by the "
    "temperature, cut with top-k, top-p and min-p, softmax, draw. Every slider below re-samples instantly "
    "from logits already computed: no new forward pass. Then append the token and step the loop yourself.")
try_this("Set the temperature to 0.1 and then to 2.0. Which one makes the bars in panel 4 look like panel 1's "
         "ranking with one winner, and which one spreads the probability out? What happens to the entropy?",
         "Dividing logits by a small temperature stretches the gaps between them, so softmax puts almost all "
         "the probability on the top token (entropy near 0 bits: nearly greedy). A large temperature shrinks "
         "the gaps, flattening the distribution: entropy rises and unlikely tokens start being drawn.",
         key="sampling_try_temperature")

settings, seed = local_settings()
stp = stepper(lm, tr)

st.header("1. The position", divider="gray")
prompt_tail = min(len(tr.prompt_ids), 12)
shown_ids = list(tr.prompt_ids[-prompt_tail:]) + stp.tokens
shown_tokens = list(tr.prompt_tokens[-prompt_tail:]) + token_strings(lm, stp.tokens)
st.html(chips(shown_tokens, shown_ids, highlight=set(range(prompt_tail, len(shown_ids)))))
if stp.step:
    st.caption(f"The last {prompt_tail} prompt tokens, then the **{stp.step} token(s) you appended** (red). "
               f"KV cache: {stp.cached_tokens()} tokens; forward passes taken here: {stp.forward_passes}.")
else:
    st.caption(f"The last {prompt_tail} of the prompt's {len(tr.prompt_ids)} tokens. The distribution below is "
               "for the token after them, taken from the run of the sidebar's settings (no extra pass).")
step = view_step(stp)
logits = stp.logits[step]

st.header("2. From logits to a choice", divider="gray")
sg = stages(logits, settings, show=SHOW)
chosen = draw_at(logits, settings, seed, step)
chosen_tok, *top_tokens = token_strings(lm, [chosen, *sg.ids])
chosen_p = float(sg.final[list(sg.ids).index(chosen)]) if chosen in sg.ids else None
if settings.greedy:
    st.warning("**Temperature 0 means greedy decoding**: no randomness at all. The most likely token is "
               "taken every time, so top-k, top-p, min-p and the seed make no difference.",
               icon=":material/target:")
c = st.columns(4)
c[0].metric("Entropy at T = 1", f"{sg.entropy_raw_bits:.2f} bits",
            help="The model's own uncertainty: softmax of the raw logits.")
c[1].metric("After temperature", f"{sg.entropy_scaled_bits:.2f} bits",
            delta=f"{sg.entropy_scaled_bits - sg.entropy_raw_bits:+.2f} bits", delta_color="off")
c[2].metric("Entropy drawn from", f"{sg.entropy_final_bits:.2f} bits",
            help="After temperature and all filters (0 bits = one certain token).")
c[3].metric("Tokens left", f"{sg.survivors[3]:,}",
            help=f"Of {V:,} in the vocabulary. After top-k: {sg.survivors[1]:,}; after top-p: "
                 f"{sg.survivors[2]:,}; after min-p: {sg.survivors[3]:,}.")
chart(stage_bars(sg, top_tokens, chosen), "model",
      f"The {SHOW} tokens with the highest raw logits at step {step}. Panel 3 colours a bar by the first filter "
      f"that removed it; panel 4 renormalises the survivors. These {SHOW} tokens hold "
      f"{sg.final_mass_shown:.1%} of the final distribution.", key="sampling_stage_chart")
how = ("greedy: the argmax" if settings.greedy else
       f"seed {seed}, draw number {step} of that seed's generator, as the loop does")
prob_txt = f"probability **{chosen_p:.1%}**" if chosen_p is not None else "a probability outside the top shown"
st.markdown(f"**Sampled token:** {md_code(chosen_tok)} (id {chosen}), {prob_txt} under these settings ({how}).")
if step < stp.step:
    st.caption(f"At this step you appended {md_code(token_strings(lm, [stp.tokens[step]])[0])}. Go back to "
               "re-draw from here with other settings.")
actions(lm, stp, step, chosen, chosen_tok)
if stp.full:
    st.caption(f"This page steps at most {MAX_STEPS} tokens.")

st.header("3. Where top-p cuts", divider="gray")
st.markdown("Top-p (nucleus sampling) keeps the smallest set of most likely tokens whose probabilities add up "
            "to at least p, then renormalises. A confident model needs few tokens to reach p; an unsure one many.")
chart(cumulative_curve(sg), "model",
      f"Running total of the probabilities after temperature and top-k, most likely token first. Top-p "
      f"= {settings.top_p:g} keeps {sg.top_p_keep:,} token(s).", key="sampling_cum_chart")

st.header("4. Roll the dice many times", divider="gray")
n = st.select_slider("Number of draws", options=[10, 50, 100, 500, 1000, 2000, 5000], value=1000,
                     key="sampling_n")
draws = draw_counts(logits, settings, n, seed)
shown, shown_probs, shown_counts = histogram_rows(sg, draws)
chart(draws_vs_probs(token_strings(lm, shown), shown_probs, shown_counts, n), "model",
      f"{n:,} independent draws (one vectorised torch.multinomial call, seed {seed}) from the real distribution. "
      f"Total variation distance between shares and probabilities: {total_variation(draws):.3f} "
      "(0 = identical; shrinks roughly as 1/\u221aN).", key="sampling_draws_chart")
try_this("With top-k = 1, or temperature 0, how many different tokens will 5,000 draws produce?",
         "Exactly one. Both leave a single token with probability 1, so sampling becomes deterministic: "
         "the histogram is one bar of height 1.", key="sampling_try_draws")

st.header("5. Step through generation", divider="gray")
if stp.step == 0:
    st.markdown("Press **Append ... + one decode step** in section 2: the sampled token joins the text and the "
                "model runs one forward pass for it, reading everything before it from the KV cache. "
                "With the sidebar's settings you reproduce the loop's own output token for token.")
else:
    st.markdown("**Text generated here so far:** " + md_code(lm.tokenizer.decode(stp.tokens)))
    rows = stp.summaries()
    chart(step_chart(token_strings(lm, [r.token_id for r in rows]), [r.prob for r in rows],
                     [r.top_prob for r in rows], [r.entropy_bits for r in rows]), "model",
          "Probabilities of each step's temperature-1 distribution. Pick any step with the slider in "
          "section 1 to see its full path, then go back and take a different branch.", key="sampling_steps_chart")
    st.dataframe(pd.DataFrame([{"step": r.step, "appended": visible(t), "p(appended)": round(r.prob, 4),
                                "top token": visible(tt), "p(top)": round(r.top_prob, 4),
                                "entropy (bits)": round(r.entropy_bits, 2)}
                               for r, t, tt in zip(rows, token_strings(lm, [r.token_id for r in rows]),
                                                   token_strings(lm, [r.top_id for r in rows]))]),
                 hide_index=True, height=min(400, 38 + 35 * len(rows)))

st.header("6. A prediction at every position, from one pass", divider="gray")
st.markdown("A forward pass over the prompt computes a next-token distribution at **every** position, not only "
            "the last: position i predicts token i + 1. Generation uses just the last one. Speculative decoding "
            "uses all of them to check several drafted tokens in one pass.")
pp, guesses = predictions_of(lm, tr)
toks = list(tr.prompt_tokens)
chart(position_probs(toks[:-1], toks[1:], pp.actual_probs, pp.actual_ranks), "model",
      f"One forward pass over the {len(toks)} prompt tokens (temperature 1). The model's top guess was right at "
      f"{int((pp.actual_ranks == 1).sum())} of {len(toks) - 1} positions.", key="sampling_positions_chart")
table = pd.DataFrame({
    "position": range(len(toks)), "token": [visible(t) for t in toks],
    "model's top guess for the next": [visible(g) for g in guesses],
    "p(top guess)": pp.top_probs[:, 0].round(4),
    "token that came next": [visible(t) for t in toks[1:]] + ["(the token you generate)"],
    "p(that token)": list(pp.actual_probs.round(4)) + [None],
    "its rank": [int(r) for r in pp.actual_ranks] + [None],
})
prob_col = st.column_config.ProgressColumn
st.dataframe(table, hide_index=True, height=min(420, 38 + 35 * len(toks)),
             column_config={"p(top guess)": prob_col(min_value=0.0, max_value=1.0, format="%.3f"),
                            "p(that token)": prob_col(min_value=0.0, max_value=1.0, format="%.3g")})
c = st.columns(2)
with c[0]:
    nav.link("pages/speculative.py")
with c[1]:
    nav.link("pages/loop.py", "Back to the whole loop")
