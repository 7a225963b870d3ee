"""Display values of the embeddings page: words derived from the engine's records. Pure: no st.*."""
from __future__ import annotations

from engine.embeddings.analysis import PCA_METHOD


def pca_caption(emap) -> str:
    """What the vocabulary map is and how far to trust it."""
    return (f"{PCA_METHOD}, over {len(emap.sample_ids):,} vocabulary rows drawn at random (seed {emap.seed}); the "
            "prompt's tokens are projected onto the same two axes. Two axes keep only a small part of the picture: "
            "closeness here is a hint, the cosine numbers are the truth.")
