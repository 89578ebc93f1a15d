"""The safety catalogue: bad inputs refused before any write, corrupted journals refused and kept, faults injected
and restored, kill -9 survived, concurrent apply/revert pairs with every original kept.

Everything runs on ONE small simulated MI300X node (building one costs seconds), tuned with the lab inventory's
variables as a playbook would. Every test leaves the node as it found it and checks that it did, so the tests share
the tree; the figures of each family are recorded (``record_property``, and ``record_testsuite_property`` in
JUnit XML) and the last test prints the catalogue and checks that every family ran in full.

"As it found it" compares every file, link and directory byte for byte, except the hex masks
``proc/irq/N/smp_affinity`` and ``effective_affinity``, which are compared as the CPU sets they encode: the
simulator renders them at the wrong width after a write (issue 16 item 14, its own fix), and nodetune restores
their ``*_list`` forms, which are compared byte for byte.
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import errno
import hashlib
import json
import multiprocessing
import os
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils import rootfs
from ansible_collections.nodetune.instinct.plugins.module_utils.apply import engine, node
from ansible_collections.nodetune.instinct.plugins.module_utils.areas.declarations import TAGS as AREA_TAGS
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import audit, verify
from ansible_collections.nodetune.instinct.plugins.module_utils.audit.bios import BiosConfigError
from ansible_collections.nodetune.instinct.plugins.module_utils.audit.waivers import WaiverError
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import parse_cpulist, parse_cpumask
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import Setting, SettingError
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import InvalidValueError, NodeFileError, Root
from ansible_collections.nodetune.lab.plugins.module_utils import simnode
from ansible_collections.nodetune.lab.plugins.module_utils.simservices import SimServices
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.lab_vars import AREAS
from tests.support.specs import AUDIT_SPEC as SPEC

pytestmark = pytest.mark.usefixtures("simulated_kernel")  # applies to simulated nodes in-process

FIGURES: dict[str, int] = collections.Counter()
# the size of each family when the whole file runs (the summary checks that each ran in full)
EXPECTED: dict[str, int] = {}

SMALL = json.loads(json.dumps(SPEC))
SMALL["name"] = "safety"
SMALL["cpu"].update(sockets=1, cores_per_socket=4, cores_per_l3=4)
SMALL["gpus"] = SMALL["gpus"][:1]
SMALL["nics"] = SMALL["nics"][:1]

FOREIGN = {  # files a node has that nodetune does not own
    "etc/shadow": "root:*:19000:0:99999:7:::\n",
    "etc/profile": "# site profile\n",
    "etc/hostname": "safety\n",
    "usr/bin/python3": "#!binary\n",
}
MASKS = ("smp_affinity", "effective_affinity")


# ------------------------------------------------------------------------------------------------ the node
def entry_state(path: Path, rel: str) -> str:
    """One entry: link target, 'dir', or mode and content hash (masks as the CPU sets they encode)."""
    full = path / rel
    if full.is_symlink():
        return "link:" + os.readlink(full)
    if full.is_dir():
        return "dir"
    if rel.startswith("proc/irq/") and full.name in ("effective_affinity", "effective_affinity_list"):
        # The kernel's choice, not nodetune's: a reverted IRQ stays on the CPU it was pinned to while the restored
        # mask holds it (arch/x86/kernel/apic/vector.c, assign_vector_locked()). It only has to lie in the mask.
        effective = (parse_cpumask(full.read_text()) if full.name == "effective_affinity"
                     else parse_cpulist(full.read_text()))
        return f"effective in mask:{set(effective) <= set(parse_cpumask((full.parent / 'smp_affinity').read_text()))}"
    if rel.startswith("proc/irq/") and full.name in MASKS:
        return f"cpus:{parse_cpumask(full.read_text())}"
    return f"{full.stat().st_mode & 0o7777:o}:{hashlib.sha256(full.read_bytes()).hexdigest()}"


def stat_of(path: Path) -> dict[str, tuple]:
    """A cheap fingerprint (inode, mode, size, mtime of every entry): any write, create or rename changes it."""
    out = {}
    prefix = len(str(path)) + 1
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            out[full[prefix:]] = (st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def state_of(path: Path) -> dict[str, str]:
    return {rel: entry_state(path, rel) for rel in stat_of(path)}


def differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))


class Reference:
    """A node state known byte for byte, and the fingerprint it had: comparing a tree with it hashes only the
    entries whose fingerprint changed (a full hash of the tree per check would dominate the run time)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.stats = stat_of(path)
        self.state = {rel: entry_state(path, rel) for rel in self.stats}

    def differences(self) -> list[str]:
        now = stat_of(self.path)
        touched = [rel for rel in set(now) | set(self.stats) if now.get(rel) != self.stats.get(rel)]
        current = {rel: entry_state(self.path, rel) for rel in touched if rel in now}
        expected = {rel: self.state[rel] for rel in touched if rel in self.state}
        found = differences(expected, current)
        if not found:
            self.stats = now  # same content, new fingerprint: the next check starts from here
        return found


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    dest = tmp_path_factory.mktemp("safety") / "node"
    simnode.build(SMALL, str(dest))
    for rel, text in FOREIGN.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_text(text)
    (dest / "etc/nodetune-link.env").symlink_to("/etc/shadow")
    state = node.load(str(dest), AREAS, {})
    assert state.settings and not state.context.errors
    return {"path": dest, "pristine": Reference(dest), "settings": state.settings}


@pytest.fixture
def pristine(lab: dict[str, Any]) -> Path:
    """The lab node, checked to be exactly as built after the test."""
    yield lab["path"]
    assert lab["pristine"].differences() == []


def tune(path: Path, areas: Any = None, policy: Any = None, waivers: Any = None, check_mode: bool = False,
         lock_timeout: float = 30.0, **kwargs: Any) -> dict[str, Any]:
    """What the tune module does: validate the waivers; then, holding the node's lock (not in check mode),
    discover, plan, validate and apply."""
    prepared = audit.prepare({}, {}, waivers) if waivers is not None else []
    assert prepared is not None
    with contextlib.nullcontext() if check_mode else engine.NodeLock(Root(str(path)), lock_timeout):
        state = node.load(str(path), AREAS if areas is None else areas, policy or {})
        return engine.apply(state.root, state.settings, services=state.services, check_mode=check_mode,
                            lock_held=not check_mode, **kwargs)


def revert(path: Path, **kwargs: Any) -> dict[str, Any]:
    root = Root(str(path))
    return engine.revert(root, services=SimServices(root), **kwargs)


def with_area(area: str, **variables: Any) -> dict[str, Any]:
    areas = json.loads(json.dumps(AREAS))
    areas[area].update(variables)
    return areas


