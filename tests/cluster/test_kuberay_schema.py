"""cluster/kuberay/*.yaml against the schemas the API server would apply: KubeRay's own CRD
schemas (operator 1.5.1, the oldest the files support, and 1.7.0), with strict field
validation as `kubectl apply` does by default (an unknown field is an error, not silently
pruned); every pod template and the plain Kubernetes objects against Kubernetes 1.37's
schemas (kubernetes-validate, strict)."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
KUBERAY = ROOT / "cluster" / "kuberay"
SCHEMAS = Path(__file__).parent / "fixtures" / "kuberay"
KUBERAY_VERSIONS = ("v1.5.1", "v1.7.0")
KUBERNETES = "1.37.0"
CRD_FILES = {"RayCluster": "rayclusters", "RayJob": "rayjobs"}


def documents() -> list[tuple[str, dict]]:
    return [(p.name, d) for p in sorted(KUBERAY.glob("*.yaml"))
            for d in yaml.safe_load_all(p.read_text()) if d is not None]


def strict(schema):
    """A structural schema as the API server applies it with strict field validation: an
    object with declared properties accepts no others (unless it preserves unknown
    fields); ``nullable`` admits null."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if ("properties" in out and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    if out.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def crd_schema(version: str, kind: str) -> dict:
    raw = gzip.decompress((SCHEMAS / version / f"{CRD_FILES[kind]}.schema.json.gz").read_bytes())
    return strict(json.loads(raw))


def errors(schema: dict, doc: dict) -> list[str]:
    validator = jsonschema.Draft4Validator(schema)
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message[:200]}"
            for e in validator.iter_errors(doc)]


@pytest.mark.parametrize("version", KUBERAY_VERSIONS)
def test_raycluster_and_rayjob_match_the_kuberay_crds(version):
    checked = set()
    for name, doc in documents():
        if doc["kind"] in CRD_FILES:
            assert errors(crd_schema(version, doc["kind"]), doc) == [], (name, version)
            checked.add(doc["kind"])
    assert checked == set(CRD_FILES)


def test_the_strict_check_catches_what_the_api_server_would_reject():
    """The check is not vacuous: a misspelt field, a wrong type and a bad quantity fail."""
    (_, job), = [(n, d) for n, d in documents() if d["kind"] == "RayJob"]
    schema = crd_schema(KUBERAY_VERSIONS[0], "RayJob")
    for path, value in ((("spec", "shutdownAfterJobFinish"), True),  # misspelt
                        (("spec", "backoffLimit"), "zero"),
                        (("spec", "rayClusterSpec", "headGroupSpec", "rayStartParams",
                          "num-gpus"), 0)):  # must be a string
        bad = copy.deepcopy(job)
        node = bad
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        assert errors(schema, bad), path
    bad = copy.deepcopy(job)
    head = bad["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    head["resources"]["requests"]["memory"] = "64 GB"
    assert errors(schema, bad)


def pod_templates(doc: dict) -> list[dict]:
    if doc["kind"] == "RayCluster":
        spec = doc["spec"]
    elif doc["kind"] == "RayJob":
        spec = doc["spec"]["rayClusterSpec"]
    else:
        return [doc["spec"]["template"]] if doc["kind"] == "Job" else []
    return [spec["headGroupSpec"]["template"]] + [g["template"] for g in spec["workerGroupSpecs"]]


def test_every_pod_template_is_valid_kubernetes():
    import kubernetes_validate

    n = 0
    for name, doc in documents():
        for template in pod_templates(doc):
            pod = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"},
                   "template": template}
            kubernetes_validate.validate(pod, KUBERNETES, strict=True)
            volumes = {v["name"] for v in template["spec"].get("volumes", [])}
            for c in template["spec"]["containers"]:
                mounts = {m["name"] for m in c.get("volumeMounts", [])}
                assert mounts <= volumes, (name, c["name"], mounts - volumes)
            n += 1
    assert n == 1 + 2 + 1 + 2 + 1  # RayCluster, RayJob: head + 2 groups; the fetch Job


def test_plain_kubernetes_objects_are_valid():
    import kubernetes_validate

    kinds = []
    for name, doc in documents():
        if doc["kind"] not in CRD_FILES:
            kubernetes_validate.validate(doc, KUBERNETES, strict=True)
            kinds.append(doc["kind"])
    assert sorted(kinds) == ["Job", "PersistentVolumeClaim", "PersistentVolumeClaim"]
    bad = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "x"},
           "spec": {"accessModes": ["ReadWriteMany"], "resource": {}}}  # misspelt
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBERNETES, strict=True)
