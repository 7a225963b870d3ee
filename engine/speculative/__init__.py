"""Speculative decoding (Leviathan et al. 2023; p = target, q = draft): the algorithm and its records
(decoding), the drafters (drafters), plain vs speculative race (race), ``bench specdec`` (bench)."""
