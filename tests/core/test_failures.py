"""The modules' refusals as one table each (issue 29 item 4): every row reachable, the first match decides, the
message and result fields as the tasks have always said them."""

from __future__ import annotations

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils import failures
from ansible_collections.nodetune.instinct.plugins.module_utils.apply import engine
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import bios
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.layout import LayoutError, PolicyError
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import SettingError
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import NodeFileError, NotFoundError
from ansible_collections.nodetune.instinct.plugins.modules import tune, verify


@pytest.mark.parametrize("table", [tune.REFUSALS, verify.REFUSALS], ids=["tune", "verify"])
def test_no_row_is_shadowed_by_an_earlier_base_class(table: tuple) -> None:
    for index, (cls, _prefix, _extra) in enumerate(table):
        earlier = [row[0].__name__ for row in table[:index] if issubclass(cls, row[0])]
        assert earlier == [], f"{cls.__name__} can never match: {earlier} come first"


def test_the_bios_refusal_is_not_reported_as_a_settings_refusal() -> None:
    out = failures.failure(bios.BiosConfigError(["nodetune_bios_iommu='maybe' is not valid"]), tune.REFUSALS)
    assert out == {"msg": "nodetune refused the BIOS-level or health check variables, nothing was written: "
                          "nodetune_bios_iommu='maybe' is not valid",
                   "errors": ["nodetune_bios_iommu='maybe' is not valid"]}
    assert failures.failure(SettingError(["a", "b"]), tune.REFUSALS)["msg"] == \
        "nodetune refused the settings, nothing was written: a; b"


def test_result_fields_follow_the_exception() -> None:
    applied = failures.failure(engine.ApplyError("write failed", rolled_back=["x"], rollback_errors=[]),
                               tune.REFUSALS)
    assert applied == {"msg": "write failed", "setting": None, "rolled_back": ["x"], "rollback_errors": []}
    missing = NotFoundError("/sys/x: no such file", path="/sys/x")
    assert failures.failure(missing, verify.REFUSALS) == {"msg": "nodetune verify: /sys/x: no such file",
                                                          "path": "/sys/x"}
    assert failures.failure(PolicyError("bad policy"), verify.REFUSALS) == {
        "msg": "nodetune verify could not plan this node: bad policy"}
    assert issubclass(NotFoundError, NodeFileError) and issubclass(PolicyError, LayoutError)


def test_an_exception_no_row_names_is_raised_again() -> None:
    with pytest.raises(KeyError):
        failures.failure(KeyError("x"), tune.REFUSALS)
