# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The kernel_cmdline area: the boot loader's kernel command line (``iommu=pt``, ``pci=realloc=off``, no
``amd_iommu=on``), opt-in because it takes effect only at the next boot.

AMD's Instinct guides ask for ``iommu=pt`` (MI300X; MI200 where the IOMMU is on) and ``pci=realloc=off`` (MI300X) on
the kernel command line (DOMAIN.md; rocm.docs.amd.com, "AMD Instinct MI300X system optimization" and "MI200 system
optimization"); ``amd_iommu=on`` is not a value the kernel knows (drivers/iommu/amd/init.c parse_amd_iommu_options()
logs "AMD-Vi: Unknown option - 'on'"), so it is removed. How each boot loader is changed: bootloader.py.

Settings: on GRUB nodes ``kernel_cmdline.dropin`` (the drop-in nodetune owns in /etc/default/grub.d, a FILE), then
``kernel_cmdline.configured`` (kind ``boot``: every boot entry meets the requirement; written by update-grub or
grubby, journaled entry by entry). Both need a reboot. Verify adds ``kernel_cmdline.running``: ``/proc/cmdline``
against the same requirement, ``pending`` where the boot loader has it and the running kernel does not yet.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from ansible_collections.nodetune.instinct.plugins.module_utils.discover.devices import detect_platform
from ansible_collections.nodetune.instinct.plugins.module_utils.plan import bootloader
from ansible_collections.nodetune.instinct.plugins.module_utils.discover import cmdline
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.cmdline import AMD_IOMMU_OPTIONS
from ansible_collections.nodetune.instinct.plugins.module_utils.areas.common import (
    choices,
    role_variables,
    Context,
    describe,
    unknown_keys,
    want_bool,
    want_list,
    want_str,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.finding import (
    DRIFT,
    OK,
    PENDING,
    UNSUPPORTED,
    Finding,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import BOOT, CONTENT, FILE, Setting

# The area's declaration: its role (ROLE), variables as an Ansible argument spec, check ids and docs; its
# role's files are generated from it (scripts/gen_role_docs.py) and declarations.py collects every area's.
ROLE = "kernel_cmdline"
DECLARATION = {
    'kind': 'area',
    'order': 73,  # the drop-in (73) before the boot entries (74): revert removes it, then regenerates grub.cfg
    'steps': ['kernel_cmdline.dropin', 'kernel_cmdline.configured'],
    'builder': 'kernel_cmdline',
    'setting_area': 'kernel_cmdline',
    'finding_prefix': 'kernel_cmdline',
    'check_ids': ['kernel_cmdline.dropin', 'kernel_cmdline.configured', 'kernel_cmdline.running'],
    'galaxy_tags': ['grub', 'iommu'],
    'severity': 'medium',
    'short_description': 'iommu=pt, pci=realloc=off and no amd_iommu=on on the kernel command line (opt-in, reboot)',
    'description': [
        (
            "AMD's Instinct guides ask for C(iommu=pt) (MI300X; MI200 where the IOMMU is on) and "
            'C(pci=realloc=off) (MI300X) on the kernel command line; C(amd_iommu=on) is not a value the kernel '
            "knows (it logs C(AMD-Vi: Unknown option)) and is removed. The defaults follow the node's GPUs "
            '(C(nodetune_kernel_cmdline_platform)); C(nodetune_kernel_cmdline_args) replaces them.'
        ),
        (
            'On BootLoaderSpec nodes (RHEL 9 and later, Fedora: C(/boot/loader/entries)) through C(grubby '
            '--update-kernel=ALL --remove-args=... --args=...), every entry\'s previous options journaled; on GRUB '
            'nodes (Debian, Ubuntu) through the drop-in C(/etc/default/grub.d/99-nodetune-kernel-cmdline.cfg), '
            'which grub-mkconfig sources after C(/etc/default/grub), then C(update-grub). A node with neither is '
            'refused before any write.'
        ),
        (
            'Opt-in (C(nodetune_kernel_cmdline_allowed)): the change takes effect at the next boot, so apply '
            'reports C(reboot_required) and reboots nothing. Verify compares every boot entry '
            '(C(kernel_cmdline.configured)) and C(/proc/cmdline) (C(kernel_cmdline.running)): a node configured '
            'but not rebooted is C(pending), and so are the C(bios.iommu) findings the next boot fixes. Revert '
            'puts every entry back. See docs/tuning.md, "Kernel command line".'
        ),
    ],
    'variables': {
        'nodetune_kernel_cmdline_enabled': {
            'type': 'bool',
            'default': True,
            'description': [
                (
                    'Look at this area. When false the area is left exactly as it is. Nothing is changed unless '
                    'C(nodetune_kernel_cmdline_allowed) is true as well.'
                ),
            ],
        },
        'nodetune_kernel_cmdline_allowed': {
            'type': 'bool',
            'default': False,
            'description': [
                (
                    'Opt-in for changing the boot loader (a reboot is needed for it to take effect). With '
                    'C(false) the area changes nothing, and says in a note what the boot entries lack.'
                ),
            ],
        },
        'nodetune_kernel_cmdline_platform': {
            'type': 'str',
            'default': 'auto',
            'choices': ['auto', 'mi250', 'mi300x', 'generic'],
            'description': [
                (
                    "Whose advice the default arguments follow: C(auto) from the GPUs' PCI device ids (as "
                    'bios_check detects them), C(mi300x) (C(iommu=pt pci=realloc=off)), C(mi250) (C(iommu=pt)), '
                    'C(generic) (none).'
                ),
            ],
        },
        'nodetune_kernel_cmdline_args': {
            'type': 'list',
            'elements': 'str',
            'default': None,
            'description': [
                (
                    'The kernel parameters to have, each one word (C(key=value) or a bare C(key)), replacing the '
                    "platform's. A parameter set to another value on the node is replaced (grubby's C(--args) "
                    'replaces a word of the same key; the GRUB drop-in filters it out). C(null) takes the '
                    "platform's advice. A word with blanks, quotes, C($) or a backslash, an C(amd_iommu=) option "
                    'the kernel does not know, or two values for one key are refused before any write.'
                ),
            ],
        },
        'nodetune_kernel_cmdline_extra_args': {
            'type': 'list',
            'elements': 'str',
            'default': [],
            'description': [
                (
                    'More parameters on top of C(nodetune_kernel_cmdline_args), e.g. '
                    "C([pci=disable_acs_redir=pci:1022:14ab;pci:1000:c030]) (health.pcie_acs's remedy names the "
                    "node's ports). A word GRUB would misread (C(;)) is single-quoted in grub.cfg."
                ),
            ],
        },
        'nodetune_kernel_cmdline_remove_args': {
            'type': 'list',
            'elements': 'str',
            'default': ['amd_iommu=on'],
            'description': [
                (
                    'Parameters to take out of every boot entry: a C(key=value) word as written, or a bare C(key) '
                    'with every value. C(null) or C([]) removes nothing.'
                ),
            ],
        },
    },
}

AREA = "kernel_cmdline"
DROPIN_ID = "kernel_cmdline.dropin"
CONFIGURED_ID = "kernel_cmdline.configured"
RUNNING_ID = "kernel_cmdline.running"
CHECK_IDS = (DROPIN_ID, CONFIGURED_ID, RUNNING_ID)
VARIABLES = role_variables(ROLE, DECLARATION)
PLATFORM_CHOICES = choices(DECLARATION, "nodetune_kernel_cmdline_platform")
# What AMD's guides put on the command line, per platform (DOMAIN.md): MI300X iommu=pt and pci=realloc=off; MI200
# iommu=pt (the IOMMU is on at >= 256 logical CPUs for x2APIC; with it off in the BIOS iommu=pt changes nothing).
PLATFORM_ARGS = {"mi300x": ("iommu=pt", "pci=realloc=off"), "mi250": ("iommu=pt",)}
DEFAULT_REMOVE = ("amd_iommu=on",)
REBOOT = "takes effect at the next boot (/proc/cmdline is what the running kernel booted with)"


def _words(ctx: Context, config: Dict[str, Any], name: str, default: Optional[Sequence[str]],
           null: Optional[Sequence[str]] = None) -> List[str]:
    """The words of a list variable: ``default`` when it is not given, ``null`` (else ``default``) when it is null."""
    if name not in config:
        return list(default or ())
    if config[name] is None:
        return list(null if null is not None else default or ())
    words, errors = cmdline.check_words(want_list(ctx, config, name), name)
    for error in errors:
        ctx.error(error)
    return words


def _invalid_amd_iommu(word: str) -> Optional[str]:
    name, sep, value = word.partition("=")
    if not cmdline.same_name(name, "amd_iommu") or not sep:
        return None
    bad = [option for option in value.split(",") if option not in AMD_IOMMU_OPTIONS]
    return ",".join(bad) or None


def requirement(ctx: Context, config: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The validated variables: {allowed, platform, add, remove}; None after ctx.error (nothing may be written)."""
    errors_before = len(ctx.errors)
    unknown_keys(ctx, config, VARIABLES, AREA)
    allowed = want_bool(ctx, config, "nodetune_kernel_cmdline_allowed", False)
    choice = want_str(ctx, config, "nodetune_kernel_cmdline_platform", PLATFORM_CHOICES) or "auto"
    platform = None
    if choice == "auto":
        platform = detect_platform(ctx.topology)[0]  # bios_check's table of GPU ids, one source
    elif choice != "generic":
        platform = choice
    add = _words(ctx, config, "nodetune_kernel_cmdline_args", PLATFORM_ARGS.get(platform or ""))
    add += [w for w in _words(ctx, config, "nodetune_kernel_cmdline_extra_args", ()) if w not in add]
    remove = _words(ctx, config, "nodetune_kernel_cmdline_remove_args", DEFAULT_REMOVE, null=())
    for word in add:
        bad = _invalid_amd_iommu(word)
        if bad:
            ctx.error("nodetune_kernel_cmdline_args: %r is not valid: the kernel does not know amd_iommu=%s (it logs "
                      "'AMD-Vi: Unknown option'); the AMD IOMMU is on whenever the BIOS enables it, use iommu=pt for "
                      "passthrough (valid amd_iommu options: %s)" % (word, bad, ", ".join(AMD_IOMMU_OPTIONS)))
        clash = [other for other in add if other != word and cmdline.same_key(word, other)]
        if clash and add.index(word) < add.index(clash[0]):
            ctx.error("nodetune_kernel_cmdline_args and _extra_args set %s twice (%s): give each parameter one "
                      "value" % (cmdline.word_key(word), ", ".join([word] + clash)))
        contradicted = [r for r in remove if cmdline.present([word], r)]
        if contradicted:
            ctx.error("nodetune_kernel_cmdline_remove_args=%s removes %r, which nodetune_kernel_cmdline_args (or "
                      "_extra_args) asks for: a word cannot be both added and removed" % (describe(remove), word))
    if len(ctx.errors) > errors_before:
        return None
    return {"allowed": allowed, "platform": platform, "choice": choice, "add": add, "remove": remove}


def build(ctx: Context, config: Dict[str, Any]) -> List[Setting]:
    wanted = requirement(ctx, config)
    if wanted is None:
        return []
    add, remove = wanted["add"], wanted["remove"]
    if not add and not remove:
        ctx.notes.append("kernel_cmdline: nothing to set (no platform advice for this node: set "
                         "nodetune_kernel_cmdline_platform or nodetune_kernel_cmdline_args)")
        return []
    loader, why = bootloader.detect(ctx.root)
    if loader is None:
        message = ("kernel_cmdline: no boot loader nodetune can change was found under %s (%s): nodetune changes the "
                   "kernel command line with grubby (BootLoaderSpec entries in /boot/loader/entries) or with "
                   "update-grub/grub-mkconfig (GRUB with /etc/default/grub); set nodetune_kernel_cmdline_enabled: "
                   "false on this node" % (ctx.root.path, why))
        if wanted["allowed"]:
            ctx.error(message)
        else:
            ctx.notes.append(message)
        return []
    items = bootloader.entries(ctx.root, loader)
    if not items:
        ctx.error("kernel_cmdline: the boot loader (%s) has no boot entry under %s: nothing to change"
                  % (loader.tool, ctx.root.path))
        return []
    expanded = [entry for entry, args in items if "$" in args and loader.kind == bootloader.BLS]
    if expanded and wanted["allowed"]:
        ctx.error("kernel_cmdline: the BootLoaderSpec entries %s take their options from GRUB variables ($kernelopts "
                  "in grubenv, RHEL 8's layout): nodetune edits entries whose options are written out (RHEL 9 and "
                  "later); set nodetune_kernel_cmdline_enabled: false here" % ", ".join(expanded))
        return []
    lacking = sorted(set(w for _entry, args in items for w in cmdline.unmet(args, add, remove)))
    if not wanted["allowed"]:
        if lacking:
            ctx.notes.append("kernel_cmdline: the boot entries lack %s; nothing changed: set "
                             "nodetune_kernel_cmdline_allowed: true to let nodetune change the kernel command line "
                             "(it %s)" % (", ".join(lacking), REBOOT))
        return []
    reason = "the kernel command line " + REBOOT
    settings = []
    if loader.kind == bootloader.GRUB and (lacking or ctx.root.exists(bootloader.DROPIN)):
        settings.append(Setting(DROPIN_ID, "grub.d", bootloader.DROPIN, bootloader.grub_dropin(add, remove),
                                kind=FILE, compare=CONTENT, area=AREA, reboot_required=True, reason=reason))
    configured = Setting(CONFIGURED_ID, loader.kind, loader.config, bootloader.requirement_value(add, remove),
                         kind=BOOT, area=AREA, key=loader.kind, reboot_required=True, reason=reason,
                         after=(bootloader.DROPIN,) if loader.kind == bootloader.GRUB else ())
    if settings:
        # after the drop-in, and so restored after it: revert removes the drop-in, then regenerates grub.cfg
        configured.order = max(configured.order, settings[0].order + 1)
    return settings + [configured]


def running_findings(root: Any, settings: List[Setting]) -> List[Finding]:
    """``/proc/cmdline`` against the requirement of the area's Setting: ok when the running kernel has it, pending
    when only the boot loader has it (a reboot away), drift when neither has."""
    setting = next((s for s in settings if s.id == CONFIGURED_ID), None)
    if setting is None:
        return []
    add, remove = bootloader.requirement(setting.value)
    wanted = bootloader.describe(add, remove)
    running = root.read("proc/cmdline")
    if running is None:
        return [Finding(RUNNING_ID, "/proc/cmdline", wanted, "unknown", UNSUPPORTED, severity="info",
                        source="setting", remedy="no /proc/cmdline under this root")]
    lacking = cmdline.unmet(running, add, remove)
    if not lacking:
        return [Finding(RUNNING_ID, "/proc/cmdline", wanted, wanted, OK, severity="medium", source="setting")]
    actual = "running without " + " ".join(w for w in lacking if not w.startswith("-"))
    gone = [w[1:] for w in lacking if w.startswith("-")]
    if gone:
        actual = (actual + ", " if actual != "running without " else "running ") + "with " + " ".join(gone)
    configured = bootloader.current(root, setting.key or "", setting.value) == wanted
    if configured:
        return [Finding(RUNNING_ID, "/proc/cmdline", wanted, actual, PENDING, severity="medium", source="setting",
                        remedy="pending: every boot entry has it; reboot the node to run with it (/proc/cmdline is "
                               "what the running kernel booted with)")]
    return [Finding(RUNNING_ID, "/proc/cmdline", wanted, actual, DRIFT, severity="medium", source="setting",
                    remedy="run the nodetune apply (--tags kernel_cmdline, with nodetune_kernel_cmdline_allowed: "
                           "true), then reboot")]
