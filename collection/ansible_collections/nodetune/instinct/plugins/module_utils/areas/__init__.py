# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The areas: every role and variable declared once (``declarations``), and each area's builder (``<area>.py``,
listed in the generated ``builders``) that turns its variables into Settings; ``persist`` writes what makes them
last a reboot and the node-local checker's files."""

from ansible_collections.nodetune.instinct.plugins.module_utils.areas import declarations as _declarations
from ansible_collections.nodetune.instinct.plugins.module_utils.plan import setting as _setting

# Every Setting's apply order is its area's (plan/setting.py's ORDER, read when a Setting's order is asked for):
# filled here, before any area's module runs.
_setting.ORDER.update(_declarations.apply_order())
