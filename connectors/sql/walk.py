"""Read the permitted rows of a ranked list of pks, best first, until `limit` are found.

An engine that ranks outside SQL (FTS5's BM25, the vector mirror) hands over its best pks in order;
the constraints are then applied by one statement over those pks only, instead of over a wide window
or the whole tenant. A read asks for what is still missing, scaled by the share admitted so far, so
a caller who may see everything costs one statement of about `limit` rows. The answer is the first
`limit` permitted pks of the ranked list, exactly: what reading the whole list would give.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from sqlalchemy import Select
from sqlalchemy.engine import Connection, Row

GIVE_UP_AFTER = 256  # pks checked before a walk admitting under 1 in 8 may stop (see `walk`)


@dataclass
class Walk:
    """Rows found so far, best first, each with its position in the ranked list."""

    rows: list[tuple[Row[Any], int]] = field(default_factory=list)
    checked: int = 0
    admitted: int = 0
    done: int = 0  # how much of the ranked list has been read

    def gave_up(self) -> bool:
        return self.checked >= GIVE_UP_AFTER and self.admitted * 8 < self.checked


def walk(
    conn: Connection,
    statement: Select[Any],
    values: dict[str, Any],
    pks: Sequence[int],
    limit: int,
    state: Walk | None = None,
    *,
    param: str = "walk_pks",
    give_up: bool = False,
) -> Walk:
    """Permitted rows of `pks` in their order: `statement` binds the pks to read as `param` (an
    expanding parameter) and applies the constraints. With `give_up`, a walk that admits under
    1 in 8 stops early, so that the caller can read the permitted set another way; `state`
    continues an earlier walk over a longer list of the same ranking."""
    state = state or Walk()
    while len(state.rows) < limit and state.done < len(pks):
        if give_up and state.gave_up():
            break
        missing = limit - len(state.rows)
        share = state.admitted / state.checked if state.checked else 1.0
        size = min(int(missing / max(share, 1 / 64) * 1.25) + 4, max(GIVE_UP_AFTER, missing * 2))
        chunk = [int(pk) for pk in pks[state.done : state.done + size]]
        found = {int(row.pk): row for row in conn.execute(statement, {**values, param: chunk})}
        for position, pk in enumerate(chunk, start=state.done):
            if pk in found and len(state.rows) < limit:
                state.rows.append((found[pk], position))
        state.done += len(chunk)
        state.checked += len(chunk)
        state.admitted += len(found)
    return state
