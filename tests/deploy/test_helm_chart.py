"""helm/governed-gateway rendered with several value sets through Helm's Go SDK, linted, every
manifest validated against the Kubernetes schemas, and its security-relevant fields asserted."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from gateway.http.app import create_app
from gateway.policy.bundle import read_bundle
from gateway.settings import PROJECT_POLICIES, Settings
from tests.deploy.chart import (
    CHART_DIR,
    FULLNAME,
    KUBE_VERSIONS,
    container,
    containers,
    env,
    kinds,
    manifests,
    one,
    pod_spec,
    render,
)

# What the Secrets in the cluster hold. The chart takes only their names and keys: none of these
# values may appear anywhere in what it renders.
CLUSTER_SECRETS = {
    "gw-db": {"url": "postgresql+psycopg://gateway:Db-Pa55word-7d1f@pg.data:5432/gateway"},
    "gw-jwt": {"secret": "jwt-shared-secret-0123456789abcdef0123456789"},
    "gw-audit": {
        "key": "audit-hmac-key-0123456789abcdef0123456789ab",
        "session": "audit-session-key-0123456789abcdef01234567",
        "signing.pem": "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIAuditSigningKeyMaterial\n-----END PRIVATE KEY-----",
    },
    "gw-llm": {"key": "sk-llm-key-9f8e7d6c5b4a"},
    "gw-embed": {"key": "emb-key-1a2b3c4d5e6f"},
    "gw-bundle": {"pub.pem": "-----BEGIN PUBLIC KEY-----\nBundleVerificationKeyMaterial\n-----END PUBLIC KEY-----"},
}

SCALE_OUT: dict[str, Any] = {
    "replicaCount": 3,
    "secrets": {
        "databaseUrl": {"name": "gw-db", "key": "url"},
        "jwtSecret": {"name": "gw-jwt", "key": "secret"},
        "auditKey": {"name": "gw-audit", "key": "key"},
        "auditSessionKey": {"name": "gw-audit", "key": "session"},
        "auditSigningKey": {"name": "gw-audit", "key": "signing.pem"},
        "llmKey": {"name": "gw-llm", "key": "key"},
        "embeddingsKey": {"name": "gw-embed", "key": "key"},
        "policyBundleKey": {"name": "gw-bundle", "key": "pub.pem"},
    },
    "audit": {"checkpointsClaim": "gw-audit-checkpoints"},
    "policies": {"source": "bundle", "bundle": {"url": "https://bundles.example.com/v1/gateway.tar.gz", "scope": "prod"}},
    "opa": {"sidecar": {"enabled": True, "decisionLogs": {"serviceUrl": "https://decisions.example.com"}}},
    "otel": {"exporter": "otlp", "endpoint": "http://otel-collector.observability:4318", "serviceName": "gateway-prod"},
    "gateway": {"env": {"GATEWAY_ADMISSION_CAPACITY": "64", "GATEWAY_LLM_URL": "https://llm.example.com/v1"}},
    "networkPolicy": {
        "egress": {
            "database": {"cidrs": ["10.20.0.0/16"], "podSelector": {}, "namespaceSelector": {}, "ports": [5432]},
            "otelCollector": {
                "cidrs": [],
                "podSelector": {"matchLabels": {"app": "otel-collector"}},
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}},
                "ports": [4318],
            },
            "bundleServer": {"cidrs": ["192.0.2.10/32"], "podSelector": {}, "namespaceSelector": {}, "ports": [443]},
        }
    },
}

INGRESS_HPA: dict[str, Any] = {
    "secrets": {"databaseUrl": {"name": "gw-db", "key": "url"}},
    "networkPolicy": {
        "egress": {
            "database": {
                "cidrs": [],
                "podSelector": {"matchLabels": {"app": "postgresql"}},
                "namespaceSelector": {},
                "ports": [5432],
            }
        }
    },
    "autoscaling": {
        "enabled": True,
        "minReplicas": 2,
        "maxReplicas": 8,
        "targetCPUUtilizationPercentage": 60,
        "targetMemoryUtilizationPercentage": 80,
    },
    "ingress": {
        "enabled": True,
        "className": "nginx",
        "hosts": [{"host": "gateway.example.com", "paths": [{"path": "/", "pathType": "Prefix"}]}],
        "tls": [{"secretName": "gateway-tls", "hosts": ["gateway.example.com"]}],
    },
}


def policy_files() -> dict[str, str]:
    """The project's policies, as a platform team would pass them (`--set-file`)."""
    return {
        path.relative_to(PROJECT_POLICIES).as_posix(): path.read_text(encoding="utf-8")
        for path in sorted(PROJECT_POLICIES.rglob("*"))
        if path.is_file() and path.suffix in {".rego", ".json"}
    }


