"""Issue 24.4: real RCCL variables are accepted under the default `error` policy.

The names below are read by RCCL (NCCL_PARAM / RCCL_PARAM declarations and ncclGetEnv calls in ROCm/rccl, see
rocm_catalog.RCCL_PARAMS / RCCL_TEXT), yet nodetune refused them as unknown. NCCL_DEBUG also takes NONE and ABORT
(RCCL src/debug.cc). Wrong names from the articles must still be refused with the real name.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import declarations as areas
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import rocm_catalog
from ansible_collections.nodetune.instinct.plugins.module_utils.areas.common import Context
from ansible_collections.nodetune.instinct.plugins.module_utils.areas.tuning import desired_settings
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import SettingError
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root

DEFAULTS = {name: areas.defaults("rocm_env")[name] for name in areas.area_variables("rocm_env")}
REAL = [
    ("NCCL_NET", "IB"), ("NCCL_PXN_DISABLE", 0), ("NCCL_P2P_NET_CHUNKSIZE", 524288), ("NCCL_DMABUF_ENABLE", 1),
    ("NCCL_IB_USE_INLINE", 1), ("NCCL_GRAPH_FILE", "/etc/rccl/graph.xml"), ("NCCL_HOSTID", "rack7-node3"),
    ("NCCL_NCHANNELS_PER_PEER", 4), ("NCCL_COLLNET_ENABLE", 1), ("NCCL_LAUNCH_MODE", "GROUP"),
    ("NCCL_IB_MERGE_NICS", 0), ("RCCL_MSCCLPP_ENABLE", 1), ("NCCL_CONF_FILE", "/etc/rccl/site.conf"),
    ("RCCL_LOG_LEVEL", 2), ("NCCL_DEBUG", "ABORT"), ("NCCL_DEBUG", "NONE"),
]


def build(tmp_path: Path, **overrides: Any) -> dict[str, str]:
    ctx = Context(Root(str(tmp_path)), {}, {})
    settings = desired_settings(ctx, {"rocm_env": dict(DEFAULTS, **overrides)}, persist=False)
    return {s.target: s.value for s in settings}


@pytest.mark.parametrize(("name", "value"), REAL, ids=[f"{n}={v}" for n, v in REAL])
def test_real_rccl_variables_are_accepted_under_the_error_policy(tmp_path: Path, name: str, value: Any) -> None:
    files = build(tmp_path, nodetune_rocm_env={name: value})
    assert f"export {name}='{value}'\n" in files["profile"]
    # RCCL reads NCCL_CONF_FILE before any conf file, so only the environment can carry it
    assert (f"\n{name}={value}\n" in files["rccl.conf"]) == (name != "NCCL_CONF_FILE")


def test_every_name_rccls_source_declares_is_accepted(tmp_path: Path) -> None:
    assert len(rocm_catalog.RCCL_NAMES) >= 90
    # integers for NCCL_PARAM/RCCL_PARAM names; the text names without a curated row take any line
    env = {n: 1 for n in rocm_catalog.RCCL_NAMES if n not in rocm_catalog.VARIABLES}
    files = build(tmp_path, nodetune_rocm_env=env)
    assert all(f"\n{n}=1\n" in files["rccl.conf"] for n in env)


def test_the_derived_names_cite_repository_path_and_commit() -> None:
    for table in (rocm_catalog.RCCL_PARAMS, rocm_catalog.RCCL_TEXT):
        for where, names in table.items():
            assert re.match(r"^(src|docs)/[\w/.-]+@[0-9a-f]{40}$", where), where
            assert all(re.match(r"^(NCCL|RCCL)_[A-Z0-9_]+$", n) for n in names), where
    # NCCL_PARAM("P2P_NET_CHUNKSIZE") is NCCL_ + suffix; RCCL_PARAM("MSCCLPP_ENABLE") is RCCL_ + suffix
    assert "NCCL_P2P_NET_CHUNKSIZE" in rocm_catalog.RCCL_PARAMS["src/init.cc@7383f10d9031167141137837c9f1b4dc7ea82e64"]
    assert "RCCL_MSCCLPP_ENABLE" in rocm_catalog.RCCL_PARAMS["src/init.cc@7383f10d9031167141137837c9f1b4dc7ea82e64"]


def test_a_source_declared_integer_is_checked_as_rccl_reads_it(tmp_path: Path) -> None:
    with pytest.raises(SettingError) as info:
        build(tmp_path, nodetune_rocm_env={"NCCL_IB_AR_THRESHOLD": "8K"})
    assert "'8K' would be read as 8" in str(info.value)


def test_wrong_names_still_get_the_real_name(tmp_path: Path) -> None:
    assert not set(rocm_catalog.WRONG_NAMES) & rocm_catalog.RCCL_NAMES
    with pytest.raises(SettingError) as info:
        build(tmp_path, nodetune_rocm_env={"RCCL_ALGO": "Ring", "NCCL_NET": "IB"})
    assert "RCCL_ALGO is read by nothing (RCCL reads NCCL_* names); use NCCL_ALGO" in str(info.value)
    assert "NCCL_NET" not in str(info.value)
