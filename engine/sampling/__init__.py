"""Logits and sampling: the sampling path stage by stage (stages), per-position predictions (positions), the
person-driven stepper (stepper). The sampling settings and filters themselves are in engine.core.sampling."""
