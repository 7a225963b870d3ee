"""Command-line arguments shared by the commands that run the loop (trace, race)."""
from __future__ import annotations


def add_run_arguments(p, max_new_tokens: int = 16) -> None:
    """--prompt, --max-new-tokens, the sampling settings, --seed and --no-chat-template."""
    p.add_argument("--prompt", required=True)
    p.add_argument("--max-new-tokens", type=int, default=max_new_tokens)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-k", type=int, default=0, help="0 = off")
    p.add_argument("--top-p", type=float, default=1.0, help="1 = off")
    p.add_argument("--min-p", type=float, default=0.0, help="0 = off")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-chat-template", action="store_true")
