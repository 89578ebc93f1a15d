"""Ansible callback plugins that nodetune's API puts on ``ANSIBLE_CALLBACK_PLUGINS`` for its own runs."""
