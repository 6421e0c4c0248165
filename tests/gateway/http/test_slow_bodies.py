"""A caller's slow socket holds no seat: every route reads its body (within GATEWAY_MAX_BODY_BYTES and
GATEWAY_BODY_TIMEOUT_MS) before its call waits for a turn, and a body that does not arrive in time
is a 408 `request_timeout` with its audit row.

The attack, as the adversarial review ran it (issue 55): an agent opens sockets to a route that was
admitted before it read its body (`POST /v1/traces/{own trace}/usage`), declares a body of 1,000
bytes and sends one byte at a time. It used to fill every seat, and another actor of its tenant got
429s for as long as the sockets lived."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import free_port, serve_gateway
from tests.gateway.fixtures import SALES_TASK

SOCKETS = 6


def trickle(port: int, path: str, key: str, stop: threading.Event, answers: list[bytes]) -> None:
    """A request whose declared 1,000-byte body comes a byte every 0.2 s; what the server answered."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
        )
        sock.sendall(head.encode())
        sock.settimeout(0.2)
        received = b""
        while not stop.is_set():
            try:
                sock.sendall(b" ")
            except OSError:
                break  # the server answered and closed
            try:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                received += chunk
                if b"\r\n\r\n" in received:
                    break
            except TimeoutError:
                pass
        answers.append(received)


def test_slow_bodies_hold_no_seat_and_time_out_as_a_408_with_its_row(sqlite_url: str, tmp_path: Path) -> None:
    with serve_gateway(sqlite_url, tmp_path, admission_capacity=2, body_timeout_ms=2500) as served:
        gateway = served.gateway
        slow = gateway.key("mallory", groups=("sales",), clearance="confidential")
        other = gateway.key("alice", groups=("sales",), clearance="confidential")
        own = gateway.retrieve(slow, {"task": SALES_TASK, "query": "renewal"})
        path = f"/v1/traces/{own.headers['x-trace-id']}/usage"
        stop, answers = threading.Event(), list[bytes]()
        sockets = [
            threading.Thread(target=trickle, args=(int(served.url.rsplit(":", 1)[1]), path, slow, stop, answers))
            for _ in range(SOCKETS)
        ]
        for thread in sockets:
            thread.start()
        try:
            time.sleep(0.5)  # every socket is in, trickling
            with httpx.Client(base_url=served.url, timeout=30) as http:
                for _ in range(5):
                    started = time.perf_counter()
                    response = http.post(
                        "/v1/retrieve",
                        json={"task": SALES_TASK, "query": "renewal", "sources": {"semantic": False}},
                        headers={"Authorization": f"Bearer {other}"},
                    )
                    assert response.status_code == 200, response.text
                    assert time.perf_counter() - started < 2.0  # not behind the trickling sockets
                    assert float(response.headers["server-timing"].split("queue;dur=")[1].split(",")[0]) == 0.0
                ready = http.get("/readyz").json()["admission"]
                assert ready["in_flight"] == 0 and ready["refused"] == 0  # the trickles hold no seat
            for thread in sockets:
                thread.join(10)
        finally:
            stop.set()
        assert len(answers) == SOCKETS
        assert all(answer.startswith(b"HTTP/1.1 408") for answer in answers), answers[:1]
        trace_id = answers[0].split(b"x-trace-id: ", 1)[1].split(b"\r\n", 1)[0].decode()
        row = gateway.trace(trace_id)
        assert (row["status_code"], row["error_code"], row["actor"]) == (408, "request_timeout", "user:mallory")


def test_headers_that_trickle_in_are_cut_off_by_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 55: slow-header connections are bounded by the server. uvicorn bounds the idle time
    between keep-alive requests but not how long a request's headers take; `gateway serve` runs
    uvicorn with gateway/http/protocol.py, which closes a connection whose next request's headers
    have not all arrived within GATEWAY_HEADER_TIMEOUT_MS, before the app sees anything of it."""
    import uvicorn

    from gateway.http.protocol import HeaderDeadlineProtocol

    monkeypatch.setattr(HeaderDeadlineProtocol, "header_timeout_s", 0.6)
    reached: list[str] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        reached.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, http=HeaderDeadlineProtocol, lifespan="off", log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        with socket.create_connection(("127.0.0.1", port)) as sock:  # a byte every 0.2 s, never done
            sock.settimeout(0.2)
            started, closed = time.monotonic(), False
            for byte in b"GET /slow HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 40:
                try:
                    sock.sendall(bytes([byte]))
                    if sock.recv(1) == b"":
                        closed = True
                        break
                except TimeoutError:
                    continue
                except OSError:
                    closed = True
                    break
            assert closed and time.monotonic() - started < 3.0
        assert reached == []  # nothing of it reached the app
        with socket.create_connection(("127.0.0.1", port)) as sock:  # a prompt request, then a slow one on the same connection
            sock.sendall(b"GET /fast HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = b""
            while not answer.endswith(b"\r\n\r\nok"):
                answer += sock.recv(4096)
            assert answer.startswith(b"HTTP/1.1 200")
            sock.sendall(b"GET /second HTTP/1.1\r\n")
            sock.settimeout(3.0)
            assert sock.recv(4096) == b""  # closed at the deadline, the second request's headers never done
        assert reached == ["/fast"] and HeaderDeadlineProtocol.closed_late >= 2
    finally:
        server.should_exit = True
        thread.join(10)
