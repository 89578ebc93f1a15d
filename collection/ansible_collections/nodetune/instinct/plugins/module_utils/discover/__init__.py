# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Discovery: what the node is, read from its sysfs and procfs under a root (CPUs, devices, IRQs, the
system's settings, the kernel command line), gathered into one ``Topology``. Reads only; imports no later stage."""
