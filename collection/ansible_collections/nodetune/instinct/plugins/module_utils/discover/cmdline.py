# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Kernel command lines: one parser for ``/proc/cmdline``, a boot loader's configured lines and the checks on them.

Used by the bios_check role (``bios.iommu``, the ``pci=realloc=off`` check, ``bios.aspm``) and the kernel_cmdline
area alike, so that what verify says about the running kernel and about the boot loader comes from the same facts.

How the kernel reads its command line (what this module follows):

- words are split at spaces; a double quote starts or ends a quoted stretch, and ``param="a b"`` loses its quotes
  (lib/cmdline.c, next_arg());
- ``--`` ends the kernel's parameters: what follows goes to init (kernel/params.c, parse_args());
- ``-`` and ``_`` are the same in a parameter's name (kernel/params.c, parameqn()); ``amd-iommu=`` is ``amd_iommu=``;
- an early parameter given twice is handled twice, in order: for options such as ``iommu=pt``/``iommu=nopt`` or
  ``pci=realloc=on``/``pci=realloc=off`` the last one wins (arch/x86/kernel/pci-dma.c, iommu_setup();
  drivers/pci/pci.c, pci_setup(), which splits ``pci=`` at commas).

A requirement is a word to have (``iommu=pt``: met when the line means IOMMU passthrough, whichever spelling gave it)
or a word to be without (``amd_iommu=on``). :func:`met` and :func:`unmet` judge a line by meaning, not by text.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Tuple

# Options the kernel's amd_iommu= parser knows (Documentation/admin-guide/kernel-parameters.txt); "on" is not one.
AMD_IOMMU_OPTIONS = ("fullflush", "off", "force_isolation", "force_enable", "pgtbl_v1", "pgtbl_v2", "irtcachedis",
                     "nohugepages", "v2_pgsizes_only")

Params = List[Tuple[str, Optional[str]]]

_TRUE_WORDS = ("1", "y", "yes", "on", "true")
# What a word nodetune writes to a boot loader may hold: no blanks, quotes, backslashes or shell/GRUB expansion
# ($, `), so that it means the same to the kernel, to sh (a GRUB drop-in is sourced by grub-mkconfig) and to grubby.
WORD = re.compile(r"^[A-Za-z0-9_.\-]+(=[A-Za-z0-9_.,:;=/+@%\[\]\-]*)?$")
# Characters GRUB's script parser would take as syntax in a linux line: a word holding one is single-quoted there.
GRUB_SPECIAL = set(";&|<>{}")


def split(text: Optional[str]) -> List[str]:
    """The words of a command line as lib/cmdline.c next_arg() delimits them (quotes kept in the words)."""
    words: List[str] = []
    if not text:
        return words
    current: List[str] = []
    quoted = False
    for char in text:
        if char == '"':
            quoted = not quoted
        if char.isspace() and not quoted:
            if current:
                words.append("".join(current))
                current = []
            continue
        current.append(char)
    if current:
        words.append("".join(current))
    return words


def params(text: Optional[str]) -> Params:
    """``'a=1 b "c=x y"'`` -> ``[("a", "1"), ("b", None), ("c", "x y")]``, in order, up to ``--`` (init's)."""
    out: Params = []
    for word in split(text):
        if word == "--":
            break
        if word.startswith('"') and word.endswith('"') and len(word) > 1:
            word = word[1:-1]
        name, sep, value = word.partition("=")
        if sep and value.startswith('"'):
            value = value[1:-1] if value.endswith('"') and len(value) > 1 else value[1:]
        out.append((name.strip('"'), value if sep else None))
    return out


def kernel_words(text: Optional[str]) -> List[str]:
    """The words before ``--`` (the kernel's; what follows is init's)."""
    words = split(text)
    return words[:words.index("--")] if "--" in words else words


def same_name(a: str, b: str) -> bool:
    """kernel/params.c parameqn(): dashes and underscores are the same in parameter names."""
    return a.replace("-", "_") == b.replace("-", "_")


def last(found: Params, name: str) -> Optional[str]:
    """The value of the last ``name`` (``""`` for a bare ``name``), None when it is not there."""
    value = None
    for key, val in found:
        if same_name(key, name):
            value = val if val is not None else ""
    return value


def iommu_passthrough(found: Params) -> bool:
    """True when the line asks for IOMMU passthrough (``iommu=pt`` or ``iommu.passthrough=1``), the last word
    deciding (arch/x86/kernel/pci-dma.c iommu_setup(); drivers/iommu/iommu.c iommu_set_def_domain_type())."""
    passthrough = False
    for key, val in found:
        if same_name(key, "iommu") and val is not None:
            options = val.split(",")
            if "pt" in options:
                passthrough = True
            elif "nopt" in options:
                passthrough = False
        elif same_name(key, "iommu.passthrough") and val is not None:
            passthrough = val.strip().lower() in _TRUE_WORDS
    return passthrough


def pci_option(found: Params, option: str) -> Optional[str]:
    """The last ``pci=`` option named ``option`` (its value, ``""`` when bare), None if no ``pci=`` has it.
    drivers/pci/pci.c pci_setup() splits each ``pci=`` at commas and handles the options in order."""
    value = None
    for key, val in found:
        if not same_name(key, "pci") or val is None:
            continue
        for item in val.split(","):
            name, sep, setting = item.partition("=")
            if name == option:
                value = setting if sep else ""
    return value


