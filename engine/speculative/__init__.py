"""Speculative decoding (Leviathan et al. 2023; p = target, q = draft): the algorithm and the race of plain against
speculative decoding (decoding), what a race measured and the paper's formula (records), the drafters (drafters), the
``python -m engine race`` command (cli), ``bench specdec`` (bench)."""

# here, not in decoding, so the command line's help needs no torch
MAX_K = 16  # the longest draft of one round

PASSAGE = (
    "The lighthouse at Hook Head has guided ships for more than eight hundred years. Monks kept a fire burning "
    "on the headland long before the tower was built, and the stone walls are four metres thick at the base. "
    "In 1996 the light was automated, and the keepers left the tower for the last time. Today visitors climb "
    "the 115 steps to the balcony, where on a clear day they can see the coast of Wales."
)

# The race's prompts, (name, kind, prompt): "extractive" tasks copy from the passage; "open" ones do not.
PROMPTS = [
    ("rewrite", "extractive", f"Rewrite the following passage in plain English, keeping every fact:\n\n{PASSAGE}"),
    ("quote", "extractive", f"Quote the following passage exactly, word for word:\n\n{PASSAGE}"),
    ("summarise", "extractive", f"Summarise the following passage in three sentences:\n\n{PASSAGE}"),
    ("story", "open", "Write a short story about a cat who learns to sail."),
    ("explain", "open", "Explain why the sky is blue."),
]
