"""Token ids -> vectors, and how the model knows where each token is.

Everything here reads the real weights: rows of the input embedding table, a PCA of a seeded sample of it,
nearest neighbours by cosine, the model's own rotary-embedding module (RoPE, Su et al. 2021, "RoFormer")
or its learned position table (GPT-2), and whether the output head is the embedding table itself.
No forward pass through the blocks is needed, so all of it is cheap.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
import torch

from engine import arch
from engine.models import LoadedModel
from engine.prompt import token_text

PCA_METHOD = "PCA: torch.linalg.svd of the mean-centred sample of embedding rows, top 2 right singular vectors"


@dataclass(frozen=True)
class PromptEmbeddings:
    ids: tuple[int, ...]
    tokens: tuple[str, ...]
    vectors: np.ndarray  # [n, d] rows of the input embedding table
    norms: np.ndarray  # [n] L2 norm of each row
    cosine: np.ndarray  # [n, n] cosine similarity between the rows
    vocab_norm_quantiles: tuple[float, float, float]  # 5 %, 50 %, 95 % of the norms of all vocabulary rows


@dataclass(frozen=True)
class EmbeddingMap:
    method: str
    sample_ids: np.ndarray  # [S] a fixed, seeded sample of the vocabulary
    sample_tokens: tuple[str, ...]
    sample_xy: np.ndarray  # [S, 2]
    prompt_ids: tuple[int, ...]
    prompt_tokens: tuple[str, ...]
    prompt_xy: np.ndarray  # [n, 2] projected with the sample's components
    explained: tuple[float, float]  # share of the sample's variance along each component
    seed: int


@dataclass(frozen=True)
class Neighbours:
    query_id: int
    query_token: str
    ids: tuple[int, ...]
    tokens: tuple[str, ...]
    cosines: tuple[float, ...]


@dataclass(frozen=True)
class RopeAngles:
    """theta_{p,i} = p * base^(-2i/d) for dimension pair i at position p (radians)."""
    positions: np.ndarray  # [P]
    inv_freq: np.ndarray  # [d/2] base^(-2i/d), as the model's rotary module holds it
    angles: np.ndarray  # [P, d/2] radians
    base: float
    head_dim: int
    rotary_dim: int  # dimensions that rotate (d above)
    module_max_diff: float  # max |cos from the model's module - cos(formula)|: the formula is what runs
    pairing: str  # which dimensions rotate together


@dataclass(frozen=True)
class RelativeDemo:
    """Attention scores q_m . k_n / sqrt(d) after rotating one fixed q and one fixed k to every position pair."""
    source: str  # where q and k came from
    scores: np.ndarray  # [P, P]: row m = query position, column n = key position
    no_rope_score: float  # the same q . k / sqrt(d) with no rotation (identical at every position pair)
    max_spread: float  # largest (max - min) of scores over pairs with the same distance m - n
    value_range: float  # max - min of all scores, for scale


@dataclass(frozen=True)
class LearnedPositions:
    vectors: np.ndarray  # [P, d] rows of the learned position table
    norms: np.ndarray  # [P]
    cosine: np.ndarray  # [P, P]
    table_size: int  # the most positions the model has vectors for


@dataclass(frozen=True)
class TiedCheck:
    tied: bool  # the output head's weight is the input embedding table's tensor (same storage)
    same_storage: bool
    max_abs_diff: float | None  # between the two matrices; None when their shapes differ
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...] | None


def table(lm: LoadedModel) -> torch.Tensor:
    return lm.model.get_input_embeddings().weight  # [vocab, d]


@torch.inference_mode()
def prompt_embeddings(lm: LoadedModel, ids) -> PromptEmbeddings:
    ids = tuple(int(i) for i in ids)
    w = table(lm)
    x = w[torch.tensor(ids, device=w.device)].float()  # [n, d]
    unit = torch.nn.functional.normalize(x, dim=-1)
    all_norms = w.float().norm(dim=-1)  # [vocab]
    q = torch.quantile(all_norms.cpu(), torch.tensor([0.05, 0.5, 0.95])).tolist()
    return PromptEmbeddings(ids, tuple(token_text(lm.tokenizer, ids)), x.cpu().numpy(), x.norm(dim=-1).cpu().numpy(),
                            (unit @ unit.T).cpu().numpy(), (q[0], q[1], q[2]))


def _fix_signs(vh: torch.Tensor) -> torch.Tensor:
    """SVD signs are arbitrary; make each component's largest entry positive so the map is stable."""
    idx = vh.abs().argmax(dim=1)
    signs = torch.sign(vh[torch.arange(vh.shape[0]), idx])
    return vh * signs[:, None]


