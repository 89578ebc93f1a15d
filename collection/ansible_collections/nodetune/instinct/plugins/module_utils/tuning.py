# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""From role variables to the node's desired Settings: the one entry point apply and verify share.

``desired_settings(ctx, areas)`` runs each enabled area's builder in a fixed order, then the persistence area over
their result, and raises :class:`SettingError` listing every problem before anything can be written.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ansible_collections.nodetune.instinct.plugins.module_utils import (
    area_cpu,
    areas,
    area_infiniband,
    area_irq,
    area_nvme,
    area_persist,
    area_rocm_env,
    area_smt,
    area_sysctl,
    inventory,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.area_common import Context
from ansible_collections.nodetune.instinct.plugins.module_utils.setting import Setting, SettingError, check_shape

# The builder modules, imported by name so that Ansible ships them in the module payload; which area each builds and
# in what order is declared in areas.py.
_MODULES = {"area_smt": area_smt, "area_cpu": area_cpu, "area_irq": area_irq, "area_infiniband": area_infiniband,
            "area_nvme": area_nvme, "area_sysctl": area_sysctl, "area_rocm_env": area_rocm_env}
BUILDERS = tuple((name, _MODULES[areas.ROLES[name]["builder"]].build) for name in areas.AREAS)
AREAS = tuple(entry[0] for entry in BUILDERS)


def desired_settings(ctx: Context, areas: Dict[str, Any], persist: bool = True,
                     expected_inventory: Optional[Dict[str, Any]] = None, persist_boot: bool = True) -> List[Setting]:
    """All Settings for the enabled ``areas`` ({area: {variable: value}}); raises SettingError on bad input.
    ``expected_inventory`` (validated, inventory.validate) goes to the node-local checker's files;
    ``persist_boot`` (nodetune_persist_boot) false leaves out the boot-time restore."""
    if not isinstance(areas, dict):
        raise SettingError(["areas must be a mapping of area name to its variables, got %r" % (areas,)])
    for name in sorted(areas):
        if name not in AREAS:
            ctx.error("unknown area %r (known: %s)" % (name, ", ".join(AREAS)))
    settings: List[Setting] = []
    for name, builder in BUILDERS:
        config = areas.get(name)
        if config is None:
            continue
        if not isinstance(config, dict):
            ctx.error("area %s: expected a mapping of its variables, got %r" % (name, config))
            continue
        if config.get("nodetune_%s_enabled" % name, True) is False:
            continue
        settings.extend(builder(ctx, config))
    if persist and not ctx.errors:
        settings.extend(area_persist.build(ctx, settings, {"boot": persist_boot}))
        settings.extend(inventory.check_settings(settings, expected_inventory, ctx.root))
    if ctx.errors:
        raise SettingError(ctx.errors)
    check_shape(settings)
    return settings
