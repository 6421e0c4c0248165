"""Signed checkpoints hold the audit trail against someone who can write the database: every way of
covering up an edit that the hash chain alone cannot catch is caught here, on both backends, by the
offline verify (public key and checkpoint file only) and by the service's own verify."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import delete, insert, select, update
from sqlalchemy.engine import Connection

from audit.chain import GENESIS, audit_anchor, audit_facet, audit_item, audit_trace, rederive, row_hash
from audit.integrity import Checkpointer, generate, load_verifier, read_checkpoints
from audit.record import Trace
from core import store as db
from gateway.cli import main
from tests.conftest import Gateway, open_gateway

TENANT = "acme"


@dataclass
class Signed:
    gateway: Gateway
    keys: dict[str, Path]
    checkpoints: Path

    @property
    def checkpointer(self) -> Checkpointer:
        found = self.gateway.client.app.state.context.audit.checkpointer  # type: ignore[attr-defined]
        assert found is not None
        return found  # type: ignore[no-any-return]

    def write(self, n: int, tenant: str = TENANT, packed: tuple[str, ...] = ("doc-1",), age: timedelta = timedelta()) -> None:
        audit = self.gateway.client.app.state.context.audit  # type: ignore[attr-defined]
        for i in range(n):
            audit.write_sync(trace(f"tr_{tenant}_{secrets_suffix()}_{i}", tenant, "user:alice", list(packed), age))

    def offline(
        self,
        public: str | tuple[str, ...] = "public",
        tenant: str = TENANT,
        checkpoints: Path | None = None,
        known: Path | None = None,
    ) -> tuple[int, str]:
        """`gateway audit verify --checkpoints --public-key`: what an auditor runs on an export (with
        every key named in `public`, and the checkpoint file it holds as `known`)."""
        args = [
            "audit",
            "verify",
            "--database-url",
            self.gateway.settings.effective_database_url,
            "--tenant",
            tenant,
            "--checkpoints",
            str(checkpoints or self.checkpoints),
        ]
        for name in (public,) if isinstance(public, str) else public:
            args += ["--public-key", str(self.keys[name])]
        if known is not None:
            args += ["--known", str(known)]
        result = CliRunner().invoke(main, args)
        return result.exit_code, result.output

    def prune_old_initech(self) -> str:
        """Five old rows and three new ones for tenant initech, checkpointed, then `gateway audit
        prune --days 30` (which removes the five and signs what it removed); its output."""
        self.write(5, tenant="initech", age=timedelta(days=365))
        self.write(3, tenant="initech")
        self.checkpointer.checkpoint(every_chain=True)
        env = {"GATEWAY_AUDIT_SIGNING_KEY": str(self.keys["private"]), "GATEWAY_AUDIT_CHECKPOINTS": str(self.checkpoints)}
        result = CliRunner(env=env).invoke(
            main, ["audit", "prune", "--days", "30", "--database-url", self.gateway.settings.effective_database_url]
        )
        assert result.exit_code == 0, result.output
        return result.output

    def served(self) -> dict[str, Any]:
        auditor = self.gateway.key("auditor", roles=("auditor",))
        response = self.gateway.client.get("/v1/audit/verify", headers=self.gateway.auth(auditor))
        assert response.status_code == 200, response.text
        return response.json()  # type: ignore[no-any-return]


_counter = iter(range(10**9))


def secrets_suffix() -> str:
    return str(next(_counter))


def trace(trace_id: str, tenant: str, actor: str, packed: list[str], age: timedelta = timedelta()) -> Trace:
    lineage = {"version": 2, "request": {"task": {"type": "account_followup"}}, "packed": packed}
    return retrieve_row(trace_id, tenant, actor, lineage, datetime.now(timezone.utc) - age)


def retrieve_row(trace_id: str, tenant: str, actor: str, lineage: dict[str, Any], created_at: datetime) -> Trace:
    """The row of an allowed retrieve, decided by the embedded engine at revision r1."""
    return Trace(
        trace_id=trace_id,
        created_at=created_at,
        endpoint="retrieve",
        status_code=200,
        decision="allow",
        tenant=tenant,
        actor=actor,
        policy_engine="embedded",
        policy_revision="r1",
        error_code=None,
        lineage=lineage,
    )


@contextmanager
def open_signed(
    url: str,
    tmp_path: Path,
    keys: dict[str, Path],
    checkpoints: Path,
    rows: int = 100_000,
    seconds: int = 86_400,
    **settings: Any,
) -> Iterator[Signed]:
    """A gateway that signs its audit trail with `keys` into `checkpoints`, every `rows` rows or
    `seconds` (by default out of reach: checkpoints only when the test says), once its own catch-up
    at start is done."""
    with open_gateway(
        url,
        tmp_path,
        audit_signing_key=keys["private"],
        audit_checkpoints=checkpoints,
        audit_checkpoint_rows=rows,
        audit_checkpoint_seconds=seconds,
        **settings,
    ) as gateway:
        run = Signed(gateway, keys, checkpoints)
        # The service's own catch-up at start runs in the background: written before it ends, these
        # rows could be signed by it, at a moment the test does not choose.
        assert run.checkpointer.caught_up.wait(30)
        yield run


@pytest.fixture
def signed(database_url: str, tmp_path: Path) -> Iterator[Signed]:
    keys = generate(tmp_path / "keys")
    with open_signed(database_url, tmp_path, keys, tmp_path / "checkpoints" / "audit.checkpoints") as run:
        run.write(12)
        run.write(3, tenant="globex")
        run.checkpointer.checkpoint(every_chain=True)
        yield run


def chain_rows(conn: Connection, tenant: str = TENANT) -> list[dict[str, Any]]:
    return [
        dict(r._mapping)
        for r in conn.execute(select(audit_trace).where(audit_trace.c.chain == tenant).order_by(audit_trace.c.seq))
    ]


def rehash(conn: Connection, tenant: str = TENANT) -> None:
    """What an insider who knows the algorithm does after an edit: recompute every link and hash."""
    rows = chain_rows(conn, tenant)
    prev = rows[0]["prev_hash"] if rows else GENESIS
    for r in rows:
        r["prev_hash"] = prev
        r["row_hash"] = row_hash(r)
        conn.execute(update(audit_trace).where(audit_trace.c.pk == r["pk"]).values(prev_hash=prev, row_hash=r["row_hash"]))
        prev = r["row_hash"]
    rederive(conn, tenant)  # and the facet index and rollup, so only the signatures can catch it


def delete_rows(conn: Connection, pks: list[int]) -> None:
    conn.execute(delete(audit_item).where(audit_item.c.trace_pk.in_(pks)))
    conn.execute(delete(audit_facet).where(audit_facet.c.trace_pk.in_(pks)))
    conn.execute(delete(audit_trace).where(audit_trace.c.pk.in_(pks)))
    rederive(conn, TENANT)


def delete_last_five(conn: Connection) -> None:
    delete_rows(conn, [r["pk"] for r in chain_rows(conn)[-5:]])


def forge_a_row(conn: Connection) -> None:
    """Frame bob: a row saying he read a secret document, hashed and linked like a real one."""
    head = chain_rows(conn)[-1]
    row = {
        **{k: v for k, v in head.items() if k not in ("pk", "seal")},
        "trace_id": "tr_forged",
        "actor": "user:bob",
        "seq": head["seq"] + 1,
        "prev_hash": head["row_hash"],
        "lineage": {"version": 2, "request": {"task": {"type": "account_followup"}}, "packed": ["doc-secret"]},
    }
    row["row_hash"] = row_hash(row)
    pk = conn.execute(insert(audit_trace).values(**row).returning(audit_trace.c.pk)).scalar_one()
    conn.execute(insert(audit_item).values(trace_pk=pk, item_id="doc-secret"))
    rederive(conn, TENANT)


def edit_and_rehash(conn: Connection) -> None:
    target = chain_rows(conn)[2]
    conn.execute(update(audit_trace).where(audit_trace.c.pk == target["pk"]).values(decision="deny", status_code=403))
    rehash(conn)


def delete_renumber_rehash(conn: Connection) -> None:
    rows = chain_rows(conn)
    delete_rows(conn, [rows[3]["pk"]])
    for r in rows[4:]:
        conn.execute(update(audit_trace).where(audit_trace.c.pk == r["pk"]).values(seq=r["seq"] - 1))
    rehash(conn)


def delete_first_five_and_forge_the_anchor(conn: Connection) -> None:
    rows = chain_rows(conn)
    delete_rows(conn, [r["pk"] for r in rows[:5]])
    conn.execute(
        insert(audit_anchor).values(
            chain=TENANT, seq=rows[5]["seq"], prev_hash=rows[5]["prev_hash"], pruned_at=datetime.now(timezone.utc)
        )
    )


def empty_the_chain_of_the_last_row(conn: Connection) -> None:
    conn.execute(update(audit_trace).where(audit_trace.c.pk == chain_rows(conn)[-1]["pk"]).values(chain=None))


def delete_the_whole_chain(conn: Connection) -> None:
    delete_rows(conn, [r["pk"] for r in chain_rows(conn)])


def reorder_and_rehash(conn: Connection) -> None:
    """Swap two rows' positions (say, to put a read before the grant that allowed it), then re-hash."""
    rows = chain_rows(conn)
    a, b = rows[3], rows[7]
    conn.execute(update(audit_trace).where(audit_trace.c.pk == a["pk"]).values(seq=-1))
    conn.execute(update(audit_trace).where(audit_trace.c.pk == b["pk"]).values(seq=a["seq"]))
    conn.execute(update(audit_trace).where(audit_trace.c.pk == a["pk"]).values(seq=b["seq"]))
    rehash(conn)


