# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The persistent files of a freshly installed node: ``etc/``, ``usr/`` and ``var/`` (os-release, host name,
machine id, limits, the boot loader's files, sysctl.conf, irqbalance's unit and config). Only a build writes
them; a reboot keeps them and acts on them (boot.py)."""

from __future__ import annotations

import re
from typing import Any, Dict

from ansible_collections.nodetune.lab.plugins.module_utils import simbootloader
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.catalogue import OS_FAMILIES
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.tree import _stable, _Tree


# ============================================================================================ persistent files
_IRQBALANCE_UNIT = """[Unit]
Description=irqbalance daemon
Documentation=man:irqbalance(1)
Documentation=https://github.com/Irqbalance/irqbalance
ConditionVirtualization=!container
ConditionCPUs=>1

[Service]
EnvironmentFile=-%s
ExecStart=/usr/sbin/irqbalance $IRQBALANCE_ARGS
ReadOnlyPaths=/
ReadWritePaths=/proc/irq
RestrictAddressFamilies=AF_UNIX AF_NETLINK
RestrictRealtime=yes

[Install]
WantedBy=multi-user.target
"""

_IRQBALANCE_DEFAULT = """# irqbalance is a daemon process that distributes interrupts across
# CPUs on SMP systems. The default is to rebalance once every 10
# seconds. This is the environment file that is specified to systemd via the
# EnvironmentFile key in the service unit file (or via whatever method the init
# system you're using has).
#
# IRQBALANCE_ONESHOT
#    After starting, wait for ten seconds, then look at the interrupt
#    load and balance it once; after balancing exit and do not change
#    it again.
#
#IRQBALANCE_ONESHOT=

#
# IRQBALANCE_BANNED_CPULIST
#    The CPUs listed here (a cpulist such as 0-3,8) will not have any IRQs
#    assigned to them on rebalance.
#
#IRQBALANCE_BANNED_CPULIST=

#
# IRQBALANCE_ARGS
#    Append any args here to the irqbalance daemon as documented in the man
#    page.
#
#IRQBALANCE_ARGS=
"""


def _persistent_files(spec: Dict[str, Any]) -> _Tree:
    """etc/, usr/ and var/ of a freshly installed node (only written by build, kept by reboot)."""
    tree = _Tree()
    osd = spec["os"]
    family = osd["family"]
    version = re.search(r"(\d+(?:\.\d+)?)", osd["pretty_name"])
    os_id = "ubuntu" if "ubuntu" in osd["pretty_name"].lower() else ("debian" if family == "Debian" else "rhel")
    tree.f("etc/os-release", 'NAME="%s"\nPRETTY_NAME="%s"\nID=%s\nID_LIKE=%s\nVERSION_ID="%s"'
           % (osd["pretty_name"].split(" ")[0], osd["pretty_name"], os_id, "debian" if family == "Debian" else "fedora",
              version.group(1) if version else ""), 0o644)
    tree.f("etc/hostname", spec["hostname"], 0o644)
    # systemd's machine id, from the host name: two simulated nodes are two machines (the journal is bound to it)
    tree.f("etc/machine-id", "%016x%016x" % (_stable(spec["hostname"] + "/machine-id", 64),
                                             _stable(spec["hostname"] + "/machine-id/2", 64)), 0o444)
    # RDMA may lock all memory (health.memlock): the healthy default of an HPC image
    memlock = spec["faults"]["memlock"]
    tree.f("etc/security/limits.d/90-memlock.conf", "* soft memlock %s\n* hard memlock %s\n" % (memlock, memlock),
           0o644)
    tree.f("etc/systemd/system.conf.d/90-memlock.conf", "[Manager]\nDefaultLimitMEMLOCK=%s\n"
           % ("infinity" if memlock == "unlimited" else "%dK" % memlock), 0o644)
    cmdline = spec["kernel"]["cmdline"]
    extra = " ".join(t for t in cmdline.split() if not t.startswith(("BOOT_IMAGE=", "root=")) and t != "ro")
    tree.f("etc/default/grub", 'GRUB_DEFAULT=0\nGRUB_TIMEOUT=5\nGRUB_DISTRIBUTOR="%s"\nGRUB_CMDLINE_LINUX_DEFAULT=""\n'
           'GRUB_CMDLINE_LINUX="%s"' % (osd["pretty_name"].split(" ")[0], extra), 0o644)
    # the boot loader: GRUB (Debian) or BootLoaderSpec entries with grubby (RHEL), simbootloader.py; this replaces
    # the /etc/default/grub above with one whose words GRUB's parser would misread are quoted
    machine_id = "%016x%016x" % (_stable(spec["hostname"] + "/machine-id", 64),
                                 _stable(spec["hostname"] + "/machine-id/2", 64))
    for path, text in simbootloader.boot_files(spec, family, machine_id).items():
        tree.raw(path, text.encode("utf-8"), 0o444 if path == simbootloader.GRUB_CFG else 0o644)
    tree.f("etc/sysctl.conf", "# /etc/sysctl.conf - Configuration file for setting system variables\n"
                              "# See sysctl.d(5) for information.", 0o644)
    tree.abslink("etc/sysctl.d/99-sysctl.conf", "../sysctl.conf")
    tree.dir("etc/modprobe.d")
    tree.dir("etc/udev/rules.d")
    tree.dir("etc/systemd/system/multi-user.target.wants")
    tree.dir("var/lib")
    tree.dir("var/log")
    if spec["irqbalance"]["installed"]:
        config = OS_FAMILIES[family]["irqbalance_config"]
        tree.f(config, _IRQBALANCE_DEFAULT.rstrip("\n"), 0o644)
        tree.f("usr/lib/systemd/system/irqbalance.service", _IRQBALANCE_UNIT.rstrip("\n") % ("/" + config), 0o644)
        tree.f("usr/sbin/irqbalance", "# simulated node: stands in for the irqbalance binary (not executable)",
               0o644)
        if spec["irqbalance"]["enabled"]:
            tree.abslink("etc/systemd/system/multi-user.target.wants/irqbalance.service",
                         "/usr/lib/systemd/system/irqbalance.service")
    return tree
