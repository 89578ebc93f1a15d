# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""From role variables to the node's desired Settings: the one entry point apply and verify share.

``desired_settings(ctx, areas)`` runs each enabled area's builder in a fixed order, then the persistence area over
their result, and raises :class:`SettingError` listing every problem before anything can be written.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

from ansible_collections.nodetune.instinct.plugins.module_utils.areas import builders as _builders
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import persist as area_persist
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import declarations as areas
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import checker_files
from ansible_collections.nodetune.instinct.plugins.module_utils.areas.common import Context
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import Setting, SettingError, check_shape

Builder = Callable[[Context, Dict[str, Any]], List[Setting]]


def _builder(area: str) -> Builder:
    """The ``build`` of ``area``'s module (its declaration's ``builder``). The modules come from
    ``areas/builders.py``, which scripts/gen_role_docs.py writes with a static import of each: Ansible ships in a
    module's payload only the module_utils imported that way (an importlib import by name would leave the builder on
    the controller)."""
    name = areas.ROLES[area]["builder"]
    module = _builders.MODULES.get(name)
    if module is None:
        raise ImportError("area %s: its builder module_utils/areas/%s.py is not in module_utils/areas/builders.py: run "
                          "python scripts/gen_role_docs.py" % (area, name))
    return module.build


BUILDERS = tuple((name, _builder(name)) for name in areas.AREAS)
AREAS = tuple(entry[0] for entry in BUILDERS)


def desired_settings(ctx: Context, areas: Dict[str, Any], persist: bool = True,
                     expected_inventory: Optional[Dict[str, Any]] = None, persist_boot: bool = True,
                     learned_inventory: Optional[Tuple[Dict[str, Any], Dict[str, str]]] = None) -> List[Setting]:
    """All Settings for the enabled ``areas`` ({area: {variable: value}}); raises SettingError on bad input.
    ``expected_inventory`` (validated, audit/inventory.validate) and ``learned_inventory``
    (audit/inventory.validate_learned) go to the node-local checker's files (areas/checker_files.py);
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
        settings.extend(checker_files.check_settings(settings, expected_inventory, ctx.root, learned_inventory))
    if ctx.errors:
        raise SettingError(ctx.errors)
    check_shape(settings)
    return settings
