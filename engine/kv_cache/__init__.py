"""The KV cache: what the cache holds (snapshot), model presets for the calculator (presets), paged
allocation (paging), ``bench kv`` (bench)."""
