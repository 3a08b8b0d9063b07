"""The Kubernetes manifests are valid objects of the Kubernetes API, checked offline
against its schemas (kubernetes-validate ships them), strictly: an unknown field, a
wrong type or a missing required one fails, as the API server would refuse it.

The ServiceMonitor is the Prometheus operator's custom resource, which those schemas do
not cover; test_deploy_files checks what it names. The kustomization is checked there
too (it lists every manifest)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
KUBERNETES_VERSION = "1.30.0"
"""The oldest Kubernetes the manifests must work on (autoscaling/v2, policy/v1,
batch/v1 CronJob are all older)."""
CUSTOM_RESOURCES = {"ServiceMonitor"}


def _objects() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            found.append((f"{path.name}:{doc['kind']}", doc))
    return found


@pytest.mark.parametrize(("where", "obj"), _objects(), ids=[w for w, _ in _objects()])
def test_k8s_manifest_is_a_valid_kubernetes_object(where: str, obj: dict[str, Any]) -> None:
    if obj["kind"] in CUSTOM_RESOURCES:
        pytest.skip(f"{obj['kind']} is a custom resource: no schema ships with Kubernetes")
    kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_the_validation_refuses_an_unknown_field() -> None:
    deployment = next(o for _, o in _objects() if o["kind"] == "Deployment")
    broken = {**deployment, "spec": {**deployment["spec"], "replica": 2}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)
