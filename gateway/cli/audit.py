"""`gateway audit`: keys, verify, witness, proofs, evidence packs, checkpoints and pruning of the audit trail."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from core.errors import GatewayError
from gateway.cli.common import settings_from, store_options
from gateway.settings import Settings

F = TypeVar("F", bound=Callable[..., Any])

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from audit.chain import Pruned
    from audit.integrity import Verified, Verifier


def _paths(name: str, help: str, required: bool = False, dirs: bool = True) -> Callable[[F], F]:
    """An option naming files (or directories, with `dirs`), given once for each."""
    return click.option(name, type=click.Path(path_type=Path, dir_okay=dirs), required=required, multiple=True, help=help)


@click.group()
def audit() -> None:
    """Audit trail tools."""


@audit.command("keygen")
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path), help="Directory for the new key pair.")
def audit_keygen(out_dir: Path) -> None:
    """Write a new Ed25519 key pair for signing audit checkpoints: the private key (mode 0600) for
    GATEWAY_AUDIT_SIGNING_KEY, and the public key and verifier key for auditors."""
    from audit.integrity import generate

    try:
        paths = generate(out_dir)
    except GatewayError as exc:
        raise click.ClickException(exc.message) from exc
    click.echo(json.dumps({name: str(path) for name, path in paths.items()}, indent=2))


@audit.command("verify")
@store_options
@click.option("--tenant", help="Check this tenant's chain only (default: every chain).")
@click.option("--checkpoints", type=click.Path(path_type=Path), help="The signed checkpoint file to hold the chains against.")
@_paths(
    "--public-key",
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
    from audit.integrity import load_verifier, read_checkpoints, verify
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
    click.echo(json.dumps(report.wire(), indent=2))
    click.echo(verdict(report), err=True)
    sys.exit(0 if report.ok else 1)


def verdict(report: "Verified") -> str:
    """One line for people: the first problem, or what was verified and what is not yet covered."""
    broken = report.first_broken
    if not report.ok and broken is not None:
        at = f" at position {broken.seq}" if broken.seq is not None else ""
        return f"FAILED: chain {broken.chain}{at}: {broken.reason}"
    if not report.signed:
        return f"OK: {report.rows} rows in {len(report.chains)} chains link and match their hashes (no checkpoints given)"
    adopted = "".join(
        f"; chain {name} was {entry.adopted.what}" for name, entry in sorted(report.chains.items()) if entry.adopted is not None
    )
    return (
        f"OK: {report.checkpointed} rows match signed checkpoints; {report.not_yet_checkpointed} rows are not yet "
        f"checkpointed (checked for links and hashes only){adopted}"
    )


@audit.command("log-key")
@click.option("--tenant", required=True, help="The tenant whose chain a C2SP witness is to know ('' for calls without one).")
@click.option(
    "--public-key",
    type=click.Path(path_type=Path),
    required=True,
    help="The gateway's public key (PEM or verifier key, `gateway audit keygen`).",
)
def audit_log_key(tenant: str, public_key: Path) -> None:
    """Print a chain's C2SP origin and the gateway's verifier key named as that origin: what a C2SP
    witness such as litewitness is told (`witnessctl add-log -origin ORIGIN`, `witnessctl add-key
    -origin ORIGIN -key VKEY`). The checkpoints carry a signature under this name as well."""
    from audit.chain import chain_of
    from audit.integrity import load_verifier, origin_of, verifier_key

    try:
        verifier = load_verifier(public_key)
    except GatewayError as exc:
        raise click.ClickException(exc.message) from exc
    origin = origin_of(chain_of(tenant or None))
    click.echo(json.dumps({"origin": origin, "vkey": verifier_key(origin, verifier.public)}, indent=2))


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
    refuses a fork. Its cosignatures are C2SP cosignature/v1 lines; it prints its verifier key at
    start. Point GATEWAY_AUDIT_WITNESS_URL at it (or at litewitness)."""
    import uvicorn

    from audit.integrity import COSIGNATURE_V1, load_signer, load_verifier, verifier_key, witness_signer

    try:
        load_verifier(log_key)
        signer = witness_signer(load_signer(key))
    except GatewayError as exc:
        raise click.ClickException(exc.message) from exc
    public = verifier_key(signer.name, signer.private.public_key(), COSIGNATURE_V1)
    click.echo(f"witness cosignature key (for verify-pack --witness-key): {public}", err=True)
    os.environ.update(
        {"GATEWAY_WITNESS_STATE": str(state), "GATEWAY_WITNESS_LOG_KEY": str(log_key), "GATEWAY_WITNESS_KEY": str(key)}
    )
    uvicorn.run("gateway.http.witness:app", factory=True, host=host, port=port, log_level="info")


