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
