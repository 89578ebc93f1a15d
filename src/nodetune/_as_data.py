"""Values the API hands to Ansible (inventories it writes, extra variables) as data that is never templated.

Ansible renders any trusted string it loads from an inventory or an ``-e @file`` as a Jinja template, so a node
root named ``n{{ lookup('pipe', 'touch X') }}`` would run a command on the controller. Every string written here,
keys and values at any depth, carries YAML's ``!unsafe`` tag, which Ansible loads as a value that is never
templated; except the strings that are numbers, booleans, nulls or dates in form, which cannot hold a template
and which the tag would turn into those types. The one template the API writes on purpose is
:data:`PLAYBOOK_PYTHON` as a host's ``ansible_python_interpreter`` (the controller's own Python, for local hosts);
an inventory that needs other templates is a file, passed by its path.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

#: The interpreter of local hosts: the Python that runs ansible-playbook. The only template the API passes on.
PLAYBOOK_PYTHON = "{{ ansible_playbook_python }}"
_INTERPRETER = "ansible_python_interpreter"
#: The most extra variables a run takes, written out (shared objects and YAML aliases count each time they appear:
#: they are written, and loaded by Ansible, in full).
MAX_EXTRA_VARS_BYTES = 4 << 20
#: The most any data written here may take (an inventory of a large fleet included).
MAX_BYTES = 64 << 20


class _Data(str):
    """A string Ansible must take as it is."""


class _Plain(str):
    """A string written untagged: :data:`PLAYBOOK_PYTHON`, or one that holds no template (see :func:`_mark`)."""


def _mark(value: Any, key: Any = None) -> Any:
    if isinstance(value, Mapping):
        return {_mark(k): _mark(v, k) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_mark(item) for item in value]
    if isinstance(value, str):
        if key == _INTERPRETER and value.strip() == PLAYBOOK_PYTHON:
            return _Plain(PLAYBOOK_PYTHON)
        # Ansible resolves an `!unsafe` scalar as if it were unquoted: `!unsafe "1"` would load as the number 1.
        # The strings that would change type ('1', 'true', '', '~', dates) are numbers, booleans, nulls and dates
        # in form, with no `{` or `%` to start a template: they stay quoted strings, untagged.
        return _Data(value) if _resolves_as_text(value) else _Plain(value)
    return value


@functools.lru_cache(maxsize=4096)
def _resolves_as_text(text: str) -> bool:
    import yaml

    return yaml.resolver.Resolver().resolve(yaml.ScalarNode, text, (True, False)) == "tag:yaml.org,2002:str"


@functools.cache
def _dumper() -> type:
    import yaml  # deferred: `import nodetune` stays on the standard library

    class Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
        pass

    # Double-quoted: every character, control characters and line breaks too, comes back exactly as it was.
    Dumper.add_representer(_Data, lambda dumper, text: dumper.represent_scalar("!unsafe", str(text), style='"'))
    Dumper.add_representer(_Plain, lambda dumper, text: dumper.represent_scalar("tag:yaml.org,2002:str", str(text),
                                                                                 style='"'))
    return Dumper


def dump(data: Any, max_bytes: int = MAX_BYTES) -> str:
    """``data`` as YAML for ``ansible-playbook -i`` or ``-e @FILE``: every string tagged ``!unsafe``.

    Raises TypeError (or yaml.YAMLError) for a value YAML cannot represent, ValueError for data larger than
    ``max_bytes`` once written, or holding itself."""
    import yaml

    # Measured before it is copied and written: one list referring N times to another doubles per level.
    _check_size(data, max_bytes)
    try:
        text = yaml.dump(_mark(data), Dumper=_dumper(), sort_keys=False, allow_unicode=True, width=2**31 - 1)
    except yaml.representer.RepresenterError as exc:
        raise TypeError(f"{exc.args[-1]!r} is not a YAML value") from None
    if len(text) > max_bytes:
        raise ValueError(f"the data is {len(text)} characters long written out, more than the {_size(max_bytes)} "
                         "nodetune passes to Ansible")
    return text


def _size(count: int) -> str:
    return f"{count >> 20} MiB" if count >= 1 << 20 and not count % (1 << 20) else f"{count} bytes"


def expanded_size(root: Any, parts: Callable[[Any], Sequence[Any] | None], leaf: Callable[[Any], int],
                  limit: int, cycle: str) -> int:
    """The size of ``root`` written out with every shared part written at each use: ``leaf`` for a value
    ``parts`` gives no parts for, one for each other plus its parts. Linear in the distinct objects (a YAML bomb's
    aliases, a list referring N times to another, are counted, not walked); stops soon past ``limit`` (the result is
    then over it). Raises ValueError(``cycle``) for a value that holds itself."""
    known: dict[int, int] = {}
    open_: set[int] = set()

    def size(value: Any) -> int:
        children = parts(value)
        if children is None:
            return leaf(value)
        key = id(value)
        if key in known:
            return known[key]
        if key in open_:
            raise ValueError(cycle)
        open_.add(key)
        total = 1
        for child in children:
            total += size(child)
            if total > limit:
                break
        open_.discard(key)
        known[key] = total
        return total

    return size(root)


def _check_size(data: Any, max_bytes: int) -> None:
    """Refuse data whose written form would exceed ``max_bytes``, and data holding itself."""

    def parts(value: Any) -> Sequence[Any] | None:
        if isinstance(value, Mapping):
            return [*value.keys(), *value.values()]
        return value if isinstance(value, list | tuple) else None

    try:
        total = expanded_size(data, parts, lambda value: len(value) + 1 if isinstance(value, str | bytes) else 1,
                              max_bytes, "the data holds itself (a reference cycle): it cannot be written out")
    except RecursionError:
        raise ValueError("the data is nested too deeply to be written out") from None
    if total > max_bytes:
        raise ValueError(f"the data would take more than the {_size(max_bytes)} nodetune passes to Ansible once "
                         "written out (its shared parts written at each use)")
