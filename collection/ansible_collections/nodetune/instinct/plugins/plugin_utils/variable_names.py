# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Misspelt nodetune variables and tags, on the controller: the nearest real name, and what sets a look-alike apart.

The action plugins, the API and the CLI refuse a ``nodetune_*`` variable that no role, playbook or lab declares
(areas/declarations.py) and a tag that selects no area, before anything runs; the modules on the nodes never need
this, so it is not in their payload.
"""

from __future__ import annotations

import difflib
import unicodedata
from typing import Iterable, List, Optional

from ansible_collections.nodetune.instinct.plugins.module_utils.areas.declarations import (
    REMOVED_VARIABLES,
    ROLES,
    TAGS,
    hints,
    known_variables,
)


# Letters of other scripts that look like Latin ones (Cyrillic, Greek; full-width forms are folded by NFKC): a name
# or tag typed with one of them is a misspelling of the Latin one, not another name.
_LOOKALIKES = dict(zip(
    "АВЕКМНОРСТХаеорсухіјѕԁһӏкԛԝΑΒΕΖΗΙΚΜΝΟΡΤΥΧαικνορτυχı",
    "abekmhopctxaeopcyxijsdhlkqwabezhikmnoptyxaikvoptuxi"))


def folded(name: str) -> str:
    """``name`` as it reads: full-width forms and look-alike letters as their Latin ones, case folded."""
    text = unicodedata.normalize("NFKC", name)
    return "".join(_LOOKALIKES.get(char, char) for char in text).casefold()


def _nearest(name: str, known: Iterable[str]) -> Optional[str]:
    """The known name ``name`` reads as, or else the closest one."""
    reads, known = folded(name), list(known)
    near = [reads] if reads in known else difflib.get_close_matches(reads, known, n=1, cutoff=0.6)
    return near[0] if near else None


def _notes(name: str, *notes: str) -> str:
    """``notes`` in parentheses, after what sets ``name`` apart from nodetune's ASCII lower-case names."""
    foreign = ["U+%04X %s" % (ord(char), unicodedata.name(char, "?")) for char in name if ord(char) > 127]
    if foreign:
        notes = ("it holds %s" % ", ".join(dict.fromkeys(foreign)),) + notes
    elif name != name.lower():
        notes = ("names are lower case",) + notes
    return " (%s)" % "; ".join(notes)


def undeclared(names: Iterable[str]) -> List[str]:
    """One error per ``nodetune_*`` name that no role, playbook or lab declares, with the nearest real name. A name
    that reads as ``nodetune_*`` once case and look-alike letters are folded (``Nodetune_smt_enabled``, a Cyrillic
    ``о``) is one too: Ansible would keep it as another variable and the real one would keep its default."""
    known = known_variables()
    known_set = set(known)
    all_hints = dict(REMOVED_VARIABLES)  # type: Dict[str, str]
    for role in ROLES:
        all_hints.update(hints(role))
    errors = []
    for name in sorted(set(names)):
        if name in known_set or not (name.startswith("nodetune_") or folded(name).startswith("nodetune_")):
            continue
        if name in all_hints:
            errors.append(all_hints[name])
            continue
        near = _nearest(name, known)
        errors.append("%s is not a nodetune variable%s%s" % (
            name, "; did you mean %s?" % near if near else "",
            _notes(name, "every variable is listed in roles/<role>/README.md")))
    return errors


#: tags of the collection's playbooks that select no area (site.yml's lab play, discover.yml) and Ansible's own
PLAYBOOK_TAGS = ("lab", "discover", "always", "never", "tagged", "untagged")


def tag_errors(tags: Iterable[str], skip_tags: Iterable[str] = (), strict: bool = True,
               others: Iterable[str] = ()) -> List[str]:
    """One error per tag that selects no area. ``strict``: every tag not in TAGS or ``others``; else only those
    that read as one of TAGS once case and look-alike letters are folded (``NVME``, ``nvmе`` with a Cyrillic ``е``),
    which select nothing where the user meant an area (``-t NVME`` makes apply a no-op, ``--skip-tags SMT`` skips
    nothing)."""
    errors = []
    for option, given in (("--tags", tags), ("--skip-tags", skip_tags)):
        for tag in given:
            if tag in TAGS or tag in others:
                continue
            if (strict and option == "--tags") or folded(tag) in TAGS:
                near = _nearest(tag, TAGS)
                errors.append("%s %s selects no nodetune area%s%s" % (
                    option, tag, "; did you mean %s?" % near if near else "",
                    _notes(tag, "valid tags: " + ", ".join(TAGS))))
    return errors
