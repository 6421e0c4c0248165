"""The `gateway` command: serve, demo, keys, ingest, policy test, policy check."""

from __future__ import annotations

import functools
import json
import os
import signal
import socket
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from core.errors import GatewayError
from gateway.settings import Settings, load_settings

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from audit.chain import Pruned


def store_options(command: Any) -> Any:
    command = click.option(
        "--data", "data_dir", type=click.Path(path_type=Path), help="Data directory (GATEWAY_DATA_DIR, default ./.gateway)."
    )(command)
    command = click.option("--database-url", help="SQLAlchemy URL, e.g. PostgreSQL (GATEWAY_DATABASE_URL).")(command)
    return command


def settings_from(**overrides: Any) -> Settings:
    try:
        return load_settings(overrides)
    except GatewayError as exc:
        raise click.ClickException(exc.message) from exc


class Gateway(click.Group):
    """Every command's own failure (a store that cannot be reached or is behind, a bad setting)
    ends in one line naming what is wrong, never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except GatewayError as exc:
            raise click.ClickException(exc.message) from exc


@click.group(cls=Gateway)
def main() -> None:
    """A policy-first governed retrieval gateway."""


@main.command()
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
            log_level="info",
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
        log_level="info",
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
    click.echo(f"Listening on {host} port {port} (Ctrl+C to quit)")
    return sock


def _export(settings: Settings) -> None:
    """Hand the resolved settings to the server module (and to worker processes) through the environment."""
    import os

    os.environ["GATEWAY_DATA_DIR"] = str(settings.data_dir)
    os.environ["GATEWAY_POLICIES_DIR"] = str(settings.policies_dir)
    for name in ("database_url", "opa_url"):
        value = getattr(settings, name)
        if value:
            os.environ[f"GATEWAY_{name.upper()}"] = value


@main.command()
@store_options
def demo(**flags: Any) -> None:
    """Load the multi-tenant demo data set and print tokens and a sample curl."""
    from core.store import open_store
    from gateway.demo import load_demo

    settings = settings_from(**flags)
    engine = open_store(settings.effective_database_url)
    tokens, report = load_demo(engine)
    click.echo(
        f"Demo data loaded into {settings.effective_database_url}: "
        f"{report.created} created, {report.updated} updated, {report.unchanged} unchanged."
    )
    click.echo("\nDemo actors (keys are shown once; run `gateway demo` again for new ones):")
    for name, (description, token) in tokens.items():
        click.echo(f"  {name:<14} {description}\n  {'':<14} {token}")
    alice = tokens["alice@acme"][1]
    body = json.dumps(
        {
            "task": {"type": "account_followup", "scope": "sales"},
            "mode": "brief",
            "query": "pricing discount",
            "entities": [{"email": "Jane@Globex.example"}],
        }
    )
    click.echo(
        f"\nStart the service with `gateway serve`, then:\n\n  curl -s http://{settings.host}:{settings.port}/v1/retrieve \\\n"
        f"    -H 'Authorization: Bearer {alice}' \\\n    -H 'Content-Type: application/json' \\\n    -d '{body}'\n"
    )
    click.echo(
        f"An MCP client reaches the same calls as tools at http://{settings.host}:{settings.port}/mcp with the same\n"
        "Authorization header; Python agents use gateway.client (README: Connecting agents)."
    )


@main.command()
@store_options
def migrate(**flags: Any) -> None:
    """Upgrade the store's schema to this release (run it before starting PostgreSQL replicas)."""
    from sqlalchemy.engine import make_url

    from core.store import migrate_store

    settings = settings_from(**flags)
    try:
        done = migrate_store(settings.effective_database_url)
    except GatewayError as exc:
        raise click.ClickException(exc.message) from exc
    click.echo(f"store: {make_url(settings.effective_database_url).render_as_string(hide_password=True)}")
    click.echo(f"revision before: {done.before or 'none (no version table)'}")
    click.echo(f"revision after: {done.after} (head{'' if done.changed else ', nothing to do'})")
    if done.backup is not None:
        click.echo(f"backup: {done.backup}")


@main.group()
def keys() -> None:
    """API keys (only their hashes are stored)."""