def edit_task_type(conn: Connection) -> None:
    conn.execute(update(audit_trace).where(audit_trace.c.pk == chain_rows(conn)[4]["pk"]).values(task_type="compliance_review"))


def edit_about(conn: Connection) -> None:
    conn.execute(update(audit_trace).where(audit_trace.c.pk == chain_rows(conn)[4]["pk"]).values(about="tr_other"))


def add_to_the_item_index(conn: Connection) -> None:
    conn.execute(insert(audit_item).values(trace_pk=chain_rows(conn)[4]["pk"], item_id="doc-secret"))


def drop_from_the_item_index(conn: Connection) -> None:
    conn.execute(delete(audit_item).where(audit_item.c.trace_pk == chain_rows(conn)[4]["pk"]))


Tamper = Callable[[Connection], None]
CASES: dict[str, tuple[Tamper, str]] = {
    "delete the last 5 rows": (delete_last_five, "5 deleted at the end"),
    "delete, renumber and rehash": (delete_renumber_rehash, "shorter than the checkpoint"),
    "edit a row and rehash every later one": (edit_and_rehash, "does not match the checkpoint"),
    "reorder two rows and rehash": (reorder_and_rehash, "does not match the checkpoint"),
    "delete the first 5 rows and forge the anchor": (delete_first_five_and_forge_the_anchor, "no signed prune removed them"),
    "empty the chain of the last row": (empty_the_chain_of_the_last_row, "no longer names its chain"),
    "delete the tenant's whole chain": (delete_the_whole_chain, "the chain is gone"),
    "edit task_type": (edit_task_type, "edited"),
    "edit about": (edit_about, "edited"),
    "add a row to the item index": (add_to_the_item_index, "item index lists 'doc-secret'"),
    "drop rows from the item index": (drop_from_the_item_index, "item index lacks 'doc-1'"),
}


