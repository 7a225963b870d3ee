"""Prefill vs decode: the timeline experiment (experiment), ``bench timeline`` (bench) and ``bench decode``
(bench_decode)."""
