"""cluster/: manifests parse, carry the required fields, and size GPUs like the catalog."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import tomllib
import yaml
from packaging.specifiers import SpecifierSet

from edv_ray.config import load_config
from edv_ray.serving.catalog import CATALOG, find_entry

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "cluster"
CONFIG = CLUSTER / "configs" / "paper-pool.yaml"
IMAGE_RE = re.compile(r"^[\w.\-/]+:(?!latest$)[\w.\-]+$")


def load_all(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def kuberay_docs() -> list[dict]:
    return [d for p in sorted((CLUSTER / "kuberay").glob("*.yaml")) for d in load_all(p)]


def cluster_specs() -> list[tuple[str, dict]]:
    specs = []
    for doc in kuberay_docs():
        if doc["kind"] == "RayCluster":
            specs.append(("RayCluster", doc["spec"]))
        elif doc["kind"] == "RayJob":
            specs.append(("RayJob", doc["spec"]["rayClusterSpec"]))
    return specs


def pod_specs(spec: dict) -> list[dict]:
    return [spec["headGroupSpec"]["template"]["spec"]] + [
        g["template"]["spec"] for g in spec["workerGroupSpecs"]]


def vllm_demand(entries: set[str]) -> int:
    """GPUs the paper-pool config needs from groups that serve these catalog entries."""
    cfg = load_config(CONFIG)
    total = 0
    for mc in cfg.models.values():
        entry = find_entry(mc.weights or "") if mc.engine == "vllm" else None
        if entry is not None and entry.name in entries:
            total += mc.replicas * entry.gpus
    return total


def check_capacity(where: str, serves: set[str], gpus_per_node: int, nodes: int) -> None:
    assert serves and serves <= set(CATALOG), f"{where}: unknown catalog entries {serves}"
    for name in serves:
        assert gpus_per_node % CATALOG[name].gpus == 0, \
            f"{where}: {gpus_per_node} GPUs per node do not fit {name} (TP {CATALOG[name].gpus})"
    demand = vllm_demand(serves)
    assert demand <= gpus_per_node * nodes, f"{where}: needs {demand} GPUs, has {gpus_per_node * nodes}"


# what each manifest must hold: Kubernetes kinds per file, or top-level keys of a mapping
EXPECTED_DOCS = {
    "configs/paper-pool.yaml": {"run_id", "output_dir", "models", "agents", "benchmark"},
    "kuberay/raycluster.yaml": ["RayCluster"],
    "kuberay/rayjob.yaml": ["RayJob"],
    "kuberay/storage.yaml": ["PersistentVolumeClaim", "PersistentVolumeClaim", "Job"],
    "launcher/aws-gpu.yaml": {"cluster_name", "provider", "docker", "available_node_types"},
    "runtime_env.yaml": {"working_dir", "excludes", "env_vars"},
}
HEAD_PORTS = {"gcs-server": 6379, "dashboard": 8265, "client": 10001}


def k8s_containers(doc: dict) -> list[dict]:
    """Every container of every pod template in a Kubernetes document."""
    if doc["kind"] in ("RayCluster", "RayJob"):
        spec = doc["spec"] if doc["kind"] == "RayCluster" else doc["spec"]["rayClusterSpec"]
        return [c for pod in pod_specs(spec) for c in pod["containers"]]
    if doc["kind"] == "Job":
        return doc["spec"]["template"]["spec"]["containers"]
    return []


def test_every_yaml_file_parses_into_the_expected_documents():
    files = {str(p.relative_to(CLUSTER)): p for p in sorted(CLUSTER.rglob("*.yaml"))}
    assert set(files) == set(EXPECTED_DOCS)
    for name, expected in EXPECTED_DOCS.items():
        docs = load_all(files[name])
        if isinstance(expected, set):
            assert len(docs) == 1 and isinstance(docs[0], dict), name
            assert expected <= set(docs[0]), (name, expected - set(docs[0]))
            continue
        assert [d.get("kind") for d in docs] == expected, name
        for doc in docs:
            assert doc["apiVersion"] in ("v1", "batch/v1", "ray.io/v1"), (name, doc["apiVersion"])
            assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", doc["metadata"]["name"]), name
            for c in k8s_containers(doc):
                assert IMAGE_RE.match(c["image"]), (name, c["image"])
                req = c["resources"]["requests"]
                assert float(req["cpu"]) > 0 and re.fullmatch(r"\d+[GT]i", req["memory"]), \
                    (name, c["name"], req)
                if "limits" in c["resources"]:
                    assert c["resources"]["limits"] == req, (name, c["name"])


def test_ray_heads_expose_the_ray_ports_and_workers_run_the_same_image():
    for kind, spec in cluster_specs():
        pods = pod_specs(spec)
        head = pods[0]["containers"][0]
        ports = {p["name"]: p["containerPort"] for p in head["ports"]}
        assert ports == HEAD_PORTS, (kind, ports)
        assert spec["headGroupSpec"]["rayStartParams"]["dashboard-host"] == "0.0.0.0"
        images = {c["image"] for pod in pods for c in pod["containers"]}
        assert len(images) == 1, (kind, images)  # one image for head and workers


def test_the_example_config_is_a_valid_cluster_run():
    cfg = load_config(CONFIG)
    assert cfg.output_dir.startswith("/mnt/runs") and cfg.runtime.ray_address == "auto"
    assert cfg.run_id  # a fixed run id makes --resume paths predictable
    for name, mc in cfg.models.items():
        assert mc.engine == "vllm" and find_entry(mc.weights or ""), name


def test_raycluster_and_rayjob_have_required_fields():
    kinds = {d["kind"]: d for d in kuberay_docs()}
    assert {"RayCluster", "RayJob", "PersistentVolumeClaim"} <= set(kinds)
    for doc in (kinds["RayCluster"], kinds["RayJob"]):
        assert doc["apiVersion"] == "ray.io/v1" and doc["metadata"]["name"]
    job = kinds["RayJob"]["spec"]
    assert job["entrypoint"].startswith("edv run ")
    config_path = job["entrypoint"].split()[-1]
    assert config_path.startswith("/configs/")
    assert (CLUSTER / "configs" / Path(config_path).name).is_file()
    assert job["shutdownAfterJobFinishes"] is True
    for kind, spec in cluster_specs():
        assert spec["rayVersion"] == "2.60.0", kind
        assert spec["headGroupSpec"]["rayStartParams"]["num-gpus"] == "0"
        assert spec["workerGroupSpecs"], kind
        for group in spec["workerGroupSpecs"]:
            assert group["groupName"] and group["replicas"] >= 1
            assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]


def test_every_pod_mounts_the_shared_run_folder():
    claims = {d["metadata"]["name"]: d for d in kuberay_docs() if d["kind"] == "PersistentVolumeClaim"}
    assert claims["edv-runs"]["spec"]["accessModes"] == ["ReadWriteMany"]
    for kind, spec in cluster_specs():
        for pod in pod_specs(spec):
            volumes = {v["name"]: v for v in pod["volumes"]}
            for container in pod["containers"]:
                mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
                assert volumes[mounts["/mnt/runs"]]["persistentVolumeClaim"]["claimName"] == "edv-runs"
                assert "/configs" in mounts
                assert IMAGE_RE.match(container["image"]), container["image"]


@pytest.mark.parametrize("kind", ["RayCluster", "RayJob"])
def test_kuberay_gpu_groups_fit_the_catalog(kind):
    spec = dict(cluster_specs())[kind]
    head = spec["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]
    assert "nvidia.com/gpu" not in head.get("limits", {})
    served: list[str] = []
    for group in spec["workerGroupSpecs"]:
        res = group["template"]["spec"]["containers"][0]["resources"]
        gpus = int(res["limits"]["nvidia.com/gpu"])
        assert int(res["requests"]["nvidia.com/gpu"]) == gpus
        serves = set(group["template"]["metadata"]["annotations"]["edv-ray/serves"].split())
        check_capacity(f"{kind}/{group['groupName']}", serves, gpus, group["replicas"])
        served += serves
    assert len(served) == len(set(served)), "an entry is claimed by two groups"
    assert set(served) == set(CATALOG)


def serves_comments(text: str) -> dict[str, set[str]]:
    """'# edv-serves: a b' comments → the name of the YAML key on the next line."""
    found, pending = {}, None
    for line in text.splitlines():
        if m := re.match(r"\s*# edv-serves:\s*(.+)$", line):
            pending = set(m.group(1).split())
        elif pending is not None and (m := re.match(r"\s*([\w.-]+):\s*$", line)):
            found[m.group(1)], pending = pending, None
    return found


def test_cluster_launcher_sizes_gpu_nodes_like_the_catalog():
    path = CLUSTER / "launcher" / "aws-gpu.yaml"
    doc = yaml.safe_load(path.read_text())
    for key in ("cluster_name", "provider", "available_node_types", "head_node_type",
                "head_start_ray_commands", "worker_start_ray_commands"):
        assert key in doc, key
    types = doc["available_node_types"]
    assert types[doc["head_node_type"]]["resources"].get("GPU", 0) == 0
    assert IMAGE_RE.match(doc["docker"]["image"])
    claims = serves_comments(path.read_text())
    assert set(claims) == {n for n, t in types.items() if t["resources"].get("GPU", 0) > 0}
    for name, serves in claims.items():
        check_capacity(f"launcher/{name}", serves, types[name]["resources"]["GPU"],
                       types[name]["min_workers"])
    assert sum(t["max_workers"] for n, t in types.items() if n != doc["head_node_type"]) \
        <= doc["max_workers"]


def test_slurm_script_is_valid_bash_and_sized_like_the_catalog():
    path = CLUSTER / "slurm" / "edv-run.sbatch"
    subprocess.run(["bash", "-n", str(path)], check=True)
    text = path.read_text()
    sbatch = dict(re.findall(r"^#SBATCH --([\w-]+)=(\S+)", text, re.MULTILINE))
    serves = set(re.search(r"^# edv-serves:\s*(.+)$", text, re.MULTILINE).group(1).split())
    check_capacity("slurm", serves, int(sbatch["gpus-per-node"]), int(sbatch["nodes"]))
    assert "ray start --head" in text and 'edv run "$@"' in text
    assert "RAY_ADDRESS" in text
    default_config = re.search(r"EDV_CONFIG:-([^}]+)\}", text).group(1)
    assert (ROOT / default_config).is_file()


def test_dockerfile_pins_versions_consistent_with_the_project():
    text = (CLUSTER / "docker" / "Dockerfile").read_text()
    froms = re.findall(r"^FROM\s+(\S+)", text, re.MULTILINE)
    assert froms and all(IMAGE_RE.match(f) for f in froms), froms
    args = dict(re.findall(r"^ARG (\w+)=(\S+)", text, re.MULTILINE))
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = {re.split(r"[\[<>=!~ ]", d, maxsplit=1)[0]: d for d in pyproject["dependencies"]}
    gpu = pyproject["optional-dependencies"]["gpu"][0]
    assert args["RAY_VERSION"] in SpecifierSet(deps["ray"].split("]", 1)[1])
    assert deps["torch"] == f"torch=={args['TORCH_VERSION']}"
    assert args["VLLM_VERSION"] in SpecifierSet(gpu.removeprefix("vllm"))
    assert 'pip install -e ".[gpu]"' in text
    assert "latest" not in text.lower()
    for kind, spec in cluster_specs():
        assert spec["rayVersion"] == args["RAY_VERSION"], kind
    ignore = (CLUSTER / "docker" / "Dockerfile.dockerignore").read_text()
    assert "!edv_ray" in ignore


def test_runtime_env_is_well_formed():
    env = yaml.safe_load((CLUSTER / "runtime_env.yaml").read_text())
    assert env["working_dir"] == "."
    assert {".venv", "runs"} <= set(env["excludes"])
    assert all(isinstance(v, str) for v in env["env_vars"].values())


def test_readme_covers_launch_results_resume_and_sizing():
    text = (CLUSTER / "README.md").read_text()
    for needle in ("edv run --resume", "/mnt/runs", "kubectl", "sbatch", "ray up"):
        assert needle in text, needle
    for entry in CATALOG.values():
        assert entry.hf_id in text, entry.hf_id
