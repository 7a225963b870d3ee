"""A run that travels: one saved file per run (``format``; its values' codec and error: ``values``; its fields
checked against each other: ``consistency``), built from the engine's records (``build``; a race's
numbers through ``speculative``), checked again on another machine (``verify``); its self-contained replay page is the UI's
(ui/record/replay.py); docs/record-format.md."""
