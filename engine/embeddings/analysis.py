"""Token ids -> vectors, and how the model knows where each token is.

Everything here reads the real weights: rows of the input embedding table, a PCA of a seeded sample of it,
nearest neighbours by cosine, the model's own rotary-embedding module (RoPE, Su et al. 2021, "RoFormer")
or its learned position table (GPT-2), and whether the output head is the embedding table itself.
No forward pass through the blocks is needed, so all of it is cheap.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engine.core import arch, archfacts
from engine.core.loaded import LoadedModel
from engine.core.prompt import token_text

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
    """theta_{p,i} = p * inv_freq_i for dimension pair i at position p (radians); inv_freq_i = base^(-2i/d), or
    that rescaled where ``scaling`` names the config's rope_type."""
    positions: np.ndarray  # [P]
    inv_freq: np.ndarray  # [d/2] as the model's rotary module holds it (base^(-2i/d) unless scaled)
    angles: np.ndarray  # [P, d/2] radians
    base: float
    head_dim: int
    rotary_dim: int  # dimensions that rotate (d above)
    module_max_diff: float  # max |cos from the model's module - cos(angles)|: the angles are what runs
    pairing: str  # which dimensions rotate together
    scaling: str | None = None  # rope_type of a model whose frequencies are not the plain formula (llama3, yarn...)


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
    return archfacts.rotary_module(lm.model)


def rope_refusal(lm: LoadedModel) -> str | None:
    """Why the RoPE sections cannot be shown for this model (one line), or None."""
    f = lm.info.arch
    if f is not None and f.position != "rope":
        return f"this model does not use rotary position embeddings ({f.position} positions)"
    mod = rotary_module(lm)
    if mod is None:
        return ("this model rotates queries and keys inside each attention layer, not in a separate rotary module "
                "the app can call")
    if archfacts.inv_freq(lm.model, _layer_type(lm)) is None:
        return "this model's rotary module has no inverse-frequency table to read"
    return None


def _layer_type(lm: LoadedModel, layer: int = 0) -> str | None:
    return archfacts.rope_layer_types(lm.model)[layer]


def _rotary(lm: LoadedModel, x, pos, layer_type: str | None):
    """(cos, sin) from the model's rotary module, one value per rotating dimension: a module that returns one
    per pair (GPT-OSS: its attention splits each head in halves itself) is widened to the rotate-half layout."""
    mod = rotary_module(lm)
    cos, sin = mod(x, pos, layer_type=layer_type) if layer_type else mod(x, pos)
    inv = archfacts.inv_freq(lm.model, layer_type)
    if inv is not None and cos.shape[-1] == inv.shape[-1]:  # [.., r/2] -> [.., r]
        cos, sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
    return cos, sin


