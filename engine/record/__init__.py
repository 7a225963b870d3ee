"""A run that travels: one saved file per run (``format``), built from the engine's records (``build``; a race's
numbers through ``speculative``), checked again on another machine (``verify``); its self-contained replay page is the UI's
(ui/record/replay.py); docs/record-format.md."""
