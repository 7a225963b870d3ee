"""AppTest of the embeddings page: display options reuse cached records; the page adapts to the position scheme."""
import engine.embeddings.analysis as E
from tests.app.test_pages import errors, run_page

PAGE = "pages/embeddings.py"


def _neighbour_title(at) -> str:
    import json

    for el in at.get("plotly_chart"):
        title = json.loads(el.proto.spec)["layout"]["title"]["text"]
        if title.startswith("Nearest tokens"):
            return title
    raise AssertionError("no neighbour chart")


def test_rope_page_and_display_options_recompute_nothing(monkeypatch):
    from ui.embeddings import runs as D

    for cached in (D.rope_for, D.relative_for, D.map_for):  # another test's run of this page may have filled them
        cached.clear()
    calls = {"rope": 0, "rel": 0, "map": 0}
    for name, fn in (("rope", "rope_angles"), ("rel", "relative_demo"), ("map", "embedding_map")):
        real = getattr(E, fn)
        def counted(*a, _r=real, _n=name, **k):
            calls[_n] += 1
            return _r(*a, **k)

        monkeypatch.setattr(E, fn, counted)
    at = run_page(PAGE, model="tiny-random", max_new_tokens="1", prompt="The cat sat on the mat. The cat")
    assert not errors(at), errors(at)
    text = " ".join(m.value for m in at.markdown) + " ".join(c.value for c in at.caption)
    assert "base = **10000**" in text and "RoPE" in " ".join(i.value for i in at.info)
    assert "Untied" in " ".join(i.value for i in at.info)
    before = dict(calls)
    assert before["rope"] >= 1 and before["rel"] >= 1
    at.slider(key="embeddings_k").set_value(20).run()
    first_title = _neighbour_title(at)
    at.selectbox(key="embeddings_neighbour").select_index(0).run()
    assert _neighbour_title(at) != first_title  # the neighbour chart follows the choice
    assert not errors(at), errors(at)
    assert calls == before  # neighbour options touch neither RoPE, the relative demo nor the map
    at.selectbox(key="embeddings_head").set_value(1).run()
    assert not errors(at), errors(at)
    assert calls["rel"] == before["rel"] + 1 and calls["rope"] == before["rope"] and calls["map"] == before["map"]


def test_learned_positions_model_from_a_local_folder(tmp_path):
    """A tiny GPT-2 saved as safetensors and loaded by path: the page shows learned positions, not RoPE."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from engine.models.tiny import make_tiny_tokenizer

    tok = make_tiny_tokenizer()
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=32, n_layer=1, n_head=2,
                               bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    at = run_page(PAGE, model=str(tmp_path), max_new_tokens="1", prompt="The cat sat")
    assert not errors(at), errors(at)
    md = " ".join(m.value for m in at.markdown)
    assert "learned vectors, one per position" in md and "64" in md
    assert "RoPE rotation" not in md
    assert any("Tied embeddings" in s.value for s in at.success)
