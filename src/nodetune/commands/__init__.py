"""Sub-commands of the nodetune CLI, one module each."""
