"""The inference engine (PyTorch + transformers, no UI)."""
from engine.measure.threads import set_wait_policy_env

set_wait_policy_env()  # before anything imports torch: OpenMP reads its wait policy once, when it loads
