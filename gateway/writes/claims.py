"""Claims: how any number of background workers, in any number of processes, share one backlog.

What waits is not a queue but a query: items without a current vector (or current spans), an outer
join of `item` with `item_vector` (or `item_pii`). A worker takes a batch of it by writing a claim
per item (`work_claim`: item, kind of work, owner, expiry) in one short write transaction that
also reads the batch, leaving out items another worker holds a live claim on:

- on SQLite the transaction begins IMMEDIATE: one writer at a time, so the read and the claims are
  one step no other worker interleaves with;
- on PostgreSQL the read takes the items `FOR NO KEY UPDATE SKIP LOCKED` (the job-queue idiom:
  two claimers skip each other's rows instead of waiting for them; the row locks last the claim
  transaction only, milliseconds, not the batch), and the claims are inserted `ON CONFLICT ... DO
  UPDATE ... WHERE` the old claim expired, `RETURNING` what was really taken.

The worker then works outside any transaction and stores its results with `release` in the same
transaction, which drops its claims. A worker that dies holding claims strands its items only
until they expire (`ttl_s`); then any worker takes them over. Results are stored by upsert, so even
a claim that expired under a slow worker costs a duplicate computation, never a wrong row.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, exists, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from core.store import writer
from core.tables import Item, WorkClaim

item = Item.__table__  # type: ignore[attr-defined]
work_claim = WorkClaim.__table__  # type: ignore[attr-defined]
CLAIM_TTL_S = 120.0  # how long a claim holds without its result: far above a batch's time


def new_owner() -> str:
    """A claimer's name: host, process and a random part (two workers of one process differ)."""
    return f"{socket.gethostname()[:60]}:{os.getpid()}:{secrets.token_hex(4)}"


@dataclass(frozen=True, slots=True)
class Claimer:
    """One worker's claims of one kind of work (`embedding`, `pii`)."""

    kind: str
    owner: str
    ttl_s: float = CLAIM_TTL_S

    @classmethod
    def of(cls, kind: str, ttl_s: float = CLAIM_TTL_S) -> Claimer:
        return cls(kind, new_owner(), ttl_s)

    def unclaimed(self, now: float) -> Any:
        """The condition: no live claim of this kind on the item."""
        live = select(work_claim.c.item_pk).where(
            work_claim.c.item_pk == item.c.pk, work_claim.c.kind == self.kind, work_claim.c.expires > now
        )
        return ~exists(live)

    def claimable(self, condition: Any) -> Any:
        """`condition`, and no live claim of this kind on the item (as of now)."""
        return and_(condition, self.unclaimed(time.time()))

    def claim(
        self,
        engine: Engine,
        joined: Any,
        condition: Any,
        columns: Sequence[Any],
        limit: int,
        *,
        after: int | None = None,
        tenant: str | None = None,
        fit: Any = None,
    ) -> list[Any]:
        """Up to `limit` waiting items (`joined`, `condition`: as `waiting_rows`) no other worker
        holds, in key order (after the key `after`, of `tenant`, when given), claimed for this
        worker; `fit` (rows -> the prefix to take, such as `Limit.within`) trims the batch before it
        is claimed. `columns` must hold `item.c.pk`."""
        now = time.time()
        where = and_(condition, self.unclaimed(now))
        if after is not None:
            where = and_(where, item.c.pk > after)
        if tenant is not None:
            where = and_(item.c.tenant == tenant, where)
        query = select(*columns).select_from(joined).where(where).order_by(item.c.pk).limit(limit)
        postgres = engine.dialect.name == "postgresql"
        if postgres:
            query = query.with_for_update(of=item, skip_locked=True, key_share=True)  # FOR NO KEY UPDATE
        with writer(engine).begin() as conn:
            rows = list(conn.execute(query).all())
            if fit is not None:
                rows = list(fit(rows))
            if not rows:
                return []
            values = [{"item_pk": r.pk, "kind": self.kind, "owner": self.owner, "expires": now + self.ttl_s} for r in rows]
            statement = (postgresql.insert if postgres else sqlite.insert)(work_claim).values(values)
            upsert = statement.on_conflict_do_update(
                index_elements=[work_claim.c.item_pk, work_claim.c.kind],
                set_={"owner": statement.excluded.owner, "expires": statement.excluded.expires},
                where=work_claim.c.expires <= now,
            ).returning(work_claim.c.item_pk)
            taken = {pk for (pk,) in conn.execute(upsert)}
            if len(taken) < len(rows):
                rows = [r for r in rows if r.pk in taken]
            # Claims of items gone (deleted, or their claimer died) are dropped once they expired.
            conn.execute(work_claim.delete().where(work_claim.c.kind == self.kind, work_claim.c.expires < now - self.ttl_s))
        return rows

    def release(self, conn: Connection, pks: Sequence[int]) -> None:
        """Drop this worker's claims on `pks`, in the transaction that stores their results."""
        for start in range(0, len(pks), 500):
            conn.execute(
                work_claim.delete().where(
                    work_claim.c.kind == self.kind,
                    work_claim.c.owner == self.owner,
                    work_claim.c.item_pk.in_(list(pks[start : start + 500])),
                )
            )

    def release_now(self, engine: Engine, pks: Sequence[int]) -> None:
        """`release` in a transaction of its own (a batch that failed: its items wait for anyone);
        a store that cannot take it leaves the claims to expire."""
        try:
            with writer(engine).begin() as conn:
                self.release(conn, pks)
        except SQLAlchemyError:
            pass

    def release_all(self, engine: Engine) -> None:
        """Drop every claim of this worker (it stops: what it held is free at once, not at expiry)."""
        with writer(engine).begin() as conn:
            conn.execute(work_claim.delete().where(work_claim.c.kind == self.kind, work_claim.c.owner == self.owner))


def claimed(engine: Engine, kind: str) -> int:
    """Items held by a live claim of `kind`: in flight in some worker now."""
    with engine.connect() as conn:
        return int(
            conn.execute(
                select(func.count()).select_from(work_claim).where(work_claim.c.kind == kind, work_claim.c.expires > time.time())
            ).scalar_one()
        )
