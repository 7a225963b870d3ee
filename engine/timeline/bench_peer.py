"""The decode benchmark's peer (``bench decode --modes ... --peer transformers``): transformers' own recipe for a fast
decode step, ``model.generate`` with a static cache and ``torch.compile`` of the model's forward (its
``CompileConfig``; on a GPU ``mode="reduce-overhead"``, CUDA graphs), measured in the same run as the engine's modes.

``generate`` times its prefill and decode together, so the decode step is derived from two runs on the same prompt and
the same static cache: (seconds for n new tokens - seconds for 1) / (n - 1), medians of the repeats. One static cache
length for every prompt (the engine's rule: engine.core.compile_record.cache_length), so one compiled graph and no compile
inside a timed run. Compiling sets transformers' compiled call on the model object: the benchmark's own process only.
"""
from __future__ import annotations

import statistics

import torch

from engine.core.compile_record import cache_length
from engine.measure.threads import pass_threads
from engine.measure.timing import now


class TransformersPeer:
    """transformers' static cache + torch.compile on ``lm``'s model, for runs of up to ``tokens`` tokens."""

    def __init__(self, lm, tokens: int):
        from transformers import StaticCache

        self.lm = lm
        length = cache_length(tokens, lm.info.max_positions) or int(tokens)
        self.cache = StaticCache(config=lm.model.config, max_cache_len=length)
        self.decode_ms: list[float] = []

    def _config(self, n: int):
        from transformers import GenerationConfig
        from transformers.generation.configuration_utils import CompileConfig

        on_gpu = self.lm.device.type == "cuda"
        compile_config = CompileConfig(fullgraph=True, dynamic=False, mode="reduce-overhead" if on_gpu else "default")
        compile_config._compile_all_devices = True  # transformers compiles on CUDA only unless told
        # EOS: an empty list stops nothing (as engine.timeline.bench_decode's generate run)
        return GenerationConfig(max_new_tokens=n, do_sample=False, pad_token_id=self.lm.tokenizer.pad_token_id,
                                eos_token_id=[], cache_implementation=None, compile_config=compile_config)

    @torch.inference_mode()
    def run(self, ids: list[int], n: int) -> tuple[float, list[int]]:
        """(seconds, new token ids) of one greedy ``generate`` of ``n`` tokens on the static cache, emptied first."""
        self.cache.reset()
        x = torch.tensor([ids], device=self.lm.device)  # [1, P]
        t0 = now(self.lm.device)
        # the engine's thread rule for a one-token step, around the whole call: a per-pass hook would break the
        # compiled graph, and the prefill's time cancels out of the derived step
        with pass_threads(1, self.lm.device):
            out = self.lm.model.generate(x, generation_config=self._config(n), attention_mask=torch.ones_like(x),
                                         past_key_values=self.cache)
        return now(self.lm.device) - t0, out[0, len(ids):].tolist()

    def warm_up(self, ids: list[int], n: int) -> None:
        for _ in range(2):  # the first compiles the decode step, the second runs it (on CUDA records its graph)
            self.run(ids, n)
            self.run(ids, 1)

    def time(self, ids: list[int], n: int) -> list[int]:
        """One timed pair of runs; keeps the derived decode step (ms) and returns the n tokens."""
        t_n, out = self.run(ids, n)
        t_1, _ = self.run(ids, 1)
        self.decode_ms.append((t_n - t_1) / max(1, n - 1) * 1000.0)
        return out

    def row(self, eager_ms: float) -> dict:
        """The peer's row; a derived step that is not positive (the two runs' difference lost in the machine's noise:
        seen at load 12 on 2 cores with the tiny model) is no measurement, so it is flagged and carries no number."""
        ms = statistics.median(self.decode_ms)
        derived = "(generate of n tokens - generate of 1) / (n - 1), median over prompts and repeats"
        samples = [round(v, 4) for v in self.decode_ms]
        if ms <= 0:
            return {"decode_ms_per_token": None, "tokens_per_s": None, "ratio_to_eager": None, "derived": derived,
                    "samples_ms": samples,
                    "flag": f"not measured: the derived step came out {ms:.3f} ms (its two runs differ by less than "
                            "the machine's noise)"}
        return {"decode_ms_per_token": ms, "tokens_per_s": 1000.0 / ms, "ratio_to_eager": eager_ms / ms,
                "derived": derived, "samples_ms": samples}
