"""What every page shares: boot (first imports), sidebar, settings and URL state (state), navigation (nav),
layout, errors, html helpers, lessons, styles, the caches (cache, models, runs), kept results after a button
(kept, measured), the worker client (work) and the shared chart look (figures)."""
