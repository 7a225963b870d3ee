"""The converted-model cache: a corrupt or partial copy is rebuilt instead of crashing."""
import json
import shutil

import pytest

from engine.models import catalog, convert, packaged

from engine.models import loading


EMBEDDED = catalog.row(catalog.EMBEDDED)


@pytest.fixture
def cache_copy(tmp_path, monkeypatch, embedded_lm):
    """A private cache dir holding a copy of the real converted model; conversion is replaced by a copy."""
    src = packaged.copy_dir(EMBEDDED)
    monkeypatch.setenv("ILE_CACHE_DIR", str(tmp_path))
    shutil.copytree(src, packaged.copy_dir(EMBEDDED))
    calls = []

    def fake_convert(r, target, progress):
        calls.append(1)
        shutil.rmtree(packaged.copy_dir(EMBEDDED), ignore_errors=True)
        shutil.copytree(src, packaged.copy_dir(EMBEDDED))
        return packaged.copy_dir(EMBEDDED)

    monkeypatch.setattr(packaged, "convert_copy", fake_convert)
    return calls


def test_valid_cache_is_reused(cache_copy):
    assert packaged.is_converted(EMBEDDED)
    loading.load_packaged(EMBEDDED, "cpu")
    assert cache_copy == []


def test_corrupt_weights_are_rebuilt(cache_copy):
    (packaged.copy_dir(EMBEDDED) / "model.safetensors").write_bytes(b"not a safetensors file")
    lm = loading.load_packaged(EMBEDDED, "cpu")
    assert cache_copy == [1] and lm.info.n_layers == 30


def test_partial_cache_without_marker_is_rebuilt(cache_copy):
    (packaged.copy_dir(EMBEDDED) / convert.CONVERTED_MARKER).unlink()
    assert not packaged.is_converted(EMBEDDED)
    loading.load_packaged(EMBEDDED, "cpu")
    assert cache_copy == [1]


def test_marker_for_another_gguf_is_rebuilt(cache_copy):
    marker = packaged.copy_dir(EMBEDDED) / convert.CONVERTED_MARKER
    marker.write_text(json.dumps({"gguf": "elsewhere", "size": 1, "mtime": 0}))
    assert not packaged.is_converted(EMBEDDED)


def test_a_copy_converted_by_another_checkout_is_reused(cache_copy):
    """Each checkout has its own environment, so its own path to the same GGUF: the stamp names the file by its
    content (pip's recorded sha256), so two checkouts sharing one user cache no longer convert each other's copy
    again, in turn; the stamp an older checkout wrote (path, size, mtime) is still accepted."""
    gguf = packaged.gguf_path(EMBEDDED)
    stamp = packaged.stamp(EMBEDDED)
    assert str(gguf.parent) not in json.dumps(stamp) and stamp["sha256"] == convert.sha256(gguf)
    marker = packaged.copy_dir(EMBEDDED) / convert.CONVERTED_MARKER
    marker.write_text(json.dumps(stamp))
    assert packaged.is_converted(EMBEDDED)
    marker.write_text(json.dumps(packaged.place_stamp(gguf)))
    assert packaged.is_converted(EMBEDDED)
    marker.write_text(json.dumps(dict(stamp, sha256="0" * 64)))
    assert not packaged.is_converted(EMBEDDED)


def test_trust_remote_code_is_never_enabled():
    import inspect

    src = inspect.getsource(loading) + inspect.getsource(convert)
    assert "trust_remote_code=True" not in src and src.count("trust_remote_code=False") >= 2
    assert "use_safetensors=True" in src


# --- the checksum covers config and tokenizer, not only the weights -------------------------------

def _same_size_edit(path, old: bytes, new: bytes) -> None:
    data = path.read_bytes()
    assert len(old) == len(new) and old in data
    path.write_bytes(data.replace(old, new, 1))


def _swap_two_ids(tok_json) -> None:
    """Swap the ids of " Paris" and " London" in tokenizer.json's vocabulary: same size, valid JSON, wrong text."""
    import re

    data = tok_json.read_bytes()
    spots = []
    for word in ("\u0120Paris", "\u0120London"):  # GPT-2 style: \u0120 is the leading space
        m = re.search(re.escape(json.dumps(word, ensure_ascii=False).encode()) + rb": ?(\d+)", data)
        spots.append((m.start(1), m.end(1)))
    (a0, a1), (b0, b1) = spots
    assert a1 - a0 == b1 - b0  # both ids have as many digits: the file keeps its size
    ia, ib = data[a0:a1], data[b0:b1]
    out = bytearray(data)
    out[a0:a1], out[b0:b1] = ib, ia
    assert len(out) == len(data)
    tok_json.write_bytes(bytes(out))


