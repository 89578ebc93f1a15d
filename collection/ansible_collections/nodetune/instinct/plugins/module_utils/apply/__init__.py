# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Applying: the engine that diffs, journals, writes all-or-nothing and reverts, and the writers it hands
to (services, the boot loader, sysctl.d, owned paths); ``diff_view`` bounds what a run shows."""
