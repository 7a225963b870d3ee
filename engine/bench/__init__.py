"""Benchmarks that compare against a peer measured in the same run: ``python -m engine bench NAME``.

Each module has ``run(lm, args) -> dict`` and optional ``add_arguments(parser)`` and ``summary(result) -> str``."""
