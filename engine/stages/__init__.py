"""The stages of the loop, each explained from the real model: tokens, embeddings and positions, attention, the
logit lens, per-position predictions, one block's sub-steps, the sampling path, and the KV cache's contents."""
