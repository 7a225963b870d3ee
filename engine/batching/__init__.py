"""Batching: static vs continuous serving (experiment), ``bench batching`` (bench), ``bench classroom``
(bench_classroom); the request trace (workload) and what a run measured (records), both torch-free."""

# compiled mode: the bench and the page say this in one line and run eager; here, not in experiment, so
# ``bench batching --help`` needs no torch
EAGER_BECAUSE = ("batched decode steps (their size and padding change every round) run eager")