CONFIGMAP: dict[str, Any] = {"policies": {"source": "configMap", "files": policy_files()}}

VALUE_SETS: dict[str, dict[str, Any] | None] = {
    "defaults": None,
    "postgres-opa-sidecar-bundle": SCALE_OUT,
    "ingress-hpa": INGRESS_HPA,
    "policies-configmap": CONFIGMAP,
}


@pytest.fixture(scope="module")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(CHART_DIR) as loaded:
        yield loaded


@pytest.fixture(scope="module")
def rendered(chart: helm.Chart) -> dict[str, dict[str, str]]:
    return {name: render(chart, values) for name, values in VALUE_SETS.items()}


def objects_of(rendered: dict[str, dict[str, str]], name: str) -> list[dict[str, Any]]:
    return manifests(rendered[name])


# --- lint and Kubernetes schemas -------------------------------------------------------------------


@pytest.mark.parametrize("name", VALUE_SETS)
def test_chart_lints_clean_in_strict_mode(name: str) -> None:
    report = helm.lint(CHART_DIR, VALUE_SETS[name], strict=True, namespace="retrieval", kube_version="v1.29.0")
    assert report["errors"] == []
    findings = [m for m in report["messages"] if m["severity"] >= 2]  # warnings and errors; infos pass
    assert findings == []


@pytest.mark.parametrize("name", VALUE_SETS)
@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_every_manifest_is_valid_kubernetes(rendered: dict[str, dict[str, str]], name: str, kube_version: str) -> None:
    objects = objects_of(rendered, name)
    assert {"Deployment", "Service", "ServiceAccount", "NetworkPolicy"} <= kinds(objects)
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, kube_version, strict=True)  # strict: unknown fields are errors too
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(
                f"{name}: {obj['kind']} {obj['metadata']['name']} is invalid for Kubernetes {kube_version}: {exc.message} at {list(exc.path)}"
            )


def test_every_resource_carries_the_recommended_labels(rendered: dict[str, dict[str, str]]) -> None:
    for name in VALUE_SETS:
        for obj in objects_of(rendered, name):
            labels = obj["metadata"]["labels"]
            assert labels["app.kubernetes.io/name"] == "governed-gateway"
            assert labels["app.kubernetes.io/instance"] == "gw"
            assert labels["app.kubernetes.io/managed-by"] == "Helm"
            assert labels["helm.sh/chart"] == "governed-gateway-0.1.0"


# --- security context ------------------------------------------------------------------------------


def workloads(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] in {"Deployment", "Job"}]


@pytest.mark.parametrize("name", VALUE_SETS)
def test_every_container_runs_non_root_read_only_without_privileges(rendered: dict[str, dict[str, str]], name: str) -> None:
    checked = 0
    for workload in workloads(objects_of(rendered, name)):
        pod = pod_spec(workload)
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] > 0
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["automountServiceAccountToken"] is False
        assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
        for c in containers(workload):
            context = c["securityContext"]
            assert context["runAsNonRoot"] is True, c["name"]
            assert context["runAsUser"] > 0, c["name"]
            assert context["readOnlyRootFilesystem"] is True, c["name"]
            assert context["allowPrivilegeEscalation"] is False, c["name"]
            assert context["capabilities"] == {"drop": ["ALL"]}, c["name"]
            assert context["seccompProfile"] == {"type": "RuntimeDefault"}, c["name"]
            assert not context.get("privileged"), c["name"]
            assert "resources" in c and c["resources"]["limits"]["memory"], c["name"]
            checked += 1
    assert checked >= 1


def test_writable_paths_are_volumes_because_the_root_filesystem_is_read_only(rendered: dict[str, dict[str, str]]) -> None:
    deployment = one(objects_of(rendered, "defaults"), "Deployment")
    gateway = container(deployment, "gateway")
    mounts = {m["mountPath"]: m["name"] for m in gateway["volumeMounts"]}
    volumes = {v["name"]: v for v in pod_spec(deployment)["volumes"]}
    data_dir = env(gateway)["GATEWAY_DATA_DIR"]["value"]
    # the store, /tmp, and ~/.cache of the image's user (onnxruntime opens a small database there at start)
    for path in (data_dir, "/tmp", "/home/gateway/.cache"):
        assert path in mounts, path
        assert "emptyDir" in volumes[mounts[path]], path


