"""The logit lens (nostalgebraist, 2020): read the residual stream after every block as if it were the last,
by applying the model's final norm and output head to it, and see the next-token prediction take shape.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engine.core import arch, instrument, loop
from engine.core.loaded import LoadedModel
from engine.core.prompt import token_text
from engine.core.trace import MAX_LENS_POSITIONS

TOP_K = 3


@dataclass(frozen=True)
class LensGrid:
    positions: np.ndarray  # [P] prompt positions covered (the last P of the prompt)
    input_tokens: tuple[str, ...]  # [P] the token at each covered position
    top_ids: np.ndarray  # [layers+1, P, TOP_K] row 0 = embeddings, row l = after l blocks (the one at index l - 1)
    top_probs: np.ndarray  # [layers+1, P, TOP_K]
    top_tokens: tuple[tuple[tuple[str, ...], ...], ...]  # [layers+1][P][TOP_K]
    final_prob: np.ndarray  # [layers+1, P] probability each layer gives to the final layer's top-1 token
    n_prompt: int  # prompt length (positions before positions[0] are not covered)

    @property
    def n_layers(self) -> int:
        return self.top_ids.shape[0] - 1


@torch.inference_mode()
def logit_lens(lm: LoadedModel, ids: list[int], max_positions: int = MAX_LENS_POSITIONS, top_k: int = TOP_K,
               chunk_layers: int = 4) -> LensGrid:
    """Top-``top_k`` next tokens at each of the last ``max_positions`` prompt positions, after every block.

    One forward pass records each block's output (the residual stream); then, ``chunk_layers`` layers at a
    time (to bound memory at chunk x P x vocab floats), final norm -> output head -> softmax. The last row is
    exactly the model's own output (it applies the same norm and head to the last block's output).
    """
    model = lm.model
    n = len(ids)
    p = max(1, min(int(max_positions), n))
    keep = slice(n - p, n)
    with instrument.residual_stream(model, lambda t: t[0, keep]) as captured:
        loop.full_pass(model, torch.tensor([ids], device=lm.device), logits_to_keep=1)
    return lens_from_residual(lm, ids, torch.stack(captured), top_k, chunk_layers)  # [L+1, P, d]


@torch.inference_mode()
def lens_from_residual(lm: LoadedModel, ids: list[int], resid, top_k: int = TOP_K, chunk_layers: int = 4) -> LensGrid:
    """The lens read from a residual stream already recorded (``resid`` [L+1, P, d] for the last P prompt
    positions, e.g. ``PromptAnalysis.lens_resid`` from the prompt's one analysis pass): no forward pass."""
    model = lm.model
    dtype = next(model.parameters()).dtype
    resid = torch.as_tensor(resid).to(device=lm.device, dtype=dtype)  # [L+1, P, d]
    n, p = len(ids), resid.shape[1]
    answer = arch.unembed(model, resid[-1]).argmax(-1)  # [P] the model's real top-1 at each position
    top_ids, top_probs, final_prob = [], [], []
    for start in range(0, resid.shape[0], chunk_layers):
        probs = arch.unembed(model, resid[start:start + chunk_layers]).float().softmax(-1)  # [c, P, vocab]
        top = torch.topk(probs, top_k, dim=-1)
        top_ids.append(top.indices.cpu())
        top_probs.append(top.values.cpu())
        final_prob.append(probs.gather(-1, answer.view(1, -1, 1).expand(probs.shape[0], -1, 1))[..., 0].cpu())
    ids_all = torch.cat(top_ids)  # [L+1, P, k]
    probs_all = torch.cat(top_probs)
    uniq = sorted(set(ids_all.flatten().tolist()))
    text = dict(zip(uniq, token_text(lm.tokenizer, uniq)))
    nested = tuple(tuple(tuple(text[i] for i in pos) for pos in layer) for layer in ids_all.tolist())
    return LensGrid(
        positions=np.arange(n - p, n), input_tokens=tuple(token_text(lm.tokenizer, ids[n - p:])),
        top_ids=ids_all.numpy(), top_probs=probs_all.numpy().astype(np.float32), top_tokens=nested,
        final_prob=torch.cat(final_prob).numpy().astype(np.float32), n_prompt=n,
    )
