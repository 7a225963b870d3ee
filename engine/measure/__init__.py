"""Measurement helpers: clocks (timing), the CPU thread policy (threads), a busy program beside a measurement (busy), the noise guard
(noise) and spreads of repeated measurements (spread)."""