def test_the_untouched_trail_verifies_and_counts_what_is_not_yet_checkpointed(signed: Signed) -> None:
    code, output = signed.offline()
    assert code == 0, output
    assert "OK: 12 rows match signed checkpoints; 0 rows are not yet checkpointed" in output
    signed.write(4)
    code, output = signed.offline()
    assert code == 0 and "4 rows are not yet checkpointed" in output  # reported, never as verified
    served = signed.served()
    assert served["ok"] is True and served["chains"] == {
        TENANT: {
            "rows": 16,
            "ok": True,
            "checkpointed": 12,
            "not_yet_checkpointed": 4,
            "last_checkpoint": served["chains"][TENANT]["last_checkpoint"],
        }
    }
    assert served["checkpoints"]["last"]["chain"] == TENANT and served["checkpoints"]["last"]["size"] == 12
    assert "globex" not in str(served)  # another tenant's checkpoints are not this auditor's business


@pytest.mark.parametrize("case", list(CASES))
def test_tampering_with_checkpointed_rows_fails_verify(signed: Signed, case: str) -> None:
    tamper, message = CASES[case]
    with db.writer(signed.gateway.store).begin() as conn:
        tamper(conn)
    code, output = signed.offline()
    assert code == 1, output
    assert "FAILED: chain acme" in output and message in output, output
    served = signed.served()
    assert served["ok"] is False and message in str(served["problems"]), served


