"""Bulk ingest: a streamed NDJSON body of any length is written part by part, each bad line reported
alone by its index, and the batch writer gives what writing one item at a time gave."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from core.store import lexical_table
from gateway.writes import item_batch
from gateway.writes.items import item_table
from tests.conftest import Gateway, serve_gateway
from tests.gateway.fixtures import SALES_TASK, memory

NDJSON = {"Content-Type": "application/x-ndjson"}
FILLER = "quarterly renewal pricing discussed with the account team " * 16  # ~1 KB a line


def lines(items: list[dict[str, Any]]) -> Iterator[bytes]:
    for entry in items:
        yield orjson.dumps(entry) + b"\n"


def stored(gateway: Gateway) -> int:
    with gateway.store.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(item_table)).scalar_one())


def indexed(gateway: Gateway, tenant: str = "acme") -> int | None:
    """Rows in the tenant's FTS5 table (SQLite), matched by a word every test item holds."""
    if gateway.store.dialect.name != "sqlite":
        return None
    with gateway.store.connect() as conn:
        table = lexical_table(tenant)
        return int(conn.exec_driver_sql(f"SELECT count(*) FROM {table} WHERE {table} MATCH 'text:renewal'").scalar_one())


def put_stream(gateway: Gateway, body: Iterator[bytes] | bytes) -> Any:
    writer = gateway.key("writer-acme", roles=("ingest",))
    return gateway.client.put("/v1/items", content=body, headers={**gateway.auth(writer), **NDJSON})


def test_a_stream_past_the_body_limit_is_written_part_by_part_and_indexed(gateway: Gateway) -> None:
    items = [memory(f"mem_{i:05d}", f"note {i} {FILLER}") for i in range(1_300)]
    assert sum(len(line) for line in lines(items)) > gateway.settings.max_body_bytes  # a JSON array this long is a 413
    response = put_stream(gateway, lines(items))  # sent chunked, no Content-Length
    assert response.status_code == 200, response.text
    assert response.json() == {"created": 1_300, "updated": 0, "unchanged": 0, "rejected": []}
    assert stored(gateway) == 1_300
    assert indexed(gateway) in (1_300, None)  # every new row indexed by its writer, in the same transaction
    alice = gateway.key("alice", groups=("sales",), clearance="confidential")
    found = gateway.retrieve(alice, {"task": SALES_TASK, "query": "note 1299 renewal"})
    assert "mem_01299" in [r["id"] for r in found.json()["items"]]  # the last part is searchable too
    again = put_stream(gateway, lines(items))  # the same stream again: nothing changes
    assert again.json() == {"created": 0, "updated": 0, "unchanged": 1_300, "rejected": []}


def test_each_bad_line_is_rejected_alone_by_index_and_line(gateway: Gateway) -> None:
    limit = gateway.settings.max_body_bytes
    body = b"".join(
        [
            orjson.dumps(memory("mem_a", "renewal first")) + b"\n",
            b"{not json\n",
            b"\n",  # blank lines are not entries
            orjson.dumps(memory("mem_long", "renewal " + "x" * (limit + 10))) + b"\n",  # past the line limit
            b'{"id": "mem_bad_utf8", "kind": "memory", "text": "\xff\xfe", "acl": ["*"]}\n',
            orjson.dumps({**memory("mem_t", "renewal tenant"), "tenant": "other"}) + b"\n",
            orjson.dumps(memory("mem_a", "renewal first, changed")) + b"\n",  # same id again: an update
            orjson.dumps(memory("mem_b", "renewal last")),  # no final newline
        ]
    )
    response = put_stream(gateway, body)
    assert response.status_code == 200, response.text
    report = response.json()
    assert (report["created"], report["updated"], report["unchanged"]) == (2, 1, 0)
    rejected = {r["index"]: r for r in report["rejected"]}
    assert sorted(rejected) == [1, 2, 3, 4]
    assert rejected[1]["errors"] == ["line 2: not valid JSON"]
    assert rejected[2]["errors"] == ["line 4: longer than the line limit (GATEWAY_MAX_BODY_BYTES)"]
    assert rejected[3]["errors"] == ["line 5: not valid UTF-8"]
    assert rejected[4]["id"] == "mem_t" and rejected[4]["errors"][0].startswith("tenant:")
    assert "x" * 100 not in response.text  # the over-long line is never echoed
    with gateway.store.connect() as conn:
        text = conn.execute(select(item_table.c.text).where(item_table.c.id == "mem_a")).scalar_one()
    assert text == "renewal first, changed"
    assert indexed(gateway) in (2, None)


def test_a_stream_with_no_item_is_a_400(gateway: Gateway) -> None:
    response = put_stream(gateway, b"\n\n")
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "body: expected NDJSON, one item per line"


def test_an_entity_pending_deletion_is_rejected_alone_in_a_batch(gateway: Gateway) -> None:
    gateway.ingest("acme", [{"id": "ent_gone", "kind": "entity", "entity_type": "company", "name": "Gone", "acl": ["*"]}])
    writer = gateway.key("writer-acme", roles=("ingest",))
    assert gateway.client.delete("/v1/entities/ent_gone", headers=gateway.auth(writer)).status_code in (200, 202)
    items = [
        memory("mem_1", "renewal one"),
        {"id": "ent_gone", "kind": "entity", "entity_type": "company", "name": "Back", "acl": ["*"]},
        memory("mem_2", "renewal two"),
    ]
    report = put_stream(gateway, lines(items)).json()
    assert report["created"] == 2
    assert report["rejected"] == [{"index": 1, "id": "ent_gone", "errors": ["id: this entity is pending deletion"]}]


def test_a_store_error_in_a_batch_rejects_only_its_row(gateway: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    """Any store error rolls the batch back and writes its rows one at a time: the row the store
    refuses is reported by index and id, the others land."""
    real = item_batch._write_distinct

    def refusing(conn: Any, tenant: str, rows: Any) -> Any:
        if any(row["id"] == "mem_refused" for row in rows):
            raise IntegrityError("INSERT", {}, Exception("refused"))
        return real(conn, tenant, rows)

    monkeypatch.setattr(item_batch, "_write_distinct", refusing)
    items = [memory(f"mem_{i}", f"renewal {i}") for i in range(3)]
    items.insert(2, memory("mem_refused", "renewal refused"))
    report = put_stream(gateway, lines(items)).json()
    assert report["created"] == 3
    assert report["rejected"] == [{"index": 2, "id": "mem_refused", "errors": ["store: IntegrityError"]}]
    assert stored(gateway) == 3
    assert indexed(gateway) in (3, None)


def test_a_stalled_stream_is_a_408_and_the_parts_before_it_stay_written(sqlite_url: str, tmp_path: Path) -> None:
    with serve_gateway(sqlite_url, tmp_path, body_timeout_ms=1500) as served:
        writer = served.gateway.key("writer-acme", roles=("ingest",))
        first = b"".join(lines([memory(f"mem_{i:04d}", f"renewal {i}") for i in range(600)]))  # a part, and some
        host, port = served.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(
                (
                    f"PUT /v1/items HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {writer}\r\n"
                    "Content-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n"
                ).encode()
                + f"{len(first):x}\r\n".encode()
                + first
                + b"\r\n"
            )
            started = time.monotonic()
            sock.settimeout(10)
            answer = b""
            while b"\r\n\r\n" not in answer:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert 1.0 < time.monotonic() - started < 8
        assert stored(served.gateway) == 500  # the first part was written; the 100 lines after it never were
