"""The speculative lesson's promise about the output holds only where the engine keeps it: greedy, float32."""
from __future__ import annotations

import re

from ui.frame.lessons import sections


def test_the_lesson_never_promises_identical_output_without_naming_the_precision():
    """In bfloat16 a verify pass of k + 1 tokens rounds differently from k + 1 single steps, and a near tie can tip
    (the race page's "outputs differ half" case): every sentence that promises the same output names float32."""
    for name, text in sections("speculative").items():
        for sentence in re.split(r"(?<=[.!?])\s+", " ".join(text.split())):
            if re.search(r"\bnever\b.*\boutput|same text|identical", sentence):
                assert "float32" in sentence or "should" in sentence or "differ" in sentence, (name, sentence)
    assert "bfloat16" in sections("speculative")["what you see"]