def test_a_forged_row_is_never_signed_and_the_refusal_fails_verify(signed: Signed) -> None:
    with db.writer(signed.gateway.store).begin() as conn:
        forge_a_row(conn)
    code, output = signed.offline()
    assert code == 0 and "1 rows are not yet checkpointed" in output  # not covered: not verified either
    served = signed.served()  # the service holds the seal key: the forged row has no seal
    assert served["ok"] is False and served["first_broken"]["trace_id"] == "tr_forged"
    assert "no valid seal" in served["first_broken"]["reason"]
    signed.write(2)  # the gateway goes on writing; its next checkpoint stops before the forgery
    made = signed.checkpointer.checkpoint()
    assert [(c.chain, c.size, c.refused[0] if c.refused else None) for c in made] == [(TENANT, 12, 13)]
    code, output = signed.offline()
    assert code == 1 and "the signer refused this row" in output and "no valid seal" in output, output
    attested = read_checkpoints(signed.checkpoints, load_verifier(signed.keys["public"]))
    assert max(c.size for c in attested.by_chain[TENANT]) == 12  # nothing was signed past the forged row


def test_checkpoints_signed_by_another_key_or_altered_are_rejected(signed: Signed, tmp_path: Path) -> None:
    other = generate(tmp_path / "other")
    signed.keys["other"] = other["public"]
    code, output = signed.offline(public="other")
    assert code == 1 and "not signed by this key" in output, output
    text = signed.checkpoints.read_text()
    size_line = "\n12\n"
    assert size_line in text
    signed.checkpoints.write_text(text.replace(size_line, "\n11\n", 1))  # a checkpoint edited to fit a truncation
    code, output = signed.offline()
    assert code == 1 and "does not verify" in output, output


def test_a_signed_prune_is_told_apart_from_a_deletion(signed: Signed) -> None:
    assert '"initech": 5' in signed.prune_old_initech()
    code, output = signed.offline(tenant="initech")
    assert code == 0 and "OK: 3 rows match signed checkpoints" in output, output
    with db.writer(signed.gateway.store).begin() as conn:  # a deletion below the anchor is still caught
        rows = chain_rows(conn, "initech")
        delete_rows(conn, [rows[0]["pk"]])
        conn.execute(
            update(audit_anchor)
            .where(audit_anchor.c.chain == "initech")
            .values(seq=rows[1]["seq"], prev_hash=rows[1]["prev_hash"])
        )
    code, output = signed.offline(tenant="initech")
    assert code == 1 and "rows 6 to 6 are gone" in output, output


