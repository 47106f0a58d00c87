"""Every name the shipped rules use (GPU resources, host paths that reach GPUs, GPU taint keys)
is one the generated matchConditions select: the routing and the rules never disagree."""

from __future__ import annotations

import pytest

from tests.support.manifests import RULES
from tests.support.routing import selects
from tests.support.routingexamples import KINDS, host_spec, limits_spec, tolerates_spec
from webhook.ruleset.hostpaths import HOST_PATHS


def _sample(pattern: str) -> str:
    return pattern.replace("*", "x0")


@pytest.mark.parametrize("pattern", RULES.gpu_resources)
def test_every_gpu_resource_of_the_rule_files_is_selected(pattern: str) -> None:
    obj = KINDS["Deployment"](limits_spec(_sample(pattern), "1"))
    assert RULES.gpu_names().matches(_sample(pattern))
    assert selects(obj) is True


@pytest.mark.parametrize(
    "pattern",
    [
        *RULES.rules.host_gpu_devices.paths,
        *(r.pattern for r in HOST_PATHS if r.reach is not None),
    ],
)
def test_every_host_path_that_reaches_gpus_is_selected(pattern: str) -> None:
    for sample in (pattern.replace("/**", ""), pattern.replace("**", "x0/y")):
        sample = _sample(sample.replace("<pid>", "1")) or "/"
        assert selects(KINDS["Pod"](host_spec(sample))) is True, sample


@pytest.mark.parametrize("key", [t.key for t in RULES.rules.gpu_tolerations.tolerations])
def test_every_gpu_taint_of_the_rule_files_is_selected(key: str) -> None:
    assert selects(KINDS["Pod"](tolerates_spec(key=key, operator="Exists"))) is True


@pytest.mark.parametrize(
    "device_class",
    [
        *RULES.gpu_device_classes.names,
        # a class the facts alone tell a GPU class (its selector requires a GPU driver)
        "h100-training",
    ],
)
def test_every_implicit_dra_class_resource_is_selected(device_class: str) -> None:
    """`deviceclass.resource.kubernetes.io/<class>`: the class's devices asked as a plain
    resource (Kubernetes 1.34+). Only the webhook's facts tell every GPU class, so each is
    sent; an amount of zero asks for nothing and is not."""
    name = "deviceclass.resource.kubernetes.io/" + _sample(device_class)
    for kind in ("Pod", "Deployment"):
        assert selects(KINDS[kind](limits_spec(name, "1"))) is True, kind
        assert selects(KINDS[kind](limits_spec(name, "0"))) is False, kind