def pci_realloc(found: Params) -> Optional[str]:
    """The last ``realloc`` option of ``pci=`` (``"off"``, ``"on"``, ``""`` for bare ``realloc``), None if unset."""
    return pci_option(found, "realloc")


def amd_iommu_values(found: Params) -> List[str]:
    return [v or "" for k, v in found if same_name(k, "amd_iommu")]


# ------------------------------------------------------------------------------------------------ requirements
def word_key(word: str) -> str:
    """What a word sets, as grubby keys it: the text before its last ``=`` (``pci=realloc`` for ``pci=realloc=off``,
    ``iommu`` for ``iommu=pt``), the word itself when it has none. rhboot/grubby grubby-bls update_args() replaces
    an existing word of the same key."""
    return word[:word.rfind("=")] if "=" in word else word


def same_key(word: str, other: str) -> bool:
    key, other_key = word_key(word), word_key(other)
    head, _sep, tail = key.partition("=")
    other_head, _sep2, other_tail = other_key.partition("=")
    return same_name(head, other_head) and tail == other_tail


def met(found: Params, word: str) -> bool:
    """Does the line (``params()``) mean what ``word`` asks for? ``iommu=pt`` by passthrough, each ``pci=`` option by
    its last value, any other ``key=value`` by the last value of ``key``, a bare word by being there."""
    name, sep, value = word.partition("=")
    if not sep:
        return any(same_name(key, name) and val is None for key, val in found)
    if same_name(name, "iommu") and value in ("pt", "nopt"):
        return iommu_passthrough(found) is (value == "pt")
    if same_name(name, "pci"):
        for item in value.split(","):
            option, opt_sep, setting = item.partition("=")
            if pci_option(found, option) != (setting if opt_sep else ""):
                return False
        return True
    return last(found, name) == value


def present(words: Sequence[str], word: str) -> List[str]:
    """The words of a line that a removal of ``word`` takes out: the same word, or every word of that name when
    ``word`` is a bare name."""
    name, sep, value = word.partition("=")
    out = []
    for item in words:
        item_name, item_sep, item_value = item.partition("=")
        if not same_name(item_name, name):
            continue
        if not sep or (item_sep and item_value == value):
            out.append(item)
    return out


def conflicting(words: Sequence[str], word: str) -> List[str]:
    """Words of a line with the same key as ``word`` but another value (``iommu=nopt`` against ``iommu=pt``)."""
    return [item for item in words if item != word and same_key(item, word)]


def unmet(text: Optional[str], add: Sequence[str], remove: Sequence[str]) -> List[str]:
    """What the line lacks: the words of ``add`` it does not mean, ``-word`` for each word of ``remove`` still
    there. Empty when the line is as wanted."""
    found = params(text)
    words = kernel_words(text)
    out = [word for word in add if not met(found, word)]
    out += ["-" + word for word in remove if present(words, word)]
    return out


def check_words(values: Sequence[object], variable: str) -> Tuple[List[str], List[str]]:
    """(valid words, errors naming ``variable``, the value and what is valid)."""
    words, errors = [], []
    for value in values:
        if not isinstance(value, str) or not WORD.match(value) or value.startswith("-"):
            errors.append("%s: %r is not a kernel parameter nodetune can write: expected one word such as "
                          "'iommu=pt' or 'pci=realloc=off' (letters, digits, _ . - then optionally = and a value of "
                          "letters, digits and _ . , : ; = / + @ %% [ ] -; no blanks, quotes, $ or backslashes)"
                          % (variable, value))
            continue
        words.append(value)
    return words, errors


def grub_quote(word: str) -> str:
    """``word`` as it must stand in a GRUB linux line: single-quoted when GRUB's script parser would read part of
    it as syntax (``pci=disable_acs_redir=a;b``: an unquoted ``;`` ends the linux command there)."""
    return "'%s'" % word if GRUB_SPECIAL & set(word) else word


def grub_words(line: str) -> List[str]:
    """The words of one GRUB script command (a ``linux`` line of grub.cfg) as GRUB's lexer reads them: quotes
    removed (``'...'`` literal, ``"..."`` with backslash escapes), a backslash escaping the next character outside
    quotes, ``#`` starting a comment at a word's start, ``;`` ending the command (grub-core/script/yylex.l)."""
    words: List[str] = []
    current: List[str] = []
    started = False
    quote = ""
    index = 0
    while index < len(line):
        char = line[index]
        if quote == "'":
            if char == "'":
                quote = ""
            else:
                current.append(char)
        elif quote == '"':
            if char == '"':
                quote = ""
            elif char == "\\" and index + 1 < len(line) and line[index + 1] in '"\\$':
                index += 1
                current.append(line[index])
            else:
                current.append(char)
        elif char in "'\"":
            quote = char
            started = True
        elif char == "\\" and index + 1 < len(line):
            index += 1
            current.append(line[index])
            started = True
        elif char.isspace() or char in ";\n":
            if started:
                words.append("".join(current))
                current, started = [], False
            if char in ";\n":
                break
        elif char == "#" and not started:
            break
        else:
            current.append(char)
            started = True
        index += 1
    if started:
        words.append("".join(current))
    return words


def facts(text: Optional[str]) -> Dict[str, object]:
    """The facts verify reports from one command line."""
    found = params(text)
    return {"iommu_passthrough": iommu_passthrough(found), "pci_realloc": pci_realloc(found),
            "amd_iommu": amd_iommu_values(found), "disable_acs_redir": pci_option(found, "disable_acs_redir")}
