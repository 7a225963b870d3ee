"""Attention: patterns and their cost (analysis), the logit lens (lens), ``bench attention`` (bench)."""
