"""Presets load with their published configs and give the published KV bytes per token."""
import pytest

from engine.kv_cache import presets as kp

# bytes per token at 16 bits, all layers, keys and values (MLA: latent + RoPE key)
PUBLISHED_16BIT = {
    "Llama-3-70B": 327_680,  # 2 x 80 x 8 x 128 x 2 = 320 KiB
    "Llama-3-8B": 131_072,  # 2 x 32 x 8 x 128 x 2 = 128 KiB
    "Mistral-7B-v0.3": 131_072,
    "Qwen2.5-0.5B": 12_288,  # 2 x 24 x 2 x 64 x 2
    "Qwen2.5-7B": 57_344,  # 2 x 28 x 4 x 128 x 2
    "Qwen2.5-72B": 327_680,
    "GPT-2 (124M)": 36_864,  # 2 x 12 x 12 x 64 x 2
    "SmolLM2-135M": 23_040,  # 2 x 30 x 3 x 64 x 2
    "SmolLM2-1.7B": 196_608,  # MHA: 2 x 24 x 32 x 64 x 2
    "DeepSeek-V3": 70_272,  # 61 x (512 + 64) x 2
}


def test_presets_load_with_sane_fields():
    presets = kp.load_presets()
    names = [p.name for p in presets]
    assert len(names) == len(set(names)) >= 12
    for p in presets:
        assert p.weights_dtype in kp.DTYPE_BITS and p.n_params > 0 and p.context_window > 0
        assert p.n_heads % p.n_kv_heads == 0, p.name
        if not p.is_mla:
            assert p.attention == ("MHA" if p.n_kv_heads == p.n_heads else "GQA"), p.name


@pytest.mark.parametrize("name,expected", PUBLISHED_16BIT.items())
def test_published_per_token_sizes(name, expected):
    assert kp.kv_bytes_per_token(kp.preset(name), 16) == expected


def test_dtypes_scale_exactly():
    p = kp.preset("Llama-3-8B")
    assert kp.kv_bytes_per_token(p, 32) == 2 * 131_072
    assert kp.kv_bytes_per_token(p, 8) == 131_072 // 2
    assert kp.kv_bytes_per_token(p, 4) == 131_072 // 4
    assert kp.kv_bytes_per_token(kp.preset("GPT-2 (124M)"), 32) == 73_728
    assert kp.kv_bytes_total(p, 1000, 4, 16) == 131_072 * 1000 * 4


def test_llama70b_common_mistake():
    p = kp.preset("Llama-3-70B")
    assert kp.kv_bytes_mistaken(p, 16) == 2_621_440 == 2.5 * 1024**2
    assert kp.kv_bytes_mistaken(p, 16) == 8 * kp.kv_bytes_per_token(p, 16)


@pytest.mark.parametrize("p", [p for p in kp.load_presets() if kp.param_count_estimate(p) is not None],
                         ids=lambda p: p.name)
def test_published_parameter_count_matches_config(p):
    """Re-deriving the parameters from layers, widths and vocab gives the published count exactly."""
    assert kp.param_count_estimate(p) == p.n_params


def test_embedded_model_matches_smollm2_preset(embedded_lm):
    i, p = embedded_lm.info, kp.preset("SmolLM2-135M")
    assert (i.n_layers, i.n_heads, i.n_kv_heads, i.head_dim, i.hidden_size, i.vocab_size, i.n_params) == \
        (p.n_layers, p.n_heads, p.n_kv_heads, p.head_dim, p.hidden_size, p.vocab_size, p.n_params)


def test_budget_and_fit():
    p = kp.preset("Llama-3-70B")
    b = kp.budget(p, 8192, 2, "bf16")
    assert b.total == b.weights + b.kv_total == p.n_params * 2 + 327_680 * 8192 * 2
    assert all(t == 0 for _, t in b.gpu_fit_tokens)  # 141 GB of bf16 weights fit on none of them
    fp8 = dict(kp.budget(p, 8192, 1, "fp8", "fp8").gpu_fit_tokens)
    assert fp8[24] == fp8[40] == 0 and fp8[141] > fp8[80] > 0
    assert fp8[80] == (80 * kp.GB - p.n_params) // 163_840  # free bytes / fp8 bytes per token
    with pytest.raises(ValueError):
        kp.budget(p, 10, 1, "fp4")


def test_attention_variants_order_and_own_design():
    for p in kp.load_presets():
        v = {x.kind: x for x in kp.attention_variants(p, 16)}
        assert v["MHA"].bytes_per_token >= v["GQA"].bytes_per_token >= v["MQA"].bytes_per_token
        own = [x for x in v.values() if x.is_model]
        assert len(own) == 1 and own[0].bytes_per_token == kp.kv_bytes_per_token(p, 16), p.name
    ds = {x.kind: x for x in kp.attention_variants(kp.preset("DeepSeek-V3"), 16)}
    assert ds["MLA"].values_per_token_layer == 576
    assert ds["MHA"].values_per_token_layer == 128 * (192 + 128)  # per-head keys 128+64 RoPE, values 128


def test_int8_kv_cache_is_one_byte_per_value():
    p = kp.preset("Llama-3-70B")
    assert kp.kv_bytes_per_token(p, kp.DTYPE_BITS["int8"]) == 2 * 80 * 8 * 128 * 1 == 163_840
    int8, bf16 = kp.budget(p, 4096, 2, "int8"), kp.budget(p, 4096, 2, "bf16")
    assert int8.kv_total * 2 == bf16.kv_total and int8.kv_total == kp.budget(p, 4096, 2, "fp8").kv_total


def test_every_context_window_says_where_it_is_read():
    for p in kp.load_presets():
        assert p.context_source.startswith(("config.json: ", "model card: ")), p.name


def _configs_here() -> dict:
    """Preset name -> a config.json on this machine for it: the Hugging Face cache's copy of its hub id, and for
    SmolLM2-135M the packaged SmolLM2-135M-Instruct's converted copy (the same architecture and window)."""
    from huggingface_hub import try_to_load_from_cache

    from engine.models import catalog, packaged

    found = {}
    for p in kp.load_presets():
        path = try_to_load_from_cache(p.hf_id, "config.json")
        if isinstance(path, str):
            found[p.name] = path
    embedded = packaged.copy_dir(catalog.row(catalog.EMBEDDED)) / "config.json"
    if embedded.is_file():
        found.setdefault("SmolLM2-135M", str(embedded))
    return found


def test_context_windows_read_from_config_equal_the_configs_here():
    import json
    from pathlib import Path

    configs = _configs_here()
    if not configs:
        pytest.skip("no preset's config.json is on this machine (the packaged model is not converted yet)")
    for name, path in configs.items():
        p = kp.preset(name)
        if not p.context_source.startswith("config.json: "):
            continue
        cfg = json.loads(Path(path).read_text())
        key = p.context_source.removeprefix("config.json: ")
        assert p.context_window == cfg[key], (name, path)
