#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: tune
short_description: nodetune.instinct.tune on a simulated lab node (its writes answered by the simulated kernel)
description:
  - Runs the production module M(nodetune.instinct.tune), unchanged, with the root layer's simulated kernel and
    simulated systemd (C(plugins/module_utils/simkernel.py)) instead of the node's own.
  - Not called directly. The C(nodetune.instinct.tune) action runs it instead of the production module for a host
    whose C(nodetune_lab_backend) is C(simulated) (the lab inventory and Molecule set it). The production module
    never contains simulation code.
  - Takes exactly the options of M(nodetune.instinct.tune).
version_added: "0.1.0"
author:
  - nodetune contributors (@nodetune)
options: {}
attributes:
  check_mode:
    description: As M(nodetune.instinct.tune).
    support: full
  diff_mode:
    description: As M(nodetune.instinct.tune).
    support: full
"""

EXAMPLES = r"""
# In the lab inventory (inventories/lab/group_vars/all/lab.yml):
#   nodetune_lab_backend: simulated
# and every nodetune.instinct.tune task on those hosts runs nodetune.lab.tune.
"""

RETURN = r"""
# As nodetune.instinct.tune.
"""

from ansible_collections.nodetune.instinct.plugins.module_utils import bytecode_cache

bytecode_cache.install(writes=True)  # first: the imports below then load from the node's bytecode cache

from ansible_collections.nodetune.lab.plugins.module_utils import simkernel
from ansible_collections.nodetune.lab.plugins.module_utils.production import tune as production


def main():
    simkernel.install()
    production.main()


if __name__ == "__main__":
    main()
