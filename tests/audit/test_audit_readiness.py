"""/readyz while the signer refuses a chain: 503 whenever it refuses one, not only when it started
without its checkpoints; the reason names each refused chain by its tag (audit.checkpoints.chain_tag),
never by the tenant's name, and holds nothing of a row, a query or an item; ready again once the
refusal clears (a checkpoint adopted by another process is found on the next tick)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import update

from audit.chain import audit_trace
from audit.integrity import chain_tag
from core import store as db
from tests.audit.test_audit_checkpoints import TENANT, Signed, chain_rows, rehash, signed  # noqa: F401 - the fixture
from tests.audit.test_audit_no_first_use_trust import checkpoint_cli, forge_a_new_chain
from tests.gateway.fixtures import SALES_TASK, memory

__all__ = ["signed"]

SECRET_QUERY = "zanzibar pricing for the merger"
SECRET_TEXT = "quetzalcoatl"


def call_with_secrets(signed: Signed) -> None:
    """A real call whose query and item text must never reach /readyz."""
    gateway = signed.gateway
    gateway.ingest(TENANT, [memory("mem_secret", f"{SECRET_TEXT} zanzibar pricing note")])
    agent = gateway.key("alice", groups=("sales",), clearance="confidential")
    answer = gateway.retrieve(agent, {"task": SALES_TASK, "query": SECRET_QUERY})
    assert answer.status_code == 200 and "mem_secret" in answer.text, answer.text


def ready(signed: Signed) -> tuple[int, str, Any]:
    response = signed.gateway.client.get("/readyz")
    return response.status_code, response.text, response.json()["checks"]["audit_checkpoints"]


def assert_says_nothing_of_rows(text: str, *names: str) -> None:
    for secret in (SECRET_QUERY, SECRET_TEXT, "mem_secret", "tr_", "user:", *names):
        assert secret not in text, (secret, text)


def test_a_chain_found_without_a_checkpoint_later_is_not_ready_until_adopted(signed: Signed) -> None:
    call_with_secrets(signed)
    assert ready(signed)[0] == 200
    assert not signed.checkpointer.started_without_checkpoints  # it has its checkpoints: not the case at start
    forge_a_new_chain(signed, "forgedco")
    signed.checkpointer.checkpoint(every_chain=True)  # the signer meets the chain it never saw written
    assert "forgedco" in signed.checkpointer.refusing
    status, text, reason = ready(signed)
    assert status == 503 and reason.startswith("refusing to sign 1 audit chain(s)"), text
    assert f"{chain_tag('forgedco')} (found without a checkpoint of it)" in reason, reason
    assert_says_nothing_of_rows(text, "forgedco", TENANT)
    # An operator adopts it from another process; the service finds the adoption on its next tick.
    code, output = checkpoint_cli(signed, "--adopt")
    assert code == 0, output
    assert ready(signed)[0] == 503  # not yet read back; the probe asks the next tick to look again
    signed.checkpointer.checkpoint()  # the tick (without every_chain: only the chains that grew, and the refused)
    assert not signed.checkpointer.refusing
    status, text, reason = ready(signed)
    assert (status, reason) == (200, "ok"), text


def test_a_chain_stopped_at_a_refused_row_is_not_ready(signed: Signed) -> None:
    call_with_secrets(signed)
    signed.checkpointer.checkpoint()
    signed.write(3)
    with db.writer(signed.gateway.store).begin() as conn:  # edited and re-hashed: the signer will not sign past it
        rows = chain_rows(conn)
        conn.execute(update(audit_trace).where(audit_trace.c.pk == rows[-2]["pk"]).values(decision="deny"))
        rehash(conn)
    (refusal,) = signed.checkpointer.checkpoint()
    assert refusal.refused is not None
    status, text, reason = ready(signed)
    assert status == 503 and f"{chain_tag(TENANT)} (stopped at a row it refused)" in reason, text
    assert "globex" not in reason and chain_tag("globex") not in reason  # only the refused chain is named
    assert_says_nothing_of_rows(text, TENANT, "deny")
