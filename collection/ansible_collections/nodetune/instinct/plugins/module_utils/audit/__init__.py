# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Auditing: findings and their stable check ids, verify and audit over the applied Settings, the BIOS, health
and inventory checks, fleet outliers and reports (the node-local checker is in node_programs/)."""