@torch.inference_mode()
def rope_angles(lm: LoadedModel, n_positions: int = 64, layer: int = 0) -> RopeAngles:
    """Rotation angle of every query/key dimension pair at positions 0..n_positions-1 in block ``layer``:
    theta_{p,i} = p * inv_freq_i with the model's own inverse frequencies (base^(-2i/d) from the config, or that
    formula rescaled where the config names a rope_type such as llama3 or yarn), checked against the cos the
    model's rotary module actually produces, in the pairing layout that module uses."""
    reason = rope_refusal(lm)
    if reason:
        raise ValueError(reason)
    f = lm.info.arch
    if f is not None and f.position == "rope" and f.rope_bases[layer] is None and any(f.rope_bases):
        raise ValueError(f"layer {layer} adds no position encoding (NoPE): it does not rotate queries and keys")
    lt = _layer_type(lm, layer)
    inv = archfacts.inv_freq(lm.model, lt).double().cpu()  # [r/2]
    rot_dim = 2 * inv.shape[0]
    base = (f.rope_bases[layer] if f is not None else None) or float(inv[1] ** (-(rot_dim / 2)))
    i = torch.arange(rot_dim // 2, dtype=torch.float64)
    formula = base ** (-2 * i / rot_dim)  # [r/2]
    scaled = bool(((inv - formula).abs() > 1e-6 * formula).any())
    pos = torch.arange(n_positions, dtype=torch.float64)
    angles = pos[:, None] * (inv if scaled else formula)[None, :]  # [P, r/2]: the formula, in float64, unless
    # the config rescales it (then the model's own float32 frequencies are the truth)
    dummy = torch.zeros(1, dtype=torch.float32, device=lm.device)
    cos, _ = _rotary(lm, dummy, torch.arange(n_positions, device=lm.device)[None], lt)  # [1, P, r]
    mod = rotary_module(lm)
    scale = float(getattr(mod, f"{lt}_attention_scaling" if lt else "attention_scaling", 1.0) or 1.0)
    layout = _layout(cos)
    full = cos[0].double().cpu() / scale  # [P, r]
    half = full[:, 0::2] if layout == "interleaved" else full[:, : rot_dim // 2]  # one cos per pair
    diff = float((half - angles.cos()).abs().max())
    pairing = ("dimensions 2i and 2i + 1 rotate together (neighbours, as in the paper)" if layout == "interleaved"
               else f"dimension i rotates with dimension i + {rot_dim // 2} (the 'rotate half' layout of this "
                    "implementation; the paper pairs neighbours 2i, 2i+1: same maths, different order)")
    if rot_dim < lm.info.head_dim:
        pairing += (f"; only the first {rot_dim} of {lm.info.head_dim} dimensions of each head rotate, the rest "
                    "pass through unchanged")
    return RopeAngles(pos.numpy().astype(np.int64), inv.float().numpy(), angles.numpy(), base, lm.info.head_dim,
                      rot_dim, diff, pairing, _rope_type(lm, lt) if scaled else None)


def _rope_type(lm: LoadedModel, layer_type: str | None) -> str:
    """The config's rope_type for a layer type (what rescales the frequencies), 'scaled' when it names none."""
    params = getattr(arch.text_config(lm.model), "rope_parameters", None)
    if isinstance(params, dict) and layer_type and isinstance(params.get(layer_type), dict):
        params = params[layer_type]
    kind = params.get("rope_type") if isinstance(params, dict) else None
    return str(kind) if kind and kind != "default" else "scaled"


def _layout(cos: torch.Tensor) -> str:
    """How the rotary module lays out each pair's cos: 'half' (cat(freqs, freqs): dimension i with i + r/2, as
    Llama's code does) or 'interleaved' (each frequency twice in a row: neighbours 2i, 2i+1, as Cohere's does)."""
    c = cos.reshape(-1, cos.shape[-1]).double()
    h = c.shape[-1] // 2
    if c.shape[-1] >= 4 and torch.allclose(c[:, 0::2], c[:, 1::2]) and not torch.allclose(c[:, :h], c[:, h:]):
        return "interleaved"
    return "half"


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def _rotate_pairs(x: torch.Tensor) -> torch.Tensor:
    """(x0, x1, x2, x3, ...) -> (-x1, x0, -x3, x2, ...): the rotation of neighbouring pairs."""
    return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)


def _apply_rotary(lm: LoadedModel, q, k, cos, sin):
    """The standard RoPE rotation (rotate-half or neighbouring pairs, in the module's own layout) on the first cos.shape[-1] dimensions (all of them, or the rotary
    fraction of a partial-rotary model: GPT-NeoX, Phi, StableLM), the rest passed through; checked against the
    model's own apply_rotary_pos_emb where its module has one and it takes whole heads."""
    r = cos.shape[-1]
    c, s_ = cos.unsqueeze(1), sin.unsqueeze(1)
    rot = _rotate_pairs if _layout(cos) == "interleaved" else _rotate_half
    qr, kr = q[..., :r] * c + rot(q[..., :r]) * s_, k[..., :r] * c + rot(k[..., :r]) * s_
    return torch.cat([qr, q[..., r:]], -1), torch.cat([kr, k[..., r:]], -1)


@torch.inference_mode()
def real_qk(lm: LoadedModel, q_token: int, k_token: int, head: int = 0):
    """Layer 0's query vector (head ``head``) for one token and key vector for another, before rotation:
    q_proj / k_proj of the normed embedding (and the per-head QK-norm where the model has one), exactly what
    block 0 computes from those tokens. Returns (q, k, whether QK-norm was applied)."""
    blk = arch.blocks(lm.model)[0]
    attn = blk.self_attn
    x = lm.model.get_input_embeddings()(torch.tensor([int(q_token), int(k_token)], device=lm.device))  # [2, hidden]
    x = blk.input_layernorm(x)
    d = lm.info.head_dim
    group = lm.info.n_heads // lm.info.n_kv_heads
    q = attn.q_proj(x[:1]).view(-1, d)  # [heads, d]
    k = attn.k_proj(x[1:]).view(-1, d)  # [kv_heads, d]
    normed = False
    for name_q, name_k in (("q_norm", "k_norm"), ("q_layernorm", "k_layernorm")):
        if hasattr(attn, name_q) and hasattr(attn, name_k):
            q, k, normed = getattr(attn, name_q)(q), getattr(attn, name_k)(k), True
    return q[head].float(), k[head // group].float(), normed


@torch.inference_mode()
def relative_demo(lm: LoadedModel, q_token: int | None = None, k_token: int | None = None, head: int = 0,
                  n_positions: int = 32, seed: int = 0) -> RelativeDemo:
    """Rotate one q to every query position m and one k to every key position n with the model's rotary module
    (layer 0's); the score q_m . k_n depends only on m - n (RoPE's defining property). Real layer-0 q/k when
    the tokens are given and the block is Llama-like, else seeded random unit vectors (said in ``source``)."""
    reason = rope_refusal(lm)
    if reason:
        raise ValueError(reason)
    d = lm.info.head_dim
    q = k = None
    if q_token is not None and k_token is not None:
        try:
            q, k, normed = real_qk(lm, q_token, k_token, head)
            names = token_text(lm.tokenizer, [q_token, k_token])
            source = (f"real layer-0 vectors: the query of head {head} for token {names[0]!r} and the key it reads "
                      f"for token {names[1]!r} (q_proj / k_proj of the normed embedding"
                      + (", then the model's QK-norm" if normed else "") + ")")
        except (AttributeError, RuntimeError, IndexError, TypeError):
            q = k = None
    if q is None:
        g = torch.Generator().manual_seed(seed)
        q = torch.nn.functional.normalize(torch.randn(d, generator=g), dim=0)
        k = torch.nn.functional.normalize(torch.randn(d, generator=g), dim=0)
        source = f"two random unit vectors of {d} dimensions (seed {seed}), not taken from the model"
    dev = lm.device
    pos = torch.arange(n_positions, device=dev)[None]  # [1, P]
    cos, sin = _rotary(lm, q.to(dev)[None, None], pos, _layer_type(lm))  # [1, P, r]
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
    return archfacts.position_table(lm.model)


@torch.inference_mode()
def learned_positions(lm: LoadedModel, n_positions: int = 64) -> LearnedPositions:
    mod = position_table(lm)
    if mod is None:
        raise ValueError("this model has no learned position table")
    off = int(getattr(mod, "offset", 0) or 0)  # OPT stores its position p at row p + 2
    w = mod.weight.float()[off:]  # [max_positions, d]
    n = min(n_positions, w.shape[0])
    x = w[:n]
    unit = torch.nn.functional.normalize(x, dim=-1)
    return LearnedPositions(x.cpu().numpy(), x.norm(dim=-1).cpu().numpy(), (unit @ unit.T).cpu().numpy(),
                            int(w.shape[0]))


def _head_weight(lm: LoadedModel):
    """The output head's weight matrix; an int8-quantized head (engine.models.precision) gives its dequantized copy,
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