@pytest.fixture
def tiny_copy(tmp_path, tiny_lm):
    """A tiny model saved like a converted copy (weights, config, tokenizer), with its checksum recorded."""
    folder = tmp_path / "copy"
    tiny_lm.model.save_pretrained(folder)
    tiny_lm.tokenizer.save_pretrained(folder)
    (folder / convert.CHECKSUM_FILE).write_text(json.dumps(convert.weights_checksum(folder)))
    return folder


def test_the_checksum_covers_config_and_tokenizer(tiny_copy):
    want = json.loads((tiny_copy / convert.CHECKSUM_FILE).read_text())
    assert {"config.json", "model.safetensors"} <= set(want) and any(n.startswith("tokenizer") for n in want)
    assert convert.weights_intact(tiny_copy)


def test_a_same_size_config_edit_is_detected(tiny_copy):
    cfg = tiny_copy / "config.json"
    n = json.loads(cfg.read_text())["num_hidden_layers"]
    assert convert.weights_intact(tiny_copy)  # hashed once, remembered for this file version
    _same_size_edit(cfg, f'"num_hidden_layers": {n}'.encode(), f'"num_hidden_layers": {n - 1}'.encode()
                    if len(str(n - 1)) == len(str(n)) else f'"num_hidden_layers":{n - 1} '.encode())
    assert not convert.weights_intact(tiny_copy)


def test_a_missing_or_added_file_is_detected(tiny_copy):
    (tiny_copy / "extra.json").write_text("{}")
    assert not convert.weights_intact(tiny_copy)
    (tiny_copy / "extra.json").unlink()
    assert convert.weights_intact(tiny_copy)
    next(tiny_copy.glob("tokenizer*.json")).unlink()
    assert not convert.weights_intact(tiny_copy)


def test_a_weights_only_record_is_extended_not_reconverted(tiny_copy):
    record = tiny_copy / convert.CHECKSUM_FILE
    want = json.loads(record.read_text())
    record.write_text(json.dumps({k: v for k, v in want.items() if k.endswith(".safetensors")}))
    assert convert.weights_intact(tiny_copy)
    assert json.loads(record.read_text()) == want  # now covers config and tokenizer too
    _same_size_edit(tiny_copy / "config.json", b'"', b"'")  # an edit after the upgrade is caught
    assert not convert.weights_intact(tiny_copy)


@pytest.mark.parametrize("edit", ["config", "tokenizer"])
def test_a_same_size_edit_of_the_converted_copy_rebuilds_it(cache_copy, edit):
    """The real converted model: fewer layers in config.json (same size), or two token ids swapped in
    tokenizer.json (same size) loaded silently before ("The capital of France is London"); now it is rebuilt."""
    folder = packaged.copy_dir(EMBEDDED)
    assert packaged.is_converted(EMBEDDED)
    if edit == "config":
        _same_size_edit(folder / "config.json", b'"num_hidden_layers": 30', b'"num_hidden_layers": 10')
    else:
        _swap_two_ids(folder / "tokenizer.json")
    assert not packaged.is_converted(EMBEDDED)
    lm = loading.load_packaged(EMBEDDED, "cpu")
    assert cache_copy == [1] and lm.info.n_layers == 30
    assert packaged.is_converted(EMBEDDED)


@pytest.mark.parametrize("tied", [True, False])
def test_a_plain_copy_loads_like_transformers_own_save(tmp_path, tied):
    """write_plain_copy (the conversion's writer: a GGUF-loaded model carries a quantization_config that
    save_pretrained refuses) gives a folder that loads to the same tensors, config and logits as transformers' own
    save of the same model; tied embeddings stay tied and are stored once; the model's config keeps its own."""
    import torch
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    model.save_pretrained(tmp_path / "reference")
    model.config.quantization_config = {"quant_method": "gguf"}
    convert.write_plain_copy(model, tmp_path / "plain")
    assert model.config.quantization_config == {"quant_method": "gguf"}
    assert "quantization_config" not in json.loads((tmp_path / "plain" / "config.json").read_text())
    keys = {}
    for which in ("reference", "plain"):
        with safe_open(tmp_path / which / "model.safetensors", "pt") as f:
            keys[which] = set(f.keys())
    assert keys["plain"] == keys["reference"] and ("lm_head.weight" in keys["plain"]) != tied
    for f in ("config.json", "generation_config.json"):
        assert json.loads((tmp_path / "plain" / f).read_text()) == json.loads((tmp_path / "reference" / f).read_text())
    ref, plain = (AutoModelForCausalLM.from_pretrained(tmp_path / w).eval() for w in ("reference", "plain"))
    assert (plain.lm_head.weight is plain.model.embed_tokens.weight) == tied
    for (n, a), (m, b) in zip(ref.state_dict().items(), plain.state_dict().items(), strict=True):
        assert n == m and torch.equal(a, b)
    ids = torch.tensor([[1, 5, 9, 2, 7]])
    with torch.no_grad():
        torch.testing.assert_close(plain(input_ids=ids).logits, model(input_ids=ids).logits, atol=0, rtol=0)
