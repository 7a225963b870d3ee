"""A run that travels: one saved file per run (``format``), built from the engine's records (``build``; a race's
numbers through ``speculative``), replayed as a self-contained page (``replay``) and checked again on another machine
(``verify``); docs/record-format.md."""
