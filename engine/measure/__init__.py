"""Measurement helpers: clocks (timing), the CPU thread policy (threads, bench_threads), the noise guard
(noise) and spreads of repeated measurements (spread)."""
