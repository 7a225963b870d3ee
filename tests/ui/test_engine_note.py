"""The loop page's caption says what ran compiled in compiled mode (a walkthrough found a compiled-mode answer whose
page said how its prefill ran but not its decode steps, so a slower first token read as "compiled is slower")."""
from types import SimpleNamespace as NS

from engine.core.loaded import Mode
from ui.loop.details import engine_note


def _trace(mode, compiled_steps, batched=False, prefill="compiled, 64-token bucket"):
    steps = [NS(phase="prefill", compiled=False)] + [NS(phase="decode", compiled=c) for c in compiled_steps]
    return NS(model=NS(mode=mode), steps=steps, timed_in_batcher=batched, prefill_mode=prefill)


def test_compiled_mode_says_how_the_decode_steps_and_the_prefill_ran():
    assert engine_note(_trace(Mode.EAGER, [False, False])) == ""
    assert engine_note(_trace(Mode.COMPILED, [True, True])) == (
        " Decode steps: compiled (torch.compile graph). Prefill: compiled, 64-token bucket.")
    assert engine_note(_trace(Mode.COMPILED, [False, False], prefill="eager (its graph is compiling)")) == (
        " Decode steps: eager. Prefill: eager (its graph is compiling).")
    assert "Decode steps: 1 of 3 compiled, the rest eager." in engine_note(_trace(Mode.COMPILED, [True, False, False]))
    # an answer the class batcher served says how its own prefill ran, in the same words as a run alone
    batched = engine_note(_trace(Mode.COMPILED, [True, True], batched=True, prefill="compiled, 16-token bucket"))
    assert batched == " Decode steps: compiled (torch.compile graph). Prefill: compiled, 16-token bucket."
