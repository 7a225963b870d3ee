"""The peer of the compiled engine mode: transformers' own static KV cache + torch.compile (``generate`` with
``cache_implementation="static"``, its default compile config: mode "reduce-overhead"), on the app's model in
bfloat16 and float32. Per dtype: ms per new token (the time of a 64-token generate minus a 2-token one, over 62;
medians of repeats, after warm-ups that compile), and every reason inductor logged for skipping CUDA graphs, with the
stack it found (on an H100 its bfloat16 graphs were skipped for "mutated inputs": the reason the app's compiled mode keeps its own static caches).

    python scripts/gpu_hf_compile.py OUT.json [MODEL]"""
from __future__ import annotations

import json
import logging
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import engine  # noqa: E402,F401  before torch: the engine's thread policy
import torch  # noqa: E402
from transformers import GenerationConfig  # noqa: E402

from engine.core.loaded import ModelRef  # noqa: E402
from engine.models.loading import load_model  # noqa: E402
from engine.measure.timing import now  # noqa: E402


class Skips(logging.Handler):
    """Every log record that says a CUDA graph was skipped or disabled."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record):
        msg = record.getMessage()
        if "cudagraph" in msg.lower():
            self.messages.append(msg[:2000])


def one_dtype(name: str, precision: str, skips: Skips) -> dict:
    from torch._dynamo.utils import counters

    lm = load_model(ModelRef(name, precision or ""))
    ids = torch.tensor([lm.tokenizer("The capital of France is")["input_ids"]], device=lm.device)

    def gen(n: int) -> float:
        cfg = GenerationConfig(max_new_tokens=n, do_sample=False, cache_implementation="static",
                               pad_token_id=lm.tokenizer.pad_token_id, eos_token_id=[])
        t0 = now(lm.device)
        with torch.inference_mode():
            lm.model.generate(ids, generation_config=cfg, attention_mask=torch.ones_like(ids))
        return now(lm.device) - t0

    before, first = len(skips.messages), counters["inductor"]["cudagraph_skips"]
    for _ in range(3):  # compiles, records the CUDA graphs, replays
        gen(8)
    long_, short = [], []
    for _ in range(3):
        long_.append(gen(64))
        short.append(gen(2))
    ms = (statistics.median(long_) - statistics.median(short)) / 62 * 1000.0
    return {"precision": precision, "ms_per_token": ms, "tokens_per_s": 1000.0 / ms,
            "cudagraph_skips": counters["inductor"]["cudagraph_skips"] - first,
            "skip_messages": skips.messages[before:]}


def main(out: str, name: str = "embedded") -> int:
    torch._logging.set_logs(perf_hints=True)  # where inductor says why it skipped CUDA graphs
    skips = Skips()
    logging.getLogger("torch").addHandler(skips)
    rows = []
    for precision in ("bfloat16", "float32"):
        try:
            rows.append(one_dtype(name, precision, skips))
        except Exception as exc:  # noqa: BLE001 - one dtype failing is a result, the other still runs
            rows.append({"precision": precision, "error": f"{type(exc).__name__}: {str(exc)[:500]}"})
        print(json.dumps(rows[-1])[:600], flush=True)
    Path(out).write_text(json.dumps({"benchmark": "hf-static-compile", "model": name, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:]))
