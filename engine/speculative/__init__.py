"""Speculative decoding (Leviathan et al. 2023; p = target, q = draft): the algorithm, its records and the race of
plain against speculative decoding (decoding), the drafters (drafters), the ``python -m engine race`` command (cli),
``bench specdec`` (bench)."""

MAX_K = 16  # the longest draft of one round; here, not in decoding, so the command line's help needs no torch
