# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Planning: from a Topology and role variables to the node's Layout and its desired Settings (``tuning``), the
shape every Setting has (``setting``) and the node facade that discovers and plans (``node``)."""
