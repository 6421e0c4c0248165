"""`gateway policy`: impact, bundle, test, explain and check."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from core.errors import GatewayError
from gateway.cli.common import settings_from, store_options
from gateway.settings import Settings, load_settings


@click.group()
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

    from gateway.policy_tools.impact import parse_window
    from gateway.policy_tools.impact_report import summary

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
    """Compile the policies, validate the data document, warn on engine divergence, and run the
    policy's Rego tests where the gateway evaluates it (the compiled path); no server needed."""
    from gateway.policy_tools.check import check_policies

    settings = settings_from()
    report = check_policies(directory or settings.policies_dir, compiled=settings.policy_compiled)
    if output_format == "json":
        click.echo(json.dumps(report.as_json(strict), indent=2))
    else:
        for finding in report.findings:
            click.echo(str(finding))
        verdict = "passed" if report.passed(strict) else "failed"
        click.echo(f"{len(report.errors)} errors, {len(report.warnings)} warnings: {verdict}")
    sys.exit(0 if report.passed(strict) else 1)
