# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The programs nodetune renders onto each node (nodetune-check, nodetune-restore), the rules they share with
verify (rules.py, with parse.py), and the renderer that writes each as one standalone file (render.py). Standard
library only; they import nothing of nodetune's but parse.py and rules.py."""