@keys.command("create")
@store_options
@click.option("--tenant", required=True)
@click.option("--principal", required=True, help="user:ID")
@click.option("--groups", default="", help="Comma-separated groups.")
@click.option(
    "--roles", default="agent", show_default=True, help="Comma-separated: agent, ingest, auditor, policy_admin, key_admin."
)
@click.option("--clearance", default="internal", show_default=True)
def keys_create(tenant: str, principal: str, groups: str, roles: str, clearance: str, **flags: Any) -> None:
    """Create an API key and print it once."""
    from core.store import close_store, open_store
    from gateway.auth import create_api_key

    settings = settings_from(**flags)
    engine = open_store(settings.effective_database_url)
    try:
        key = create_api_key(
            engine,
            tenant=tenant,
            principal=principal,
            roles=[r for r in roles.split(",") if r],
            groups=[g for g in groups.split(",") if g],
            clearance=clearance,
        )
    except GatewayError as exc:
        raise click.ClickException(exc.message) from exc
    finally:
        close_store(engine)
    click.echo(key)


@keys.command("list")
@store_options
@click.option("--tenant", help="Only this tenant's keys (default: every tenant's).")
def keys_list(tenant: str | None, **flags: Any) -> None:
    """Print every key, revoked ones too, one JSON object a line: never a secret or its hash."""
    from core.store import close_store, open_store
    from gateway.auth import list_api_keys

    settings = settings_from(**flags)
    engine = open_store(settings.effective_database_url)
    try:
        for key in list_api_keys(engine, tenant):
            click.echo(json.dumps(key))
    finally:
        close_store(engine)


@keys.command("revoke")
@store_options
@click.option("--tenant", help="Refuse unless the key is this tenant's.")
@click.argument("key_id")
def keys_revoke(key_id: str, tenant: str | None, **flags: Any) -> None:
    """Revoke the key KEY_ID (the 16 hex digits after gw_) and end its audit-page sessions."""
    from core.store import close_store, open_store
    from gateway.auth import revoke_api_key

    settings = settings_from(**flags)
    engine = open_store(settings.effective_database_url)
    try:
        revoked = revoke_api_key(engine, key_id, tenant)
    except GatewayError as exc:
        raise click.ClickException(exc.message) from exc
    finally:
        close_store(engine)
    click.echo(json.dumps(revoked))


@main.command("ingest")
@store_options
@click.option("--tenant", required=True, help="Tenant the items belong to.")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
def ingest_command(tenant: str, files: tuple[Path, ...], **flags: Any) -> None:
    """Ingest JSON, NDJSON or Markdown (.md) files, with the same rules as PUT /v1/items and /v1/documents."""
    from core.store import open_store
    from gateway.writes.documents import parse_document
    from gateway.writes.items import ingest, ingest_document, parse_items_body

    settings = settings_from(**flags)
    engine = open_store(settings.effective_database_url)
    failed = False
    for path in files:
        if path.suffix.lower() in (".md", ".markdown"):
            try:
                outcome = ingest_document(engine, tenant, parse_document(path.stem, path.read_bytes()))
            except GatewayError as exc:
                click.echo(f"{path}: {exc.message}", err=True)
                failed = True
                continue
            click.echo(json.dumps({"file": str(path), **outcome}))
            failed = failed or bool(outcome["rejected"])
            continue
        try:
            entries = parse_items_body(path.read_bytes(), "application/x-ndjson" if path.suffix == ".ndjson" else None)
        except GatewayError as exc:
            click.echo(f"{path}: {exc.message}", err=True)
            failed = True
            continue
        with click.progressbar(length=len(entries), label=str(path), file=sys.stderr) as bar:
            report = ingest(engine, tenant, entries)
            bar.update(len(entries))
        click.echo(json.dumps({"file": str(path), **report.as_dict()}))
        failed = failed or bool(report.rejected)
    sys.exit(1 if failed else 0)