# ------------------------------------------------------------------------------------------------ bad inputs
ROCM = {"nodetune_rocm_env": {"NCCL_DEBUG": "WARN"}}
BAD_INPUTS = [
    # numbers: ASCII digits only (item 10)
    ("dirty_ratio Arabic-Indic digits", {"areas": with_area("sysctl", nodetune_vm_dirty_ratio="٤٠")}),
    ("dirty_ratio full-width digits", {"areas": with_area("sysctl", nodetune_vm_dirty_ratio="４０")}),
    ("dirty_ratio underscore", {"areas": with_area("sysctl", nodetune_vm_dirty_ratio="4_0")}),
    ("dirty_ratio plus sign", {"areas": with_area("sysctl", nodetune_vm_dirty_ratio="+40")}),
    ("dirty_ratio float", {"areas": with_area("sysctl", nodetune_vm_dirty_ratio="40.5")}),
    ("dirty_ratio bool", {"areas": with_area("sysctl", nodetune_vm_dirty_ratio=True)}),
    ("dirty_ratio 0", {"areas": with_area("sysctl", nodetune_vm_dirty_ratio=0)}),
    ("dirty_ratio 101", {"areas": with_area("sysctl", nodetune_vm_dirty_ratio=101)}),
    ("dirty_ratio word", {"areas": with_area("sysctl", nodetune_vm_dirty_ratio="forty")}),
    ("background >= ratio", {"areas": with_area("sysctl", nodetune_vm_dirty_background_ratio=30)}),
    ("numa_balancing Devanagari 1", {"areas": with_area("sysctl", nodetune_kernel_numa_balancing="१")}),
    ("sysctl_extra as a string", {"areas": with_area("sysctl", nodetune_sysctl_extra="vm.swappiness=10")}),
    ("sysctl_extra bad key", {"areas": with_area("sysctl", nodetune_sysctl_extra={"Vm Swap": 1})}),
    ("sysctl_extra two lines", {"areas": with_area("sysctl", nodetune_sysctl_extra={"vm.swappiness": "1\n2"})}),
    ("sysctl_extra missing sysctl", {"areas": with_area("sysctl", nodetune_sysctl_extra={"vm.nosuch": 1})}),
    ("sysctl_extra list value", {"areas": with_area("sysctl", nodetune_sysctl_extra={"vm.swappiness": [1]})}),
    ("sysctl typo", {"areas": with_area("sysctl", nodetune_vm_dirty_ratioo=20)}),
    # values the kernel or the node cannot hold (issue 23 item 11)
    ("dirty_bytes 10**30", {"areas": with_area("sysctl", nodetune_vm_dirty_ratio=None,
                                               nodetune_vm_dirty_bytes=10**30)}),
    ("dirty_bytes 2**64", {"areas": with_area("sysctl", nodetune_vm_dirty_ratio=None,
                                              nodetune_vm_dirty_bytes=2**64)}),
    ("sysctl_extra empty text", {"areas": with_area("sysctl", nodetune_sysctl_extra={"vm.swappiness": ""})}),
    ("sysctl_extra boolean", {"areas": with_area("sysctl", nodetune_sysctl_extra={"vm.swappiness": True})}),
    ("sysctl_extra float", {"areas": with_area("sysctl", nodetune_sysctl_extra={"vm.swappiness": 1.5})}),
    ("sysctl_extra 10**100", {"areas": with_area("sysctl", nodetune_sysctl_extra={"vm.swappiness": 10**100})}),
    ("sysctl_extra 1 MB of text", {"areas": with_area("sysctl", nodetune_sysctl_extra={"vm.swappiness": "1" * 2**20})}),
    ("sysctl_extra carriage return", {"areas": with_area("sysctl", nodetune_sysctl_extra={"vm.swappiness": "10\r5"})}),
    ("policy omp_threads 10**9", {"policy": {"omp_threads": 10**9}}),
    ("env_file with a newline", {"areas": with_area("rocm_env", nodetune_rocm_env_file="/etc/nodetune/x\n.env",
                                                    **ROCM)}),
    ("ipoib mtu Arabic-Indic", {"areas": with_area("infiniband", nodetune_ipoib_mtu="٤٠٩٢")}),
    ("ipoib mtu underscore", {"areas": with_area("infiniband", nodetune_ipoib_mtu="4_092")}),
    ("ipoib mtu 4096 datagram", {"areas": with_area("infiniband", nodetune_ipoib_mtu=4096)}),
    ("ipoib mtu too small", {"areas": with_area("infiniband", nodetune_ipoib_mtu=1000)}),
    ("ipoib mtu word", {"areas": with_area("infiniband", nodetune_ipoib_mtu="max2")}),
    ("ipoib mtu bool", {"areas": with_area("infiniband", nodetune_ipoib_mtu=True)}),
    ("nr_requests Arabic-Indic", {"areas": with_area("nvme", nodetune_nvme_nr_requests="٢٥٦")}),
    ("nr_requests underscore", {"areas": with_area("nvme", nodetune_nvme_nr_requests="2_56")}),
    ("nr_requests too small", {"areas": with_area("nvme", nodetune_nvme_nr_requests=2)}),
    ("nr_requests word", {"areas": with_area("nvme", nodetune_nvme_nr_requests="lots")}),
    # choices (item 11)
    ("os_family Windows", {"areas": with_area("irq_affinity", nodetune_os_family="Windows")}),
    ("os_family lower case", {"areas": with_area("irq_affinity", nodetune_os_family="debian")}),
    ("os_family number", {"areas": with_area("irq_affinity", nodetune_os_family=7)}),
    ("irqbalance mode", {"areas": with_area("irq_affinity", nodetune_irqbalance_mode="off")}),
    ("smt policy", {"areas": with_area("smt", nodetune_smt_policy="sometimes")}),
    ("rocm wrong name", {"areas": with_area("rocm_env", nodetune_rocm_env={"RCCL_ALGO": "Ring"})}),
    ("rocm bad name", {"areas": with_area("rocm_env", nodetune_rocm_env={"bad-name": "1"})}),
    ("rocm policy", {"areas": with_area("rocm_env", nodetune_rocm_env_policy="ignore")}),
    # path variables (item 3)
    ("env_file /etc/shadow", {"areas": with_area("rocm_env", nodetune_rocm_env_file="/etc/shadow", **ROCM)}),
    ("env_file /etc", {"areas": with_area("rocm_env", nodetune_rocm_env_file="/etc", **ROCM)}),
    ("env_file link to shadow", {"areas": with_area("rocm_env", nodetune_rocm_env_file="/etc/nodetune-link.env",
                                                    **ROCM)}),
    ("env_file outside folders", {"areas": with_area("rocm_env", nodetune_rocm_env_file="/srv/x/rocm.env", **ROCM)}),
    ("env_file relative", {"areas": with_area("rocm_env", nodetune_rocm_env_file="etc/rocm.env", **ROCM)}),
    ("env_file dotdot", {"areas": with_area("rocm_env", nodetune_rocm_env_file="/etc/nodetune/../shadow", **ROCM)}),
    ("bind_file python3", {"areas": with_area("rocm_env", nodetune_rocm_bind_file="/usr/bin/python3")}),
    ("bind_file a folder", {"areas": with_area("rocm_env", nodetune_rocm_bind_file="/usr/local/bin")}),
    ("ranks_file /etc/hostname", {"areas": with_area("rocm_env", nodetune_rocm_ranks_file="/etc/hostname")}),
    ("profile_file /etc/profile", {"areas": with_area("rocm_env", nodetune_rocm_profile_file="/etc/profile",
                                                      **ROCM)}),
    ("rccl_conf in /usr/bin", {"areas": with_area("rocm_env", nodetune_rocm_rccl_conf_file="/usr/bin/rccl.conf",
                                                  **ROCM)}),
    # the layout policy (item 11)
    ("policy key=value string", {"policy": "housekeeping=1"}),
    ("policy yaml-ish string", {"policy": "housekeeping: 1"}),
    ("policy list", {"policy": ["housekeeping"]}),
    ("policy number", {"policy": 5}),
    ("policy broken JSON", {"policy": "{housekeeping"}),
    ("policy Arabic-Indic CPU", {"policy": {"housekeeping": "٣"}}),
    ("policy bad cpulist", {"policy": {"housekeeping": "0-3,x"}}),
    ("policy unknown key", {"policy": {"housekeping": 1}}),
    # waivers (item 11)
    ("waiver unknown key", {"waivers": [{"id": "nvme.scheduler", "reason": "r", "expires": "2099-01-01",
                                         "targte": "nvme0n1"}]}),
    ("waiver unknown id", {"waivers": [{"id": "nvme.schedular", "reason": "r", "expires": "2099-01-01"}]}),
    ("waiver id of no check", {"waivers": [{"id": "gpu.clock", "reason": "r", "expires": "2099-01-01"}]}),
    ("waiver id not a string", {"waivers": [{"id": 5, "reason": "r", "expires": "2099-01-01"}]}),
    ("waiver no reason", {"waivers": [{"id": "bios.iommu", "expires": "2099-01-01"}]}),
    ("waiver bad date", {"waivers": [{"id": "bios.iommu", "reason": "r", "expires": "soon"}]}),
    # expires: YYYY-MM-DD only, compared as dates (issue 23 item 6)
    ("waiver expires int", {"waivers": [{"id": "bios.iommu", "reason": "r", "expires": 20260204}]}),
    ("waiver expires compact", {"waivers": [{"id": "bios.iommu", "reason": "r", "expires": "20260204"}]}),
    ("waiver expires week date", {"waivers": [{"id": "bios.iommu", "reason": "r", "expires": "2026-W49-1"}]}),
    ("waiver expires with time", {"waivers": [{"id": "bios.iommu", "reason": "r", "expires": "2026-12-01T10:00"}]}),
    ("waiver expires datetime", {"waivers": [{"id": "bios.iommu", "reason": "r",
                                              "expires": datetime.datetime(2026, 12, 1, 10, 0)}]}),
    ("waiver expires bool", {"waivers": [{"id": "bios.iommu", "reason": "r", "expires": True}]}),
    ("waiver expires Feb 30", {"waivers": [{"id": "bios.iommu", "reason": "r", "expires": "2026-02-30"}]}),
    ("waiver expires Arabic-Indic", {"waivers": [{"id": "bios.iommu", "reason": "r", "expires": "٢٠٢٦-١٢-٠١"}]}),
    ("waivers not a list", {"waivers": {"id": "bios.iommu"}}),
]
REFUSALS = (SettingError, WaiverError, BiosConfigError, NodeFileError)


