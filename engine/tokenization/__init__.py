"""Tokenization: the prompt cut into tokens, tokenizer contrasts (tokens)."""
