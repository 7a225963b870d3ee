"""The loop's core, shared by every topic: models (loading, names, the tiny random one, Gemma's background
conversion), the architecture facts (arch, archfacts), the loop itself (loop: the one door to the model), the
Trace record (trace), the engine worker (worker), instrumentation hooks (instrument), prompts, sampling, KV
accounting (kv), load-time precision (precision, smoothing) and class-mode batched analyses (classbatch)."""
