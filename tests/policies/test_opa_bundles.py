"""Bundles in both directions with the real `opa` binary: what `opa build` writes (signed and not)
loads through the gateway's bundle loader and hot reload, and what the gateway accepts or writes,
`opa run --bundle` accepts too, deciding alike."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.errors import ConfigurationError
from gateway.policy.bundle import PolicyBundle, read_bundle, write_archive
from gateway.policy.embedded import EmbeddedEngine
from gateway.policy.signatures import VerificationKey
from gateway.settings import PROJECT_POLICIES
from tests.conftest import open_gateway
from tests.engines import OpaServer, opa_command
from tests.gateway.fixtures import seed
from tests.policies.test_policy_reload import QUESTION, reload, rsa_pair, without_sales

REQUEST = {
    "actor": {"id": "alice", "tenant": "acme", "roles": ["agent"], "groups": ["sales"], "clearance": "internal"},
    "task": {"type": "account_followup", "scope": "sales"},
    "request": {},
    "now": "2026-12-01T00:00:00Z",
}


def opa_build(source: Path, output: Path, revision: str, *signing: str) -> Path:
    """`opa build --bundle . --revision R [signing flags]` run inside `source`, as a platform team would."""
    built = opa_command("build", "--bundle", ".", "--revision", revision, "--output", output, *signing, cwd=source)
    assert built.returncode == 0, built.stdout + built.stderr
    return output


def keys(tmp_path: Path) -> tuple[Path, Path]:
    private, public = rsa_pair()
    (tmp_path / "private.pem").write_text(private)
    (tmp_path / "public.pem").write_text(public)
    return tmp_path / "private.pem", tmp_path / "public.pem"


def test_an_opa_build_bundle_reads_as_the_directory_it_was_built_from(tmp_path: Path) -> None:
    bundle = read_bundle(opa_build(PROJECT_POLICIES, tmp_path / "b.tar.gz", "r1"))
    directory = read_bundle(PROJECT_POLICIES)
    assert bundle.label == "r1" and bundle.revision.startswith("sha256:")  # the manifest's revision is a label
    assert bundle.data == directory.data  # `opa build` merges every data.json into one at the root
    # `opa build` re-formats each module (opa fmt): the same modules at the same paths, deciding alike
    assert sorted(path for path, _ in bundle.modules) == sorted(path for path, _ in directory.modules)
    assert len(bundle.tests) == len(directory.tests) > 0  # its _test.rego files are kept apart, as ours
    for policy_input in (REQUEST, {**REQUEST, "task": {"type": "research"}}, {**REQUEST, "actor": {}}):
        assert embedded(bundle, "request", policy_input) == embedded(directory, "request", policy_input)


def test_a_signed_opa_build_bundle_serves_and_hot_reloads(tmp_path: Path, policy_copy: Path) -> None:
    private, public = keys(tmp_path)
    bundle = tmp_path / "policy.tar.gz"
    signing = ("--signing-key", str(private), "--signing-alg", "RS256")
    opa_build(policy_copy, bundle, "r1", *signing)
    with open_gateway(
        f"sqlite:///{tmp_path / 'g.db'}", tmp_path, policy_bundle=str(bundle), policy_bundle_key=str(public)
    ) as gateway:
        alice = seed(gateway)
        admin = gateway.key("pat", tenant="platform", roles=("policy_admin",))
        key = VerificationKey.load(str(public), "RS256")
        r1 = read_bundle(bundle, key).revision  # the digest of what it holds; "r1" is its label
        before = gateway.retrieve(alice, QUESTION)
        assert before.status_code == 200 and before.json()["decision"]["policy_revision"] == r1
        assert before.json()["items"]
        # a new revision, built and signed by opa, replaces the file: reload serves it
        without_sales(policy_copy)
        opa_build(policy_copy, tmp_path / "next.tar.gz", "r2", *signing)
        r2 = read_bundle(tmp_path / "next.tar.gz", key).revision
        (tmp_path / "next.tar.gz").replace(bundle)
        switched = reload(gateway, admin).json()["reload"]
        assert switched["status"] == "switched" and switched["revision"] == r2 != r1
        after = gateway.retrieve(alice, QUESTION)
        assert after.status_code == 403 and after.json()["error"]["code"] == "policy_denied"
        # one built with another key is refused, and r2 goes on serving
        (tmp_path / "other").mkdir()
        other, _ = keys(tmp_path / "other")
        opa_build(policy_copy, tmp_path / "forged.tar.gz", "r3", "--signing-key", str(other), "--signing-alg", "RS256")
        (tmp_path / "forged.tar.gz").replace(bundle)
        refused = reload(gateway, admin)
        assert refused.status_code >= 400 and "r3" not in refused.text
        assert gateway.retrieve(alice, QUESTION).json()["error"]["code"] == "policy_denied"
        info = gateway.client.get("/v1/policy", headers=gateway.auth(admin)).json()
        assert info["revision"] == r2 and info["label"] == "r2"


def test_an_unsigned_opa_build_bundle_is_refused_when_a_key_is_configured(tmp_path: Path) -> None:
    _, public = keys(tmp_path)
    bundle = opa_build(PROJECT_POLICIES, tmp_path / "b.tar.gz", "r1")
    with pytest.raises(ConfigurationError, match="not signed"):
        read_bundle(bundle, VerificationKey.load(str(public), "RS256"))


def embedded(bundle: PolicyBundle, entrypoint: str, policy_input: dict[str, Any]) -> Any:
    engine = EmbeddedEngine(bundle)
    try:
        return asyncio.run(engine.evaluate(entrypoint, policy_input))
    finally:
        asyncio.run(engine.aclose())


def decide(url: str, entrypoint: str, policy_input: dict[str, Any]) -> Any:
    response = httpx.post(f"{url}/v1/data/gateway/{entrypoint}", json={"input": policy_input}, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()["result"]


@pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "signed"])
def test_a_bundle_the_gateway_writes_and_accepts_is_one_opa_run_accepts(tmp_path: Path, signed: bool) -> None:
    private, public = keys(tmp_path)
    archive = write_archive(PROJECT_POLICIES, "g1", private.read_text() if signed else None)
    bundle = tmp_path / "gateway-bundle.tar.gz"
    bundle.write_bytes(archive)
    ours = read_bundle(bundle, VerificationKey.load(str(public), "RS256") if signed else None)  # the gateway accepts it
    extra = ("--verification-key", str(public), "--signing-alg", "RS256") if signed else ()
    with OpaServer((bundle,), bundle=True, extra=extra) as server:
        served = httpx.get(f"{server.url}/v1/data/gateway/config", timeout=10).json()["result"]
        assert served == ours.data["gateway"]["config"]
        decision = decide(server.url, "request", REQUEST)
        assert decision["allow"] is True and decision["constraints"]["tenant"] == "acme"
        provenance = httpx.post(f"{server.url}/v1/data/gateway/request?provenance", json={"input": REQUEST}, timeout=10)
        assert [b["revision"] for b in provenance.json()["provenance"]["bundles"].values()] == ["g1"]


def test_the_policies_directory_is_a_bundle_opa_run_accepts_as_it_is(tmp_path: Path) -> None:
    copy = tmp_path / "policies"
    shutil.copytree(PROJECT_POLICIES, copy)
    with OpaServer((copy,), bundle=True) as server:
        assert decide(server.url, "request", REQUEST)["allow"] is True
    with OpaServer((copy,)) as server:  # and loaded as plain files (every .json under it is data)
        assert decide(server.url, "request", REQUEST)["allow"] is True
