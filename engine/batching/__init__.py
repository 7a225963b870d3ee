"""Batching: static vs continuous serving (experiment), ``bench batching`` (bench), ``bench classroom``
(bench_classroom)."""
