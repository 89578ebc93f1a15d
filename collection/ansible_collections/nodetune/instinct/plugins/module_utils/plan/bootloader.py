# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The boot loader's configured kernel command line: which loader a node uses, what its entries say, how nodetune
changes them and puts them back.

Two kinds of node, told apart by their files:

- ``bls``: BootLoaderSpec entries ``/boot/loader/entries/*.conf`` (RHEL 8+, Fedora, their rebuilds), each with its
  own ``options`` line; changed with ``grubby --update-kernel=ALL --remove-args=... --args=...``, which edits every
  entry's ``options`` (rhboot/grubby, grubby-bls update_bls_fragment()/update_args(): the removals first, then each
  ``key=value`` argument replaces an existing word of the same key in place or is appended).
- ``grub``: ``/etc/default/grub`` and a generated ``/boot/grub/grub.cfg`` (Debian, Ubuntu): nodetune owns the drop-in
  :data:`DROPIN`, which grub-mkconfig sources after ``/etc/default/grub`` (Debian's grub2 package,
  util/grub-mkconfig.in: ``for x in ${sysconfdir}/default/grub.d/*.cfg``), then runs ``update-grub`` (or
  ``grub-mkconfig -o``), which writes ``GRUB_CMDLINE_LINUX`` (and ``GRUB_CMDLINE_LINUX_DEFAULT`` on normal entries)
  into every ``linux`` line (util/grub.d/10_linux.in).

Reading needs no tool (entry files, grub.cfg); only writing runs one, through a ``run(argv) -> (rc, out, err)``
callback: the module's ``run_command`` on a real node, the lab's simulated tools on a simulated one
(:func:`runner`). ``/proc/cmdline`` is only what the running kernel booted with: a change here takes effect at the
next boot.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ansible_collections.nodetune.instinct.plugins.module_utils.discover import cmdline
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import NodeFileError, Root

GRUB = "grub"
BLS = "bls"
ENTRIES = "boot/loader/entries"
DROPIN = "etc/default/grub.d/99-nodetune-kernel-cmdline.cfg"
TOOL_DIRS = ("usr/sbin", "sbin", "usr/bin", "bin")
# grub.cfg, then the tools that regenerate it (the distribution's update-grub first), with their arguments
GRUB_CONFIGS = (
    ("boot/grub/grub.cfg", (("update-grub",), ("grub-mkconfig", "-o", "/boot/grub/grub.cfg"))),
    ("boot/grub2/grub.cfg", (("grub2-mkconfig", "-o", "/boot/grub2/grub.cfg"),)),
)
LINUX_COMMANDS = ("linux", "linuxefi", "linux16")

Run = Callable[[List[str]], Tuple[int, str, str]]
Entries = List[Tuple[str, str]]  # (entry, its kernel arguments as one line)


class Loader(object):
    """A node's boot loader: ``kind`` (grub|bls), ``config`` (grub.cfg or the entries directory, relative to the
    root) and ``command`` (the tool's argv on the node)."""

    __slots__ = ("kind", "config", "command")

    def __init__(self, kind: str, config: str, command: List[str]) -> None:
        self.kind = kind
        self.config = config
        self.command = command

    @property
    def tool(self) -> str:
        return self.command[0].rsplit("/", 1)[-1]


def find_tool(root: Root, name: str) -> Optional[str]:
    for directory in TOOL_DIRS:
        if root.exists("%s/%s" % (directory, name)):
            return "/%s/%s" % (directory, name)
    return None


def detect(root: Root) -> Tuple[Optional[Loader], str]:
    """(the node's boot loader, why none when None)."""
    why = []
    if any(name.endswith(".conf") for name in root.listdir(ENTRIES)):
        grubby = find_tool(root, "grubby")
        if grubby:
            return Loader(BLS, ENTRIES, [grubby]), ""
        # the entries are what boots (grub.cfg only reads them, blscfg): no other tool may stand in for grubby
        return None, "BootLoaderSpec entries in /%s but no grubby in %s" % (ENTRIES, ", ".join(
            "/" + d for d in TOOL_DIRS))
    for config, tools in GRUB_CONFIGS:
        if not root.exists(config):
            continue
        if not root.exists("etc/default/grub"):
            why.append("/%s but no /etc/default/grub" % config)
            continue
        for tool in tools:
            path = find_tool(root, tool[0])
            if path:
                return Loader(GRUB, config, [path] + list(tool[1:])), ""
        why.append("/%s but none of %s" % (config, ", ".join(t[0] for t in tools)))
    return None, "; ".join(why) or "neither /%s/*.conf nor /boot/grub/grub.cfg (or /boot/grub2/grub.cfg)" % ENTRIES


def runner(root: Root, services: Any) -> Optional[Run]:
    """Who runs the boot loader's tool: the lab's simulated tools on a simulated node (its root's backend), the
    module's run_command (kept by the service manager) on the node itself, nothing on any other tree."""
    tools = getattr(getattr(root, "backend", None), "boot_tools", None)
    if tools is not None:
        return tools(root)
    if getattr(root, "is_host", False):
        return getattr(services, "run", None)
    return None


# ------------------------------------------------------------------------------------------------ reading
def bls_entry(text: str) -> Dict[str, str]:
    """A BootLoaderSpec entry's keys; ``options`` lines add up (the spec allows several)."""
    out: Dict[str, str] = {}
    for line in text.splitlines():
        key, _sep, value = line.strip().partition(" ")
        if not key or key.startswith("#"):
            continue
        value = value.strip()
        if key == "options" and "options" in out:
            out["options"] = (out["options"] + " " + value).strip()
        else:
            out[key] = value
    return out


def bls_entries(root: Root) -> List[Tuple[str, Dict[str, str]]]:
    """(path relative to the root, keys) of every entry, by file name."""
    out = []
    for name in sorted(root.listdir(ENTRIES)):
        if name.endswith(".conf"):
            rel = "%s/%s" % (ENTRIES, name)
            out.append((rel, bls_entry(root.read(rel, strip=False) or "")))
    return out


def grub_entries(text: str) -> Entries:
    """(menu entry title, kernel arguments) of every ``linux`` line of a grub.cfg, in order, read with GRUB's
    quoting (the kernel path is left out)."""
    out: Entries = []
    title = "?"
    for line in text.splitlines():
        words = cmdline.grub_words(line)
        if not words:
            continue
        if words[0] in ("menuentry", "submenu") and len(words) > 1:
            title = words[1]
        elif words[0] in LINUX_COMMANDS and len(words) > 1:
            out.append((title, " ".join(words[2:])))
    return out


def entries(root: Root, loader: Loader) -> Entries:
    """(entry, kernel arguments) of every boot entry the loader would offer."""
    if loader.kind == BLS:
        return [(rel.rsplit("/", 1)[-1], keys.get("options", "")) for rel, keys in bls_entries(root)]
    return grub_entries(root.read(loader.config, strip=False) or "")


def configured_lines(root: Root) -> Optional[List[str]]:
    """The kernel arguments of every configured boot entry, None where the node's boot loader is unknown (or has no
    entry): what the next boot runs with."""
    loader = detect(root)[0]
    if loader is None:
        return None
    lines = [args for _entry, args in entries(root, loader)]
    return lines or None


# ------------------------------------------------------------------------------------------------ requirements
def requirement(value: str) -> Tuple[List[str], List[str]]:
    """A kernel_cmdline Setting's value ``"iommu=pt pci=realloc=off -amd_iommu=on"`` -> (add, remove)."""
    words = value.split()
    return [w for w in words if not w.startswith("-")], [w[1:] for w in words if w.startswith("-")]


def requirement_value(add: Sequence[str], remove: Sequence[str]) -> str:
    return " ".join(list(add) + ["-" + w for w in remove])


def describe(add: Sequence[str], remove: Sequence[str]) -> str:
    """How verify shows the requirement (and the configured state when every entry meets it)."""
    text = " ".join(add)
    if remove:
        text += (" " if text else "") + "without " + " ".join(remove)
    return text or "no change"


def _entries_text(items: Entries, separator: str = "; ") -> str:
    return separator.join("%s: %s" % (entry, args) for entry, args in items) or "<no boot entry>"


def current(root: Root, key: str, value: str) -> Optional[str]:
    """The configured state in comparable form: the requirement itself when every entry meets it, else the entries
    that do not (with their arguments). None when the node has no such boot loader or no entry."""
    loader = detect(root)[0]
    if loader is None or loader.kind != key:
        return None
    items = entries(root, loader)
    if not items:
        return None
    add, remove = requirement(value)
    bad = [(entry, args) for entry, args in items if cmdline.unmet(args, add, remove)]
    if bad:
        return _entries_text(bad)
    if loader.kind == GRUB and root.exists(DROPIN) and (
            root.read(DROPIN, strip=False) != grub_dropin(add, remove) or _newer(root, DROPIN, loader.config)):
        # grub.cfg is only what update-grub made of the drop-in it read: one that changed since is not in it yet
        return _entries_text(items) + " (/%s not regenerated since /%s changed)" % (loader.config, DROPIN)
    return describe(add, remove)


def _newer(root: Root, path: str, than: str) -> bool:
    try:
        return os.stat(root.real(path)).st_mtime_ns > os.stat(root.real(than)).st_mtime_ns
    except OSError:
        return False


def shown(root: Root, key: str) -> Optional[str]:
    """Every entry with its arguments, a line each (a diff's before)."""
    loader = detect(root)[0]
    if loader is None or loader.kind != key:
        return None
    return _entries_text(entries(root, loader), "\n")


# ------------------------------------------------------------------------------------------------ grubby
def grubby_update(words: List[str], remove_args: Sequence[str], add_args: Sequence[str]) -> List[str]:
    """One entry's words after ``grubby --remove-args=R --args=A`` (grubby-bls update_args(), taken word by word):
    each removal takes out the first word that starts with it; then each ``key=value`` replaces the first word of
    that key (the text before its last ``=``) in place, or is appended; a bare word is appended when absent."""
    out = list(words)
    for arg in remove_args:
        for index, word in enumerate(out):
            if word.startswith(arg):
                del out[index]
                break
    for arg in add_args:
        if "=" in arg:
            key = cmdline.word_key(arg)
            for index, word in enumerate(out):
                if word.startswith(key + "="):
                    out[index] = arg
                    break
            else:
                out.append(arg)
        elif arg not in out:
            out.append(arg)
    return out


def grubby_args(lines: Sequence[str], add: Sequence[str], remove: Sequence[str]) -> Tuple[List[str], List[str]]:
    """(--remove-args words, --args words) that bring every line to the requirement in one call: the words to
    remove and, where an ``add`` word is not met, the words of the same key that would contradict it (each listed
    as often as one entry has it), then the ``add`` words some entry does not meet."""
    counts: Dict[str, int] = {}
    order: List[str] = []
    adds: List[str] = []
    for line in lines:
        words = cmdline.kernel_words(line)
        found = cmdline.params(line)
        drop: List[str] = []
        for word in remove:
            drop += cmdline.present(words, word)
        for word in add:
            if not cmdline.met(found, word):
                drop += cmdline.conflicting(words, word)
                if word not in adds:
                    adds.append(word)
        seen: Dict[str, int] = {}
        for word in drop:
            seen[word] = seen.get(word, 0) + 1
            if word not in counts:
                order.append(word)
            counts[word] = max(counts.get(word, 0), seen[word])
    removes = [word for word in order for _count in range(counts[word])]
    return removes, [word for word in add if word in adds]


def restore_args(now: List[str], then: List[str]) -> Optional[Tuple[List[str], List[str]]]:
    """(--remove-args, --args) that turn the words ``now`` back into exactly ``then`` with grubby: the words after
    the longest common start are removed and the old ones added back in order; where grubby would put one
    elsewhere (it replaces a word of the same key in place), an earlier start is tried. None when no call does
    it (``then`` has two words of one key after the point where they differ)."""
    start = 0
    while start < min(len(now), len(then)) and now[start] == then[start]:
        start += 1
    for cut in range(start, -1, -1):
        remove, add = now[cut:], then[cut:]
        if grubby_update(now, remove, add) == then:
            return remove, add
    return None


def grubby_command(tool: str, target: str, remove: Sequence[str], add: Sequence[str]) -> List[str]:
    argv = [tool, "--update-kernel=" + target]
    if remove:
        argv.append("--remove-args=" + " ".join(remove))
    if add:
        argv.append("--args=" + " ".join(add))
    return argv


# ------------------------------------------------------------------------------------------------ GRUB drop-in
def _case_pattern(word: str, prefix: bool = False) -> str:
    """A sh case pattern matching ``word`` (its name with - and _ alike, as the kernel reads it), and with
    ``prefix`` every ``word=...`` too."""
    name, sep, rest = word.partition("=")
    name_pattern = "".join("[_-]" if char in "_-" else char for char in name)
    literal = sep + rest
    pattern = name_pattern + ("'%s'" % literal if literal else "")
    if prefix:
        pattern += "|" + name_pattern + ("'%s='*" % literal if literal else "=*")
    return pattern


def _word_matches(word: str, pattern_word: str, prefix: bool) -> bool:
    """What :func:`_case_pattern` matches, in Python (the prediction of what the drop-in filters out)."""
    name, sep, rest = word.partition("=")
    want_name, want_sep, want_rest = pattern_word.partition("=")
    if not cmdline.same_name(name, want_name):
        return False
    head, tail = sep + rest, want_sep + want_rest
    return head == tail or (prefix and head.startswith(tail + "="))


def dropin_patterns(add: Sequence[str], remove: Sequence[str]) -> List[str]:
    patterns = []
    for word in add:
        patterns.append(_case_pattern(cmdline.word_key(word), prefix=True))
    for word in remove:
        patterns.append(_case_pattern(word, prefix="=" not in word))
    return patterns


def grub_dropin(add: Sequence[str], remove: Sequence[str]) -> str:
    """The drop-in nodetune owns in /etc/default/grub.d: grub-mkconfig sources it after /etc/default/grub, so it
    takes the words to remove (and every other value of a key it sets) out of GRUB_CMDLINE_LINUX and
    GRUB_CMDLINE_LINUX_DEFAULT and appends the words to set to GRUB_CMDLINE_LINUX (every entry, recovery ones too).
    POSIX sh (dash runs it on Debian); globbing is off while the words are split."""
    patterns = dropin_patterns(add, remove)
    added = " ".join(cmdline.grub_quote(word) for word in add)
    lines = [
        "# Written by nodetune (the kernel_cmdline role); 'revert' removes it. Do not edit: nodetune rewrites it.",
        "# grub-mkconfig (update-grub) sources it after /etc/default/grub; the kernel reads the result at the next",
        "# boot. Wanted: %s" % describe(add, remove),
    ]
    if patterns:
        lines += [
            "nodetune_cmdline_filter() {",
            "    nodetune_cmdline_out=",
            "    set -f",
            "    for nodetune_cmdline_word in $1; do",
            "        case \"$nodetune_cmdline_word\" in",
            "            %s) ;;" % "|".join(patterns),
            "            *) nodetune_cmdline_out=\"${nodetune_cmdline_out:+$nodetune_cmdline_out }"
            "$nodetune_cmdline_word\" ;;",
            "        esac",
            "    done",
            "    set +f",
            "}",
            "nodetune_cmdline_filter \"$GRUB_CMDLINE_LINUX\"",
            "GRUB_CMDLINE_LINUX=\"$nodetune_cmdline_out\"",
            "nodetune_cmdline_filter \"$GRUB_CMDLINE_LINUX_DEFAULT\"",
            "GRUB_CMDLINE_LINUX_DEFAULT=\"$nodetune_cmdline_out\"",
            "unset -f nodetune_cmdline_filter",
            "unset nodetune_cmdline_out nodetune_cmdline_word",
        ]
    if added:
        lines.append("GRUB_CMDLINE_LINUX=\"${GRUB_CMDLINE_LINUX:+$GRUB_CMDLINE_LINUX }%s\"" % added)
    return "\n".join(lines) + "\n"


def grub_edit(words: List[str], add: Sequence[str], remove: Sequence[str]) -> List[str]:
    """An entry's words once the drop-in is sourced: what it filters out gone, what it sets added (shown at the end:
    update-grub writes them at the end of GRUB_CMDLINE_LINUX, before GRUB_CMDLINE_LINUX_DEFAULT's words)."""
    keep = [word for word in words
            if not any(_word_matches(word, cmdline.word_key(a), True) for a in add)
            and not any(_word_matches(word, r, "=" not in r) for r in remove)]
    return keep + list(add)


# ------------------------------------------------------------------------------------------------ plan
def predicted(root: Root, key: str, value: str) -> Optional[str]:
    """Every entry with its arguments once the change is made (a diff's after)."""
    loader = detect(root)[0]
    if loader is None or loader.kind != key:
        return None
    add, remove = requirement(value)
    items = entries(root, loader)
    if loader.kind == BLS:
        removes, adds = grubby_args([args for _e, args in items], add, remove)
        after = [(entry, " ".join(grubby_update(cmdline.split(args), removes, adds))) for entry, args in items]
    else:
        after = [(entry, " ".join(grub_edit(cmdline.split(args), add, remove))) for entry, args in items]
    return _entries_text(after, "\n")


def snapshot(root: Root, key: str) -> Dict[str, Any]:
    """What revert needs to put the entries back: each entry's arguments (BLS: by entry file)."""
    loader = detect(root)[0]
    if loader is None or loader.kind != key:
        raise NodeFileError("the node's boot loader is no longer %s; nothing was written" % key, key)
    if loader.kind == BLS:
        saved = dict((rel, keys.get("options", "")) for rel, keys in bls_entries(root))
    else:
        saved = dict(("%s#%d" % (loader.config, index), args)
                     for index, (_entry, args) in enumerate(entries(root, loader)))
    return {"kind": "boot", "loader": loader.kind, "entries": saved}


def _run(run: Optional[Run], argv: List[str], where: str) -> None:
    if run is None:
        raise NodeFileError("%s: no way to run %s on this root (nodetune runs boot loader tools only on the node "
                            "itself, root /, or on a simulated lab node)" % (where, argv[0]), where)
    rc, out, err = run(argv)
    if rc != 0:
        raise NodeFileError("%s failed (rc=%d): %s" % (" ".join(argv), rc, (err or out or "").strip()), where)


def write(root: Root, key: str, value: str, run: Optional[Run]) -> None:
    """Make every entry meet the requirement with the loader's tool (GRUB: the drop-in is written before)."""
    loader = detect(root)[0]
    if loader is None or loader.kind != key:
        raise NodeFileError("the node's boot loader is no longer %s; nothing was written" % key, key)
    if loader.kind == GRUB:
        _run(run, list(loader.command), loader.config)
        return
    add, remove = requirement(value)
    removes, adds = grubby_args([args for _e, args in entries(root, loader)], add, remove)
    if removes or adds:
        _run(run, grubby_command(loader.command[0], "ALL", removes, adds), loader.config)


def is_restored(root: Root, snap: Dict[str, Any]) -> bool:
    loader = detect(root)[0]
    if loader is None or loader.kind != snap.get("loader"):
        return True  # nothing nodetune can act on
    saved = snap.get("entries") or {}
    if loader.kind == BLS:
        return all(keys.get("options", "") == saved[rel] for rel, keys in bls_entries(root) if rel in saved)
    return [args for _e, args in entries(root, loader)] == [saved[k] for k in sorted(saved, key=_grub_index)]


def _grub_index(key: str) -> int:
    return int(key.rsplit("#", 1)[-1]) if key.rsplit("#", 1)[-1].isdigit() else 0


def restore(root: Root, snap: Dict[str, Any], run: Optional[Run]) -> None:
    """Put the entries back as journaled. GRUB: regenerate grub.cfg from /etc/default/grub (revert removed the
    drop-in first); BLS: for each entry that differs, one grubby call on its kernel, then the entry must read as
    journaled. An entry whose file is gone (its kernel removed since) is left alone."""
    loader = detect(root)[0]
    if loader is None or loader.kind != snap.get("loader"):
        raise NodeFileError("the node's boot loader is no longer %s: put the kernel command line back by hand (the "
                            "journal has every entry's arguments)" % snap.get("loader"), ENTRIES)
    if loader.kind == GRUB:
        _run(run, list(loader.command), loader.config)
        return
    saved = snap.get("entries") or {}
    for rel, keys in bls_entries(root):
        if rel not in saved or keys.get("options", "") == saved[rel]:
            continue
        now, then = cmdline.split(keys.get("options", "")), cmdline.split(saved[rel])
        plan = restore_args(now, then)
        if plan is None:
            raise NodeFileError("/%s: grubby cannot put back its options exactly (%r; grubby's --args replaces a "
                                "word of the same key): set them by hand" % (rel, saved[rel]), rel)
        _run(run, grubby_command(loader.command[0], keys.get("linux") or "ALL", plan[0], plan[1]), rel)
        after = bls_entry(root.read(rel, strip=False) or "").get("options", "")
        if after != saved[rel]:
            message = "/%s: after grubby its options read %r, not the journaled %r" % (rel, after, saved[rel])
            raise NodeFileError(message, rel)


def restore_change(root: Root, snap: Dict[str, Any]) -> Tuple[Optional[str], Optional[str]]:
    """(now, as journaled) for a revert's diff."""
    loader = detect(root)[0]
    saved = snap.get("entries") or {}
    before = _entries_text(entries(root, loader), "\n") if loader is not None else None
    if snap.get("loader") == BLS:
        after = _entries_text([(rel.rsplit("/", 1)[-1], args) for rel, args in sorted(saved.items())], "\n")
    else:
        labels = [entry for entry, _args in entries(root, loader)] if loader is not None else []
        values = [saved[k] for k in sorted(saved, key=_grub_index)]
        after = _entries_text([(labels[i] if i < len(labels) else "entry %d" % i, args)
                               for i, args in enumerate(values)], "\n")
    return before, after
