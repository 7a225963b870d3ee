"""The sampling page's dice and the sections they drive (1-5), as one fragment: moving a die, the position
slider or the number of draws reruns this part of the page, not the whole script.

Everything the dice, the position slider and the append / go-back buttons change is inside the fragment (the
position strip, the choice, top-p, the draws, the steps taken), so none of them needs a full rerun."""
from __future__ import annotations

import streamlit as st

from ui.frame import errors

from engine.sampling.stepper import MAX_STEPS
from engine.sampling.stages import total_variation
from ui.sampling import view as SV
from ui.frame.layout import chart, presenting
from ui.frame.predict import ask
from ui.frame.lessons import lesson
from ui.sampling.controls import actions, draws_of, histogram_rows, local_settings, stages_of, stepper, view_step
from ui.sampling.view import md_code, token_strings
from ui.sampling.figures import cumulative_curve, draws_vs_probs, stage_bars

DRAWS = [10, 50, 100, 500, 1000, 2000, 5000]


@errors.fragment
def dice_and_sections(lm, tr, lead=None) -> None:
    """This page's dice beside the chart they drive, then sections 2-5 (the position, top-p, many draws, the
    steps taken). The dice and the stage chart share the first screen (a 1366x768 projector shows both); the
    position picker sits below them, so the chart is filled after it (a container kept for it). ``lead`` draws
    the page's lesson boxes under the chart."""
    st.header("1. From logits to a choice", divider="gray")
    dice_col, chart_col = st.columns([1, 3], gap="medium")
    with dice_col:
        settings, seed = local_settings(stacked=True)
    chart_area = chart_col.container()
    after = st.container()
    stp = stepper(lm, tr)

    st.header("2. The position", divider="gray")
    strip, strip_caption = SV.position_strip(lm, tr, stp)
    st.html(strip)
    st.caption(strip_caption)
    step = view_step(stp)
    logits = stp.logits[step]

    show = SV.SHOW_PRESENTING if presenting() else SV.SHOW  # a projector's larger rows: fewer tokens, all labelled
    ch = SV.choice(lm, *stages_of(logits, settings, seed, step, show), settings, seed, step)
    sg = ch.sg
    with chart_area:
        chart(stage_bars(sg, ch.top_texts, ch.token, large=presenting()), "model",
              f"The {show} tokens with the highest raw logits at step {step}. Panel 3 colours a bar by the first "
              f"filter that removed it; panel 4 renormalises the survivors. These {show} tokens hold "
              f"{sg.final_mass_shown:.1%} of the final distribution.", key="sampling_stage_chart")
    with after:
        if settings.greedy:
            st.warning(lesson("sampling", "greedy"), icon=":material/target:")
        for col, (label, value, help_, delta) in zip(st.columns(4), SV.metrics(sg, lm.info.vocab_size)):
            col.metric(label, value, help=help_, delta=delta, delta_color="off")
        st.markdown(ch.sentence)
        if step < stp.step:
            st.caption(f"At this step you appended {md_code(token_strings(lm, [stp.tokens[step]])[0])}. Go back "
                       "to re-draw from here with other settings.")
        actions(lm, stp, step, ch.token, ch.text)
        if stp.full:
            st.caption(f"This page steps at most {MAX_STEPS} tokens.")
        if lead is not None:
            lead()

    st.header("3. Where top-p cuts", divider="gray")
    st.markdown(lesson("sampling", "top-p"))
    chart(cumulative_curve(sg), "model",
          "Running total of the probabilities after temperature and top-k, most likely token first. "
          + ("Temperature 0 is greedy: the most likely token is taken, so 1 token is kept and top-p is not used."
             if sg.greedy else f"Top-p = {settings.top_p:g} keeps {sg.top_p_keep:,} token(s)."),
          key="sampling_cum_chart")

    st.header("4. Roll the dice many times", divider="gray")
    draws(lm, sg, logits, settings, seed)
    ask("sampling", "try draws", lesson("sampling", "answer draws"), key="sampling_try_draws")

    st.header("5. Step through generation", divider="gray")
    if stp.step == 0:
        st.markdown(lesson("sampling", "step first"))
        return
    st.markdown("**Text generated here so far:** " + md_code(lm.tokenizer.decode(stp.tokens)))
    fig, df, height = SV.steps(lm, stp)
    chart(fig, "model", "Probabilities of each step's temperature-1 distribution. Pick any step with the slider in "
          "section 2 to see its full path, then go back and take a different branch.", key="sampling_steps_chart")
    st.dataframe(df, hide_index=True, height=height)


@errors.fragment
def draws(lm, sg, logits, settings, seed: int) -> None:
    """Section 4: many draws from the distribution on view; the number of draws reruns only this."""
    n = st.select_slider("Number of draws", options=DRAWS, value=1000, key="sampling_n")
    counts = draws_of(logits, settings, n, seed)
    shown, shown_probs, shown_counts = histogram_rows(sg, counts)
    chart(draws_vs_probs(token_strings(lm, shown), shown_probs, shown_counts, n), "model",
          f"{n:,} independent draws (one vectorised torch.multinomial call, seed {seed}) from the real distribution. "
          f"Total variation distance between shares and probabilities: {total_variation(counts):.3f} "
          "(0 = identical; shrinks roughly as 1/\u221aN).", key="sampling_draws_chart")


def position_table(table, bars: dict[str, str], height: int) -> None:
    """Section 6's table: the probability columns in ``bars`` drawn as bars from 0 to 1, in their format."""
    col = st.column_config.ProgressColumn
    st.dataframe(table, hide_index=True, height=height,
                 column_config={name: col(min_value=0.0, max_value=1.0, format=fmt) for name, fmt in bars.items()})
