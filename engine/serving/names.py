"""What each serving engine calls the quantities this app reads, per engine and version, in one table.

A row says where its names come from: ``checked`` rows are asserted against a real server in the tests
(tests/engine/test_llama_server.py starts llama.cpp's ``llama-server`` built from the llama.cpp that
llama-cpp-python 0.3.36 vendors and compares its /metrics, /slots and ``timings`` with this table, so the test
fails when the server's names change); the other rows are read from each engine's documentation and say so.

A quantity a row leaves out (None) is one that engine does not export: the page says it is missing, never
draws it as 0. llama.cpp's current server has no KV-usage gauge at all; the page reads each slot's cached tokens
from /slots instead (``SLOTS_FIELDS``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

QUANTITIES = {
    "kv_usage": "KV-cache usage (0..1)",
    "running": "running requests",
    "waiting": "waiting (deferred) requests",
    "prompt_tokens": "prompt tokens processed (counter)",
    "generated_tokens": "tokens generated (counter)",
    "spec_drafts": "speculative drafts (verification steps, counter)",
    "spec_draft_tokens": "drafted tokens (counter)",
    "spec_accepted": "accepted drafted tokens (counter)",
    "spec_accepted_per_pos": "accepted tokens per draft position (counter, label 'position')",
    "spec_accept_length": "mean accepted length (gauge)",
}


@dataclass(frozen=True)
class EngineNames:
    engine: str
    version: str
    source: str  # "checked against a real server (test name)" or "documentation"
    names: dict  # quantity -> metric family name (counters without '_total'); missing = not exported
    exports: tuple[str, ...] = ()  # for checked rows: every metric name the server writes in '# TYPE' lines
    checked: bool = False
    extra: dict = field(default_factory=dict)  # endpoint/field names beside /metrics

    def name(self, quantity: str) -> str | None:
        return self.names.get(quantity)


LLAMA_CPP = EngineNames(
    "llama.cpp server", "llama-server from the llama.cpp that llama-cpp-python 0.3.36 vendors (ggml 0.25.3)",
    "checked against a real llama-server in tests/engine/test_llama_server.py",
    {"running": "llamacpp:requests_processing", "waiting": "llamacpp:requests_deferred",
     "prompt_tokens": "llamacpp:prompt_tokens", "generated_tokens": "llamacpp:tokens_predicted",
     "spec_drafts": "llamacpp:spec_decode_num_drafts", "spec_draft_tokens": "llamacpp:spec_decode_num_draft_tokens",
     "spec_accepted": "llamacpp:spec_decode_num_accepted_tokens",
     "spec_accepted_per_pos": "llamacpp:spec_decode_num_accepted_tokens_per_pos"},
    exports=("llamacpp:prompt_tokens_total", "llamacpp:prompt_tokens_cached_total", "llamacpp:prompt_seconds_total",
             "llamacpp:tokens_predicted_total", "llamacpp:tokens_predicted_seconds_total",
             "llamacpp:n_decode_total", "llamacpp:n_tokens_max", "llamacpp:spec_decode_num_draft_tokens_total",
             "llamacpp:spec_decode_num_accepted_tokens_total", "llamacpp:spec_decode_num_drafts_total",
             "llamacpp:prompt_tokens_seconds", "llamacpp:predicted_tokens_seconds", "llamacpp:requests_processing",
             "llamacpp:requests_deferred", "llamacpp:n_busy_slots_per_decode"),
    checked=True,
    extra={"per_pos_export": "llamacpp:spec_decode_num_accepted_tokens_per_pos_total",  # only once it drafted
           "kv_usage": "/slots: tokens cached per slot / its context (no gauge in /metrics)"},
)
LLAMA_CPP_OLD = EngineNames(
    "llama.cpp server", "older builds (before the KV gauges were removed)", "documentation",
    {"kv_usage": "llamacpp:kv_cache_usage_ratio", "running": "llamacpp:requests_processing",
     "waiting": "llamacpp:requests_deferred"})
VLLM_V1 = EngineNames(
    "vLLM", "v1 engine", "documentation",
    {"kv_usage": "vllm:kv_cache_usage_perc", "running": "vllm:num_requests_running",
     "waiting": "vllm:num_requests_waiting", "prompt_tokens": "vllm:prompt_tokens",
     "generated_tokens": "vllm:generation_tokens", "spec_drafts": "vllm:spec_decode_num_drafts",
     "spec_draft_tokens": "vllm:spec_decode_num_draft_tokens",
     "spec_accepted": "vllm:spec_decode_num_accepted_tokens",
     "spec_accepted_per_pos": "vllm:spec_decode_num_accepted_tokens_per_pos"})
VLLM_V0 = EngineNames(
    "vLLM", "v0 engine", "documentation",
    {"kv_usage": "vllm:gpu_cache_usage_perc", "running": "vllm:num_requests_running",
     "waiting": "vllm:num_requests_waiting", "prompt_tokens": "vllm:prompt_tokens",
     "generated_tokens": "vllm:generation_tokens"})
SGLANG = EngineNames(
    "SGLang", "--enable-metrics", "documentation",
    {"kv_usage": "sglang:token_usage", "running": "sglang:num_running_reqs", "waiting": "sglang:num_queue_reqs",
     "prompt_tokens": "sglang:prompt_tokens", "generated_tokens": "sglang:generation_tokens",
     "spec_accept_length": "sglang:spec_accept_length"})
TGI = EngineNames(
    "TGI", "text-generation-inference (in maintenance mode since December 2025)", "documentation",
    {"running": "tgi_batch_current_size", "waiting": "tgi_queue_size"})

TABLE: tuple[EngineNames, ...] = (VLLM_V1, VLLM_V0, SGLANG, LLAMA_CPP, LLAMA_CPP_OLD, TGI)
PREFIXES = {"vllm:": "vLLM", "sglang:": "SGLang", "llamacpp:": "llama.cpp server", "tgi_": "TGI"}

# llama.cpp's per-request ``timings`` (in the last streamed event) and each slot's entry in /slots: checked
# against the real server like the table above.
TIMINGS_FIELDS = ("cache_n", "prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second", "predicted_n",
                  "predicted_ms", "predicted_per_token_ms", "predicted_per_second")
TIMINGS_SPEC_FIELDS = ("draft_n", "draft_n_accepted")  # only when the request drafted
SLOTS_FIELDS = ("id", "n_ctx", "speculative", "is_processing")
SLOTS_TASK_FIELDS = ("id_task", "n_prompt_tokens", "n_prompt_tokens_processed", "n_prompt_tokens_cache",
                     "next_token")  # once the slot has served a request


def names_for(quantity: str) -> tuple[str, ...]:
    """Every name known for ``quantity``, in table order, each once (first match wins when reading)."""
    out: list[str] = []
    for row in TABLE:
        n = row.name(quantity)
        if n and n not in out:
            out.append(n)
    return tuple(out)


def rows() -> list[dict]:
    """The table as rows for display: engine, version, where the names come from, then one column per quantity."""
    return [{"engine": r.engine, "version": r.version, "names from": r.source,
             **{label: r.name(q) or r.extra.get(q) or "not exported" for q, label in QUANTITIES.items()}}
            for r in TABLE]
