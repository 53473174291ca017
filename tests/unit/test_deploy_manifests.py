"""deploy/kubernetes validates against the Kubernetes schemas (kubernetes-validate, offline)
and KServe's CRD schemas (tests/data/kserve), and runs the server with flags it has."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from triton_core.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
KUBERNETES = ROOT / "deploy" / "kubernetes"
KSERVE_SCHEMAS = ROOT / "tests" / "data" / "kserve"
#: the oldest Kubernetes the manifests are meant for (autoscaling/v2 is GA from 1.23)
KUBERNETES_VERSION = "1.27"


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def manifests() -> list[tuple[Path, dict[str, Any]]]:
    found = []
    for path in sorted(KUBERNETES.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            found += [(path, doc) for doc in documents(path)]
    return found


def kserve_schema(kind: str) -> dict[str, Any]:
    [path] = KSERVE_SCHEMAS.glob(f"serving.kserve.io_{kind.lower()}s.*.schema.json.gz")
    schema: dict[str, Any] = json.loads(gzip.decompress(path.read_bytes()))
    return schema


def containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    if doc["kind"] == "Deployment":
        return list(doc["spec"]["template"]["spec"]["containers"])
    if doc["kind"] == "ServingRuntime":
        return list(doc["spec"]["containers"])
    return []


@pytest.mark.parametrize(("path", "doc"), manifests(), ids=lambda v: getattr(v, "name", ""))
def test_each_manifest_validates_against_the_kubernetes_schema(path, doc):
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_validator_refuses_a_wrong_manifest():
    [deployment] = documents(KUBERNETES / "deployment.yaml")
    deployment["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)
    deployment["spec"]["replicas"] = 2
    deployment["spec"]["template"]["spec"]["containers"][0]["livenessProbes"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("name", ["servingruntime.yaml", "inferenceservice.yaml"])
def test_the_kserve_examples_validate_against_kserves_crds(name):
    [doc] = documents(KUBERNETES / "kserve" / name)
    assert doc["apiVersion"] in ("serving.kserve.io/v1alpha1", "serving.kserve.io/v1beta1")
    schema = kserve_schema(doc["kind"])
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.Draft7Validator(schema).validate(doc)
    doc["spec"] = "not an object"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(schema).validate(doc)


def test_the_kserve_runtime_serves_what_the_example_asks_for():
    [runtime] = documents(KUBERNETES / "kserve" / "servingruntime.yaml")
    [service] = documents(KUBERNETES / "kserve" / "inferenceservice.yaml")
    model = service["spec"]["predictor"]["model"]
    assert model["runtime"] == runtime["metadata"]["name"]
    formats = {entry["name"] for entry in runtime["spec"]["supportedModelFormats"]}
    assert model["modelFormat"]["name"] in formats
    assert model["protocolVersion"] in runtime["spec"]["protocolVersions"]


def all_containers() -> list[dict[str, Any]]:
    docs = [doc for _, doc in manifests()]
    docs += documents(KUBERNETES / "kserve" / "servingruntime.yaml")
    return [c for doc in docs for c in containers(doc) if c["image"].startswith("triton-core")]


@pytest.mark.parametrize("container", all_containers(), ids=lambda c: c["name"])
def test_the_server_is_started_with_flags_it_has_and_probed_on_v2_health(container):
    args = build_parser().parse_args(container["args"])  # exits on an unknown flag
    assert args.command == "serve"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_the_autoscaler_metric_is_the_one_the_adapter_rule_serves():
    [hpa] = documents(KUBERNETES / "hpa.yaml")
    [adapter] = documents(KUBERNETES / "prometheus-adapter-rules.yaml")
    [rule] = yaml.safe_load(adapter["data"]["config.yaml"])["rules"]
    assert hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] == rule["name"]["as"]
    assert rule["name"]["matches"] == "nv_inference_pending_request_count"
    assert rule["seriesQuery"].startswith(rule["name"]["matches"] + "{")


def test_kustomization_lists_existing_manifests():
    [kustomization] = documents(KUBERNETES / "kustomization.yaml")
    for resource in kustomization["resources"]:
        assert (KUBERNETES / resource).is_file(), resource
