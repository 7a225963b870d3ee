"""Precision: float32 vs bfloat16 vs int8 measured (experiment), ``bench precision`` (bench). Load-time
quantization is in engine.models.precision."""
