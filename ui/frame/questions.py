"""The choices of each lesson's "Try this" question, read from its lesson file, and how the right one is decided.

A question's section ``## <name>`` (e.g. ``## try this``) gets a companion ``## <name> choices`` in the same file,
plain markdown a teacher can edit or translate, the keys before the colons and the rule's line kept as they are::

    ## try this choices
    - narrower: Much narrower than the decode bars together
    - as wide: About as wide
    - wider: Wider
    decided by: measured prefill_vs_decode

``decided by: measured <rule>`` names a rule of engine/predictions/grading.py (this run's numbers decide);
``decided by: fact <key>`` names the right choice of a question whose answer does not depend on the run.
Pure functions of the text: no Streamlit.
"""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from functools import lru_cache

from engine.predictions.grading import RULES
from ui.frame.lessons import LESSONS, sections

SUFFIX = " choices"
_CHOICE = re.compile(r"^\s*[-*]\s+([a-z0-9][a-z0-9 _-]{0,23})\s*:\s*(\S.*)$")
_RULE = re.compile(r"^\s*decided by\s*:\s*(measured|fact)\s+(\S.*?)\s*$", re.IGNORECASE)
MAX_CHOICES = 4


class Decider(enum.Enum):
    MEASURED = "measured"  # a grading rule decides it from this run's numbers
    FACT = "fact"  # the lesson file names the right choice


@dataclass(frozen=True)
class Choice:
    key: str
    text: str


@dataclass(frozen=True)
class Question:
    id: str  # "<topic>.<section, spaces as hyphens>", e.g. "timeline.try-this": the tally's key and the ?q= value
    topic: str
    section: str
    choices: tuple[Choice, ...]
    decider: Decider
    rule: str  # the grading rule's name (MEASURED) or the right choice's key (FACT)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(c.key for c in self.choices)

    def text_of(self, key: str) -> str:
        return next((c.text for c in self.choices if c.key == key), key)


class LessonError(ValueError):
    """A choices section that cannot be used: the message names the file, the section and what is wrong."""


def parse(topic: str, section: str, text: str) -> Question:
    """A question from the text of its choices section; raises LessonError with one clear line when it is not
    2-4 distinct choices and one rule that decides among them."""
    where = f"assets/lessons/{topic}.md, ## {section}{SUFFIX}"
    choices, rule = [], None
    for line in text.splitlines():
        if not line.strip():
            continue
        if m := _CHOICE.match(line):
            choices.append(Choice(m.group(1).strip().lower(), m.group(2).strip()))
        elif m := _RULE.match(line):
            rule = (Decider(m.group(1).lower()), m.group(2).strip().lower())
        else:
            raise LessonError(f"{where}: a line is neither a choice (\"- key: text\") nor \"decided by: ...\": "
                              f"{line.strip()[:60]!r}")
    keys = [c.key for c in choices]
    if not 2 <= len(choices) <= MAX_CHOICES:
        raise LessonError(f"{where}: {len(choices)} choices; a question has 2 to {MAX_CHOICES}.")
    if len(set(keys)) != len(keys):
        raise LessonError(f"{where}: two choices have the same key.")
    if rule is None:
        raise LessonError(f"{where}: no \"decided by: measured <rule>\" or \"decided by: fact <key>\" line.")
    decider, name = rule
    if decider is Decider.FACT and name not in keys:
        raise LessonError(f"{where}: the fact {name!r} is not one of the choices {keys}.")
    if decider is Decider.MEASURED:
        if name not in RULES:
            raise LessonError(f"{where}: no grading rule {name!r} (known: {', '.join(sorted(RULES))}).")
        if set(RULES[name].answers) != set(keys):
            raise LessonError(f"{where}: the rule {name!r} decides among {list(RULES[name].answers)}, the choices are "
                              f"{keys}.")
    return Question(f"{topic}.{section.replace(' ', '-')}", topic, section, tuple(choices), decider, name)


def question(topic: str, section: str) -> Question | None:
    """The question of ``## <section>`` in ``topic``'s lesson file, or None when it has no choices section."""
    text = sections(topic).get(f"{section.lower()}{SUFFIX}")
    return None if text is None else parse(topic, section.lower(), text)


@lru_cache(maxsize=1)
def all_questions() -> dict[str, Question]:
    """Every question with choices in assets/lessons, by id (the tally accepts only these)."""
    out = {}
    for path in sorted(LESSONS.glob("*.md")):
        for name in sections(path.stem):
            if name.endswith(SUFFIX):
                q = question(path.stem, name[: -len(SUFFIX)])
                out[q.id] = q
    return out


def by_id(qid: object) -> Question | None:
    """The question a ``?q=`` value or a tally key names, or None for anything else (a forged value)."""
    return all_questions().get(qid) if isinstance(qid, str) else None
