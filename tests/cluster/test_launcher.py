"""cluster/launcher/aws-gpu.yaml through Ray's own loader, offline: `ray up` fills in the
defaults (``prepare_config``), validates against Ray's cluster schema (``validate_config``)
and lets the AWS provider fill in a missing AMI (``_check_ami``), which must leave every
node type on the AMI the file names — Ray's default is an Ubuntu 18.04 Deep Learning AMI
whose driver cannot run the image's CUDA 13.0."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = ROOT / "cluster" / "launcher" / "aws-gpu.yaml"
# the AWS Deep Learning Base OSS Nvidia Driver GPU AMI: NVIDIA driver >= 580 (CUDA 13)
DLAMI_SSM = "resolve:ssm:/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-24.04/"


def prepared(config: dict) -> dict:
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = prepare_config(copy.deepcopy(config))
    validate_config(config)
    return config


def test_rays_loader_accepts_the_launcher_config():
    config = prepared(yaml.safe_load(LAUNCHER.read_text()))
    assert config["head_node_type"] in config["available_node_types"]
    for name, node_type in config["available_node_types"].items():
        assert node_type["max_workers"] >= node_type["min_workers"], name


def test_rays_schema_rejects_a_broken_config():
    """The check is not vacuous: Ray's schema refuses a misspelt top-level field."""
    from ray.autoscaler._private.util import validate_config

    config = prepared(yaml.safe_load(LAUNCHER.read_text()))
    config["max_worker"] = 5
    with pytest.raises(Exception, match="max_worker"):
        validate_config(config)


def test_every_node_type_names_a_current_gpu_ami_and_ray_keeps_it():
    from ray.autoscaler._private.aws.config import DEFAULT_AMI, _check_ami

    config = prepared(yaml.safe_load(LAUNCHER.read_text()))
    _check_ami(config)  # what `ray up` does for a node type without ImageId
    defaults = set(DEFAULT_AMI.values())
    for name, node_type in config["available_node_types"].items():
        ami = node_type["node_config"]["ImageId"]
        assert ami not in defaults, f"{name}: Ray's default AMI (Ubuntu 18.04 DLAMI)"
        assert ami.startswith(DLAMI_SSM), (name, ami)
