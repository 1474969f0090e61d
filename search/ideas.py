"""What the hybrid arm's ideas are (search/hybrid.py) and what supplies them: an idea is a
list of exact replacements in train.py plus knob overrides; an `Ideas` callable returns a batch of
them with what asking cost (search/arms_llm.LLMIdeas asks Claude).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from search import knobs
from search.space import Space


@dataclass
class Idea:
    name: str                                   # short id used as the IDEA choice
    description: str
    edits: list[tuple[str, str]] = field(default_factory=list)   # exact (old, new), in order
    knobs: dict = field(default_factory=dict)   # overrides of knobs outside the searched space

    def apply(self, source: str, space: Space | None = None) -> str:
        """train.py with this idea in it; ValueError when an edit does not match exactly once."""
        for old, new in self.edits:
            count = source.count(old) if old else 0
            if count != 1:
                raise ValueError(f"edit {old[:40]!r} matches {count} times (needs exactly 1)")
            source = source.replace(old, new)
        fixed = {k: v for k, v in self.knobs.items() if not space or k not in space.specs}
        return knobs.set_knobs(source, fixed) if fixed else source


@dataclass
class IdeaBatch:
    """What an ideas callable returns: the ideas and what asking for them cost."""
    ideas: list[Idea]
    tokens: dict = field(default_factory=dict)
    cost_usd: float = 0.0
    errors: list[str] = field(default_factory=list)
    model: str | None = None


class Ideas(Protocol):
    def __call__(self, source: str, space: Space, n: int) -> IdeaBatch: ...
