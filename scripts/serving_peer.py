"""Is the serving page's tokens/s plausible? The same GGUF, the same prompt and token count, measured two ways in
one run: through llama-cpp-python's HTTP server (engine.serving, streamed over 127.0.0.1) and in-process with
llama_cpp.Llama (no HTTP). Prints medians and the ratio; quote the ratio, with the load average it prints.

    python scripts/serving_peer.py [--repeats 5] [--new-tokens 64] [--prompt-tokens 64]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # the same for both sides (see tests/serving_servers.py)

from engine.models import catalog, packaged  # noqa: E402
from engine.serving import config as K  # noqa: E402
from engine.serving import measure as Me  # noqa: E402
from tests.serving_servers import LlamaServer  # noqa: E402


def in_process(llm, prompt: str, n: int) -> tuple[float, float]:
    """(TTFT s, decode tokens/s) streaming from llama_cpp.Llama: exactly n tokens (EOS suppressed like the server's
    min_tokens), decode rate = (n - 1) / (last token - first token), the formula the serving page uses."""
    import llama_cpp

    lp = llama_cpp.LogitsProcessorList([llama_cpp.MinTokensLogitsProcessor(n, llm.token_eos())])
    llm.reset()
    t0 = time.perf_counter()
    times = []
    for _ in llm.create_completion(prompt, max_tokens=n, temperature=0.0, stream=True, logits_processor=lp):
        times.append(time.perf_counter() - t0)
    return times[0], (len(times) - 1) / (times[-1] - times[0])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    a = ap.parse_args()
    import llama_cpp

    gguf = packaged.gguf_path(catalog.row(catalog.EMBEDDED))
    load_before = os.getloadavg()
    server = LlamaServer(gguf)
    try:
        cfg = K.ServerConfig(server.base_url, server.model)
        Me.measure_request(cfg, Me.unique_prompt(16, "warm"), 4)
        http = []
        for r in range(a.repeats):
            tl = Me.measure_request(cfg, Me.unique_prompt(a.prompt_tokens, f"s{r}"), a.new_tokens)
            http.append((tl.ttft_s, tl.decode_tok_s))
    finally:
        server.stop()
    llm = llama_cpp.Llama(str(gguf), n_threads=2, n_threads_batch=2, n_ctx=4096, verbose=False)
    in_process(llm, Me.unique_prompt(16, "warm"), 4)
    local = [in_process(llm, Me.unique_prompt(a.prompt_tokens, f"p{r}"), a.new_tokens) for r in range(a.repeats)]
    med = lambda xs, i: statistics.median(x[i] for x in xs)  # noqa: E731
    out = {
        "new_tokens": a.new_tokens, "prompt_tokens_about": a.prompt_tokens, "repeats": a.repeats,
        "server_decode_tok_s": med(http, 1), "in_process_decode_tok_s": med(local, 1),
        "server_ttft_ms": med(http, 0) * 1000, "in_process_ttft_ms": med(local, 0) * 1000,
        "ratio_server_over_in_process": med(http, 1) / med(local, 1),
        "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