def cores() -> int:
    """The cores this process may run on (a container's CPU set, not the host's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def rate_bar(length: int, label: str) -> Any:
    """A progress bar with items/s (and the percentage and ETA click shows when the length is known)."""
    started = time.monotonic()

    def rate(_: Any) -> str:
        seconds = time.monotonic() - started
        return f"{bar.pos / seconds:.1f} items/s" if bar.pos and seconds > 0 else ""

    bar = click.progressbar(length=length, label=label, file=sys.stderr, show_eta=True, show_percent=True, item_show_func=rate)
    return bar


@main.command()
@store_options
@click.option(
    "--batch",
    type=click.IntRange(min=1, max=1024),
    default=8,
    show_default=True,
    help="Passages per model call (passages of similar length run together).",
)
@click.option(
    "--threads",
    type=click.IntRange(min=1, max=256),
    default=None,
    help="Model runs side by side, one core each (default: the cores this process may use).",
)
def embed(batch: int, threads: int | None, **flags: Any) -> None:
    """Embed every item still waiting for a vector (the service also does this in the background)."""
    from core.errors import ConnectorError
    from core.store import open_store
    from gateway.context import build_weaviate
    from gateway.writes.embeddings import load_embedder
    from gateway.writes.vectorize import embed_all, lag, publish_to_weaviate

    settings = settings_from(**flags)
    embedder, unavailable = load_embedder(settings, threads=threads or cores(), bulk=True)
    if embedder is None:
        raise click.ClickException(unavailable or "no embedder")
    engine = open_store(settings.effective_database_url)
    waiting = lag(engine, embedder.model_id)
    # With Weaviate, every chunk is copied there before it counts as embedded (as the service does).
    weaviate = build_weaviate(settings, embedder) if settings.weaviate_url else None
    publish = functools.partial(publish_to_weaviate, weaviate) if weaviate else None
    try:
        with rate_bar(waiting, f"embedding with {embedder.model_id}") as bar:
            done = embed_all(engine, embedder, batch, progress=bar.update, publish=publish)
    except ConnectorError as exc:
        raise click.ClickException(f"{exc.message}; the items not yet copied are still waiting") from exc
    finally:
        if weaviate is not None:
            weaviate.close()
    click.echo(f"{done} items embedded; {lag(engine, embedder.model_id)} waiting")


@main.group()
def audit() -> None:
    """Audit trail tools."""


@audit.command("keygen")
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path), help="Directory for the new key pair.")
def audit_keygen(out_dir: Path) -> None:
    """Write a new Ed25519 key pair for signing audit checkpoints: the private key (mode 0600) for
    GATEWAY_AUDIT_SIGNING_KEY, and the public key and verifier key for auditors."""
    from audit.keys import generate

    try:
        paths = generate(out_dir)
    except GatewayError as exc:
        raise click.ClickException(exc.message) from exc
    click.echo(json.dumps({name: str(path) for name, path in paths.items()}, indent=2))


@audit.command("verify")
@store_options
@click.option("--tenant", help="Check this tenant's chain only (default: every chain).")
@click.option("--checkpoints", type=click.Path(path_type=Path), help="The signed checkpoint file to hold the chains against.")
@click.option(
    "--public-key",
    type=click.Path(path_type=Path),
    multiple=True,
    help="The public key (PEM or verifier key) the checkpoints are signed with; again for each key it replaced.",
)
@click.option(
    "--known",
    type=click.Path(path_type=Path),
    help="Checkpoints you hold from before (an earlier copy of the "
    "file, or notes a witness cosigned): each must still be in --checkpoints, so an emptied, truncated or "
    "replaced file fails.",
)
def audit_verify(
    tenant: str | None, checkpoints: Path | None, public_key: tuple[Path, ...], known: Path | None, **flags: Any
) -> None:
    """Recompute the audit hash chains, and hold them against the signed checkpoints when given;
    print the report, name the first problem and exit 1 if there is one."""
    from audit.checkpoints import read_checkpoints
    from audit.integrity import verify
    from audit.keys import load_verifier
    from core.store import close_store, open_store

    if (checkpoints is None) != (not public_key):
        raise click.ClickException("--checkpoints and --public-key: give both, or neither")
    if known is not None and checkpoints is None:
        raise click.ClickException("--known: give --checkpoints and --public-key too")
    settings = settings_from(**flags)
    attested = held = None
    if checkpoints is not None and public_key:
        if not checkpoints.is_file():
            raise click.ClickException(f"--checkpoints: {checkpoints} cannot be read")
        try:
            verifier = [load_verifier(key) for key in public_key]
        except GatewayError as exc:
            raise click.ClickException(exc.message) from exc
        attested = read_checkpoints(checkpoints, verifier, tenant if tenant is not None else None)
        if known is not None:
            if not known.is_file():
                raise click.ClickException(f"--known: {known} cannot be read")
            held = read_checkpoints(known, verifier, tenant if tenant is not None else None)
    engine = open_store(settings.effective_database_url)
    try:
        report = verify(engine, tenant, attested, known=held)
    finally:
        close_store(engine)
    click.echo(json.dumps(report, indent=2))
    click.echo(verdict(report), err=True)
    sys.exit(0 if report["ok"] else 1)


def verdict(report: dict[str, Any]) -> str:
    """One line for people: the first problem, or what was verified and what is not yet covered."""
    rows = sum(c["rows"] for c in report["chains"].values())
    if not report["ok"]:
        broken = report["first_broken"]
        at = f" at position {broken['seq']}" if broken["seq"] is not None else ""
        return f"FAILED: chain {broken['chain']}{at}: {broken['reason']}"
    if "checkpoints" not in report:
        return f"OK: {rows} rows in {len(report['chains'])} chains link and match their hashes (no checkpoints given)"
    return (
        f"OK: {report['checkpointed']} rows match signed checkpoints; {report['not_yet_checkpointed']} rows are not yet "
        "checkpointed (checked for links and hashes only)"
    )


@audit.command("witness")
@click.option(
    "--state",
    type=click.Path(path_type=Path),
    required=True,
    help="The witness's own directory: the latest cosigned checkpoint of each chain (never the gateway's volume).",
)
@click.option(
    "--log-key",
    type=click.Path(path_type=Path),
    required=True,
    help="The gateway's public key (PEM or verifier key): only checkpoints it signed are cosigned.",
)
@click.option(
    "--key",
    type=click.Path(path_type=Path),
    required=True,
    help="The witness's own Ed25519 private key (PEM, `gateway audit keygen`).",
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8090, show_default=True)
def audit_witness(state: Path, log_key: Path, key: Path, host: str, port: int) -> None:
    """Run a witness of the audit checkpoints (C2SP tlog-witness's add-checkpoint): it cosigns a
    checkpoint only when a consistency proof shows it extends the last one it cosigned, and
    refuses a fork. Point GATEWAY_AUDIT_WITNESS_URL at it."""
    import uvicorn

    from audit.keys import load_signer, load_verifier

    try:
        load_verifier(log_key)
        load_signer(key)
    except GatewayError as exc:
        raise click.ClickException(exc.message) from exc
    os.environ.update(
        {"GATEWAY_WITNESS_STATE": str(state), "GATEWAY_WITNESS_LOG_KEY": str(log_key), "GATEWAY_WITNESS_KEY": str(key)}
    )
    uvicorn.run("gateway.http.witness:app", factory=True, host=host, port=port, log_level="info")


@audit.command("verify-proof")
@click.argument("proof", type=click.Path(path_type=Path))
@click.option(
    "--public-key",
    type=click.Path(path_type=Path),
    required=True,
    multiple=True,
    help="The public key (PEM or verifier key) the checkpoint was signed with; again for each key it replaced.",
)
def audit_verify_proof(proof: Path, public_key: tuple[Path, ...]) -> None:
    """Check one trace's proof (GET /v1/audit/traces/{id}/proof) with nothing but the public key:
    the row's hash from its content, its inclusion path to the Merkle root, the checkpoint's
    signature over that root. Exits 1 and says what does not hold."""
    from audit.keys import load_verifier
    from audit.proofs import verify_proof

    try:
        verifier = [load_verifier(key) for key in public_key]
        document = json.loads(proof.read_text(encoding="utf-8"))
    except GatewayError as exc:
        raise click.ClickException(exc.message) from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise click.ClickException(f"{proof}: not a readable JSON proof ({type(exc).__name__})") from exc
    ok, line = verify_proof(document, verifier)
    click.echo(line if ok else f"FAILED: {line}", err=not ok)
    sys.exit(0 if ok else 1)


@audit.command("checkpoint")
@store_options
@click.option(
    "--adopt",
    is_flag=True,
    help="Also sign chains found without a checkpoint of them, as they are (marked "
    "'adopted' in the note): an operator's decision to trust what the store holds.",
)
def audit_checkpoint(adopt: bool, **flags: Any) -> None:
    """Sign a checkpoint of every chain now (GATEWAY_AUDIT_SIGNING_KEY, GATEWAY_AUDIT_CHECKPOINTS);
    the service does this on its own as rows arrive and at shutdown. A chain with no checkpoint in
    the file is refused (exit 1) unless --adopt: this process did not see it written."""
    from core.store import close_store, open_store
    from gateway.context import build_checkpointer

    settings = settings_from(**flags)
    if settings.audit_signing_key is None:
        raise click.ClickException("GATEWAY_AUDIT_SIGNING_KEY and GATEWAY_AUDIT_CHECKPOINTS: set both to sign checkpoints")
    engine = open_store(settings.effective_database_url)
    try:
        checkpointer = build_checkpointer(settings, engine)
        assert checkpointer is not None
        made = checkpointer.checkpoint(every_chain=True, adopt=adopt)
    except GatewayError as exc:
        raise click.ClickException(exc.message) from exc
    finally:
        close_store(engine)
    click.echo(
        json.dumps({"signed": [{"chain": c.chain, **c.as_dict()} for c in made], "refused": checkpointer.refusing}, indent=2)
    )
    if checkpointer.refusing:
        click.echo(
            f"REFUSED: {len(checkpointer.refusing)} chain(s) found without a checkpoint of them were not signed "
            "(restore the checkpoint file, or --adopt them as found)",
            err=True,
        )
    sys.exit(1 if any(c.refused for c in made) or checkpointer.refusing else 0)


@audit.command("prune")
@store_options
@click.option("--days", type=int, help="Keep this many days (default GATEWAY_AUDIT_RETENTION_DAYS).")
def audit_prune(days: int | None, **flags: Any) -> None:
    """Remove audit rows older than the retention period; each chain stays verifiable from its
    oldest kept row. With a signing key, each chain is verified first (a broken one is left
    alone) and what was removed is signed, so verify can tell the prune from a deletion."""
    from datetime import timedelta

    from core.instants import utc_now
    from core.store import close_store, open_store

    settings = settings_from(**flags)
    keep_days = days if days is not None else settings.audit_retention_days
    if keep_days < 1:
        raise click.ClickException("--days: keep at least one day")
    engine = open_store(settings.effective_database_url)
    try:
        removed, refused = _prune(settings, engine, utc_now() - timedelta(days=keep_days))
    except GatewayError as exc:
        raise click.ClickException(exc.message) from exc
    finally:
        close_store(engine)
    click.echo(
        json.dumps({"kept_days": keep_days, "removed": {c: p.removed for c, p in removed.items()}, "not_pruned_broken": refused})
    )


def _prune(settings: Settings, engine: "Engine", before: "datetime") -> tuple[dict[str, "Pruned"], dict[str, str]]:
    """Prune every chain that verifies (all of them without a signing key), then sign what went."""
    from audit.chain import chains_in, prune
    from audit.store import AuditStore
    from gateway.context import build_checkpointer

    checkpointer = build_checkpointer(settings, engine)
    if checkpointer is None:
        return prune(engine, before), {}
    checker = AuditStore(engine, checkpointer=checkpointer)
    with engine.connect() as conn:
        reports = {chain: checker.verify(chain) for chain in chains_in(conn)}
    removed = prune(engine, before, [chain for chain, report in reports.items() if report["ok"]], checkpointer.cut_before)
    checkpointer.pruned({chain: (p.oldest, p.prev_hash) for chain, p in removed.items()})
    return removed, {chain: report["first_broken"]["reason"] for chain, report in reports.items() if not report["ok"]}


@main.group()
def pii() -> None:
    """Personal-data tools."""


@pii.command("analyze")
@store_options
@click.option("--batch", type=click.IntRange(min=1, max=4096), default=32, show_default=True, help="Items per batch.")
@click.option(
    "--processes",
    type=click.IntRange(min=1, max=256),
    default=None,
    help="Analysing processes (default: the cores this process may use).",
)
def pii_analyze(batch: int, processes: int | None, **flags: Any) -> None:
    """Analyse every item whose stored spans are missing, older than its text, or from another
    analyzer configuration (the service also does this in the background)."""
    from core.store import open_store
    from gateway.privacy.detect import Detector, analyzer_version
    from gateway.privacy.store import analyze_all, analyze_all_processes, pending

    settings = settings_from(**flags)
    engine = open_store(settings.effective_database_url)
    processes = processes or cores()
    version = analyzer_version()
    waiting = pending(engine, version)
    with rate_bar(waiting, f"analysing with {version}") as bar:
        if processes > 1 and waiting > batch:
            done = analyze_all_processes(engine, version, processes, batch, progress=bar.update)
        else:
            done = analyze_all(engine, Detector(), batch, progress=bar.update)
    click.echo(f"{done} items analysed; {pending(engine, version)} waiting")


@main.group()
def policy() -> None:
    """Policy tools."""


@policy.command("impact")
@store_options
@click.option("--policies", "policies_dir", type=click.Path(path_type=Path), help="The policies in force (GATEWAY_POLICIES_DIR).")
@click.option(
    "--candidate",
    required=True,
    type=click.Path(path_type=Path),
    help="The candidate: a policies directory or an OPA bundle (.tar.gz).",
)
@click.option("--since", help="Replay calls made at or after this instant (RFC 3339).")
@click.option("--tenant", help="Replay this tenant's calls only (default: every tenant's).")
@click.option("--limit", type=int, default=1000, show_default=True, help="The newest calls replayed, at most (up to 10000).")
@click.option("--json", "json_file", type=click.Path(path_type=Path), help="Write the JSON report to this file.")
def policy_impact(
    candidate: Path, since: str | None, tenant: str | None, limit: int, json_file: Path | None, **flags: Any
) -> None:
    """Replay recorded retrieve calls against the policy in force and the candidate; print what changes."""
    import anyio

    from gateway.policy_tools.impact import parse_window, summary

    settings = settings_from(**flags)
    try:
        window = parse_window(tenant, since, limit)
        report = anyio.run(_impact, settings, candidate, window)
    except GatewayError as exc:
        raise click.ClickException(exc.message) from exc
    if json_file is not None:
        json_file.write_text(json.dumps(report, indent=2) + "\n")
    click.echo(summary(report))


async def _impact(settings: Settings, candidate_path: Path, window: Any) -> dict[str, Any]:
    """Both policies in policy processes of their own (never logged as decisions), replayed on the store."""
    from core.store import close_store, open_store
    from gateway.policy.candidate import open_candidate, read_candidate
    from gateway.policy.factory import policy_source
    from gateway.policy_tools.impact import impact

    in_force = await policy_source(settings).fetch()
    assert in_force is not None  # a first fetch has no ETag to match
    store = open_store(settings.effective_database_url)
    try:
        current = await open_candidate(in_force)
        try:
            candidate = await open_candidate(read_candidate(candidate_path))
            try:
                return await impact(store, current, candidate, window)
            finally:
                await candidate.aclose()
        finally:
            await current.aclose()
    finally:
        close_store(store)


@policy.command("bundle")
@click.argument("directory", type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False), required=True, help="The .tar.gz to write.")
@click.option("--revision", default="", help="The revision written into .manifest (default: a hash of the contents).")
@click.option("--signing-key", help="Sign the bundle (.signatures.json): a private PEM key file, or the HMAC secret for HS*.")
@click.option("--signing-alg", default="RS256", show_default=True, help="The signature's algorithm.")
def policy_bundle(directory: Path, output: Path, revision: str, signing_key: str | None, signing_alg: str) -> None:
    """Pack a policies directory as an OPA bundle (`.tar.gz`), optionally signed, as `opa build`
    and `opa sign` would; serve it with GATEWAY_POLICY_BUNDLE (a file or a bundle server URL)."""
    from gateway.policy.bundle import read_archive, read_bundle, write_archive

    try:
        revision = revision or read_bundle(directory).revision
        key = Path(signing_key).read_text() if signing_key and Path(signing_key).is_file() else signing_key
        archive = write_archive(directory, revision, key, signing_alg)
        read_archive(archive, output)  # what was written reads back
    except GatewayError as exc:
        raise click.ClickException(exc.message) from exc
    output.write_bytes(archive)
    click.echo(f"{output}: revision {revision}{', signed' if signing_key else ''}")


@policy.command("test")
@click.argument("directory", required=False, type=click.Path(path_type=Path))
@click.option("-v", "--verbose", is_flag=True, help="List passing tests too.")
def policy_test(directory: Path | None, verbose: bool) -> None:
    """Run the Rego tests (test_ rules) with the embedded engine; exit 1 on any failure."""
    from gateway.policy_tools.rego_tests import run_rego_tests

    root = directory or load_settings().policies_dir
    try:
        results = run_rego_tests(root)
    except GatewayError as exc:
        raise click.ClickException(exc.message) from exc
    failures = [r for r in results if not r.passed]
    for result in results:
        if verbose or not result.passed:
            status = "PASS" if result.passed else "FAIL"
            click.echo(f"{status} data.{result.package}.{result.name}" + (f": {result.error}" if result.error else ""))
    click.echo(f"{len(results) - len(failures)}/{len(results)} Rego tests passed")
    sys.exit(1 if failures or not results else 0)


@policy.command("explain")
@store_options
@click.option("--policies", "policies_dir", type=click.Path(path_type=Path), help="The policies in force (GATEWAY_POLICIES_DIR).")
@click.option("--actor", "actor_json", required=True, help='The actor as JSON: {"id", "tenant", "roles", "groups", "clearance"}.')
@click.option("--request", "request_arg", required=True, help="The retrieve body: a JSON file, or JSON itself.")
@click.option("--item", "item_ids", multiple=True, help="An item id to explain (repeatable).")
@click.option(
    "--candidate",
    type=click.Path(path_type=Path, exists=True),
    help="Also explain against this candidate: a policies directory or an OPA bundle (.tar.gz).",
)
def policy_explain(actor_json: str, request_arg: str, item_ids: tuple[str, ...], candidate: Path | None, **flags: Any) -> None:
    """Explain the decision for an actor and request, and why each item is in or out; prints JSON."""
    import anyio

    from core.validation import loads_json
    from gateway.policy_tools.explain import parse_actor, parse_items, parse_request

    settings = settings_from(**flags)
    try:
        request_text = request_arg if request_arg.lstrip().startswith("{") else Path(request_arg).read_text()
        actor, request = parse_actor(loads_json(actor_json, "actor")), parse_request(loads_json(request_text, "request"))
        answer = anyio.run(_explain, settings, actor, request, parse_items(list(item_ids)), candidate)
    except OSError as exc:
        raise click.ClickException(f"--request: cannot read the file ({type(exc).__name__})") from exc
    except (ValueError, RecursionError) as exc:
        raise click.ClickException(f"--actor or --request: malformed JSON ({type(exc).__name__})") from exc
    except GatewayError as exc:
        raise click.ClickException(exc.message) from exc
    click.echo(json.dumps(answer, indent=2))


async def _explain(
    settings: Settings, actor: Any, request: Any, ids: tuple[str, ...], candidate_path: Path | None
) -> dict[str, Any]:
    """The policy in force (and the candidate) in policy processes of their own, on the local store."""
    from connectors.sql.exact import SqlExactConnector
    from core.instants import utc_now
    from core.store import close_store, open_store
    from gateway.pipeline.subjects import request_subjects
    from gateway.policy.candidate import open_candidate, read_candidate
    from gateway.policy.factory import policy_source
    from gateway.policy_tools.explain import differences, explain

    in_force_bundle = await policy_source(settings).fetch()
    assert in_force_bundle is not None  # a first fetch has no ETag to match
    store, now = open_store(settings.effective_database_url), utc_now()
    subjects = request_subjects(SqlExactConnector(store), actor, request)
    try:
        engine = await open_candidate(in_force_bundle)
        try:
            in_force = await explain(engine, store, actor, request, ids, now, subjects)
        finally:
            await engine.aclose()
        if candidate_path is None:
            return {"in_force": in_force.as_json()}
        engine = await open_candidate(read_candidate(candidate_path))
        try:
            other = await explain(engine, store, actor, request, ids, now, subjects)
        finally:
            await engine.aclose()
        return {"in_force": in_force.as_json(), "candidate": other.as_json(), "differences": differences(in_force, other)}
    finally:
        close_store(store)


@policy.command("check")
@click.argument("directory", required=False, type=click.Path(path_type=Path))
@click.option("--strict", is_flag=True, help="Fail on warnings too.")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def policy_check(directory: Path | None, strict: bool, output_format: str) -> None:
    """Compile the policies, validate the data document, warn on engine divergence; no server needed."""
    from gateway.policy_tools.check import check_policies

    report = check_policies(directory or settings_from().policies_dir)
    if output_format == "json":
        click.echo(json.dumps(report.as_json(strict), indent=2))
    else:
        for finding in report.findings:
            click.echo(str(finding))
        verdict = "passed" if report.passed(strict) else "failed"
        click.echo(f"{len(report.errors)} errors, {len(report.warnings)} warnings: {verdict}")
    sys.exit(0 if report.passed(strict) else 1)