@pytest.mark.parametrize("case", [c[1] for c in BAD_INPUTS], ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_is_refused_before_any_write(pristine: Path, case: dict[str, Any],
                                               record_property: Callable[[str, Any], None]) -> None:
    before = stat_of(pristine)
    with pytest.raises(REFUSALS) as info:
        tune(pristine, case.get("areas"), case.get("policy"), case.get("waivers"))
    message = str(info.value)
    assert "Traceback" not in message and len(message) > 20
    assert differences(before, stat_of(pristine)) == []
    FIGURES["bad inputs refused before any write"] += 1
    record_property("refused", message[:300])


EXPECTED["bad inputs refused before any write"] = len(BAD_INPUTS)


# Issue 40 item 2: nodetune_slurm_gres_path named any absolute path (the journal: revert could never finish; /etc/shadow
# replaced). Now Slurm's configuration folders only, unless nodetune_slurm_gres_path_anywhere; never nodetune's own.
ANYWHERE = {"nodetune_slurm_gres_path_anywhere": True}
GRES_PATHS = [
    ("the journal", {"nodetune_slurm_gres_path": "/var/lib/nodetune/journal.json"}, "nodetune's own folder"),
    ("the journal, anywhere", {"nodetune_slurm_gres_path": "/var/lib/nodetune/journal.json", **ANYWHERE},
     "nodetune's own folder"),
    ("the structure cache", {"nodetune_slurm_gres_path": "/var/lib/nodetune/topology-structure.json", **ANYWHERE},
     "nodetune's own folder"),
    ("a boot-restore file", {"nodetune_slurm_gres_path": "/etc/nodetune/boot-restore.d/smt.json", **ANYWHERE},
     "nodetune's own folder"),
    ("nodetune-restore, anywhere", {"nodetune_slurm_gres_path": "/usr/local/sbin/nodetune-restore", **ANYWHERE},
     "nodetune gives its own programs"),
    ("/etc/shadow", {"nodetune_slurm_gres_path": "/etc/shadow"}, "it is outside Slurm's configuration folders"),
    ("/etc/shadow, anywhere", {"nodetune_slurm_gres_path": "/etc/shadow", **ANYWHERE}, "nodetune did not create it"),
    ("a new file outside Slurm's folders", {"nodetune_slurm_gres_path": "/etc/gres.conf"},
     "it is outside Slurm's configuration folders"),
    ("anywhere not a boolean", {"nodetune_slurm_gres_path_anywhere": "yes"}, "expected true or false"),
]


def with_slurm(**variables: Any) -> dict[str, Any]:
    """The lab's areas and the slurm area, its gres.conf fragment written whether or not the node has a slurm.conf."""
    areas = json.loads(json.dumps(AREAS))
    areas["slurm"] = {"nodetune_slurm_enabled": True, "nodetune_slurm_gres": "always", **variables}
    return areas


@pytest.mark.parametrize(("variables", "says"), [c[1:] for c in GRES_PATHS], ids=[c[0] for c in GRES_PATHS])
def test_a_gres_path_outside_slurms_folders_or_of_nodetune_is_refused_before_any_write(
        pristine: Path, variables: dict[str, Any], says: str, record_property: Callable[[str, Any], None]) -> None:
    before = stat_of(pristine)
    with pytest.raises(REFUSALS) as info:
        tune(pristine, with_slurm(**variables))
    message = str(info.value)
    name, value = next(iter(variables.items()))
    assert f"{name}={value!r} is not valid" in message and says in message, message
    assert differences(before, stat_of(pristine)) == []
    FIGURES["gres paths refused before any write"] += 1
    record_property("refused", message[:300])


EXPECTED["gres paths refused before any write"] = len(GRES_PATHS)


def test_the_gres_path_takes_slurms_folders_and_anywhere_a_new_file(pristine: Path) -> None:
    """What stays allowed: the default, a gres.conf to take over, a subfolder of /etc/slurm-llnl; with the opt-in a
    new file in another folder (checked by the planner only: nothing is written)."""
    for variables in ({}, {"nodetune_slurm_gres_path": "/etc/slurm/gres.conf"},
                      {"nodetune_slurm_gres_path": "/etc/slurm-llnl/gres.d/nodetune.conf"},
                      {"nodetune_slurm_gres_path": "/usr/local/etc/slurm/nodetune-gres.conf", **ANYWHERE}):
        state = node.load(str(pristine), with_slurm(**variables), {})
        path = variables.get("nodetune_slurm_gres_path", "/etc/slurm/nodetune-gres.conf")
        assert [s.path for s in state.settings if s.id == "slurm.gres"] == [path[1:]]


def test_a_waiver_expires_on_a_date_written_one_way() -> None:
    """Issue 23 item 6: the error names the waiver, the key and the value; a YAML date is taken as it is."""
    from ansible_collections.nodetune.instinct.plugins.module_utils.audit.waivers import apply_waivers, validate_waivers
    from ansible_collections.nodetune.instinct.plugins.module_utils.plan.finding import Finding

    with pytest.raises(WaiverError) as info:
        validate_waivers([{"id": "bios.iommu", "reason": "r", "expires": 20260204}])
    assert str(info.value) == ("waiver #1 (bios.iommu): expires=20260204 is not valid: a date written YYYY-MM-DD "
                               "(like 2026-12-31) is needed")
    waivers = validate_waivers([{"id": "bios.iommu", "reason": "r", "expires": datetime.date(2026, 2, 4)}])
    assert waivers[0]["expires"] == "2026-02-04"
    findings = [Finding("bios.iommu", "cmdline", "on", "off", "drift")]
    assert apply_waivers(findings, waivers, today="2026-02-04") == [] and findings[0].status == "waived"
    findings = [Finding("bios.iommu", "cmdline", "on", "off", "drift")]
    assert apply_waivers(findings, waivers, today="2026-02-05") and findings[0].status == "drift"


# ------------------------------------------------------------------------------------------------ misspelt names
# Issue 23 item 9: a nodetune variable or tag typed in the wrong case or with a look-alike letter (Cyrillic о and е,
# full-width forms) used to be ignored: SMT was still offlined, or apply did nothing and passed.
MISSPELT = [
    ("variable capitalised", {"Nodetune_smt_enabled": False},
     "Nodetune_smt_enabled is not a nodetune variable; did you mean nodetune_smt_enabled? (names are lower case"),
    ("variable Cyrillic o", {"nоdetune_smt_enabled": False},
     "nоdetune_smt_enabled is not a nodetune variable; did you mean nodetune_smt_enabled? "
     "(it holds U+043E CYRILLIC SMALL LETTER O"),
    ("variable full-width", {"ｎodetune_smt_enabled": False}, "did you mean nodetune_smt_enabled?"),
    ("variable Greek o inside", {"nodetune_smt_pοlicy": "off"}, "did you mean nodetune_smt_policy?"),
    ("tag upper case", {"ansible_run_tags": ["NVME"]}, "--tags NVME selects no nodetune area; did you mean nvme?"),
    ("tag Cyrillic e", {"ansible_run_tags": ["nvmе"]},
     "--tags nvmе selects no nodetune area; did you mean nvme? (it holds U+0435 CYRILLIC SMALL LETTER IE; valid "
     "tags: " + ", ".join(AREA_TAGS) + ")"),  # every declared area's, then bios_check, all, apply, verify
    ("tag unknown", {"ansible_run_tags": ["nvm"]}, "--tags nvm selects no nodetune area; did you mean nvme?"),
    ("tag misspelt beside a real one", {"ansible_run_tags": ["nvme", "CPU"]}, "--tags CPU selects no nodetune area"),
    ("skip tag upper case", {"ansible_skip_tags": ["SMT"]}, "--skip-tags SMT selects no nodetune area"),
]
MISSPELT_FAMILY = "misspelt variables and tags refused (tune, verify)"


@pytest.mark.parametrize("plugin", ["tune", "verify"])
@pytest.mark.parametrize("variables,message", [c[1:] for c in MISSPELT], ids=[c[0] for c in MISSPELT])
def test_a_misspelt_variable_or_tag_is_refused_before_the_call(pristine: Path, plugin: str,
                                                               variables: dict[str, Any], message: str) -> None:
    from ansible_collections.nodetune.instinct.plugins.action import tune as tune_action
    from ansible_collections.nodetune.instinct.plugins.action import verify as verify_action

    from tests.support.actions import action, host

    run = action(tune_action if plugin == "tune" else verify_action, {"root": str(pristine)})
    result = run.run(task_vars=host(**variables))
    assert result.get("failed") and run.calls == [], result
    assert message in result["msg"]
    FIGURES[MISSPELT_FAMILY] += 1


EXPECTED[MISSPELT_FAMILY] = 2 * len(MISSPELT)


def test_real_names_and_the_playbooks_own_tags_still_pass(pristine: Path) -> None:
    from ansible_collections.nodetune.instinct.plugins.action import tune as tune_action

    from tests.support.actions import action, host

    for variables in ({"nodetune_smt_enabled": False}, {"ansible_run_tags": ["nvme", "cpu"]},
                      {"ansible_skip_tags": ["smt", "lab"]}, {"ansible_run_tags": ["apply"]}):
        run = action(tune_action, {"root": str(pristine)})
        result = run.run(task_vars=host(**variables))
        assert not result.get("failed") and len(run.calls) == 1, (variables, result.get("msg"))
    run = action(tune_action, {"root": str(pristine)})
    result = run.run(task_vars=host(ansible_run_tags=["lab"]))  # site.yml --tags lab: the tune task has no area
    assert result.get("skipped") and run.calls == [], result


@pytest.mark.parametrize("words,message", [
    (["apply", "-t", "NVME"], "--tags NVME selects no nodetune area; did you mean nvme?"),
    (["verify", "-t", "nvmе,cpu"], "--tags nvmе selects no nodetune area; did you mean nvme?"),
    (["apply", "-t", "lab"], "--tags lab selects no nodetune area (valid tags: smt, cpu"),
    (["apply", "-e", "Nodetune_smt_enabled=false"], "did you mean nodetune_smt_enabled?"),
    (["apply", "-e", "nоdetune_smt_enabled=false"], "did you mean nodetune_smt_enabled?"),
])
def test_the_cli_refuses_a_misspelt_variable_or_tag_before_running(pristine: Path, words: list[str], message: str,
                                                                   capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from nodetune import api
    from nodetune.cli import main

    calls: list[Any] = []
    for name in ("apply", "verify"):
        monkeypatch.setattr(api, name, lambda *args, **kwargs: calls.append(args))
    assert main([*words, "--root", str(pristine)]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and calls == [], err


@pytest.mark.parametrize("make", ["link_to_slash", "empty_sys", "empty_cpu_dir", "a_file", "missing"])
def test_a_root_that_is_no_node_is_refused(tmp_path: Path, make: str) -> None:
    target = tmp_path / "root"
    if make == "link_to_slash":
        target.symlink_to("/")
    elif make == "empty_sys":
        (target / "sys").mkdir(parents=True)
    elif make == "empty_cpu_dir":
        (target / "sys/devices/system/cpu").mkdir(parents=True)
    elif make == "a_file":
        target.write_text("x")
    before = stat_of(tmp_path)
    with pytest.raises(NodeFileError) as info:
        tune(target)
    assert "nodetune_root" in str(info.value)
    if make == "link_to_slash":
        assert "resolves to '/'" in str(info.value)
    elif make.startswith("empty"):
        assert "does not look like a node's root" in str(info.value)
        with pytest.raises(NodeFileError):
            engine_revert_like_the_module(target)
    assert differences(before, stat_of(tmp_path)) == []
    FIGURES["roots refused (link to /, empty sys/, ...)"] += 1


EXPECTED["roots refused (link to /, empty sys/, ...)"] = 5


# ------------------------------------------------------------------------------------------------ values as data
# What the CLI and the API hand to Ansible (roots, host names, inventory values, -e values, limits) is data: a value
# that reads like a template is never rendered. Each template below would create its own marker file.
EVIL = "{{ lookup('pipe', 'touch ${NT_MARKS}%s') }}"


def marks_made(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("mark-*"))


@pytest.mark.slow
def test_api_values_reach_ansible_as_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nodetune import api

    monkeypatch.setenv("NT_MARKS", str(tmp_path / "mark-"))
    root = tmp_path / ("n" + EVIL % "root")
    root.mkdir()
    host = "h" + EVIL % "host"
    inventory = api.local_inventory(root, name=host)
    inventory["all"]["vars"] = {"nodetune_rocm_env": {"NCCL_DEBUG": EVIL % "inventory"}}
    result = api.verify(inventory, extra_vars={"nodetune_rocm_env": {"NCCL_DEBUG": EVIL % "extra",
                                                                     EVIL % "key": "1"},
                                               "nodetune_irqbalance_mode": EVIL % "extra-string"},
                        limit=f"all,{EVIL % 'limit'}", raise_on_failure=False)
    assert marks_made(tmp_path) == []
    node_result = result.nodes[host]
    # refused by the role's validation, which names the value exactly as given
    assert node_result.failed and EVIL % "extra-string" in node_result.message, node_result.message
    FIGURES["values never templated (entry points)"] += 1


@pytest.mark.slow
def test_cli_values_reach_ansible_as_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    from nodetune.cli import main

    monkeypatch.setenv("NT_MARKS", str(tmp_path / "mark-"))
    root = tmp_path / ("n" + EVIL % "root")
    root.mkdir()
    variables = tmp_path / "vars.json"
    variables.write_text(json.dumps({"nodetune_rocm_env": {"NCCL_DEBUG": EVIL % "file"}}))
    code = main(["verify", "--root", str(root), "-e", "nodetune_irqbalance_mode=" + EVIL % "key-value",
                 "-e", "@" + str(variables), "-e", json.dumps({"nodetune_rocm_env_file": EVIL % "mapping"}),
                 "-l", "all," + EVIL % "limit"])
    captured = capsys.readouterr()
    assert marks_made(tmp_path) == []
    assert code == 1 and EVIL % "key-value" in captured.out, captured.out
    FIGURES["values never templated (entry points)"] += 1


EXPECTED["values never templated (entry points)"] = 2


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                    max_leaves=12))
@settings(max_examples=60, deadline=None)
def test_data_written_for_ansible_comes_back_exactly_and_untrusted(value: Any) -> None:
    """Every string (keys too, control characters and line breaks included) loads back as itself, as a value
    Ansible never renders; the interpreter template is the one rendered."""
    import tempfile

    from ansible.parsing.dataloader import DataLoader
    from ansible.template import is_trusted_as_template

    from nodetune import _as_data

    data = {"v": value, "ansible_python_interpreter": _as_data.PLAYBOOK_PYTHON}
    with tempfile.NamedTemporaryFile("w", suffix=".yml", encoding="utf-8") as handle:
        handle.write(_as_data.dump(data))
        handle.flush()
        # as ansible-playbook loads `-e @FILE` and the yaml inventory plugin its files
        loaded = DataLoader().load_from_file(handle.name, cache="none", trusted_as_template=True)
    assert loaded == data
    strings: list[str] = []

    def collect(item: Any) -> None:
        if isinstance(item, dict):
            for key, inner in item.items():
                collect(key)
                collect(inner)
        elif isinstance(item, list):
            for inner in item:
                collect(inner)
        elif isinstance(item, str):
            strings.append(item)

    collect(loaded["v"])
    # the strings left trusted are numbers, booleans, nulls and dates in form: nothing that can start a template
    assert not [s for s in strings if is_trusted_as_template(s) and any(c in s for c in "{%#")]
    assert all(is_trusted_as_template(s) for s in strings if s in ("", "1", "true", "~", "2026-12-01"))
    assert is_trusted_as_template(loaded["ansible_python_interpreter"])


def engine_revert_like_the_module(path: Path) -> None:
    root = Root(str(path))
    root.check_node()
    engine.revert(root)


# ------------------------------------------------------------------------------------------------ journals
JOURNALS = {
    "version only": '{"version": 1}',
    "a list": "[]",
    "null": "null",
    "a string": '"journal"',
    "empty object": "{}",
    "not JSON": '{"version": 1, "baseline": {',
    "version 2": '{"version": 2, "baseline": {}}',
    "version true": '{"version": true, "baseline": {}}',
    "baseline a list": '{"version": 1, "baseline": []}',
    "entry without kind": '{"version": 1, "baseline": {"proc/sys/vm/dirty_ratio": {"restore": "20"}}}',
    "entry of unknown kind": '{"version": 1, "baseline": {"proc/sys/vm/dirty_ratio": {"kind": "x"}}}',
    "non-string value": '{"version": 1, "baseline": {"proc/sys/vm/dirty_ratio": {"kind": "attr", "restore": 20}}}',
    "entry not an object": '{"version": 1, "baseline": {"proc/sys/vm/dirty_ratio": "20"}}',
    "file without content": '{"version": 1, "baseline": {"etc/x": {"kind": "file", "exists": true, '
                            '"content": null, "mode": "0644"}}}',
    "file mode not octal": '{"version": 1, "baseline": {"etc/x": {"kind": "file", "exists": false, '
                           '"content": null, "mode": "rw-"}}}',
    "absolute key": '{"version": 1, "baseline": {"/etc/x": {"kind": "file", "exists": false, '
                    '"content": null, "mode": "0644"}}}',
    "escaping created_dirs": '{"version": 1, "baseline": {}, "created_dirs": ["../../tmp"]}',
    "service named wrong": '{"version": 1, "baseline": {"service:a.service": {"kind": "service", '
                           '"unit": "b.service", "state": "active=yes"}}}',
    "runs not a list": '{"version": 1, "baseline": {}, "runs": {}}',
    "file digest not sha256": '{"version": 1, "baseline": {"etc/x": {"kind": "file", "exists": false, '
                              '"content": null, "mode": "0644", "sha256": "abc"}}}',
    "identity not an object": '{"version": 1, "baseline": {}, "identity": "node-a"}',
    "identity fact a number": '{"version": 1, "baseline": {}, "identity": {"machine_id": 5}}',
}


@pytest.mark.parametrize("text", list(JOURNALS.values()), ids=list(JOURNALS))
def test_a_journal_that_does_not_validate_is_refused_and_kept(pristine: Path, text: str) -> None:
    journal = pristine / engine.JOURNAL
    journal.parent.mkdir(parents=True)
    journal.write_text(text)
    before = stat_of(pristine)
    try:
        for run in (revert, tune, lambda path: tune(path, check_mode=True)):
            with pytest.raises(engine.JournalError) as info:
                run(pristine)
            assert "the journal /var/lib/nodetune/journal.json is not valid" in str(info.value)
            assert "nothing was written or deleted" in str(info.value)
            assert differences(before, stat_of(pristine)) == []
        assert journal.read_text() == text
    finally:
        shutil.rmtree(pristine / "var/lib/nodetune")
    FIGURES["corrupted journals refused and kept"] += 1


EXPECTED["corrupted journals refused and kept"] = len(JOURNALS)


# ------------------------------------------------------------------------------------------------ faults
FAULT_POINTS = (0, 1, 2, 5, 9, 14, 20, 30, -1)


@pytest.mark.parametrize("point", FAULT_POINTS)
def test_a_failed_write_restores_what_the_run_changed(pristine: Path, lab: dict[str, Any], point: int) -> None:
    root = Root(str(pristine))
    planned = engine.plan_actions(root, lab["settings"], SimServices(root))
    victim = planned[point].setting.uid

    def fault(setting: Setting) -> None:
        if setting.uid == victim:
            raise InvalidValueError("writing failed: EIO (injected)", setting.path, 5)

    with pytest.raises(engine.ApplyError) as info:
        tune(pristine, fault=fault)
    assert victim in str(info.value) and info.value.rollback_errors == []
    assert len(info.value.rolled_back) == (point % len(planned))
    FIGURES["faults injected and restored"] += 1


EXPECTED["faults injected and restored"] = len(FAULT_POINTS)


# ------------------------------------------------------------------------------------------------ kill -9
def _apply_and_die_at(path: str, index: int) -> None:
    count = [0]

    def die(_setting: Setting) -> None:
        if count[0] == index:
            os.kill(os.getpid(), signal.SIGKILL)
        count[0] += 1

    tune(Path(path), fault=die)


KILL_POINTS = (0, 3, 8, 17, 25, 33)


@pytest.mark.parametrize("point", KILL_POINTS)
def test_kill_9_during_apply_loses_no_original(pristine: Path, point: int) -> None:
    child = multiprocessing.get_context("fork").Process(target=_apply_and_die_at, args=(str(pristine), point))
    child.start()
    child.join(60)
    assert child.exitcode == -signal.SIGKILL
    assert (pristine / engine.JOURNAL).exists()  # the baseline was on disk before the first write
    # what an interrupted write_file leaves: a temporary file beside its target
    leftover = pristine / "etc/nodetune/.nodetune-k9x2"
    leftover.parent.mkdir(parents=True, exist_ok=True)
    leftover.write_text("half")
    tune(pristine)  # the next run finishes the job and sweeps the leftover
    assert not leftover.exists()
    late = pristine / "etc/nodetune/boot-restore.d/.nodetune-late1"
    late.write_text("half")
    revert(pristine)  # and revert sweeps one left beside a file it restores (the teardown checks every byte)
    assert not late.exists()
    FIGURES["kill -9 during apply, originals kept"] += 1


EXPECTED["kill -9 during apply, originals kept"] = len(KILL_POINTS)


def test_leftovers_of_a_run_killed_before_its_journal_are_removed_by_revert(pristine: Path) -> None:
    state_dir = pristine / engine.STATE_DIR
    state_dir.mkdir(parents=True)
    (state_dir / ".nodetune-abc123").write_text('{"version": 1')
    (state_dir / "lock").write_text("")  # earlier versions' lock file
    result = revert(pristine)
    assert result["changed"] is True and "interrupted run" in result["msg"]
    assert not (pristine / "var/lib/nodetune").exists()
    state_dir.mkdir(parents=True)  # only an empty state dir
    assert revert(pristine)["changed"] is True
    assert not state_dir.exists()
    assert revert(pristine)["changed"] is False
    FIGURES["kill -9 leftovers cleaned"] += 2


EXPECTED["kill -9 leftovers cleaned"] = 2


# ------------------------------------------------------------------------------------------------ concurrency
def _run(path: str, what: str, start: Any) -> None:
    start.wait(30)
    if what == "apply":
        tune(Path(path), lock_timeout=120)
    else:
        revert(Path(path), lock_timeout=120)


PAIRS = 24


def test_concurrent_apply_revert_pairs_keep_every_original(pristine: Path, lab: dict[str, Any],
                                                           record_property: Callable[[str, Any], None]) -> None:
    """Apply and revert started together on one root (every third round apply, revert and apply); after each
    round the node is either exactly the tuned node with a valid journal or exactly the original node, and after
    one last revert it is the original: no original lost."""
    context = multiprocessing.get_context("fork")
    tuned = None
    started = time.monotonic()
    for pair in range(PAIRS):
        start = context.Event()
        runs = ("apply", "revert", "apply") if pair % 3 == 2 else ("apply", "revert")[::1 if pair % 2 else -1]
        children = [context.Process(target=_run, args=(str(pristine), what, start)) for what in runs]
        for child in children:
            child.start()
        start.set()
        for child in children:
            child.join(120)
            assert child.exitcode == 0
        journal = pristine / engine.JOURNAL
        if journal.exists():  # tuned: every run that tunes leaves the very same node
            assert engine.journal_problems(json.loads(journal.read_text())) == []
            if tuned is None:
                tuned = Reference(pristine)
            # the journal's run list and times differ from run to run; its shape is checked above
            assert [rel for rel in tuned.differences() if rel != engine.JOURNAL] == []
        else:  # reverted: exactly the original node
            assert lab["pristine"].differences() == []
        FIGURES["concurrent pairs"] += 1
    revert(pristine)
    FIGURES["concurrent pairs, originals kept"] += PAIRS
    record_property("seconds", round(time.monotonic() - started, 1))


EXPECTED["concurrent pairs"] = PAIRS
EXPECTED["concurrent pairs, originals kept"] = PAIRS


def test_revert_waits_for_the_lock_before_it_reads_the_journal(pristine: Path) -> None:
    """An apply holding the lock extends the journal; a revert that started meanwhile must restore that too."""
    tune(pristine, areas={"sysctl": AREAS["sysctl"]})
    context = multiprocessing.get_context("fork")
    root = Root(str(pristine))
    with engine.NodeLock(root):
        child = context.Process(target=revert, args=(pristine,))
        child.start()
        time.sleep(0.5)  # the revert is waiting on the lock now
        journal = json.loads((pristine / engine.JOURNAL).read_text())
        journal["baseline"]["proc/sys/vm/swappiness"] = {"kind": "attr", "restore": root.read("proc/sys/vm/swappiness"),
                                                          "order": 60}
        (pristine / engine.JOURNAL).write_text(json.dumps(journal))
        root.write("proc/sys/vm/swappiness", "1")
    child.join(60)
    assert child.exitcode == 0
    assert not (pristine / engine.JOURNAL).exists()


def test_lock_timeout_is_honoured_and_the_lock_is_never_a_file(pristine: Path) -> None:
    root = Root(str(pristine))
    with engine.NodeLock(root):
        for run in (lambda: tune(pristine, lock_timeout=0.3), lambda: revert(pristine, lock_timeout=0.3)):
            started = time.monotonic()
            with pytest.raises(engine.LockedError, match="0.3 s"):
                run()
            assert time.monotonic() - started < 5
    tune(pristine)
    assert not (pristine / engine.LEGACY_LOCK).exists()
    revert(pristine)


# ------------------------------------------------------------------------------------------------ symbolic links
# nodetune's own fixed paths (issue 23 item 2): a link placed at one, or at a directory on its way, must never make
# apply write, or revert delete, another file. The node's root re-anchors an absolute link at the root, so a link to
# /etc/shadow here aims at the tree's etc/shadow as it would at the real one on a node tuned at '/'.
SYSCTL_CONF = "etc/sysctl.d/90-nodetune-sysctl.conf"
LINKS = "links refused, edited files kept (apply, revert)"


def shadow_untouched(path: Path) -> bool:
    shadow = path / "etc/shadow"
    return not shadow.is_symlink() and shadow.read_text() == FOREIGN["etc/shadow"]


@contextlib.contextmanager
def linked_directory(path: Path, rel: str, target: str) -> Any:
    """``rel`` (a directory of the node) replaced by a link to ``target`` meanwhile."""
    folder, aside = path / rel, path / (rel + ".aside")
    folder.rename(aside)
    folder.symlink_to(target)
    try:
        yield
    finally:
        folder.unlink()
        aside.rename(folder)


@pytest.mark.parametrize("where", ["file", "directory"])
def test_a_link_on_a_path_nodetune_writes_is_refused_before_any_write(pristine: Path, where: str) -> None:
    conf = pristine / SYSCTL_CONF
    with contextlib.ExitStack() as stack:
        if where == "file":
            conf.symlink_to("/etc/shadow")
            stack.callback(conf.unlink)
        else:
            stack.enter_context(linked_directory(pristine, "etc/sysctl.d", "/etc"))
        before = stat_of(pristine)
        for check_mode in (True, False):
            with pytest.raises(SettingError) as info:
                tune(pristine, check_mode=check_mode)
            assert differences(before, stat_of(pristine)) == []
        message = str(info.value)
        assert f"writing /{SYSCTL_CONF} refused" in message and "nodetune does not write or delete files " \
            "through symbolic links" in message
        assert ("it is a symbolic link (to /etc/shadow)" if where == "file"
                else "/etc/sysctl.d, on the way to it, is a symbolic link (to /etc)") in message
    assert shadow_untouched(pristine) and not (pristine / "etc/90-nodetune-sysctl.conf").exists()
    FIGURES[LINKS] += 1


@pytest.mark.parametrize("where", ["file", "directory"])
def test_a_link_swapped_in_between_plan_and_write_is_refused(pristine: Path, where: str) -> None:
    """The fault hook runs just before a write: the link appears after the plan checked the path. The directory is
    swapped before the first file written into it, so that no earlier write of the run lies behind the link."""
    conf = pristine / SYSCTL_CONF
    victim = SYSCTL_CONF if where == "file" else "etc/sysctl.d/"
    swapped: list[str] = []
    with contextlib.ExitStack() as stack:

        def swap(setting: Setting) -> None:
            if setting.path.startswith(victim) and not swapped:
                swapped.append(setting.path)
                if where == "file":
                    conf.symlink_to("/etc/shadow")
                    stack.callback(conf.unlink)
                else:
                    stack.enter_context(linked_directory(pristine, "etc/sysctl.d", "/etc"))

        with pytest.raises(engine.ApplyError) as info:
            tune(pristine, fault=swap)
        assert "symbolic link" in str(info.value) and info.value.rollback_errors == []
        assert info.value.setting.path.startswith(victim) and shadow_untouched(pristine)
        assert not [p for p in (pristine / "etc").iterdir() if p.name.startswith("90-nodetune")]
    FIGURES[LINKS] += 1


def test_a_link_placed_after_apply_is_kept_and_reported_by_revert(pristine: Path) -> None:
    tune(pristine)
    conf = pristine / SYSCTL_CONF
    assert conf.is_file() and not conf.is_symlink()
    conf.unlink()
    conf.symlink_to("/etc/shadow")
    with pytest.raises(engine.ApplyError) as info:
        revert(pristine)
    assert f"removing /{SYSCTL_CONF} refused: it is a symbolic link (to /etc/shadow)" in str(info.value)
    assert [p for p in info.value.rollback_errors if SYSCTL_CONF in p] == info.value.rollback_errors != []
    assert shadow_untouched(pristine) and conf.is_symlink()
    assert (pristine / engine.JOURNAL).exists()  # kept: the operator deals with the link, then reverts again
    conf.unlink()
    assert revert(pristine)["changed"] is True
    FIGURES[LINKS] += 1


@pytest.mark.parametrize("journal", ["this version", "earlier version"])
def test_a_file_edited_after_apply_is_kept_and_reported_by_revert(pristine: Path, journal: str) -> None:
    """Revert deletes a file nodetune created only while it holds what nodetune wrote. A journal of an earlier
    version has no digest: revert then deletes only a regular file (the edited one goes), never a link."""
    tune(pristine)
    conf = pristine / SYSCTL_CONF
    state = pristine / engine.JOURNAL
    recorded = json.loads(state.read_text())
    assert recorded["baseline"][SYSCTL_CONF]["exists"] is False
    written = hashlib.sha256(conf.read_bytes()).hexdigest()
    conf.write_text(conf.read_text() + "vm.swappiness = 1\n")
    if journal == "earlier version":
        for snap in recorded["baseline"].values():
            snap.pop("sha256", None)
        state.write_text(json.dumps(recorded))
        link = pristine / "etc/modprobe.d/nodetune-nvme.conf"
        created = [key for key, snap in recorded["baseline"].items() if snap.get("exists") is False]
        assert link.relative_to(pristine).as_posix() in created
        link.unlink()
        link.symlink_to("/etc/shadow")
        with pytest.raises(engine.ApplyError, match="it is a symbolic link"):
            revert(pristine)
        assert shadow_untouched(pristine) and link.is_symlink() and not conf.exists()
        link.unlink()
    else:
        with pytest.raises(engine.ApplyError) as info:
            revert(pristine)
        assert f"removing /{SYSCTL_CONF} refused: its content changed since nodetune wrote it" in str(info.value)
        assert conf.read_text().endswith("vm.swappiness = 1\n") and state.exists()
        assert json.loads(state.read_text())["baseline"][SYSCTL_CONF]["sha256"] == written
        conf.unlink()
    assert revert(pristine)["changed"] is True
    FIGURES[LINKS] += 1


EXPECTED[LINKS] = 7


# ------------------------------------------------------------------------------------------------ sysctl at boot
def test_a_sysctl_shadowed_at_boot_is_warned_and_reported(pristine: Path) -> None:
    """The simulated node, like Debian, links etc/sysctl.d/99-sysctl.conf to /etc/sysctl.conf; a site value there
    wins over nodetune's 90-nodetune-sysctl.conf at boot."""
    conf = pristine / "etc/sysctl.conf"
    assert os.readlink(pristine / "etc/sysctl.d/99-sysctl.conf").endswith("sysctl.conf")
    site = conf.read_text()
    conf.write_text(site + "\nvm.dirty_ratio = 40\n")
    try:
        state = node.load(str(pristine), AREAS, {})
        warned = [w for w in state.context.warnings if "vm.dirty_ratio" in w]
        assert len(warned) == 1 and "/etc/sysctl.d/99-sysctl.conf (-> /etc/sysctl.conf) sets vm.dirty_ratio=40" \
            in warned[0]
        found = {f.target: f for f in verify.verify_settings(state, AREAS) if f.id == "persist.sysctl_boot"}
        assert found["vm.dirty_ratio"].status == "drift"
        assert found["vm.dirty_ratio"].actual == "40 (from /etc/sysctl.d/99-sysctl.conf (-> /etc/sysctl.conf))"
        assert found["vm.dirty_background_ratio"].status == "ok"
    finally:
        conf.write_text(site)
    state = node.load(str(pristine), AREAS, {})
    assert not [w for w in state.context.warnings if "sysctl" in w]
    assert {f.status for f in verify.verify_settings(state, AREAS) if f.id == "persist.sysctl_boot"} == {"ok"}


# ------------------------------------------------------------------------------------------------ originals kept
# Issue 23 items 3, 4, 7 and 8: no write without a known original, no change left behind by a journal that could not
# be saved, no journal of another node trusted, no revert stuck on an object that is gone.
ORIGINALS = "originals kept (unreadable, unsaved, foreign, gone)"
UNREADABLE = "proc/sys/net/core/rmem_max"


@pytest.mark.parametrize("when,code", [("plan", errno.EACCES), ("snapshot", errno.EIO)])
def test_an_attribute_whose_original_cannot_be_read_is_refused_before_any_write(
        pristine: Path, lab: dict[str, Any], monkeypatch: pytest.MonkeyPatch, when: str, code: int) -> None:
    """chmod 0200 on the attribute (a non-root run), or EIO on the read: it was written and its original lost
    (journal restore null). ``snapshot``: readable for the plan, unreadable when the journal takes its original."""
    failing = [when == "plan"]
    real_open, real_plan = os.open, engine.plan_actions

    def fake_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if failing[0] and str(path).endswith(UNREADABLE) and not flags & (os.O_WRONLY | os.O_RDWR):
            raise OSError(code, os.strerror(code), str(path))
        return real_open(path, flags, *args, **kwargs)

    def plan(*args: Any, **kwargs: Any) -> list[engine.Action]:
        actions = real_plan(*args, **kwargs)
        plans.append(actions)
        failing[0] = failing[0] or len(plans) == 2  # apply plans twice (before and under the lock), then snapshots
        return actions

    plans: list[list[engine.Action]] = []
    monkeypatch.setattr(os, "open", fake_open)
    monkeypatch.setattr(engine, "plan_actions", plan)
    root = Root(str(pristine))
    before = stat_of(pristine)
    with pytest.raises(SettingError) as info:
        engine.apply(root, lab["settings"], services=SimServices(root))
    message = str(info.value)
    assert f"/{UNREADABLE} exists but its current value cannot be read (reading {UNREADABLE} failed: " in message
    assert os.strerror(code) in message and "nodetune writes nothing whose original it cannot keep" in message
    assert differences(before, stat_of(pristine)) == []
    FIGURES[ORIGINALS] += 1


@pytest.mark.parametrize("which,code", [("final", errno.ENOSPC), ("final", errno.EROFS), ("first", errno.ENOSPC)])
def test_a_failed_journal_save_restores_the_run_and_says_why(pristine: Path, monkeypatch: pytest.MonkeyPatch,
                                                             which: str, code: int) -> None:
    """var/lib/nodetune full or remounted read-only: every change stayed applied and the run said "failed, 0
    changes", blaming the kernel. The save before the first write and the final one (with the digests of the files
    nodetune created, so that revert deletes only them) both fail as what they are, with nothing left changed."""
    real_save = engine.save_journal

    def save_journal(root: Root, journal: dict[str, Any]) -> None:
        if (which == "final") == bool(journal.get("runs")):  # the final save records the run
            raise rootfs._classify(OSError(code, os.strerror(code)), engine.JOURNAL, "writing")
        real_save(root, journal)

    monkeypatch.setattr(engine, "save_journal", save_journal)
    with pytest.raises(engine.ApplyError) as info:
        tune(pristine)
    message = str(info.value)
    assert message.startswith(f"saving the journal /{engine.JOURNAL} failed: writing {engine.JOURNAL} failed: ")
    assert os.strerror(code) in message and "kernel rejected" not in message, message
    assert info.value.rollback_errors == [] and (len(info.value.rolled_back) > 30) == (which == "final")
    assert ("Nothing was written" in message) == (which == "first")
    FIGURES[ORIGINALS] += 1


def test_a_journal_from_another_node_is_refused_before_any_write(pristine: Path, tmp_path: Path) -> None:
    """B reverted with A's journal took A's originals (numa_balancing, rmem_max, irqbalance) and exited 0. Two
    simulated nodes are two machines: their machine ids and DMI UUIDs come from their host names."""
    other = tmp_path / "other"
    simnode.build(dict(SMALL, name="other", hostname="other"), str(other))
    facts = ("etc/machine-id", "sys/class/dmi/id/product_uuid")
    assert all((other / fact).read_text() != (pristine / fact).read_text() for fact in facts)
    tune(other)
    foreign = json.loads((other / engine.JOURNAL).read_text())
    assert foreign["identity"]["machine_id"] == (other / "etc/machine-id").read_text().strip()
    journal = pristine / engine.JOURNAL
    journal.parent.mkdir(parents=True)
    journal.write_text(json.dumps(foreign))
    before = stat_of(pristine)
    try:
        for run in (revert, lambda path: revert(path, check_mode=True), tune, lambda path: tune(path, check_mode=True)):
            with pytest.raises(engine.JournalError) as info:
                run(pristine)
            assert differences(before, stat_of(pristine)) == []
        here = (pristine / "etc/machine-id").read_text().strip()
        message = str(info.value)
        assert f"the journal /{engine.JOURNAL} was taken on another node (machine_id " \
               f"{foreign['identity']['machine_id']}" in message and "host name other" in message
        assert f"not on this one (machine_id {here}" in message and "host name safety" in message
        assert "nothing was written or deleted" in message
        assert json.loads(journal.read_text()) == foreign  # kept
    finally:
        shutil.rmtree(pristine / "var/lib/nodetune")
    FIGURES[ORIGINALS] += 1


def test_a_journal_of_an_earlier_version_takes_this_nodes_identity(pristine: Path) -> None:
    tune(pristine, areas={"sysctl": AREAS["sysctl"]})
    state = pristine / engine.JOURNAL
    recorded = json.loads(state.read_text())
    assert recorded["identity"]["machine_id"] == (pristine / "etc/machine-id").read_text().strip()
    assert recorded["identity"]["product_uuid"] == (pristine / "sys/class/dmi/id/product_uuid").read_text().strip()
    del recorded["identity"]
    state.write_text(json.dumps(recorded))
    assert revert(pristine, check_mode=True)["restored"]  # accepted as it is
    tune(pristine)  # and this node's identity added when the journal is next saved
    assert json.loads(state.read_text())["identity"] == engine.node_identity(Root(str(pristine)))
    revert(pristine)
    FIGURES[ORIGINALS] += 1


@pytest.mark.parametrize("also", ["nothing else", "a link at a file"])
def test_revert_finishes_without_the_objects_that_are_gone(tmp_path: Path, lab: dict[str, Any], also: str) -> None:
    """An IRQ and a NIC gone since apply: revert failed on every attempt and kept the journal. It restores the rest,
    names each gone entry with its original, and drops only those from the journal (kept while anything else
    failed)."""
    dest = tmp_path / "node"
    shutil.copytree(lab["path"], dest, symlinks=True)
    original = Reference(dest)
    tune(dest)
    device_mtu = Root(str(dest)).inner("sys/class/net/ib0/mtu")  # the device stays, only its name is gone
    shutil.rmtree(dest / "proc/irq/39")
    (dest / "sys/class/net/ib0").unlink()
    gone = ["proc/irq/39/smp_affinity_list", "sys/class/net/ib0/mtu"]
    conf = dest / SYSCTL_CONF
    if also != "nothing else":
        conf.unlink()
        conf.symlink_to("/etc/shadow")
        with pytest.raises(engine.ApplyError) as info:
            revert(dest)
        assert [g.split(":")[0] for g in info.value.gone] == ["/" + g for g in gone]
        assert info.value.rollback_errors == [p for p in info.value.rollback_errors if SYSCTL_CONF in p] != []
        kept = json.loads((dest / engine.JOURNAL).read_text())
        assert not set(gone) & set(kept["baseline"]) and SYSCTL_CONF in kept["baseline"]
        conf.unlink()
    assert revert(dest, check_mode=True).get("gone", []) == ([] if also != "nothing else" else [
        "/proc/irq/39/smp_affinity_list: not restored (original 0): it no longer exists on this node, its device, CPU, "
        "IRQ or interface is gone",
        "/sys/class/net/ib0/mtu: not restored (original 2044): it no longer exists on this node, its device, CPU, IRQ "
        "or interface is gone"])
    result = revert(dest)
    named = [] if also != "nothing else" else ["/" + g for g in gone]
    assert [g.split(":")[0] for g in result.get("gone", [])] == named
    assert not set(gone) & set(result["restored"])
    # everything else is as it was before apply
    assert [rel for rel in original.differences() if not rel.startswith("proc/irq/39/")] == sorted(
        ["proc/irq/39", "sys/class/net/ib0", device_mtu])
    FIGURES[ORIGINALS] += 1


EXPECTED[ORIGINALS] = 2 + 3 + 1 + 1 + 2


def test_the_tune_module_and_the_api_name_what_is_gone(tmp_path: Path, lab: dict[str, Any]) -> None:
    from nodetune import api
    from tests.support.inprocess import adhoc  # about the module: in process

    dest = tmp_path / "node"
    shutil.copytree(lab["path"], dest, symlinks=True)
    tune(dest, areas={"infiniband": AREAS["infiniband"]})
    (dest / "sys/class/net/ib0").unlink()
    rc, result = adhoc("nodetune.instinct.tune", {"root": str(dest), "state": "reverted"})
    assert rc == 0 and [g.split(":")[0] for g in result["gone"]] == ["/sys/class/net/ib0/mtu"], result["_output"]
    assert "/sys/class/net/ib0/mtu: not restored (original 2044)" in result["_output"]  # a warning too
    node = api.NodeResult(host="node")
    api._absorb(node, api._TUNE, result)
    assert node.gone == result["gone"] == node.notes and not (dest / engine.JOURNAL).exists()


# ------------------------------------------------------------------------------------------------ hostile report files
# Issue 40 item 1: ``nodetune report`` (and the run_once fleet report, which reads files the same way) over report
# files anyone could have put there. Each case: one hostile ``nodes/x.json`` beside a good drifted node; the file is
# named, its node failed, the rest of the report built. In a process of its own with 1 GiB and 120 seconds: a FIFO
# blocked the report forever, a copy of /dev/zero was read until the kernel's OOM killer ended it.
def report_dict(host: str, drift: bool = False, **changes: Any) -> dict[str, Any]:
    from ansible_collections.nodetune.instinct.plugins.module_utils.audit import report

    finding = {"id": "cpu.governor", "target": "cpu0", "expected": "performance",
               "actual": "powersave" if drift else "performance", "status": "drift" if drift else "ok",
               "severity": "medium", "remedy": "apply --tags cpu" if drift else "", "source": "setting", "waiver": None}
    return {**report.node_report(host, [finding], {}, timestamp=1700000000.0), **changes}


def json_file(data: Any) -> Callable[[Path], Any]:
    return lambda path: path.write_text(json.dumps(data))


def sparse_file(size: int) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        with path.open("wb") as handle:
            handle.truncate(size)

    return write


NOT_A_REPORT = "is not a nodetune node report ("
HOSTILE_REPORTS = [
    ("a FIFO", os.mkfifo, "is a FIFO, not a regular file: skipped, not read"),
    ("a link to /dev/zero", lambda path: path.symlink_to("/dev/zero"), "is a symbolic link, not a regular file"),
    ("past the size cap", sparse_file((64 << 20) + 1), "is larger than the 67108864 bytes nodetune reads of a file"),
    ("JSON nested 200,000 deep", lambda path: path.write_text("[" * 200000), "is not valid JSON (nested too deeply)"),
    ("timestamp 1e400", lambda path: path.write_text(json.dumps(report_dict("x")).replace("1700000000.0", "1e400")),
     "is not valid JSON (the number 1e400 is out of range)"),
    ("timestamp 1e300", json_file(report_dict("x", timestamp=1e300)),
     NOT_A_REPORT + "its timestamp is no time from 1970 to 9999"),
    ("findings of the wrong types", json_file(report_dict("x", findings=[1, "x", {"id": ["cpu"], "status": "ok"}])),
     NOT_A_REPORT + "a finding is not a mapping with a text id and status"),
    ("checks of the wrong types", json_file({**report_dict("x", findings=None), "checks": [{"id": 5, "counts": []}]}),
     NOT_A_REPORT + "a check is not a mapping with the texts, counts and number of findings"),
    ("an inventory of the wrong type", json_file(report_dict("x", inventory={"versions": "6.8"})),
     NOT_A_REPORT + "its inventory is not a mapping of plain values"),
]


def report_cli(*args: str) -> Any:
    """``nodetune report ARGS`` in a process of its own, with 1 GiB of address space and 120 seconds."""
    import resource
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(repo / "src"), str(repo / "collection")]))

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    return subprocess.run([sys.executable, "-m", "nodetune.cli", "report", *args], capture_output=True, text=True,
                          env=env, timeout=120, preexec_fn=limit, check=False)