@torch.inference_mode()
def embedding_map(lm: LoadedModel, ids, sample_size: int = 2000, seed: int = 0) -> EmbeddingMap:
    """The prompt's tokens placed among a fixed random sample of the vocabulary, in the sample's top-2 PCA plane."""
    ids = tuple(int(i) for i in ids)
    w = table(lm).float()
    gen = torch.Generator().manual_seed(seed)
    s = min(sample_size, w.shape[0])
    sample = torch.randperm(w.shape[0], generator=gen)[:s].sort().values  # [S]
    xs = w[sample.to(w.device)]  # [S, d]
    mu = xs.mean(dim=0, keepdim=True)
    _, sv, vh = torch.linalg.svd(xs - mu, full_matrices=False)  # vh: [min(S, d), d]
    comps = _fix_signs(vh[:2])  # [2, d]
    var = sv ** 2
    explained = (var[:2] / var.sum()).tolist()
    xy = ((xs - mu) @ comps.T).cpu().numpy()  # [S, 2]
    pxy = ((w[torch.tensor(ids, device=w.device)] - mu) @ comps.T).cpu().numpy()  # [n, 2]
    return EmbeddingMap(PCA_METHOD, sample.numpy(), tuple(token_text(lm.tokenizer, sample.tolist())), xy, ids,
                        tuple(token_text(lm.tokenizer, ids)), pxy, (explained[0], explained[1]), seed)


@torch.inference_mode()
def nearest_tokens(lm: LoadedModel, token_id: int, k: int = 10) -> Neighbours:
    """The k vocabulary rows with the highest cosine similarity to row ``token_id`` (itself excluded)."""
    w = table(lm).float()
    unit = torch.nn.functional.normalize(w, dim=-1)  # [vocab, d]
    cos = unit @ unit[int(token_id)]  # [vocab]
    cos[int(token_id)] = -2.0
    top = torch.topk(cos, min(k, w.shape[0] - 1))
    ids = [int(i) for i in top.indices]
    return Neighbours(int(token_id), token_text(lm.tokenizer, [token_id])[0], tuple(ids),
                      tuple(token_text(lm.tokenizer, ids)), tuple(float(v) for v in top.values))


def rotary_module(lm: LoadedModel):
    """The model's own rotary-embedding module (shared by all layers in current transformers), or None."""
    body = arch.body(lm.model)
    mod = getattr(body, "rotary_emb", None)
    if mod is None:
        mod = getattr(getattr(arch.blocks(lm.model)[0], "self_attn", None), "rotary_emb", None)
    return mod


def _rope_base(lm: LoadedModel, mod) -> float:
    cfg = lm.model.config
    params = getattr(cfg, "rope_parameters", None) or {}
    base = params.get("rope_theta") if isinstance(params, dict) else None
    base = base or getattr(cfg, "rope_theta", None) or lm.info.rope_theta
    if base is None and mod is not None:  # recover it from inv_freq[1] = base^(-2/d)
        inv = mod.inv_freq.float()
        base = float(inv[1] ** (-(2 * len(inv)) / 2))
    return float(base)