def test_the_service_signs_as_rows_arrive_and_once_at_shutdown(sqlite_url: str, tmp_path: Path) -> None:
    from tests.gateway.fixtures import SALES_TASK

    keys = generate(tmp_path / "keys")
    checkpoints = tmp_path / "audit.checkpoints"
    with open_signed(sqlite_url, tmp_path, keys, checkpoints, rows=3, seconds=3600) as run:
        gateway = run.gateway
        agent = gateway.key("alice", groups=("sales",), clearance="confidential")
        for i in range(4):
            assert gateway.retrieve(agent, {"task": SALES_TASK, "query": f"renewal {i}"}).status_code == 200
        deadline = time.monotonic() + 30
        # The background task signs every 3 rows; the file exists a moment before its first note is in it.
        while TENANT not in read_checkpoints(checkpoints, load_verifier(keys["verifier"])).by_chain:
            assert time.monotonic() < deadline, "no checkpoint signed"
            time.sleep(0.05)
        signed = read_checkpoints(checkpoints, load_verifier(keys["verifier"]))
        assert max(c.size for c in signed.by_chain[TENANT]) >= 3
        for i in range(2):
            gateway.retrieve(agent, {"task": SALES_TASK, "query": f"more {i}"})
        with gateway.store.connect() as conn:
            head = chain_rows(conn)[-1]
    final = read_checkpoints(checkpoints, load_verifier(keys["public"]))  # after shutdown
    newest = max(final.by_chain[TENANT], key=lambda c: c.size)
    assert (newest.size, newest.head) == (head["seq"], head["row_hash"]) and final.problems == []


def test_the_audit_page_says_what_the_checkpoints_cover(signed: Signed) -> None:
    from tests.gateway.http.test_audit_page import signed_in

    signed.write(2)
    page = signed_in(signed.gateway).client.get("/audit/verify")
    assert page.status_code == 200 and 'data-ok="true"' in page.text
    assert "12 rows match checkpoints signed outside the database" in page.text
    waiting = re.search(r'<strong id="not-yet-checkpointed">(\d+)</strong>', page.text)
    assert waiting is not None and int(waiting.group(1)) >= 2  # the two written, and the sign-in's own rows


def test_a_signing_key_needs_its_file_and_a_readable_ed25519_key(tmp_path: Path) -> None:
    from core.errors import ConfigurationError
    from gateway.settings import load_settings

    with pytest.raises(ConfigurationError, match="set both"):
        load_settings({"audit_signing_key": tmp_path / "key.pem"}, environ={})
    (tmp_path / "key.pem").write_text("not a key")
    with pytest.raises(ConfigurationError, match="not a readable, unencrypted PEM private key"):
        from audit.integrity import load_signer

        load_signer(tmp_path / "key.pem")
    result = CliRunner().invoke(main, ["audit", "verify", "--checkpoints", str(tmp_path / "none")])
    assert result.exit_code != 0 and "give both" in result.output


def test_rows_edited_before_their_checkpoint_are_caught_either_way(signed: Signed) -> None:
    """The checkpointer reads only links and seals past its last checkpoint; an edit in that window
    is caught by verify (content against hash) or, re-hashed, by the seal the editor cannot make."""
    signed.write(3)
    with db.writer(signed.gateway.store).begin() as conn:  # edited, hash left as it was
        conn.execute(update(audit_trace).where(audit_trace.c.pk == chain_rows(conn)[13]["pk"]).values(decision="deny"))
    assert [c.size for c in signed.checkpointer.checkpoint()] == [15]
    code, output = signed.offline()
    assert code == 1 and "content does not match its hash" in output, output


def test_rows_edited_and_rehashed_before_their_checkpoint_are_refused(signed: Signed) -> None:
    signed.write(3)
    with db.writer(signed.gateway.store).begin() as conn:  # edited and re-hashed: rows 14 and 15 lose their seals
        conn.execute(update(audit_trace).where(audit_trace.c.pk == chain_rows(conn)[13]["pk"]).values(decision="deny"))
        rehash(conn)
    (refusal,) = signed.checkpointer.checkpoint()
    assert (refusal.size, refusal.refused[0] if refusal.refused else None) == (13, 14)
    code, output = signed.offline()
    assert code == 1 and "the signer refused this row" in output, output