def test_service_account_does_not_mount_a_token(rendered: dict[str, dict[str, str]]) -> None:
    account = one(objects_of(rendered, "defaults"), "ServiceAccount")
    assert account["automountServiceAccountToken"] is False
    deployment = one(objects_of(rendered, "defaults"), "Deployment")
    assert pod_spec(deployment)["serviceAccountName"] == account["metadata"]["name"]


# --- secrets by reference only ---------------------------------------------------------------------


def test_secrets_are_referenced_never_inlined(rendered: dict[str, dict[str, str]]) -> None:
    text = "\n".join(rendered["postgres-opa-sidecar-bundle"].values())
    for secret, entries in CLUSTER_SECRETS.items():
        for key, value in entries.items():
            for fragment in [value] + value.splitlines()[1:2]:  # the whole value, and a key's body line
                assert fragment not in text, f"{secret}/{key} leaked into the rendered chart"
    objects = objects_of(rendered, "postgres-opa-sidecar-bundle")
    assert "Secret" not in kinds(objects)
    gateway = env(container(one(objects, "Deployment"), "gateway"))
    expected = {
        "GATEWAY_DATABASE_URL": ("gw-db", "url"),
        "GATEWAY_JWT_SECRET": ("gw-jwt", "secret"),
        "GATEWAY_AUDIT_KEY": ("gw-audit", "key"),
        "GATEWAY_AUDIT_SESSION_KEY": ("gw-audit", "session"),
        "GATEWAY_LLM_KEY": ("gw-llm", "key"),
        "GATEWAY_EMBEDDINGS_KEY": ("gw-embed", "key"),
        "GATEWAY_POLICY_BUNDLE_KEY": ("gw-bundle", "pub.pem"),
    }
    for name, (secret, key) in expected.items():
        assert "value" not in gateway[name], name
        assert gateway[name]["valueFrom"]["secretKeyRef"] == {"name": secret, "key": key}, name
    # the checkpoint signing key is a file: mounted from its Secret, the setting names the path
    volumes = {v["name"]: v for v in pod_spec(one(objects, "Deployment"))["volumes"]}
    assert volumes["audit-signing-key"]["secret"]["secretName"] == "gw-audit"
    assert gateway["GATEWAY_AUDIT_SIGNING_KEY"]["value"] == "/etc/gateway/audit/signing-key.pem"
    # the checkpoints on a claim of their own, outside the data volume
    assert volumes["audit-checkpoints"]["persistentVolumeClaim"] == {"claimName": "gw-audit-checkpoints"}
    assert gateway["GATEWAY_AUDIT_CHECKPOINTS"]["value"] == "/var/lib/gateway-audit/checkpoints.jsonl"
    mounts = {m["name"]: m["mountPath"] for m in container(one(objects, "Deployment"), "gateway")["volumeMounts"]}
    assert mounts["audit-checkpoints"] == "/var/lib/gateway-audit" and not mounts["audit-checkpoints"].startswith(
        mounts["data"] + "/"
    )
    # the migration Job reads the database URL from the same Secret
    job = env(container(one(objects, "Job"), "migrate"))
    assert job["GATEWAY_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "gw-db", "key": "url"}


@pytest.mark.parametrize(
    "values, field",
    [
        ({"gateway": {"env": {"GATEWAY_DATABASE_URL": CLUSTER_SECRETS["gw-db"]["url"]}}}, "GATEWAY_DATABASE_URL"),
        ({"gateway": {"env": {"GATEWAY_LLM_KEY": CLUSTER_SECRETS["gw-llm"]["key"]}}}, "GATEWAY_LLM_KEY"),
        ({"secrets": {"databaseUrl": {"name": CLUSTER_SECRETS["gw-db"]["url"], "key": "url"}}}, "/secrets/databaseUrl/name"),
    ],
)
def test_a_secret_value_put_where_a_reference_belongs_is_refused(chart: helm.Chart, values: dict[str, Any], field: str) -> None:
    with pytest.raises(helm.HelmValuesError) as refused:
        render(chart, values)
    assert field in str(refused.value)


# --- environment: real settings only ---------------------------------------------------------------

SETTING_NAMES = {f"GATEWAY_{f.name.upper()}" for f in fields(Settings)}


@pytest.mark.parametrize("name", VALUE_SETS)
def test_every_gateway_env_var_is_a_real_setting(rendered: dict[str, dict[str, str]], name: str) -> None:
    seen = 0
    for workload in workloads(objects_of(rendered, name)):
        for c in containers(workload):
            names = [e["name"] for e in c.get("env", [])]
            assert len(names) == len(set(names)), f"{c['name']}: a variable set twice"
            for variable in env(c):
                assert variable in SETTING_NAMES, f"{c['name']}: {variable} is not a setting of gateway/settings.py"
                seen += 1
    assert seen >= 4


def test_the_schema_offers_only_real_settings_in_gateway_env(chart: helm.Chart) -> None:
    offered = set(chart.schema["properties"]["gateway"]["properties"]["env"]["propertyNames"]["enum"])  # type: ignore[index]
    assert offered <= SETTING_NAMES
    # every setting the chart does not set itself (those and the secrets are refused) is offered
    managed = {
        name for workload in workloads(manifests(render(chart, SCALE_OUT))) for c in containers(workload) for name in env(c)
    }
    managed -= set(SCALE_OUT["gateway"]["env"])
    managed |= {
        "GATEWAY_JWT_PUBLIC_KEY",
        "GATEWAY_WEAVIATE_API_KEY",
        "GATEWAY_POLICIES_DIR",
        "GATEWAY_DECISION_LOG",
        "GATEWAY_DECISION_LOG_URL",
        "GATEWAY_OPA_URL",
        "GATEWAY_OPA_PUSH_POLICIES",
        "GATEWAY_POLICY_POLL_SECONDS",
    }
    missing = sorted(SETTING_NAMES - managed - offered)
    assert missing == [], f"add to gateway.env's propertyNames enum in values.schema.json: {missing}"
    assert "GATEWAY_ADMISSION_CAPACITY" in offered
    with pytest.raises(helm.HelmValuesError, match="GATEWAY_ADMISION_CAPACITY"):
        chart.validate_schema({"gateway": {"env": {"GATEWAY_ADMISION_CAPACITY": "64"}}})  # a typo is refused


def test_extra_settings_pass_through_as_strings(rendered: dict[str, dict[str, str]]) -> None:
    gateway = env(container(one(objects_of(rendered, "postgres-opa-sidecar-bundle"), "Deployment"), "gateway"))
    assert gateway["GATEWAY_ADMISSION_CAPACITY"]["value"] == "64"
    assert gateway["GATEWAY_OTEL_EXPORTER"]["value"] == "otlp"
    assert gateway["GATEWAY_OTEL_ENDPOINT"]["value"] == "http://otel-collector.observability:4318"
    assert gateway["GATEWAY_OTEL_SERVICE_NAME"]["value"] == "gateway-prod"


# --- probes and graceful shutdown ------------------------------------------------------------------


def test_probes_use_the_service_health_and_readiness_routes(rendered: dict[str, dict[str, str]]) -> None:
    routes = {getattr(route, "path", None) for route in create_app(Settings()).routes}
    gateway = container(one(objects_of(rendered, "defaults"), "Deployment"), "gateway")
    assert gateway["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert gateway["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert gateway["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert {"/healthz", "/readyz"} <= routes


def test_shutdown_leaves_the_service_first_and_has_time_to_drain(rendered: dict[str, dict[str, str]]) -> None:
    deployment = one(objects_of(rendered, "defaults"), "Deployment")
    gateway = container(deployment, "gateway")
    sleep = gateway["lifecycle"]["preStop"]["exec"]["command"]
    assert sleep[0] == "sleep" and int(sleep[1]) >= 5
    grace = pod_spec(deployment)["terminationGracePeriodSeconds"]
    assert grace >= int(sleep[1]) + 30  # after the sleep: calls in flight, the decision log, the last checkpoint
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert gateway["args"][:3] == ["gateway", "serve", "--host"]
    drain = int(env(gateway)["GATEWAY_DRAIN_SECONDS"]["value"])  # uvicorn's bound on waiting for calls in flight
    assert int(sleep[1]) + drain < grace


def test_a_drain_longer_than_the_grace_period_is_refused(chart: helm.Chart) -> None:
    """Else the kubelet kills the pod mid-drain, before the decision log is flushed."""
    with pytest.raises(helm.HelmError, match="drainSeconds must stay under terminationGracePeriodSeconds"):
        render(chart, {"shutdown": {"preStopSleepSeconds": 10, "drainSeconds": 50, "terminationGracePeriodSeconds": 60}})


# --- network policy ---------------------------------------------------------------------------------


def test_network_policy_by_default_allows_dns_out_and_the_service_port_in_only(rendered: dict[str, dict[str, str]]) -> None:
    policy = one(objects_of(rendered, "defaults"), "NetworkPolicy")["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    assert policy["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/name": "governed-gateway",
        "app.kubernetes.io/instance": "gw",
    }
    assert policy["ingress"] == [{"ports": [{"protocol": "TCP", "port": 8080}]}]
    assert len(policy["egress"]) == 1
    assert sorted((p["protocol"], p["port"]) for p in policy["egress"][0]["ports"]) == [("TCP", 53), ("UDP", 53)]
    assert policy["egress"][0]["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}


def test_network_policy_allows_exactly_the_configured_peers(rendered: dict[str, dict[str, str]]) -> None:
    policy = one(objects_of(rendered, "postgres-opa-sidecar-bundle"), "NetworkPolicy")["spec"]
    rules = policy["egress"][1:]  # after DNS
    for rule in policy["egress"]:
        assert rule.get("to"), "an egress rule without `to` would allow every destination"
        assert rule.get("ports"), "an egress rule without ports would allow every port"
    cidrs = [peer["ipBlock"]["cidr"] for rule in rules for peer in rule["to"] if "ipBlock" in peer]
    assert cidrs == ["10.20.0.0/16", "192.0.2.10/32"]
    assert "0.0.0.0/0" not in json.dumps(policy)
    by_port = {rule["ports"][0]["port"]: rule for rule in rules}
    assert set(by_port) == {5432, 4318, 443}
    assert by_port[4318]["to"] == [
        {
            "podSelector": {"matchLabels": {"app": "otel-collector"}},
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}},
        }
    ]


def test_extra_egress_must_name_its_destination(chart: helm.Chart) -> None:
    with pytest.raises(helm.HelmValuesError, match="extraEgress"):
        render(chart, {"networkPolicy": {"extraEgress": [{"ports": [{"port": 443}]}]}})


# --- migration hook ---------------------------------------------------------------------------------


def test_migration_job_runs_before_install_and_upgrade(rendered: dict[str, dict[str, str]]) -> None:
    job = one(objects_of(rendered, "postgres-opa-sidecar-bundle"), "Job")
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert "before-hook-creation" in annotations["helm.sh/hook-delete-policy"]
    migrate = container(job, "migrate")
    assert migrate["args"] == ["gateway", "migrate"]  # reads GATEWAY_DATABASE_URL: no password in argv
    assert pod_spec(job)["restartPolicy"] == "Never"
    # not one of the serving pods: the Service never sends it a call
    service = one(objects_of(rendered, "postgres-opa-sidecar-bundle"), "Service")
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert not service["spec"]["selector"].items() <= labels.items()


def test_no_migration_job_on_the_embedded_store(rendered: dict[str, dict[str, str]]) -> None:
    assert "Job" not in kinds(objects_of(rendered, "defaults"))  # SQLite migrates itself at start


# --- OPA sidecar, bundle ----------------------------------------------------------------------------


def test_opa_sidecar_serves_the_bundle_and_the_gateway_asks_it(rendered: dict[str, dict[str, str]]) -> None:
    objects = objects_of(rendered, "postgres-opa-sidecar-bundle")
    deployment = one(objects, "Deployment")
    opa = container(deployment, "opa")
    assert opa in pod_spec(deployment)["initContainers"] and opa["restartPolicy"] == "Always"  # native sidecar
    assert opa["image"] == "openpolicyagent/opa:1.22.3-static"
    assert opa["args"][:2] == ["run", "--server"]
    assert "--addr=localhost:8181" in opa["args"]  # only the pod's own containers reach the API
    assert "--set-file=keys.gateway.key=/etc/opa-keys/bundle-key" in opa["args"]
    assert opa["startupProbe"]["httpGet"]["path"] == "/health?bundles=true"
    gateway = env(container(deployment, "gateway"))
    assert gateway["GATEWAY_OPA_URL"]["value"] == "http://localhost:8181"
    assert gateway["GATEWAY_OPA_PUSH_POLICIES"]["value"] == "false"
    assert gateway["GATEWAY_POLICY_BUNDLE"]["value"] == "https://bundles.example.com/v1/gateway.tar.gz"
    assert gateway["GATEWAY_POLICY_BUNDLE_SCOPE"]["value"] == "prod"
    config = yaml.safe_load(one(objects, "ConfigMap")["data"]["config.yaml"])
    assert config["services"]["bundles"]["url"] == "https://bundles.example.com"
    assert config["bundles"]["gateway"]["resource"] == "/v1/gateway.tar.gz"
    assert config["bundles"]["gateway"]["signing"] == {"keyid": "gateway", "scope": "prod"}
    assert config["keys"]["gateway"] == {"algorithm": "RS256"}  # the key itself comes from the Secret
    assert config["decision_logs"] == {"console": True, "service": "decision-logs", "reporting": {"max_delay_seconds": 10}}
    assert config["services"]["decision-logs"]["url"] == "https://decisions.example.com"


def test_opa_sidecar_without_a_bundle_is_refused(chart: helm.Chart) -> None:
    with pytest.raises(helm.HelmError, match="opa.sidecar.enabled needs policies.source bundle"):
        render(chart, {"opa": {"sidecar": {"enabled": True}}})


# --- HPA, PDB, ingress ------------------------------------------------------------------------------


def test_autoscaling_replaces_the_replica_count_and_a_budget_keeps_pods_up(rendered: dict[str, dict[str, str]]) -> None:
    objects = objects_of(rendered, "ingress-hpa")
    deployment, hpa, pdb = (
        one(objects, "Deployment"),
        one(objects, "HorizontalPodAutoscaler"),
        one(objects, "PodDisruptionBudget"),
    )
    assert "replicas" not in deployment["spec"]
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": FULLNAME}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 8)
    assert [m["resource"]["name"] for m in hpa["spec"]["metrics"]] == ["cpu", "memory"]
    assert pdb["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    ingress = one(objects, "Ingress")
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]
    assert backend == {"service": {"name": FULLNAME, "port": {"name": "http"}}}
    assert ingress["spec"]["tls"] == [{"secretName": "gateway-tls", "hosts": ["gateway.example.com"]}]


def test_one_pod_gets_no_disruption_budget_that_would_block_node_drains(rendered: dict[str, dict[str, str]]) -> None:
    assert "PodDisruptionBudget" not in kinds(objects_of(rendered, "defaults"))
    assert "PodDisruptionBudget" in kinds(objects_of(rendered, "postgres-opa-sidecar-bundle"))


@pytest.mark.parametrize(
    "values, peer",
    [
        ({"secrets": {"databaseUrl": {"name": "gw-db", "key": "url"}}}, "networkPolicy.egress.database is empty"),
        (
            {"policies": {"source": "bundle", "bundle": {"url": "https://bundles.example.com/gateway.tar.gz"}}},
            "networkPolicy.egress.bundleServer is empty",
        ),
        ({"otel": {"exporter": "otlp", "endpoint": "http://collector:4318"}}, "networkPolicy.egress.otelCollector is empty"),
        ({"opa": {"url": "http://opa.policy:8181"}}, "networkPolicy.egress.opa is empty"),
    ],
)
def test_a_peer_the_network_policy_would_block_is_refused(chart: helm.Chart, values: dict[str, Any], peer: str) -> None:
    with pytest.raises(helm.HelmError, match=peer):
        render(chart, values)
    render(chart, {**values, "networkPolicy": {"enabled": False}})  # without the policy nothing is blocked


def test_scaling_out_on_the_embedded_store_is_refused(chart: helm.Chart) -> None:
    with pytest.raises(helm.HelmError, match="secrets.databaseUrl.name is required"):
        render(chart, {"replicaCount": 3})


# --- policies from a ConfigMap ----------------------------------------------------------------------


def test_policies_from_a_configmap_load_as_the_same_bundle(rendered: dict[str, dict[str, str]], tmp_path: Path) -> None:
    """Lay the ConfigMap out as the kubelet does (timestamped directory, `..data` and per-entry
    symlinks), run the chart's own copy command, and load the result with the gateway's loader:
    the same revision and data as the policies it was made from."""
    objects = objects_of(rendered, "policies-configmap")
    configmap, deployment = one(objects, "ConfigMap"), one(objects, "Deployment")
    volume = next(v for v in pod_spec(deployment)["volumes"] if v["name"] == "policies-configmap")
    mounted, copied = tmp_path / "policies-configmap", tmp_path / "policies"
    stamp = mounted / "..2026_12_01_00_00_00.000000001"
    for item in volume["configMap"]["items"]:
        target = stamp / item["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(configmap["data"][item["key"]], encoding="utf-8")
    (mounted / "..data").symlink_to(stamp.name)
    for top in sorted({item["path"].split("/")[0] for item in volume["configMap"]["items"]}):
        (mounted / top).symlink_to(f"..data/{top}")
    copied.mkdir()
    copy = container(deployment, "copy-policies")
    script = (
        copy["command"][2]
        .replace("/etc/gateway/policies-configmap", str(mounted))
        .replace("/etc/gateway/policies/", f"{copied}/")
    )
    subprocess.run([shutil.which("sh") or "/bin/sh", "-c", script], check=True)
    shipped, loaded = read_bundle(PROJECT_POLICIES), read_bundle(copied)
    assert loaded.revision == shipped.revision
    assert loaded.data == shipped.data and list(loaded.modules) == list(shipped.modules)
    # and read straight from the volume, each file once, through the links (never the staging names)
    direct = read_bundle(mounted)
    assert direct.revision == shipped.revision and direct.data == shipped.data
    gateway = container(deployment, "gateway")
    assert env(gateway)["GATEWAY_POLICIES_DIR"]["value"] == "/etc/gateway/policies"
    assert {"name": "policies", "mountPath": "/etc/gateway/policies", "readOnly": True} in gateway["volumeMounts"]


def test_a_policy_change_rolls_the_pods(chart: helm.Chart) -> None:
    files = dict(CONFIGMAP["policies"]["files"])
    before = one(manifests(render(chart, CONFIGMAP)), "Deployment")
    files["gateway/config/data.json"] = files["gateway/config/data.json"].replace("{", '{"changed": true, ', 1)
    after = one(manifests(render(chart, {"policies": {"source": "configMap", "files": files}})), "Deployment")
    checksum = "checksum/policies"
    assert (
        before["spec"]["template"]["metadata"]["annotations"][checksum]
        != after["spec"]["template"]["metadata"]["annotations"][checksum]
    )


# --- values.schema.json -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values, field",
    [
        ({"replicaCount": "two"}, "/replicaCount"),
        ({"replicaCount": 0}, "/replicaCount"),
        (
            {
                "securityContext": {
                    "runAsNonRoot": True,
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": False,
                    "capabilities": {"drop": ["ALL"]},
                }
            },
            "/securityContext/readOnlyRootFilesystem",
        ),
        (
            {
                "securityContext": {
                    "runAsNonRoot": True,
                    "allowPrivilegeEscalation": True,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                }
            },
            "/securityContext/allowPrivilegeEscalation",
        ),
        (
            {
                "securityContext": {
                    "runAsNonRoot": True,
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"], "add": ["NET_ADMIN"]},
                }
            },
            "/securityContext/capabilities/add",
        ),
        ({"podSecurityContext": {"runAsNonRoot": True, "runAsUser": 0}}, "/podSecurityContext/runAsUser"),
        ({"policies": {"source": "git"}}, "/policies/source"),
        ({"otel": {"exporter": "jaeger"}}, "/otel/exporter"),
        ({"replicas": 2}, "replicas"),
    ],
)
def test_schema_rejects_bad_values(chart: helm.Chart, values: dict[str, Any], field: str) -> None:
    with pytest.raises(helm.HelmValuesError) as refused:
        chart.validate_schema(chart.merge_values(values))
    assert field in str(refused.value)
    with pytest.raises(helm.HelmValuesError):  # and an install with them never renders
        render(chart, values)


def test_schema_accepts_the_defaults_and_every_value_set(chart: helm.Chart) -> None:
    for values in VALUE_SETS.values():
        chart.validate_schema(chart.merge_values(values))


def test_every_default_value_is_documented_in_values_yaml() -> None:
    """Helm best practice: each value has a comment that starts with its key."""
    text = (CHART_DIR / "values.yaml").read_text()
    defaults = yaml.safe_load(text)

    def undocumented(node: dict[str, Any], prefix: str) -> Iterator[str]:
        """A key whose comment is there covers what is under it; otherwise each key under it needs one."""
        for key, value in node.items():
            name = f"{prefix}{key}"
            if f"# {name} --" in text:
                continue
            if isinstance(value, dict) and value:
                yield from undocumented(value, f"{name}.")
            else:
                yield name

    assert list(undocumented(defaults, "")) == []


def test_notes_say_how_to_reach_the_service_and_warn_about_the_embedded_store(rendered: dict[str, dict[str, str]]) -> None:
    notes = rendered["defaults"]["governed-gateway/templates/NOTES.txt"]
    assert f"http://{FULLNAME}.retrieval.svc:8080" in notes
    assert "WARNING: no secrets.databaseUrl" in notes
    scaled = rendered["postgres-opa-sidecar-bundle"]["governed-gateway/templates/NOTES.txt"]
    assert "WARNING" not in scaled and "pre-install/pre-upgrade Job" in scaled


SIGNING = {"secrets": {"auditSigningKey": {"name": "gw-audit", "key": "signing.pem"}}}


@pytest.mark.parametrize(
    "values, refusal",
    [
        (SIGNING, "audit.checkpointsClaim is required"),  # an emptyDir: every new pod starts without its checkpoints
        (
            {**SIGNING, "persistence": {"existingClaim": "gw-data"}, "audit": {"checkpointsClaim": "gw-data"}},
            "must not be persistence.existingClaim",
        ),
        (
            {**SIGNING, "audit": {"checkpointsClaim": "gw-ckpt", "checkpointsMountPath": "/var/lib/gateway/audit"}},
            "must lie outside gateway.dataDir",
        ),
    ],
)
def test_checkpoints_on_an_emptydir_or_the_data_volume_are_refused(
    chart: helm.Chart, values: dict[str, Any], refusal: str
) -> None:
    with pytest.raises(helm.HelmError, match=refusal):
        render(chart, values)


def test_behind_an_ingress_the_public_url_is_its_first_host(chart: helm.Chart) -> None:
    """So the MCP OAuth metadata names the gateway's URL, never a caller's Host (issue 30)."""
    objects = manifests(render(chart, INGRESS_HPA))
    gateway = env(container(one(objects, "Deployment"), "gateway"))
    assert gateway["GATEWAY_PUBLIC_URL"]["value"] == "https://gateway.example.com"
    chosen = manifests(render(chart, {**INGRESS_HPA, "gateway": {"env": {"GATEWAY_PUBLIC_URL": "https://gw.example.org"}}}))
    names = [e["name"] for e in container(one(chosen, "Deployment"), "gateway")["env"]]
    assert names.count("GATEWAY_PUBLIC_URL") == 1
    assert env(container(one(chosen, "Deployment"), "gateway"))["GATEWAY_PUBLIC_URL"]["value"] == "https://gw.example.org"


# --- metrics ----------------------------------------------------------------------------------------


def test_metrics_are_scraped_by_annotation_and_a_service_monitor_when_asked(chart: helm.Chart) -> None:
    """GET /metrics on the service port: annotations on the pods and the Service by default, a
    ServiceMonitor with metrics.serviceMonitor.enabled, none of it with metrics.enabled false."""
    routes = {getattr(route, "path", None) for route in create_app(Settings()).routes}
    assert "/metrics" in routes
    expected = {"prometheus.io/scrape": "true", "prometheus.io/path": "/metrics", "prometheus.io/port": "8080"}
    objects = manifests(render(chart, None))
    deployment = one(objects, "Deployment")
    assert expected.items() <= deployment["spec"]["template"]["metadata"]["annotations"].items()
    assert expected.items() <= one(objects, "Service")["metadata"]["annotations"].items()
    gateway = env(container(deployment, "gateway"))
    assert (gateway["GATEWAY_METRICS"]["value"], gateway["GATEWAY_METRICS_TENANT_LABEL"]["value"]) == ("on", "off")
    assert "ServiceMonitor" not in kinds(objects)

    monitored = {"metrics": {"tenantLabel": True, "serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}}}
    report = helm.lint(CHART_DIR, monitored, strict=True, namespace="retrieval", kube_version="v1.29.0")
    assert report["errors"] == []
    objects = manifests(render(chart, monitored))
    monitor = one(objects, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1" and monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["endpoints"] == [{"port": "http", "path": "/metrics", "interval": "30s", "scrapeTimeout": "10s"}]
    service = one(objects, "Service")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["retrieval"]}
    assert env(container(one(objects, "Deployment"), "gateway"))["GATEWAY_METRICS_TENANT_LABEL"]["value"] == "on"

    off = manifests(render(chart, {"metrics": {"enabled": False, "serviceMonitor": {"enabled": True}}}))
    assert "ServiceMonitor" not in kinds(off)
    assert "prometheus.io/scrape" not in one(off, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert "annotations" not in one(off, "Service")["metadata"]
    assert env(container(one(off, "Deployment"), "gateway"))["GATEWAY_METRICS"]["value"] == "off"
    with pytest.raises(helm.HelmValuesError, match="interval"):
        chart.validate_schema(chart.merge_values({"metrics": {"serviceMonitor": {"interval": "soon"}}}))
