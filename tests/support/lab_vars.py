"""The lab's variables grouped by area, as the tune action hands them to the module (``areas``)."""

from __future__ import annotations

from pathlib import Path

import yaml
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import declarations as declaration

REPO = Path(__file__).resolve().parents[2]
AREA_ROLES = ("smt", "cpu", "irq_affinity", "infiniband", "nvme", "sysctl", "rocm_env")


def role_areas() -> dict:
    """{area: {variable: value}} as the tune action takes them: declared defaults + lab group_vars."""
    variables: dict = {}
    for role in AREA_ROLES:
        variables.update(yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text()) or {})
    for path in sorted((REPO / "inventories/lab/group_vars/all").glob("*.yml")):
        variables.update(yaml.safe_load(path.read_text()) or {})
    areas = {}
    for role in AREA_ROLES:
        declared = declaration.ROLES[role]["variables"]
        config = {k: v for k, v in variables.items() if k in declared}
        if config.get(f"nodetune_{role}_enabled", True):
            areas[role] = config
    return areas


AREAS = role_areas()
