"""A tiny random-weight Llama with a small byte-level BPE tokenizer trained in memory.

For unit tests and for trying pages without the real model: no files and no network. Same architecture
family as SmolLM2 (RoPE, RMSNorm, grouped-query attention; untied head, unlike SmolLM2), so every page works with it.
"""
from __future__ import annotations

import torch

_CORPUS = [
    "The capital of France is Paris. The capital of Italy is Rome.",
    "Once upon a time there was a small model that learned to predict the next token.",
    "def add(a, b):\n    return a + b\n",
    "Attention looks back at every earlier token; the KV cache keeps their keys and values.",
    "Speculative decoding drafts tokens cheaply and verifies them in one pass.",
] * 4

TINY_CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def make_tiny_tokenizer(vocab_size: int = 320, chat_template: bool = True):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>", unk_token="<|endoftext|>",
        pad_token="<|im_end|>",
    )
    fast.chat_template = TINY_CHAT_TEMPLATE if chat_template else None
    return fast


def make_tiny(seed: int = 0, layers: int = 2, heads: int = 4, kv_heads: int = 2, hidden: int = 64,
              chat_template: bool = True):
    """Return (model, tokenizer): a random-weight LlamaForCausalLM small enough to run in milliseconds."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = make_tiny_tokenizer(chat_template=chat_template)
    cfg = LlamaConfig(
        vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=hidden // heads,
        max_position_embeddings=1024, tie_word_embeddings=False, bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, attn_implementation="sdpa",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    # Default init gives near-uniform predictions; a larger output head makes them peaked enough (logit
    # spread of a few units) that sampling and speculative-decoding tests see distributions with structure.
    with torch.no_grad():
        model.get_input_embeddings().weight.normal_(0, 1.0)
        model.get_output_embeddings().weight.normal_(0, 0.3)
    return model.eval(), tok


# ------------------------------------------------------------------ tiny models of other architectures
# Built from each family's own config class (2 layers, hidden 64, random weights), for the architecture matrix
# test (tests/engine/test_architectures.py) and for trying pages on other layouts. Windows are kept small (8) so
# a prompt of a few dozen tokens crosses them.

TINY_WINDOW = 8


def arch_configs(vocab: int, ids: dict) -> dict:
    import transformers as t

    h, n = 64, 2
    rope = {"rope_type": "default", "rope_theta": 10000.0}
    return {
        "llama": lambda: t.LlamaConfig(vocab_size=vocab, hidden_size=h, intermediate_size=2 * h, num_hidden_layers=n,
                                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, **ids),
        "gpt2": lambda: t.GPT2Config(vocab_size=vocab, n_embd=h, n_layer=n, n_head=4, n_positions=512, **ids),
        "opt": lambda: t.OPTConfig(vocab_size=vocab, hidden_size=h, ffn_dim=2 * h, num_hidden_layers=n,
                                   num_attention_heads=4, max_position_embeddings=512, word_embed_proj_dim=h, **ids),
        "falcon": lambda: t.FalconConfig(vocab_size=vocab, hidden_size=h, num_hidden_layers=n, num_attention_heads=4,
                                         multi_query=True, new_decoder_architecture=False, parallel_attn=True,
                                         alibi=False, bias=False, max_position_embeddings=512, **ids),
        "gpt_neox": lambda: t.GPTNeoXConfig(vocab_size=vocab, hidden_size=h, intermediate_size=2 * h,
                                            num_hidden_layers=n, num_attention_heads=4, max_position_embeddings=512,
                                            rope_parameters={**rope, "partial_rotary_factor": 0.25}, **ids),
        "qwen3": lambda: t.Qwen3Config(vocab_size=vocab, hidden_size=h, intermediate_size=2 * h, num_hidden_layers=n,
                                       num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                       max_position_embeddings=512, **ids),
        "gemma3": lambda: t.Gemma3TextConfig(vocab_size=vocab, hidden_size=h, intermediate_size=2 * h,
                                             num_hidden_layers=n, num_attention_heads=4, num_key_value_heads=1,
                                             head_dim=16, sliding_window=TINY_WINDOW, max_position_embeddings=512,
                                             layer_types=["sliding_attention", "full_attention"], **ids),
        "mistral": lambda: t.MistralConfig(vocab_size=vocab, hidden_size=h, intermediate_size=2 * h,
                                           num_hidden_layers=n, num_attention_heads=4, num_key_value_heads=2,
                                           sliding_window=TINY_WINDOW, max_position_embeddings=512, **ids),
        "phi": lambda: t.PhiConfig(vocab_size=vocab, hidden_size=h, intermediate_size=2 * h, num_hidden_layers=n,
                                   num_attention_heads=4, max_position_embeddings=512,
                                   rope_parameters={**rope, "partial_rotary_factor": 0.5}, **ids),
        "gemma2": lambda: t.Gemma2Config(vocab_size=vocab, hidden_size=h, intermediate_size=2 * h,
                                         num_hidden_layers=n, num_attention_heads=4, num_key_value_heads=2,
                                         head_dim=16, sliding_window=TINY_WINDOW, max_position_embeddings=512, **ids),
        "qwen2": lambda: t.Qwen2Config(vocab_size=vocab, hidden_size=h, intermediate_size=2 * h, num_hidden_layers=n,
                                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, **ids),
        "stablelm": lambda: t.StableLmConfig(vocab_size=vocab, hidden_size=h, intermediate_size=2 * h,
                                             num_hidden_layers=n, num_attention_heads=4, num_key_value_heads=4,
                                             max_position_embeddings=512, **ids),
        "gptj": lambda: t.GPTJConfig(vocab_size=vocab, n_embd=h, n_layer=n, n_head=4, rotary_dim=8, n_positions=512,
                                     **ids),
        "bloom": lambda: t.BloomConfig(vocab_size=vocab, hidden_size=h, n_layer=n, n_head=4, **ids),
        "mpt": lambda: t.MptConfig(vocab_size=vocab, d_model=h, n_layers=n, n_heads=4, max_seq_len=512, **ids),
        "codegen": lambda: t.CodeGenConfig(vocab_size=vocab, n_embd=h, n_layer=n, n_head=4, rotary_dim=8,
                                           n_positions=512, n_ctx=512, **ids),
        "gpt_bigcode": lambda: t.GPTBigCodeConfig(vocab_size=vocab, n_embd=h, n_layer=n, n_head=4, n_positions=512,
                                                  multi_query=True, **ids),
        "cohere": lambda: t.CohereConfig(vocab_size=vocab, hidden_size=h, intermediate_size=2 * h, num_hidden_layers=n,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                                         **ids),
        "llama-scaled-rope": lambda: t.LlamaConfig(
            vocab_size=vocab, hidden_size=h, intermediate_size=2 * h, num_hidden_layers=n, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=512,
            rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 128}, **ids),
        "smollm3": lambda: t.SmolLM3Config(vocab_size=vocab, hidden_size=h, intermediate_size=2 * h,
                                           num_hidden_layers=n, num_attention_heads=4, num_key_value_heads=2,
                                           max_position_embeddings=512, no_rope_layer_interval=2, **ids),
        "deepseek_v3": lambda: t.DeepseekV3Config(
            vocab_size=vocab, hidden_size=h, intermediate_size=2 * h, moe_intermediate_size=h, num_hidden_layers=n,
            num_attention_heads=4, num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8,
            qk_nope_head_dim=8, v_head_dim=8, n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
            first_k_dense_replace=1, max_position_embeddings=512, **ids),
        "gpt_oss": lambda: t.GptOssConfig(vocab_size=vocab, hidden_size=h, intermediate_size=h, num_hidden_layers=n,
                                          num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                          sliding_window=TINY_WINDOW, num_local_experts=4, num_experts_per_tok=2,
                                          max_position_embeddings=512,
                                          layer_types=["sliding_attention", "full_attention"], **ids),
    }


TINY_ARCHS = ("llama", "gpt2", "opt", "falcon", "gpt_neox", "qwen3", "gemma3", "mistral", "phi", "gemma2", "qwen2",
              "stablelm", "gptj", "bloom", "mpt", "codegen",
              # layouts that broke what the first sixteen did not: multi-query with learned positions, RoPE on
              # neighbouring pairs, rescaled RoPE frequencies, RoPE skipped in some layers (NoPE), values with
              # their own head dim plus experts (MLA), and experts, attention sinks and half-width cos (GPT-OSS)
              "gpt_bigcode", "cohere", "llama-scaled-rope", "smollm3", "deepseek_v3", "gpt_oss")


def make_tiny_arch(arch: str, seed: int = 0):
    """Return (model, tokenizer): a random-weight model of family ``arch`` (one of TINY_ARCHS), built from its
    config class with the attention implementation the loader would pick (engine.core.loaded.attention_implementation;
    eager where the family has no SDPA)."""
    from transformers import AutoModelForCausalLM

    tok = make_tiny_tokenizer()
    ids = dict(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    cfg = arch_configs(len(tok), ids)[arch]()
    from engine.core.loaded import attention_implementation

    torch.manual_seed(seed)
    try:
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attention_implementation(cfg))
    except ValueError:  # a family without SDPA support runs eager attention
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    with torch.no_grad():
        model.get_input_embeddings().weight.normal_(0, 1.0)
    return model.eval(), tok
