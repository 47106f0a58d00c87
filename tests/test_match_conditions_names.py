"""Every name the shipped rules use (GPU resources, device paths, GPU taint keys) is one the
generated matchConditions select: the routing and the rules never disagree."""

from __future__ import annotations

import pytest
from manifests_support import RULES
from test_match_conditions import KINDS, _host, _limits, _tolerates, selects


def _sample(pattern: str) -> str:
    return pattern.replace("*", "x0")


@pytest.mark.parametrize("pattern", RULES.gpu_resources)
def test_every_gpu_resource_of_the_rule_files_is_selected(pattern: str) -> None:
    obj = KINDS["Deployment"](_limits(_sample(pattern), "1"))
    assert RULES.gpu_names().matches(_sample(pattern))
    assert selects(obj) is True


@pytest.mark.parametrize("pattern", RULES.rules.host_gpu_devices.paths)
def test_every_host_device_path_of_the_rule_files_is_selected(pattern: str) -> None:
    assert selects(KINDS["Pod"](_host(_sample(pattern)))) is True


@pytest.mark.parametrize("key", [t.key for t in RULES.rules.gpu_tolerations.tolerations])
def test_every_gpu_taint_of_the_rule_files_is_selected(key: str) -> None:
    assert selects(KINDS["Pod"](_tolerates(key=key, operator="Exists"))) is True
