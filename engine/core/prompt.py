"""From what a person typed to the token ids the model receives (chat template, limits, messages)."""
from __future__ import annotations

from dataclasses import dataclass

MAX_PROMPT_CHARS = 20_000  # longer text is cut before tokenizing (a 50,000-character paste stays fast)
MAX_PROMPT_TOKENS = 512  # the app's prompt budget on a CPU; the model itself allows more


class PromptError(ValueError):
    """The prompt cannot be run; the message is written for the person who typed it."""


@dataclass(frozen=True)
class EncodedPrompt:
    text: str  # exactly the text the model receives, chat template included
    ids: tuple[int, ...]
    chat_applied: bool
    truncated: bool
    notes: tuple[str, ...]  # things the user should be told (truncation, no chat template)


def token_text(tokenizer, ids) -> list[str]:
    """Each token decoded on its own (a piece of a multi-byte character decodes to U+FFFD)."""
    return [tokenizer.decode([int(i)], clean_up_tokenization_spaces=False) for i in ids]


def encode_prompt(tokenizer, prompt: str, use_chat_template: bool = True, max_tokens: int = MAX_PROMPT_TOKENS,
                  reserve: int = 0) -> EncodedPrompt:
    """Apply the chat template (if asked and the model has one), enforce the token budget, tokenize.

    ``reserve`` tokens are kept free for generation. Raises PromptError for an empty prompt.
    """
    prompt = "" if prompt is None else str(prompt).replace("\x00", "")
    if not prompt.strip():
        raise PromptError("The prompt is empty. Type some text in the sidebar to run the model.")
    notes: list[str] = []
    truncated = False
    if len(prompt) > MAX_PROMPT_CHARS:
        prompt = prompt[:MAX_PROMPT_CHARS]
        truncated = True
    budget = max(8, max_tokens - reserve)
    user_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    if len(user_ids) > budget:
        prompt = tokenizer.decode(user_ids[:budget], clean_up_tokenization_spaces=False)
        truncated = True
    if truncated:
        notes.append(f"The prompt was long, so only its first {budget} tokens are used "
                     f"(this app's limit on a CPU; the model allows more).")
    chat = False
    if use_chat_template:
        if getattr(tokenizer, "chat_template", None):
            text = tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
            )
            chat = True
        else:
            text = prompt
            notes.append("This model has no chat template, so the prompt is used as plain text.")
    else:
        text = prompt
    ids = tokenizer(text, add_special_tokens=not chat)["input_ids"]
    if not ids:
        raise PromptError("The prompt produced no tokens.")
    return EncodedPrompt(text, tuple(int(i) for i in ids), chat, truncated, tuple(notes))
