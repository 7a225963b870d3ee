"""The compile box's progress line and bar (ui.frame.models): the step, torch's phase within it, the time so far
against the last time; the bar follows the clock against the last time, else the phase, and never goes back."""
from ui.frame.compiling import compile_fraction, compile_progress_text


def test_the_line_says_step_phase_and_time_against_the_last():
    text = compile_progress_text("Step 1 of 3: compiling the decode step", "inductor writes and builds the graph's "
                                 "kernels (torch graphs in this compile: 0)", 83.4, 204.0)
    assert text.startswith("Step 1 of 3") and "inductor writes" in text and "83 s so far (last time 204 s)" in text
    assert "no earlier time on record" in compile_progress_text("Step 1 of 3", "", 5.0, None)


def test_the_bar_follows_the_last_time_else_the_phase_and_never_goes_back():
    assert compile_fraction("Step 1 of 3", 102.0, 204.0, 0.0) == 0.5
    assert compile_fraction("Step 1 of 3", 400.0, 204.0, 0.5) == 0.97  # slower than last time: not full
    step1 = compile_fraction("Step 1 of 3: compiling", 1.0, None, 0.0)
    inductor = compile_fraction("inductor writes and builds the graph's kernels (torch graphs in this compile: 0)", 1.0, None, step1)
    done = compile_fraction("graph compiled; the first compiled step runs (torch graphs in this compile: 1)", 1.0, None, inductor)
    assert 0 < step1 < inductor < done < compile_fraction("Step 3 of 3: replaying it", 1.0, None, done) < 1
    assert compile_fraction("Step 1 of 3", 1.0, None, 0.9) == 0.9
