"""The inference engine (PyTorch + transformers, no UI)."""
import os

from engine import settings
from engine.core import logs
from engine.measure.threads import set_wait_policy_env


def _point_compiled_kernel_cache() -> None:
    """torch.compile keeps compiled kernels on disk (its FX graph and AOTAutograd caches) in TORCHINDUCTOR_CACHE_DIR,
    by default a folder in the system's temporary directory, which a reboot or a clean-up empties. Point it beside
    the converted models, so a later start compiles from it (tens of seconds on a busy 2-core CPU, not minutes). It
    must be set before the first model loads: loading one makes torch write its default into the variable. A value
    the user set wins; a cache folder that cannot be written leaves torch's default."""
    if settings.TORCHINDUCTOR_CACHE_DIR.is_set():
        return
    folder = settings.cache_dir() / "torchinductor"
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.is_dir() and os.access(existing, os.W_OK):
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(folder)  # torch makes the folder when it first writes


logs.attach("engine")  # every engine module logs to logging.getLogger(__name__): one stderr handler
set_wait_policy_env()  # before anything imports torch: OpenMP reads its wait policy once, when it loads
_point_compiled_kernel_cache()
