"""One run of the inference loop, recorded: prefill, the decode loop, and an analysis of the prompt.

``run_trace`` returns an immutable ``Trace`` of plain values (numpy arrays, ints, strs) that every page
reads. The timed path (``prefill`` then ``decode_step`` per token, each with the KV cache) is the same
lean loop a server runs; the extra analysis (attention weights, per-position predictions, residual
norms) is a separate, untimed pass over the prompt so it never inflates a timing.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np
import torch

from engine.core import arch, instrument
from engine.core.kv import kv_bytes, kv_tokens
from engine.core.loop import decode, device_draw, eos_ids, full_pass, new_cache, prefill, served_compiled, warm_up
from engine.core.loaded import LoadedModel, Mode, ModelInfo, ModelRef, described
from engine.core.prefill_buckets import PrefillMode, prefill_mode, run_tokens
from engine.core.unwatched import decode_unwatched
from engine.core.prompt import MAX_PROMPT_TOKENS, EncodedPrompt, encode_prompt, token_text
from engine.core.sampling import SamplingSettings, entropy_bits, make_generator, sample, sampling_probs
from engine.core.predictions import PositionPredictions, predictions_from_logits
from engine.measure.timing import now

TOP_K_RECORD = 10  # alternatives kept per position / step
ATTN_MAX = 160  # attention weights are kept for at most this many prompt positions (memory: L*H*n^2)
MAX_NEW_TOKENS = 256
MAX_LENS_POSITIONS = 48  # the last prompt positions whose residual stream is kept for the logit lens


@dataclass(frozen=True)
class StepRecord:
    index: int
    phase: str  # "prefill" | "decode"
    tokens_in: int  # tokens processed by this forward pass
    seconds: float  # forward pass + sampling, measured after a device sync
    kv_bytes: int  # measured from the cache tensors after this step
    kv_tokens: int
    token_id: int  # the chosen next token
    token: str
    prob: float  # probability of the chosen token under the sampling distribution
    top_ids: tuple[int, ...]  # most likely next tokens under plain softmax (temperature 1)
    top_tokens: tuple[str, ...]
    top_probs: tuple[float, ...]
    entropy_bits: float  # of the plain softmax
    # Rows in the forward pass that ``seconds`` timed: 1 when the run was alone; more when the engine worker
    # served this request in a batch with other sessions' requests (engine/jobs/classbatch.py). A step measured in a
    # batch of 7 is the time of one pass that made a token for each of 7 requests: not a solo step time.
    batch_size: int = 1
    top_logits: tuple[float, ...] = ()  # raw logits of top_ids: what a saved run is checked against (engine/record)
    # this pass ran as a compiled graph (engine.core.compiled): a decode step as the decode graph, the prefill (step 0)
    # as its bucket's graph (engine.core.prefill_buckets)
    compiled: bool = False


@dataclass(frozen=True)
class PromptAnalysis:
    top_ids: np.ndarray  # [n, K] next-token predictions at every prompt position
    top_probs: np.ndarray  # [n, K]
    attentions: np.ndarray  # [layers, heads, m, m] float16, m = min(n, ATTN_MAX); rows sum to 1
    residual_norms: np.ndarray  # [layers+1, n] L2 norm of the residual stream (embeddings, after each block)
    lens_ids: np.ndarray  # [layers+1, 5] logit lens at the last prompt position
    lens_probs: np.ndarray  # [layers+1, 5]
    embedding_preview: np.ndarray  # [n, 8] first values of each token's embedding vector
    hidden_preview: np.ndarray  # [8] first values of the last position's final (normed) hidden state
    # From the same pass, so no page runs a second one for this prompt:
    positions: PositionPredictions | None = None  # predictions at every position (the sampling page)
    lens_resid: np.ndarray | None = None  # [layers+1, P, d] residual stream at the last P <= MAX_LENS_POSITIONS
    #                                       positions, read through the logit lens without a pass (attention page)


@dataclass(frozen=True)
class Trace:
    model: ModelRef  # which model ran: name, precision, engine mode asked for (the steps say which loop ran them)
    info: ModelInfo
    prompt: str
    encoded: EncodedPrompt
    settings: SamplingSettings
    seed: int
    max_new_tokens: int
    prompt_tokens: tuple[str, ...]
    generated_ids: tuple[int, ...]
    generated_tokens: tuple[str, ...]
    generated_text: str
    stop_reason: str  # "max_new_tokens" | "eos"
    steps: tuple[StepRecord, ...]
    first_logits: np.ndarray  # [vocab] raw logits for the token after the prompt (re-sampling needs no pass)
    analysis: PromptAnalysis | None = field(default=None)
    # timed by the class batcher's padded loop (engine.jobs.classbatch), even with one row: not the solo loop's times
    timed_in_batcher: bool = False
    # how the prefill ran, in words (engine.core.prefill_buckets.PrefillMode.line: "compiled, 64-token bucket",
    # "eager (its graph is compiling)"); "" where it was not recorded (a batched run, a saved run read back)
    prefill_mode: str = ""

    @property
    def prompt_ids(self) -> tuple[int, ...]:
        return self.encoded.ids

    @property
    def ttft(self) -> float:
        return self.steps[0].seconds if self.steps else float("nan")

    @property
    def decode_seconds(self) -> list[float]:
        return [s.seconds for s in self.steps if s.phase == "decode"]

    @property
    def tokens_per_second(self) -> float:
        total = sum(s.seconds for s in self.steps)
        return len(self.generated_ids) / total if total > 0 else float("nan")

    @property
    def engine_mode(self) -> Mode:
        """The loop that ran the decode steps: "compiled" when the compiled graph served them, else "eager" (also a
        compiled model's run that was longer than any static cache, or whose compile failed)."""
        return Mode.COMPILED if any(s.compiled for s in self.steps if s.phase == "decode") else Mode.EAGER

    @property
    def largest_batch(self) -> int:
        """The most rows any of this run's timed passes had (1: every step was measured alone)."""
        return max((s.batch_size for s in self.steps), default=1)

    @property
    def batched(self) -> bool:
        return self.largest_batch > 1

    def to_dict(self, tokenizer, attentions: bool = True) -> dict:
        """The record as JSON-ready values; ``tokenizer`` names the analysis's predicted tokens that neither the
        prompt nor a step's top-k already spelled (the record keeps their ids only)."""
        d = {
            "model": described(self.model, self.info),
            "prompt": self.prompt,
            "input_text": self.encoded.text,
            "chat_template_applied": self.encoded.chat_applied,
            "notes": list(self.encoded.notes),
            "settings": asdict(self.settings),
            "seed": self.seed,
            "max_new_tokens": self.max_new_tokens,
            "prompt_ids": list(self.prompt_ids),
            "prompt_tokens": list(self.prompt_tokens),
            "generated_ids": list(self.generated_ids),
            "generated_tokens": list(self.generated_tokens),
            "generated_text": self.generated_text,
            "stop_reason": self.stop_reason,
            "engine_mode": self.engine_mode,
            "prefill_mode": self.prefill_mode,
            "ttft_seconds": self.ttft,
            "tokens_per_second": self.tokens_per_second,
            "steps": [asdict(s) for s in self.steps],
        }
        a = self.analysis
        if a is not None:
            d["positions"] = [
                {"position": i, "token": self.prompt_tokens[i], "top_ids": [int(t) for t in a.top_ids[i]],
                 "top_tokens": token_list(self, a.top_ids[i], tokenizer), "top_probs": _r(a.top_probs[i])}
                for i in range(len(self.prompt_ids))
            ]
            d["residual_norms"] = _r(a.residual_norms)
            d["logit_lens_last_position"] = [
                {"layer": layer, "top_ids": [int(t) for t in a.lens_ids[layer]],
                 "top_tokens": token_list(self, a.lens_ids[layer], tokenizer),
                 "top_probs": _r(a.lens_probs[layer])}
                for layer in range(a.lens_ids.shape[0])
            ]
            if attentions:
                d["attentions"] = _r(a.attentions.astype(np.float32))
        return d

    def to_json(self, tokenizer, **kw) -> str:
        return json.dumps(self.to_dict(tokenizer, **kw), ensure_ascii=False)


def token_list(trace: Trace, ids, tokenizer) -> list[str]:
    """Token strings for ids: the pieces already in the trace where it has them, the rest decoded one by one as
    ``token_text`` decodes every token of the record (never a stand-in for the string)."""
    known = dict(zip(trace.prompt_ids, trace.prompt_tokens))
    for s in trace.steps:
        known.update(zip(s.top_ids, s.top_tokens))
    missing = [int(i) for i in ids if int(i) not in known]
    known.update(zip(missing, token_text(tokenizer, missing)))
    return [known[int(i)] for i in ids]


def _r(a, nd: int = 4):
    return np.round(np.asarray(a, dtype=np.float64), nd).tolist()


def step_stats(logits_cpu: torch.Tensor, token_id: int, settings: SamplingSettings) -> tuple:
    """Cheap tensor work per step (top-k, chosen probability, entropy); strings are decoded later."""
    probs = logits_cpu.softmax(-1)
    top = torch.topk(probs, TOP_K_RECORD)
    chosen_p = float(probs[token_id]) if settings.temperature == 1.0 and settings.top_k == 0 and \
        settings.top_p >= 1.0 and settings.min_p <= 0.0 else float(sampling_probs(logits_cpu, settings)[token_id])
    return (top.indices.tolist(), top.values.tolist(), chosen_p, entropy_bits(probs),
            logits_cpu[top.indices].float().tolist())


def step_record(lm, index, tokens_in, seconds, kv, token_id, stats, batch_size: int = 1, compiled: bool = False
                ) -> StepRecord:
    """A step's record from what the loop kept while it ran (``stats`` from ``step_stats``); its token strings are
    decoded here, outside the timed pass."""
    top_ids, top_probs, chosen_p, ent, top_logits = stats
    strings = token_text(lm.tokenizer, [token_id, *top_ids])
    return StepRecord(
        index=index, phase="prefill" if index == 0 else "decode", tokens_in=tokens_in, seconds=seconds,
        kv_bytes=kv[0], kv_tokens=kv[1], token_id=token_id, token=strings[0], prob=chosen_p,
        top_ids=tuple(top_ids), top_tokens=tuple(strings[1:]), top_probs=tuple(top_probs), entropy_bits=ent,
        batch_size=int(batch_size), top_logits=tuple(top_logits), compiled=bool(compiled),
    )


def generate_tokens(lm: LoadedModel, ids: list[int], settings: SamplingSettings, max_new_tokens: int, seed: int,
                    stop_at_eos: bool = True, on_step: Callable[[StepRecord], None] | None = None,
                    record: bool = True, on_prefill: Callable[[PrefillMode], None] | None = None, reserve: int = 0):
    """The inference loop: prefill, then decode one token at a time with the KV cache.

    Returns (generated ids, step records, first-step logits on CPU, stop reason). With ``record=False`` only
    the ids are kept and no one watches token by token (the lean loop the decode benchmark compares against
    ``model.generate``): the decode steps run as ``engine.core.unwatched.decode_unwatched``. Token strings
    are decoded after the loop unless ``on_step`` streams records as they happen. ``on_prefill(mode)`` hears how
    the prefill ran (compiled mode: its bucket's graph, or eager and why), off the clock. ``reserve``: a compiled
    model's static cache holds at least this many tokens.
    """
    settings = settings.clamp()
    gen = make_generator(seed)
    stops = eos_ids(lm) if stop_at_eos else set()
    raw: list[tuple] = []
    steps: list[StepRecord] = []
    dev = lm.device
    pick = lambda logits: int(sample(logits, settings, gen))  # noqa: E731

    def keep(i: int, tok: int, logits: torch.Tensor, seconds: float, tokens_in: int = 1) -> None:
        if record:
            raw.append((i, tokens_in, seconds, (kv_bytes(cache), kv_tokens(cache)), tok,
                        step_stats(logits, tok, settings), 1, how.compiled if i == 0 else compiled))
            if on_step is not None:
                steps.append(step_record(lm, *raw[-1]))
                on_step(steps[-1])

    tokens = max(len(ids) + int(max_new_tokens), int(reserve))
    warm_up(lm, tokens)  # compiled mode: its graph for this length is compiled here, before anything is timed
    cache = new_cache(lm, tokens=tokens)
    compiled = served_compiled(lm, cache)
    how = prefill_mode(lm, len(ids), cache)  # decided here, once: the run says how its prefill ran
    t0 = now(dev)
    first_logits = prefill(lm, torch.tensor([ids], device=dev), cache, how)[0].float().cpu()  # [vocab]
    tok = pick(first_logits)
    keep(0, tok, first_logits, now(dev) - t0, len(ids))
    if on_prefill is not None:
        on_prefill(how)
    if tok in stops:
        out, reason = [tok], "eos"
    elif not record:  # no one watches token by token: compiled, the ids stay on the device between reads
        rest = decode_unwatched(lm, tok, cache, max_new_tokens - 1, device_draw(lm, settings, gen), pick, stops)
        out, reason = [tok] + rest.tokens, rest.reason
    else:
        rest, reason = decode(lm, tok, cache, max_new_tokens - 1, lambda i, t, lg, sec: keep(i + 1, t, lg, sec),
                              pick, stops, on_device=device_draw(lm, settings, gen), logits=record)
        out = [tok] + rest
    if record and on_step is None:
        steps = [step_record(lm, *r) for r in raw]
    return out, steps, first_logits, reason


@torch.inference_mode()
def analyse_prompt(lm: LoadedModel, ids: list[int]) -> PromptAnalysis:
    """Untimed look inside one pass over the prompt: attention weights (first ATTN_MAX positions;
    causality makes them identical to a pass over those alone), next-token predictions at every position,
    the residual stream's norm after each block, and the logit lens at the last position."""
    return analyse_prompts(lm, [list(ids)])[0]


@torch.inference_mode()
def analyse_prompts(lm: LoadedModel, prompts: list[list[int]]) -> list[PromptAnalysis]:
    """``analyse_prompt`` for several prompts in one pass (the class worker's requests that finish together).

    Rows are RIGHT-padded and the pass is plainly causal: a real position never sees a later one, so every row's
    real positions compute exactly what a pass over that prompt alone computes (no mask, no position shift), and
    the padding after them is cut off."""
    model, dev = lm.model, lm.device
    n_max = max(len(p) for p in prompts)
    pad = getattr(lm.tokenizer, "pad_token_id", None) or 0
    x = torch.tensor([list(p) + [pad] * (n_max - len(p)) for p in prompts], device=dev)  # [B, P]
    m_max = min(n_max, ATTN_MAX)
    no_attention = lm.info.refused("analysis") or lm.info.refused("attention")
    no_lens = lm.info.refused("lens")  # the final norm and head do not reproduce the logits (engine.core.archfacts)
    with instrument.residual_stream(model) as captured:
        if no_attention:  # a plain pass: its logits and residual stream are right, its attention is not recorded
            logits, att = full_pass(model, x).logits, []
        else:
            logits, att = _analysis_pass(lm, x, m_max)
    n_l = len(arch.blocks(model))
    resid_all = torch.stack([c.float() for c in captured[: n_l + 1]])  # [L+1, B, P, d]
    dtype = next(model.parameters()).dtype
    out = []
    for i, ids in enumerate(prompts):
        n, m = len(ids), min(len(ids), ATTN_MAX)
        resid = resid_all[:, i, :n]  # [L+1, n, d]
        row_logits = logits[i, :n]  # [n, vocab]
        probs = row_logits.float().softmax(-1)  # [n, vocab]
        top = torch.topk(probs, TOP_K_RECORD, dim=-1)
        if no_lens:
            lens_ids, lens_probs, lens_resid = np.zeros((0, 5), np.int64), np.zeros((0, 5), np.float32), None
            final_hidden = torch.full((8,), float("nan"))
        else:
            lens = arch.unembed(model, resid[:, -1].to(dtype)).float().softmax(-1)  # [L+1, vocab]
            # The last entry is the real output: the model applies the final norm itself.
            lens[-1] = probs[-1]
            lens_top = torch.topk(lens, 5, dim=-1)
            lens_ids = lens_top.indices.cpu().numpy()
            lens_probs = lens_top.values.cpu().numpy().astype(np.float32)
            lens_resid = resid[:, -MAX_LENS_POSITIONS:].float().cpu().numpy()  # [L+1, P, d]
            final_hidden = arch.final_norm(model)(resid[-1, -1:].to(dtype))[0]
        attentions = (torch.stack([a[i, :, :m, :m] for a in att]).float().cpu().numpy().astype(np.float16) if att
                      else np.zeros((0, 0, m, m), dtype=np.float16))  # [L, H, m, m]; empty when refused
        out.append(PromptAnalysis(
            top_ids=top.indices.cpu().numpy(),
            top_probs=top.values.cpu().numpy().astype(np.float32),
            attentions=attentions,
            residual_norms=resid.norm(dim=-1).cpu().numpy().astype(np.float32),
            lens_ids=lens_ids,
            lens_probs=lens_probs,
            embedding_preview=resid[0, :, :8].cpu().numpy().astype(np.float32),
            hidden_preview=final_hidden[:8].float().cpu().numpy(),
            positions=predictions_from_logits(list(ids), row_logits),
            lens_resid=lens_resid,
        ))
    return out


def _analysis_pass(lm: LoadedModel, x: torch.Tensor, m: int):
    """One plain forward pass over the prompt that also records every layer's attention weights (first ``m``
    positions). The measuring attention installed at load (engine.core.instrument) is switched on for this pass
    only; the model itself is not changed. A model loaded without SDPA runs eager attention and returns them.
    At load (engine.core.archfacts.check_analysis) this pass was compared with a plain one for this architecture."""
    from engine.core.archfacts import analysis_pass

    return analysis_pass(lm.model, x, m)


def run_trace(lm: LoadedModel, prompt: str, settings: SamplingSettings = SamplingSettings(), max_new_tokens: int = 16,
              seed: int = 0, use_chat_template: bool = True, on_step: Callable[[StepRecord], None] | None = None,
              analyse: bool = True, max_prompt_tokens: int = MAX_PROMPT_TOKENS) -> Trace:
    """Run prefill and the decode loop for (model, prompt, settings, seed) and record everything."""
    max_new_tokens = int(min(max(max_new_tokens, 1), MAX_NEW_TOKENS))
    settings = settings.clamp()
    enc = encode_prompt(lm.tokenizer, prompt, use_chat_template, max_tokens=max_prompt_tokens)
    heard: list[PrefillMode] = []
    n = len(enc.ids)  # compiled mode: a static cache that its prompt's bucket fits (as run_graphs compiles for)
    ids, steps, first_logits, reason = generate_tokens(lm, list(enc.ids), settings, max_new_tokens, seed,
                                                       on_step=on_step, on_prefill=heard.append,
                                                       reserve=run_tokens(lm, n, n + max_new_tokens))
    analysis = analyse_prompt(lm, list(enc.ids)) if analyse else None
    return build_trace(lm, prompt, enc, settings, seed, max_new_tokens, ids, steps, first_logits, reason, analysis,
                       prefill_mode=heard[0].line)


def warm_run(lm: LoadedModel, prompt: str, max_new_tokens: int = 16, use_chat_template: bool = True,
             max_prompt_tokens: int = MAX_PROMPT_TOKENS) -> None:
    """Compiled mode, before ``run_trace`` on the command line: the run's decode graph and its prompt's prefill
    bucket compiled here, untimed (engine.core.background_compile.run_graphs). Not for the engine's worker: the app
    compiles them on the background compiler. Raises PromptError as ``run_trace`` does."""
    from engine.core.background_compile import run_graphs

    n = len(encode_prompt(lm.tokenizer, prompt, use_chat_template, max_tokens=max_prompt_tokens).ids)
    for _, fn, args in run_graphs(lm, n, n + int(min(max(max_new_tokens, 1), MAX_NEW_TOKENS))):
        fn(*args)


def build_trace(lm: LoadedModel, prompt: str, enc: EncodedPrompt, settings: SamplingSettings, seed: int,
                max_new_tokens: int, ids: list[int], steps, first_logits: torch.Tensor, reason: str,
                analysis: PromptAnalysis | None, timed_in_batcher: bool = False, prefill_mode: str = "") -> Trace:
    """The immutable record of one run (alone: ``run_trace``; in a batch: ``engine.jobs.classbatch``)."""
    return Trace(
        model=lm.ref, info=lm.info, prompt=prompt, encoded=enc, settings=settings, seed=int(seed),
        max_new_tokens=max_new_tokens,
        prompt_tokens=tuple(token_text(lm.tokenizer, enc.ids)), generated_ids=tuple(ids),
        generated_tokens=tuple(token_text(lm.tokenizer, ids)),
        generated_text=lm.tokenizer.decode(ids, clean_up_tokenization_spaces=False), stop_reason=reason,
        steps=tuple(steps), first_logits=first_logits.numpy().astype(np.float32), analysis=analysis,
        timed_in_batcher=timed_in_batcher, prefill_mode=prefill_mode,
    )
