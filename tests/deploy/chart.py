"""Rendering helm/governed-gateway offline through Helm's own Go SDK (helm-python-sdk), and reading
what it renders: the manifests as dicts, the containers, their environment."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = ROOT / "helm" / "governed-gateway"
RELEASE, NAMESPACE = "gw", "retrieval"
FULLNAME = f"{RELEASE}-governed-gateway"
# The Kubernetes versions every manifest is validated against: the oldest the chart supports
# (Chart.yaml kubeVersion; native sidecars) and the newest kubernetes-validate carries.
KUBE_VERSIONS = ("1.29.0", "1.37.0")


def render(chart: helm.Chart, values: dict[str, Any] | None) -> dict[str, str]:
    """Template path -> rendered text, as `helm template` would write it for an install (NOTES.txt included)."""
    return chart.render(values=values, name=RELEASE, namespace=NAMESPACE, is_install=True)


def manifests(rendered: dict[str, str]) -> list[dict[str, Any]]:
    """Every Kubernetes object rendered (NOTES.txt and templates that rendered nothing left out)."""
    objects: list[dict[str, Any]] = []
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            continue
        objects.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return objects


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def kinds(objects: list[dict[str, Any]]) -> set[str]:
    return {o["kind"] for o in objects}


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def containers(workload: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every container of a workload's pods, init containers (and native sidecars) included."""
    spec = pod_spec(workload)
    yield from spec.get("initContainers", [])
    yield from spec["containers"]


def container(workload: dict[str, Any], name: str) -> dict[str, Any]:
    matches = [c for c in containers(workload) if c["name"] == name]
    assert len(matches) == 1, f"no container {name}"
    return matches[0]


def env(c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """name -> the env entry (value or valueFrom)."""
    return {e["name"]: e for e in c.get("env", [])}
