"""The home page's note on an answer served in a class batch: what its step times mean, and, outside float32, that
a batched pass does not compute exactly what a pass alone does (a near tie can go the other way)."""
from types import SimpleNamespace

from ui.loop.details import batch_note


def _trace(batched: bool, precision: str = "", dtype: str = "float32"):
    from engine.core.loaded import ModelRef

    return SimpleNamespace(batched=batched, largest_batch=7, model=ModelRef("tiny-random", precision),
                           info=SimpleNamespace(dtype=dtype))


def test_a_solo_answer_has_no_note():
    assert batch_note(_trace(False, "bfloat16", "bfloat16")) == ""


def test_float32_batches_promise_nothing_about_rounding():
    note = batch_note(_trace(True))
    assert "batch of up to 7" in note and "nearly tied" not in note


def test_half_precision_batches_say_a_near_tie_can_differ():
    bf16 = batch_note(_trace(True, "", "bfloat16"))
    assert "In bfloat16" in bf16 and "nearly tied" in bf16
    assert "In float16" in batch_note(_trace(True, "float16", "float16"))
