"""Precision: float32 vs bfloat16 vs int8 measured (experiment), ``bench precision`` (bench). Load-time
quantization is in engine.models.precision."""

# here, not in experiment, so ``bench precision --help`` needs no torch
PROMPT = "Explain in two sentences why the sky is blue."  # the prompt whose prefill and decode are timed
