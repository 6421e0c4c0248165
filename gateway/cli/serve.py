"""`gateway serve`: the HTTP service, in one process or several sharing a port."""

from __future__ import annotations

import logging
import os
import signal
import socket
from pathlib import Path
from typing import Any

import click

log = logging.getLogger("gateway")

from gateway.cli.common import settings_from, store_options
from gateway.logs import configure
from gateway.settings import Settings

# uvicorn's h11 protocol with a deadline for request headers, named as uvicorn imports it (in each
# worker process too): the HTTP layer sits above the CLI's, so it is not imported here.
PROTOCOL = "gateway.http.protocol:HeaderDeadlineProtocol"


@click.command()
@store_options
@click.option("--host", help="Bind address (GATEWAY_HOST, default 127.0.0.1).")
@click.option("--port", type=int, help="Port (GATEWAY_PORT, default 8080).")
@click.option("--policies", "policies_dir", type=click.Path(path_type=Path), help="Policies directory (GATEWAY_POLICIES_DIR).")
@click.option("--opa-url", help="Use a running OPA server instead of the embedded engine (GATEWAY_OPA_URL).")
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Worker processes sharing the port (background jobs run in one of them).",
)
def serve(workers: int, **flags: Any) -> None:
    """Run the HTTP service (embedded default: one SQLite file, in-process Rego)."""
    import uvicorn

    from core.store import close_store, open_store

    settings = settings_from(**flags)
    configure(settings.log_level, settings.log_format)  # libraries at WARNING; uvicorn is told to leave it be
    # Before any worker starts: the embedded store is migrated here, once (with its backup copy),
    # and a PostgreSQL store behind this release stops the command with one line saying to run
    # `gateway migrate`, instead of every worker failing its start-up with a traceback.
    close_store(open_store(settings.effective_database_url))
    _export(settings)
    # On SIGTERM uvicorn stops accepting and waits for the calls in flight, at most drain_seconds;
    # then the lifespan flushes the decision log and signs the last audit checkpoint.
    if workers <= 1:  # one process: it reloads its policy on SIGHUP itself (gateway/policy/reload.py)
        uvicorn.run(
            "gateway.http.server:app",
            host=settings.host,
            port=settings.port,
            log_config=None,  # the logging configured above (gateway/logs.py), in every process
            http=PROTOCOL,  # h11 with a deadline for request headers (gateway/http/protocol.py)
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=settings.drain_seconds,
        )
        return
    from uvicorn.supervisors import Multiprocess

    class Supervisor(Multiprocess):
        """uvicorn's supervisor, but SIGHUP reloads every worker's policy instead of restarting the
        workers: a broken revision is refused by each, and nothing in flight is cut."""

        def handle_hup(self) -> None:
            for process in self.processes:
                if process.pid is not None:
                    os.kill(process.pid, signal.SIGHUP)

    os.environ["GATEWAY_SUPERVISOR_PID"] = str(os.getpid())  # a worker answering POST /v1/policy/reload signals here
    config = uvicorn.Config(
        "gateway.http.server:app",
        host=settings.host,
        port=settings.port,
        workers=workers,
        http=PROTOCOL,
        log_config=None,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=settings.drain_seconds,
    )
    Supervisor(config, sockets=[listening_socket(settings.host, settings.port)]).run()


def listening_socket(host: str, port: int) -> socket.socket:
    """The socket the workers share. Its protocol is named because asyncio turns TCP_NODELAY on
    only for accepted sockets whose `proto` is IPPROTO_TCP, and they inherit the listener's:
    uvicorn's `Config.bind_socket()` leaves it 0, so Nagle held every response body back until
    the client's delayed ACK, ~44 ms per keep-alive call (Kludex/uvicorn#3149)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # Linux copies it to accepted sockets too
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    log.info("listening on http://%s:%d with shared workers (Ctrl+C to quit)", host, port)
    return sock


def _export(settings: Settings) -> None:
    """Hand the resolved settings to the server module (and to worker processes) through the environment."""
    import os

    os.environ["GATEWAY_DATA_DIR"] = str(settings.data_dir)
    os.environ["GATEWAY_POLICIES_DIR"] = str(settings.policies_dir)
    for name in ("database_url", "opa_url", "host", "port"):  # the flags too: the start line names the address served
        value = getattr(settings, name)
        if value:
            os.environ[f"GATEWAY_{name.upper()}"] = str(value)