@audit.command("verify-proof")
@click.argument("proof", type=click.Path(path_type=Path))
@_paths(
    "--public-key",
    required=True,
    help="The public key (PEM or verifier key) the checkpoint was signed with; again for each key it replaced.",
)
def audit_verify_proof(proof: Path, public_key: tuple[Path, ...]) -> None:
    """Check one trace's proof (GET /v1/audit/traces/{id}/proof) with nothing but the public key:
    the row's hash from its content, its inclusion path to the Merkle root, the checkpoint's
    signature over that root. Exits 1 and says what does not hold."""
    from audit.integrity import load_verifier, verify_proof

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


def _instant(name: str, value: str) -> "datetime":
    from core.instants import parse_rfc3339

    try:
        return parse_rfc3339(value)
    except ValueError as exc:
        raise click.ClickException(f"--{name}: {exc} (an RFC 3339 instant with its offset, e.g. 2026-11-30T00:00:00Z)") from exc


@audit.command("export")
@store_options
@click.option("--since", required=True, help="The period's start, RFC 3339 with its offset (included).")
@click.option("--until", required=True, help="The period's end, RFC 3339 with its offset (excluded).")
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path), help="A new or empty directory for the pack.")
@click.option("--tenant", help="The tenant whose chain to export (default: the store's only chain).")
@_paths(
    "--known",
    dirs=False,
    help="Checkpoint notes the auditor holds (a witness's, an earlier pack's): the pack's rows reach "
    "each one's position, so verify-pack --known can hold it against them. Repeatable.",
)
def audit_export(since: str, until: str, out_dir: Path, tenant: str | None, known: tuple[Path, ...], **flags: Any) -> None:
    """Write an evidence pack of one tenant's audit rows over a period, for an outside auditor to
    check offline with `gateway audit verify-pack`: the rows with everything their hashes cover,
    the signed checkpoints they tie to and the public keys, the policy revisions in force, the
    compliance overview's figures, a manifest of digests and a README (docs/evidence-pack.md). When
    this gateway signs, the rows written since its last checkpoint are signed first."""
    from audit.chain import NO_TENANT, chains_in
    from audit.evidence import gateway_version, signing_of, write_pack
    from core.instants import utc_now
    from core.store import close_store, open_store
    from gateway.context import build_checkpointer

    start, end = _instant("since", since), _instant("until", until)
    if end <= start:
        raise click.ClickException("--until: must come after --since")
    settings = settings_from(**flags)
    engine = open_store(settings.effective_database_url)
    try:
        if tenant is None:
            with engine.connect() as conn:
                chains = chains_in(conn)
            if len(chains) != 1:
                raise click.ClickException(f"--tenant: the store holds {len(chains)} chains; name the tenant to export")
            tenant = "" if chains[0] == NO_TENANT else chains[0]
        reach = _known_sizes(known, tenant)
        signing = signing_of(build_checkpointer(settings, engine), catch_up=True, ending=(tenant, end))
        manifest = write_pack(engine, tenant, start, end, out_dir, signing, gateway_version(), utc_now(), reach)
    except GatewayError as exc:
        raise click.ClickException(exc.message) from exc
    finally:
        close_store(engine)
    click.echo(
        json.dumps({"pack": str(out_dir), **{k: manifest[k] for k in ("tenant", "period", "counts", "tied_to")}}, indent=2)
    )


