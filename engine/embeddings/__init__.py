"""Embeddings and position: the embedding table read for the prompt (analysis)."""
