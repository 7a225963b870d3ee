"""Attention: patterns and their cost (analysis), the logit lens (lens), ``bench attention`` (bench)."""

# here, not in analysis, so ``bench attention --help`` needs no torch
DEFAULT_LENGTHS = (32, 64, 128, 256, 512)  # prompt lengths (tokens) whose prefill cost is measured