def hostile_report(folder: Path, plant: Callable[[Path], Any], says: str) -> str:
    """Plant ``nodes/x.json`` beside a good drifted node, run the report, check it; returns what it printed."""
    from xml.etree import ElementTree

    from ansible_collections.nodetune.instinct.plugins.plugin_utils import report_files

    (folder / "nodes").mkdir()
    report_files.write_report(str(folder / "nodes/good.json"), report_files.with_checks(report_dict("good", True)))
    bad = folder / "nodes" / "x.json"
    plant(bad)
    done = report_cli(str(folder), "-o", str(folder / "out"))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stdout.startswith("nodetune verify: 2 node(s): 0 clean, 1 drifted, 1 failed\n"), done.stdout
    assert f"unreadable report {bad} (node x failed): {says}" in done.stdout, done.stdout
    summary = json.loads((folder / "out/summary.json").read_text())
    assert summary["drifted"] == {"good": ["cpu.governor"]} and [u["file"] for u in summary["unreadable"]] == [str(bad)]
    ElementTree.parse(folder / "out/junit.xml")
    return done.stdout


@pytest.mark.parametrize(("plant", "says"), [c[1:] for c in HOSTILE_REPORTS], ids=[c[0] for c in HOSTILE_REPORTS])
def test_a_hostile_report_file_is_named_and_the_rest_of_the_report_built(
        tmp_path: Path, plant: Callable[[Path], Any], says: str, record_property: Callable[[str, Any], None]) -> None:
    printed = hostile_report(tmp_path, plant, says)
    FIGURES["hostile report files named, the rest built"] += 1
    record_property("named", printed.splitlines()[-6:])