@torch.inference_mode()
def rope_angles(lm: LoadedModel, n_positions: int = 64) -> RopeAngles:
    """Rotation angle of every query/key dimension pair at positions 0..n_positions-1, from the real config,
    checked against the cos the model's rotary module actually produces."""
    mod = rotary_module(lm)
    if mod is None:
        raise ValueError("this model has no rotary-embedding module")
    inv = mod.inv_freq.float().cpu()  # [d/2]
    rot_dim = 2 * inv.shape[0]
    base = _rope_base(lm, mod)
    i = torch.arange(rot_dim // 2, dtype=torch.float64)
    formula = base ** (-2 * i / rot_dim)  # [d/2]
    pos = torch.arange(n_positions, dtype=torch.float64)
    angles = pos[:, None] * formula[None, :]  # [P, d/2]
    dummy = torch.zeros(1, dtype=torch.float32, device=lm.device)
    cos, _ = mod(dummy, torch.arange(n_positions, device=lm.device)[None])  # [1, P, d]
    scale = float(getattr(mod, "attention_scaling", 1.0) or 1.0)
    half = cos[0, :, : rot_dim // 2].double().cpu() / scale  # HF layout: cat(freqs, freqs)
    diff = float((half - angles.cos()).abs().max())
    return RopeAngles(pos.numpy().astype(np.int64), inv.numpy(), angles.numpy(), base, lm.info.head_dim, rot_dim, diff,
                      f"dimension i rotates with dimension i + {rot_dim // 2} (the 'rotate half' layout of this "
                      "implementation; the paper pairs neighbours 2i, 2i+1: same maths, different order)")


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def _apply_rotary(lm: LoadedModel, q, k, cos, sin):
    """The model's own apply_rotary_pos_emb where its module has one, else the standard rotate-half formula."""
    attn = getattr(arch.blocks(lm.model)[0], "self_attn", None)
    fn = getattr(sys.modules.get(type(attn).__module__), "apply_rotary_pos_emb", None) if attn is not None else None
    if fn is not None:
        try:
            return fn(q, k, cos, sin)
        except TypeError:
            pass
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


@torch.inference_mode()
def real_qk(lm: LoadedModel, q_token: int, k_token: int, head: int = 0):
    """Layer 0's query vector (head ``head``) for one token and key vector for another, before rotation:
    q_proj / k_proj of the RMS-normed embedding, exactly what block 0 computes from those tokens."""
    blk = arch.blocks(lm.model)[0]
    attn = blk.self_attn
    w = table(lm)
    x = blk.input_layernorm(w[torch.tensor([int(q_token), int(k_token)], device=w.device)])  # [2, hidden]
    d = lm.info.head_dim
    group = lm.info.n_heads // lm.info.n_kv_heads
    q = attn.q_proj(x[:1]).view(-1, d)[head]  # [d]
    k = attn.k_proj(x[1:]).view(-1, d)[head // group]  # [d]; grouped-query attention shares key heads
    return q.float(), k.float()


@torch.inference_mode()
def relative_demo(lm: LoadedModel, q_token: int | None = None, k_token: int | None = None, head: int = 0,
                  n_positions: int = 32, seed: int = 0) -> RelativeDemo:
    """Rotate one q to every query position m and one k to every key position n with the model's rotary module;
    the score q_m . k_n depends only on m - n (RoPE's defining property). Real layer-0 q/k when the tokens
    are given and the block is Llama-like, else seeded random unit vectors (said in ``source``)."""
    mod = rotary_module(lm)
    if mod is None:
        raise ValueError("this model has no rotary-embedding module")
    d = lm.info.head_dim
    q = k = None
    if q_token is not None and k_token is not None:
        try:
            q, k = real_qk(lm, q_token, k_token, head)
            names = token_text(lm.tokenizer, [q_token, k_token])
            source = (f"real layer-0 vectors: the query of head {head} for token {names[0]!r} and the key it reads "
                      f"for token {names[1]!r} (q_proj / k_proj of the normed embedding)")
        except (AttributeError, RuntimeError, IndexError):
            q = k = None
    if q is None:
        g = torch.Generator().manual_seed(seed)
        q = torch.nn.functional.normalize(torch.randn(d, generator=g), dim=0)
        k = torch.nn.functional.normalize(torch.randn(d, generator=g), dim=0)
        source = f"two random unit vectors of {d} dimensions (seed {seed}), not taken from the model"
    dev = lm.device
    pos = torch.arange(n_positions, device=dev)[None]  # [1, P]
    cos, sin = mod(q.to(dev)[None, None], pos)  # [1, P, d]
    qs = q.to(dev).expand(1, 1, n_positions, d).to(cos.dtype)  # [batch, heads, P, d]
    ks = k.to(dev).expand(1, 1, n_positions, d).to(cos.dtype)
    qr, kr = _apply_rotary(lm, qs, ks, cos, sin)
    scores = (qr[0, 0].double() @ kr[0, 0].double().T / d ** 0.5).cpu().numpy()  # [P(query m), P(key n)]
    spread = 0.0
    for delta in range(-(n_positions - 1), n_positions):
        diag = np.diagonal(scores, offset=-delta)  # entries with m - n = delta
        spread = max(spread, float(diag.max() - diag.min()))
    return RelativeDemo(source, scores, float(q.double() @ k.double() / d ** 0.5), spread,
                        float(scores.max() - scores.min()))


def position_table(lm: LoadedModel) -> torch.nn.Module | None:
    """The learned absolute position embedding (GPT-2's wpe, OPT's embed_positions), or None."""
    body = arch.body(lm.model)
    for attr in ("wpe", "embed_positions", "position_embeddings"):
        mod = getattr(body, attr, None)
        if mod is not None and hasattr(mod, "weight"):
            return mod
    return None


@torch.inference_mode()
def learned_positions(lm: LoadedModel, n_positions: int = 64) -> LearnedPositions:
    mod = position_table(lm)
    if mod is None:
        raise ValueError("this model has no learned position table")
    w = mod.weight.float()  # [max_positions, d]
    n = min(n_positions, w.shape[0])
    x = w[:n]
    unit = torch.nn.functional.normalize(x, dim=-1)
    return LearnedPositions(x.cpu().numpy(), x.norm(dim=-1).cpu().numpy(), (unit @ unit.T).cpu().numpy(),
                            int(w.shape[0]))


def _head_weight(lm: LoadedModel):
    """The output head's weight matrix; an int8-quantized head (engine.precision) gives its dequantized copy,
    a separate tensor from the embedding table, so the check reports it untied, with the rounding as the gap."""
    w = getattr(lm.model.get_output_embeddings(), "weight", None)
    return w().dequantize() if callable(w) else w


@torch.inference_mode()
def tied_check(lm: LoadedModel) -> TiedCheck:
    """Is the output head (hidden -> vocabulary logits) the input embedding table itself?"""
    win = lm.model.get_input_embeddings().weight
    wout = _head_weight(lm)
    if wout is None:
        return TiedCheck(False, False, None, tuple(win.shape), None)
    same = wout.data_ptr() == win.data_ptr() and wout.shape == win.shape
    diff = float((wout.float() - win.float()).abs().max()) if wout.shape == win.shape else None
    return TiedCheck(same, same, diff, tuple(win.shape), tuple(wout.shape))


@torch.inference_mode()
def row_pair(lm: LoadedModel, token_id: int, n: int = 6) -> tuple[np.ndarray, np.ndarray | None]:
    """First values of one token's row in the input embedding table and in the output head's weight."""
    a = table(lm)[int(token_id), :n].float().cpu().numpy()
    head = _head_weight(lm)
    return a, (head[int(token_id), :n].float().cpu().numpy() if head is not None else None)
