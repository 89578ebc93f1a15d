# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The areas: every role and variable declared once (``declarations``), and each area's builder (``<area>.py``,
listed in the generated ``builders``) that turns its variables into Settings; ``persist`` writes what makes them
last a reboot and the node-local checker's files."""
