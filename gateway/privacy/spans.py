"""A span of personal data found in a text: its type and character offsets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence


@dataclass(frozen=True, slots=True)
class Span:
    type: str
    start: int
    end: int
    score: float

    def as_json(self) -> list[Any]:
        return [self.type, self.start, self.end, round(self.score, 3)]

    @classmethod
    def from_json(cls, value: Sequence[Any]) -> "Span":
        return cls(str(value[0]), int(value[1]), int(value[2]), float(value[3]))