def _known_sizes(paths: tuple[Path, ...], tenant: str) -> list[int]:
    """The positions of the tenant's chain that checkpoint notes name (read, not verified: the
    auditor verifies them against the pack)."""
    from audit.chain import chain_of
    from audit.integrity import Checkpoint, CheckpointLog, NoteError

    sizes = []
    for path in paths:
        if not path.is_file():
            raise click.ClickException(f"--known: {path} cannot be read")
        for line, note in CheckpointLog(path).notes():
            try:
                checkpoint = Checkpoint.parse(note.partition("\n\n")[0] + "\n", line)
            except NoteError as exc:
                raise click.ClickException(f"--known: {path} line {line}: {exc}") from exc
            if checkpoint.chain == chain_of(tenant):
                sizes.append(checkpoint.size)
    return sizes


@audit.command("verify-pack")
@click.argument("pack", type=click.Path(path_type=Path))
@_paths(
    "--public-key",
    help="The gateway's public key (PEM or verifier key) as you received it; again for each key it replaced. "
    "Without it, the pack's own keys are used, which proves less.",
)
@_paths(
    "--known",
    dirs=False,
    help="Checkpoint notes you hold from elsewhere (a witness's cosigned note, one from an earlier pack; "
    "several may be pasted in one file): each must lie within the pack's rows and match them. Repeatable.",
)
@_paths(
    "--witness-key",
    dirs=False,
    help="A witness's verifier key: its cosignatures on the pack's checkpoints are checked (a forged one fails). "
    "Signature lines of witnesses without a key are reported as not checked. Repeatable.",
)
@click.option(
    "--allow-uncovered",
    is_flag=True,
    help="Accept rows of the period under no signed checkpoint in the pack (checked for hashes and links "
    "only); without it they fail the check.",
)
def audit_verify_pack(
    pack: Path, public_key: tuple[Path, ...], known: tuple[Path, ...], witness_key: tuple[Path, ...], allow_uncovered: bool
) -> None:
    """Check an evidence pack (`gateway audit export`, GET /v1/audit/evidence) offline, without a
    database or network: file digests, every row's hash, link and position, the checkpoints'
    signatures and what they sign, that every row of the period is under one of them, the
    checkpoints you hold (--known) and the witnesses' cosignatures (--witness-key), the manifest's
    claims, the figures and policy revisions recomputed. Prints the report, the first problem (file
    and line) on stderr, and exits 1 if there is one."""
    from audit.evidence import Trust, check_pack, verdict
    from audit.integrity import load_verifier

    if not (pack / "manifest.json").is_file():
        raise click.ClickException(f"{pack}: not an evidence pack (no manifest.json)")
    try:
        verifiers = [load_verifier(key) for key in public_key] if public_key else None
        witnesses = [_witness_key(key) for key in witness_key]
    except GatewayError as exc:
        raise click.ClickException(exc.message) from exc
    report = check_pack(pack, trust=Trust(verifiers, known, witnesses, allow_uncovered))
    click.echo(json.dumps(report.wire(), indent=2))
    click.echo(verdict(report), err=True)
    sys.exit(0 if report.ok else 1)


def _witness_key(path: Path) -> "Verifier":
    """A witness's verifier key file (`<name>+<id>+<key>`): a C2SP cosignature/v1 key (litewitness,
    `gateway audit witness`) or an Ed25519 note key."""
    from audit.integrity import NoteError, parse_verifier

    try:
        return parse_verifier(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise click.ClickException(f"--witness-key: {path} cannot be read") from exc
    except NoteError as exc:
        raise click.ClickException(f"--witness-key: {path}: {exc}") from exc


@audit.command("checkpoint")
@store_options
@click.option(
    "--adopt",
    is_flag=True,
    help="Also sign chains found without a checkpoint of them, as they are: an operator's decision to trust "
    "what the store holds, recorded as 'adopted <row> <time>' in that checkpoint and every later one of the chain.",
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
    removed = prune(engine, before, [chain for chain, report in reports.items() if report.ok], checkpointer.cut_before)
    checkpointer.pruned({chain: (p.oldest, p.prev_hash) for chain, p in removed.items()})
    return removed, {chain: report.first_broken.reason for chain, report in reports.items() if report.first_broken}
