"""Prefill vs decode: the timeline experiment (experiment), ``bench timeline`` (bench) and ``bench decode``
(bench_decode).

The constants below are here, not in experiment, so the benchmarks' ``--help`` needs no torch."""

SWEEP_LENGTHS = (16, 64, 128, 256, 512)  # the prompt-length sweep's lengths (tokens), before it extends itself
PROMPT = "Explain in two sentences why the sky is blue."  # the benchmarks' prompt for one prefill and decode step