EXPECTED["hostile report files named, the rest built"] = len(HOSTILE_REPORTS)


def test_a_copy_of_dev_zero_is_skipped_not_read(tmp_path: Path) -> None:
    """The character device itself (``cp -a /dev/zero``), where this process may create one."""
    import stat

    def plant(path: Path) -> None:
        try:
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))
        except PermissionError:
            pytest.skip("creating a character device needs CAP_MKNOD")

    hostile_report(tmp_path, plant, "is a character device, not a regular file: skipped, not read")


def test_control_characters_of_a_report_are_escaped_in_every_text_output(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A node name that drives the terminal, forges a line or holds NUL, and one with a lone surrogate, in the
    printed lines, junit.xml (valid XML) and fleet.prom as Python escapes; summary.json keeps them as data."""
    from xml.etree import ElementTree

    from nodetune.cli import main

    evil, odd = "a\x1b]0;x\x07\x1b[2J\nforged\x00", "b\r\u2028\ud800"
    (tmp_path / "nodes").mkdir()
    (tmp_path / "nodes/evil.json").write_text(json.dumps(report_dict(evil, True)))
    (tmp_path / "nodes/odd.json").write_text(json.dumps({"node": odd, "outcome": "failed", "timestamp": 1.0,
                                                         "message": "unreachable\x1b[2J\nforged: ok"}))
    out = tmp_path / "out"
    assert main(["report", str(tmp_path), "-o", str(out)]) == 1
    printed = capsys.readouterr().out
    assert all(line.isprintable() for line in printed.split("\n")), printed
    assert "drifted: a\\x1b]0;x\\x07\\x1b[2J\\nforged\\x00\n" in printed
    assert "failed: b\\r\\u2028\\ud800\n" in printed
    suites = {s.get("name"): s for s in ElementTree.parse(out / "junit.xml").getroot().iter("testsuite")}
    # XML holds a line feed and a carriage return (as character references); the rest is escaped
    assert set(suites) == {"a\\x1b]0;x\\x07\\x1b[2J\nforged\\x00", "b\r\\u2028\\ud800"}
    assert "unreachable\\x1b[2J\nforged: ok" in ElementTree.tostring(suites["b\r\\u2028\\ud800"], encoding="unicode")
    assert all(line.isprintable() for line in (out / "fleet.prom").read_text().splitlines())
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary["drifted"]) == [evil] and list(summary["failed"]) == [odd]


def without_blocking(call: Callable[[], Any], fifo: Path, seconds: float = 10.0) -> Any:
    """``call()``; where it blocks on ``fifo`` the test fails (the FIFO opened for writing releases the thread)."""
    import threading

    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - raised again in the test's thread
            outcome["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(seconds)
        pytest.fail(f"blocked on the FIFO {fifo}")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def test_the_tune_and_verify_actions_skip_a_held_report_or_learned_file_that_is_a_fifo(tmp_path: Path) -> None:
    """The controller reads a node's report (held findings) and learned expectation at every verify and apply:
    the same helper (report_files.read_regular) opens them."""
    from ansible_collections.nodetune.instinct.plugins.plugin_utils import report_files

    fifo = tmp_path / "n1.json"
    os.mkfifo(fifo)
    assert without_blocking(lambda: report_files.held_report(str(fifo)), fifo) == (None, None)
    with pytest.raises(ValueError, match="cannot be read on the controller: it is a FIFO, not a regular file"):
        without_blocking(lambda: report_files.read_learned(str(fifo)), fifo)
    assert without_blocking(lambda: report_files.keep_learned(str(fifo), {"expected": {}}, "write"), fifo)
    assert fifo.is_file() and json.loads(fifo.read_text())["version"] == report_files.LEARNED_VERSION


# ------------------------------------------------------------------------------------------------ the catalogue
def test_catalogue_figures(record_testsuite_property: Callable[[str, Any], None],
                           record_property: Callable[[str, Any], None]) -> None:
    """The figures of this run; every family must have run in full (skipped when tests were deselected)."""
    if set(FIGURES) != set(EXPECTED):
        missing = ", ".join(sorted(set(EXPECTED) - set(FIGURES)))
        pytest.skip(f"the catalogue needs the whole file: {missing} did not run")
    lines = [f"{name:<45} {FIGURES[name]:>4}" for name in sorted(EXPECTED)]
    print("\nnodetune safety catalogue\n" + "\n".join(lines))
    for name in sorted(EXPECTED):
        # the suite's property where pytest runs alone; the test's own under -n (workers send only those back)
        record_testsuite_property(name.replace(" ", "_"), FIGURES[name])
        record_property(name.replace(" ", "_"), FIGURES[name])
    assert dict(FIGURES) == EXPECTED


# ------------------------------------------------------------------------------------------------ small rules
def test_every_check_id_the_code_builds_is_one_a_waiver_may_name() -> None:
    import re

    from ansible_collections.nodetune.instinct.plugins.module_utils.audit import check_ids

    source = Path(check_ids.__file__).parents[1]  # all of module_utils: areas build Findings too (checker_files)
    built = set()
    for path in source.rglob("*.py"):
        built |= set(re.findall(r'(?:Setting|Finding)\(\s*"([a-z_]+\.[a-z_.]+)"', path.read_text()))
    assert built and built <= set(check_ids.known_ids())
    assert check_ids.is_known("sysctl.net.core.rmem_max") and not check_ids.is_known("nvme.schedular")


def test_a_control_character_never_splits_a_plain_row(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 23 item 12: the plain tables are one row per line (docs/cli.md), whatever a host name or value holds;
    control characters are written as Python escapes."""
    from nodetune import render
    from nodetune.api import Finding, NodeResult, RunResult, SettingChange

    evil = "node\n1\r\t\x1b[31m\x00\x7f\x85\u2028"
    node = NodeResult(host=evil, status="failed", message="first\rsecond\x0bthird",
                      settings=[SettingChange(id="sysctl.vm.x", target="t\nu", before="a\tb", after="c\x1cd")],
                      findings=[Finding(id="x.y", target="t\n", status="drift", expected="e\t", actual="a\r",
                                        remedy="r\x85r")])
    render.print_apply(RunResult(operation="apply", nodes={evil: node}, rc=1))
    render.print_verify(RunResult(operation="verify", nodes={evil: node}, rc=1))
    render.print_discover(RunResult(operation="discover", nodes={evil: node}, rc=1))
    out = capsys.readouterr().out
    tables = [block.split("\n") for block in out.split("# ")[1:]]
    assert [len(lines) - 3 for lines in tables] == [1, 1, 1, 1, 1]  # title, header, one row, the newline at the end
    for lines in tables:
        assert {line.count("\t") for line in lines[1:-1]} == {lines[1].count("\t")}, lines
    assert out.splitlines() == out.split("\n")[:-1]
    assert "node\\n1\\r\\t\\x1b[31m\\x00\\x7f\\x85\\u2028" in out and "first\\rsecond\\x0bthird" in out
    assert "a\\tb\tc\\x1cd" in out


@pytest.mark.parametrize("target", ["absolute", "relative"])
def test_a_kernel_attribute_swapped_for_a_link_out_of_a_lab_tree_is_not_written_through(tmp_path: Path,
                                                                                        target: str) -> None:
    """Issue 23 item 13 (lab trees): an attribute replaced by a link to a file outside the tree; the write resolves
    inside the tree (an absolute target is re-anchored at the root, ``..`` stops there) and never reaches the file
    outside. It did not reproduce at this stop's start; this keeps it so."""
    from ansible_collections.nodetune.lab.plugins.module_utils import simkernel

    tree, outside = tmp_path / "node", tmp_path / "outside"
    (tree / "sys/devices/system/cpu/cpu0").mkdir(parents=True)
    (tree / "proc/sys/vm").mkdir(parents=True)
    outside.write_text("20\n")
    link = outside if target == "absolute" else Path("../" * 8 + str(outside).lstrip("/"))
    (tree / "proc/sys/vm/dirty_ratio").symlink_to(link)
    with pytest.raises(NodeFileError):
        simkernel.sim_root(str(tree)).write("proc/sys/vm/dirty_ratio", "33")
    assert outside.read_text() == "20\n"


def test_numbers_are_ascii_digits_only() -> None:
    from ansible_collections.nodetune.instinct.plugins.module_utils.parse import (
        ParseError,
        ascii_int,
        parse_cpulist,
        parse_int,
    )

    for text in ("٣", "0-٣", "３", "1_0", "0-1_0"):
        with pytest.raises(ParseError):
            parse_cpulist(text)
    for value in ("٤٠٩٢", "4_092", "+4", "4.0", " ", True, None, 4.0):
        with pytest.raises(ParseError):
            ascii_int(value)
    assert ascii_int(" 4092\n") == 4092 and ascii_int("-1") == -1 and ascii_int(7) == 7
    assert parse_int("٤") is None and parse_int("0x1f") == 31 and parse_int("0x١") is None


def test_a_file_nodetune_created_may_be_named_again(tmp_path: Path, lab: dict[str, Any]) -> None:
    """A path variable's new file is created once; the next run (and verify) accept it as nodetune's own."""
    dest = tmp_path / "node"
    shutil.copytree(lab["path"], dest, symlinks=True)
    areas = with_area("rocm_env", nodetune_rocm_env_file="/etc/nodetune/site/rocm.env", **ROCM)
    assert tune(dest, areas)["changed"]
    again = node.load(str(dest), areas, {})
    assert not again.context.errors
    assert engine.apply(again.root, again.settings, services=again.services)["changed"] is False
    # without the journal, the file's own header still says it is nodetune's
    (dest / engine.JOURNAL).rename(tmp_path / "journal.json")
    assert not node.load(str(dest), areas, {}).context.errors
    (tmp_path / "journal.json").rename(dest / engine.JOURNAL)
    revert(dest)
    assert not (dest / "etc/nodetune/site").exists()


def test_the_tune_module_refuses_a_key_value_policy_string(lab: dict[str, Any]) -> None:
    """Ansible turns 'housekeeping=1' into a mapping for a dict option; the module takes the raw value and refuses
    it, in check mode and before any write."""
    from tests.support.playbooks import adhoc

    before = Reference(lab["path"])
    rc, result = adhoc("nodetune.instinct.tune", {"root": str(lab["path"]), "areas": {"sysctl": AREAS["sysctl"]},
                                                  "policy": "housekeeping=1"})
    assert rc != 0, result["_output"][-2000:]
    assert "nodetune_layout_policy='housekeeping=1' is not valid" in result["msg"]
    assert before.differences() == []
