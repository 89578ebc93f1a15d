# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Which module a nodetune task runs on a host: the production module, or for a lab node its nodetune.lab twin.

A lab node is a directory tree with no kernel behind it; the lab's inventory (and Molecule's) says so with
``nodetune_lab_backend: simulated``, and the tune and verify actions then run ``nodetune.lab.<module>``: the same
production module with the simulated kernel injected into the root layer. Nothing found on the node decides it,
and the production modules' payload holds no simulation code.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleActionFail

VARIABLE = "nodetune_lab_backend"
# backend -> the collection whose module runs the task (None: the production module itself)
BACKENDS = {"kernel": None, "simulated": "nodetune.lab"}


def module_for(module_name, task_vars, templar=None):
    """``nodetune.instinct.tune`` -> itself on a real node, ``nodetune.lab.tune`` on a simulated one."""
    backend = task_vars.get(VARIABLE, "kernel")
    if templar is not None:
        backend = templar.template(backend)
    if backend not in BACKENDS:
        raise AnsibleActionFail("%s %r is not valid: expected one of %s ('kernel': the node's own, the default; "
                                "'simulated': a lab node of nodetune.lab)" % (VARIABLE, backend, ", ".join(BACKENDS)))
    collection = BACKENDS[backend]
    return module_name if collection is None else collection + "." + module_name.rpartition(".")[2]
