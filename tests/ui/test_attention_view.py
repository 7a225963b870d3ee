"""View builders of the attention page: the numbers and sentences it lays out."""
import dataclasses
from types import SimpleNamespace

import numpy as np

from ui.attention import view as AV

INFO = SimpleNamespace(n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, bytes_per_value=2, dtype="bfloat16",
                       max_positions=1024, source="tiny", position_encoding="rope")


def _prompt(first: float):
    """(Prompt, trace): 2 layers x 4 heads over 5 tokens, the last query putting ``first`` of its weight on position 0."""
    m = 5
    att = np.tril(np.ones((2, 4, m, m))) / np.arange(1, m + 1)[:, None]  # [L, H, m, m], rows sum to 1
    att[:, :, -1, :] = (1 - first) / (m - 1)
    att[:, :, -1, 0] = first
    tr = SimpleNamespace(analysis=SimpleNamespace(attentions=att), prompt_ids=list(range(m)),
                         prompt_tokens=[" a", "b", "c", "d", "e"], generated_ids=[7, 8])
    return AV.prompt_of(tr), tr


def test_sink_answer_follows_the_first_token_pull():
    sink, _ = _prompt(0.9)
    assert "Mostly not" in AV.sink_answer(sink) and "**8 of 8 heads**" in AV.sink_answer(sink)
    assert "\\'·a\\'" in AV.sink_answer(sink)  # the first token, its space made visible, quotes escaped
    spread, _ = _prompt(0.1)
    assert AV.sink_answer(spread).startswith("In this run, 0 of 8 heads")


def test_gqa_names_the_shared_kv_head_and_mha_shares_nothing():
    _, tr = _prompt(0.5)
    g = AV.gqa(INFO, tr, 3)
    assert g.shared and g.groups == [[0, 1], [2, 3]]
    assert "Head 3 reads K/V head **1**, shared with heads 2." in g.text and "**2× smaller**" in g.text
    assert g.contexts == [7, 1024, 2048] and all(m == 2 * q for q, m in zip(g.bytes_gqa, g.bytes_mha))
    mha = AV.gqa(SimpleNamespace(**{**vars(INFO), "n_kv_heads": 4}), tr, 3)
    assert not mha.shared and "nothing is shared" in mha.text



def test_sink_answer_shows_a_markdown_token_literally():
    """A token's text is user text: in the sink answer it cannot become a link or emphasis."""
    sink, _ = _prompt(0.9)
    sink = dataclasses.replace(sink, toks=["[x](https://e.invalid)**"] + sink.toks[1:])
    text = AV.sink_answer(sink)
    assert "[x](" not in text and "\\[x\\]\\(" in text and "\\*\\*" in text
