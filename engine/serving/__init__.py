"""Serving engines (vLLM, SGLang, llama.cpp's server, and others) measured from outside, over their OpenAI-compatible
HTTP API: ``client`` (requests, streaming, clear errors), ``measure`` (timeline, sweeps, next-token
distribution), ``metrics`` (Prometheus /metrics), ``probe`` (what a server offers), ``bench`` (the
``python -m engine serve-bench`` command). No torch, no streamlit."""
