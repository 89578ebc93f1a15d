"""The area builders on a small hand-made node: the roles' defaults are valid and safe, bad input is refused.

The node is written by hand (only the files the builders look at) with its Topology and Layout stated next to it,
so each case says the truth it relies on (an amd-pstate node in active mode, an NVMe with 1023 tags, ib0 in
datagram mode...) instead of re-computing the builders' logic. The same catalogue runs through
ansible-playbook in tests/ansible/test_playbooks.py where a case is reachable through role variables; the
layout-level cases (CPU0, a CPU that takes a pinned IRQ) can only come from a planner bug, so they are tested
here only.
"""

from __future__ import annotations

import copy
import difflib
import re
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.apply import engine
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import declarations as declaration
from ansible_collections.nodetune.instinct.plugins.module_utils.areas.common import Context
from ansible_collections.nodetune.instinct.plugins.module_utils.areas.tuning import AREAS, desired_settings
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import SettingError
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root
from ansible_collections.nodetune.lab.plugins.module_utils.simkernel import sim_root
from ansible_collections.nodetune.lab.plugins.module_utils.simservices import SimServices

from tests.support.trees import tree_digest

REPO = Path(__file__).resolve().parents[2]
CPU = "sys/devices/system/cpu"
CORES = 4  # 8 CPUs: siblings N and N+4
SECONDARY = [4, 5, 6, 7]
NIC_IRQS = {40: [1], 41: [2], 42: [3]}


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


@pytest.fixture
def node(tmp_path: Path) -> Path:
    """amd-pstate (active) EPYC-like node: 4 cores x 2 threads, one NVMe, ib0 in datagram mode, irqbalance."""
    for cpu in range(2 * CORES):
        base = f"{CPU}/cpu{cpu}"
        if cpu:  # x86 >= 6.5: CPU0 has no online file
            write(tmp_path, f"{base}/online", "1")
        write(tmp_path, f"{base}/cpufreq/scaling_governor", "powersave")
        write(tmp_path, f"{base}/cpufreq/scaling_available_governors", "performance powersave")
        write(tmp_path, f"{base}/cpufreq/energy_performance_preference", "balance_performance")
        for index, name in enumerate(("POLL", "C1", "C2")):
            write(tmp_path, f"{base}/cpuidle/state{index}/name", name)
            write(tmp_path, f"{base}/cpuidle/state{index}/disable", "0")
    write(tmp_path, f"{CPU}/smt/control", "on")
    write(tmp_path, "sys/block/nvme0n1/queue/scheduler", "[none] mq-deadline kyber")
    write(tmp_path, "sys/block/nvme0n1/queue/nr_requests", "1023")
    write(tmp_path, "sys/block/nvme0n1/mq/0/nr_tags", "1023")
    write(tmp_path, "sys/class/net/ib0/mtu", "2044")
    write(tmp_path, "sys/class/net/ib0/mode", "datagram")
    for key, value in SYSCTLS.items():
        write(tmp_path, "proc/sys/" + key.replace(".", "/"), value)
    for irq in NIC_IRQS:
        write(tmp_path, f"proc/irq/{irq}/smp_affinity_list", "0-7")
    write(tmp_path, "usr/lib/systemd/system/irqbalance.service", "[Service]")
    write(tmp_path, "run/systemd/units/invocation:irqbalance.service", "x")
    (tmp_path / "etc/systemd/system/multi-user.target.wants").mkdir(parents=True)
    (tmp_path / "etc/systemd/system/multi-user.target.wants/irqbalance.service").symlink_to(
        "/usr/lib/systemd/system/irqbalance.service")
    return tmp_path


SYSCTLS = {
    "vm.dirty_ratio": "20", "vm.dirty_background_ratio": "10", "vm.dirty_bytes": "0",
    "kernel.numa_balancing": "1", "net.core.rmem_max": "212992", "net.core.wmem_max": "212992",
    "net.ipv4.neigh.default.gc_thresh1": "128", "net.ipv4.neigh.default.gc_thresh2": "512",
    "net.ipv4.neigh.default.gc_thresh3": "1024",
}

TOPOLOGY: dict[str, Any] = {
    "cpus": [{"id": c, "online": True, "thread_siblings": [c % CORES, c % CORES + CORES]} for c in range(2 * CORES)],
    "smt": {"control": "on", "active": True, "threads_per_core": 2},
    "cpufreq": {"driver": "amd-pstate-epp", "available_governors": ["performance", "powersave"],
                "amd_pstate_status": "active",
                "available_epp": ["default", "performance", "balance_performance", "balance_power", "power"]},
    "cpuidle": {"driver": "acpi_idle", "states": [
        {"index": 0, "name": "POLL", "cpus_with_state": list(range(8))},
        {"index": 1, "name": "C1", "cpus_with_state": list(range(8))},
        {"index": 2, "name": "C2", "cpus_with_state": list(range(8))}]},
    "nics": [{"name": "ib0", "type": "infiniband", "ipoib_mode": "datagram", "mtu": 2044, "driver": "mlx5_core",
              "ib_device": "mlx5_0", "bdf": "0000:41:00.0"}],
    "block_devices": [{"name": "nvme0n1", "kind": "nvme", "scheduler": "none",
                       "schedulers": ["none", "mq-deadline", "kyber"], "nr_requests": 1023}],
    "sysctl": dict(SYSCTLS),
    "irqbalance": {"installed": True, "config_file": None, "banned_cpulist": None},
}
LAYOUT: dict[str, Any] = {
    "smt_offline": list(SECONDARY),
    "irq_affinity": [{"irq": irq, "cpus": cpus, "device": "0000:41:00.0"} for irq, cpus in NIC_IRQS.items()],
    "irqbalance": {"mode": "disable"},
}


def context(node: Path, topology: dict | None = None, layout: dict | None = None) -> Context:
    root = Root(str(node))
    return Context(root, topology or copy.deepcopy(TOPOLOGY), layout if layout is not None else copy.deepcopy(LAYOUT),
                   SimServices(root))


# ------------------------------------------------------------------------------------------ the roles' defaults
AREA_ROLES = set(declaration.AREAS)  # areas/declarations.py is the only list of areas (issue 29 item 1)


def areas_from_roles(overrides: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """What the tune action sends for every enabled area: its declared variables over their defaults. An override
    the area does not declare goes to the area of its nearest declared name, as a module caller might send it (the
    tune action refuses it before: tests/ansible/test_tune_action.py; the builders refuse it too)."""
    known = declaration.known_variables()
    out = {}
    for role in AREA_ROLES:
        declared = declaration.ROLES[role]["variables"]
        config = {name: option["default"] for name, option in declared.items() if "default" in option}
        for name, value in (overrides or {}).items():
            near = difflib.get_close_matches(name, known, n=1, cutoff=0.5) or [""]
            if name in declared or (name not in known and declaration.owner(near[0]) == role):
                config[name] = value
        if config.get(f"nodetune_{role}_enabled", True):
            out[role] = config
    return out


def test_area_roles_are_the_tuning_areas() -> None:
    assert set(AREAS) == AREA_ROLES


def test_the_role_defaults_are_valid_and_safe_on_a_typical_node(node: Path) -> None:
    ctx = context(node)
    settings = desired_settings(ctx, areas_from_roles())
    ids = {s.id for s in settings}
    assert {"cpu.governor", "cpu.idle_state", "nvme.scheduler", "nvme.nr_requests",
            "sysctl.vm.dirty_ratio", "sysctl.kernel.numa_balancing", "sysctl.net.core.rmem_max"} <= ids
    # Safe: nothing disruptive by default. irqbalance runs on this node and stopping it is opt-in, so neither it
    # nor the NIC IRQs (which it would move again) are touched, and the user is told which variable to set.
    assert not any(s.disruptive for s in settings)
    assert not any(s.id.startswith("irq.") for s in settings)
    assert any("nodetune_irqbalance_stop_allowed: true" in w for w in ctx.warnings)
    assert not any(s.reboot_required for s in settings)
    assert not any(s.id.startswith(("smt.", "ib.", "cpu.epp", "rocm.")) for s in settings)
    # nr_requests 'max' with scheduler none is the hardware tag depth, not the articles' 1024
    assert {s.value for s in settings if s.id == "nvme.nr_requests"} == {"1023"}


def test_the_role_defaults_apply_and_are_idempotent(node: Path) -> None:
    ctx = context(node)
    settings = desired_settings(ctx, areas_from_roles())
    first = engine.apply(ctx.root, settings, services=ctx.services)
    assert first["changed"] and not first["unconfirmed"]
    assert (node / f"{CPU}/cpu3/cpuidle/state2/disable").read_text().strip() == "1"
    assert (node / f"{CPU}/cpu3/cpuidle/state1/disable").read_text().strip() == "0"
    assert SimServices(ctx.root).state("irqbalance.service") == {"enabled": "yes", "active": "yes"}
    again = engine.apply(ctx.root, desired_settings(context(node), areas_from_roles()), services=ctx.services)
    assert again["changed"] is False


def test_stopping_irqbalance_is_opt_in_and_then_nic_irqs_are_pinned(node: Path) -> None:
    ctx = context(node)
    settings = desired_settings(ctx, areas_from_roles({"nodetune_irqbalance_stop_allowed": True}))
    assert {s.id for s in settings if s.disruptive} == {"irq.irqbalance"}
    assert any(s.id == "irq.nic_local" for s in settings)
    engine.apply(ctx.root, settings, services=ctx.services)
    assert SimServices(ctx.root).state("irqbalance.service") == {"enabled": "no", "active": "no"}
    # once irqbalance is stopped and disabled, the defaults keep the NIC IRQs pinned without any opt-in
    settings = desired_settings(context(node), areas_from_roles())
    assert any(s.id == "irq.nic_local" for s in settings)


def test_ban_mode_bans_the_pinned_cpus_and_irqs(node: Path) -> None:
    layout = copy.deepcopy(LAYOUT)
    pinned_cpus = sorted({c for e in layout["irq_affinity"] for c in e["cpus"]})
    layout["irqbalance"] = {"mode": "ban", "banned_cpulist": pinned_cpus}
    for index, entry in enumerate(layout["irq_affinity"]):
        entry["name"] = f"mlx5_comp{index}@pci:0000:41:00.0"
    settings = desired_settings(context(node, layout=layout), areas_from_roles({"nodetune_irqbalance_mode": "ban"}))
    lines = {s.key: s.value for s in settings if s.id == "irq.irqbalance" and s.kind == "line"}
    pinned = sorted(s.key for s in settings if s.id == "irq.nic_local")
    assert pinned, "ban mode pins the NIC IRQs"
    # banned by action name through irqbalance's --policyscript: IRQ numbers change from one boot to the next
    assert lines["IRQBALANCE_ARGS"] == "--policyscript=/usr/local/sbin/nodetune-irqbalance-policy"
    listed = next(s.value for s in settings if s.id == "irq.irqbalance" and s.target == "banned IRQs")
    assert [line for line in listed.splitlines() if not line.startswith("#")] == pinned
    assert lines["IRQBALANCE_BANNED_CPULIST"]


def test_the_lab_opt_ins_tune_smt_and_ipoib(node: Path) -> None:
    overrides = {"nodetune_smt_policy": "offline_siblings", "nodetune_smt_offline_allowed": True,
                 "nodetune_ipoib_mtu": "max", "nodetune_ipoib_mtu_change_allowed": True,
                 "nodetune_rocm_env": {"NCCL_BUFFSIZE": 8388608, "NCCL_SOCKET_IFNAME": "ib0"}}
    settings = desired_settings(context(node), areas_from_roles(overrides))
    assert sorted(s.target for s in settings if s.id == "smt.siblings_offline") == [f"cpu{c}" for c in SECONDARY]
    assert [s.value for s in settings if s.id == "ib.mtu"] == ["4092"]
    # per-CPU settings go to the CPUs that stay online
    assert sorted(s.target for s in settings if s.id == "cpu.governor") == [f"cpu{c}" for c in range(CORES)]
    profile = next(s for s in settings if s.id == "rocm.env" and s.target == "profile")
    assert "export NCCL_SOCKET_IFNAME='ib0'\n" in profile.value


LARGE_MEMORY_WRITEBACK = {"nodetune_vm_dirty_ratio": None, "nodetune_vm_dirty_background_ratio": None,
                          "nodetune_vm_dirty_bytes": 32 << 30, "nodetune_vm_dirty_background_bytes": 4 << 30}


def test_the_bytes_form_wins_its_pair_and_stays_put_over_repeated_applies(node: Path) -> None:
    """Each exclusive pair takes one form: the ratio is neither written, verified nor persisted (issue 14.4)."""
    settings = desired_settings(context(node), areas_from_roles(LARGE_MEMORY_WRITEBACK))
    dirty = {s.target: s.value for s in settings if s.id.startswith("sysctl.vm.dirty")}
    assert dirty == {"vm.dirty_bytes": str(32 << 30), "vm.dirty_background_bytes": str(4 << 30)}
    write(node, "proc/sys/vm/dirty_background_bytes", "0")
    root = sim_root(str(node))  # writes answered like a kernel: one form zeroes the other
    for run in range(4):
        result = engine.apply(root, desired_settings(context(node), areas_from_roles(LARGE_MEMORY_WRITEBACK)),
                              services=SimServices(root))
        assert result["changed"] is (run == 0), run
    assert (node / "proc/sys/vm/dirty_ratio").read_text().strip() == "0"  # the kernel zeroed it
    conf = (node / "etc/sysctl.d/90-nodetune-sysctl.conf").read_text()
    assert f"vm.dirty_bytes = {32 << 30}" in conf and "vm.dirty_ratio" not in conf


def udev_rule_matches(rule: str, device: dict[str, str]) -> bool:
    """udev's match semantics for the keys nodetune writes: each 'KEY=="glob|glob"' must match (fnmatch globs)."""
    from fnmatch import fnmatchcase

    for key, op, value in re.findall(r'([A-Z]+(?:\{[^}]*\})?)\s*(==|!=)\s*"([^"]*)"', rule):
        found = any(fnmatchcase(device.get(key, ""), glob) for glob in value.split("|"))
        if found != (op == "=="):
            return False
    return True


@pytest.mark.parametrize("namespaces", [["nvme0n1"], ["nvme0n1", "nvme1n1"]], ids=["one-rule", "per-device"])
def test_the_nvme_udev_rule_matches_whole_namespaces_not_partitions(node: Path, namespaces: list[str]) -> None:
    """A partition has no queue/ folder: matching it makes udev log a failed write per partition (issue 14.8)."""
    topology = copy.deepcopy(TOPOLOGY)
    for index, name in enumerate(namespaces[1:], start=1):
        write(node, f"sys/block/{name}/queue/scheduler", "[none] mq-deadline kyber")
        write(node, f"sys/block/{name}/queue/nr_requests", "255")
        write(node, f"sys/block/{name}/mq/0/nr_tags", "255")
        topology["block_devices"].append({"name": name, "kind": "nvme", "scheduler": "none",
                                          "schedulers": ["none", "mq-deadline", "kyber"], "nr_requests": 255 + index})
    settings = desired_settings(context(node, topology), areas_from_roles())
    rules = next(s.value for s in settings if s.id == "persist.udev")
    lines = [line for line in rules.splitlines() if line and not line.startswith("#")]
    assert len(lines) == len(namespaces)
    for name in namespaces:
        namespace = {"ACTION": "add", "SUBSYSTEM": "block", "KERNEL": name, "ENV{DEVTYPE}": "disk"}
        partition = {"ACTION": "add", "SUBSYSTEM": "block", "KERNEL": name + "p1", "ENV{DEVTYPE}": "partition"}
        assert any(udev_rule_matches(line, namespace) for line in lines), name
        assert not any(udev_rule_matches(line, partition) for line in lines), name + "p1"


def test_disabled_areas_are_not_touched(node: Path) -> None:
    areas = areas_from_roles({"nodetune_cpu_enabled": False, "nodetune_nvme_enabled": False})
    settings = desired_settings(context(node), areas)
    assert not any(s.area in ("cpu", "nvme") for s in settings)
    # the toggle itself is a known variable of every area (passing it is not an "unknown variable")
    areas = areas_from_roles()
    for role in areas:  # the areas enabled by default (an opt-in area is left out by areas_from_roles)
        areas[role][f"nodetune_{role}_enabled"] = True
    desired_settings(context(node), areas)


def test_persistence_is_per_area_so_a_partial_run_keeps_the_others(node: Path) -> None:
    """`--tags infiniband` must not rewrite the sysctl area's sysctl.d file nor drop its boot-restore entries."""
    full = {s.path: s for s in desired_settings(context(node), areas_from_roles())}
    only_ib = {s.path: s for s in desired_settings(context(node), {"infiniband": areas_from_roles()["infiniband"]})}
    sysctl_files = [p for p in full if p.startswith("etc/sysctl.d/")]
    assert len(sysctl_files) == 2
    for path, setting in only_ib.items():
        if path in full:
            assert setting.value == full[path].value, path
    only_cpu = {s.path: s for s in desired_settings(context(node), {"cpu": areas_from_roles()["cpu"]})}
    for path, setting in only_cpu.items():
        if path in full:
            assert setting.value == full[path].value, path


# ------------------------------------------------------------------------------------------ bad-input catalogue
def refused(node: Path, areas: dict[str, Any], topology: dict | None = None, layout: dict | None = None) -> str:
    with pytest.raises(SettingError) as info:
        desired_settings(context(node, topology, layout), areas)
    return str(info.value)


CATALOGUE = [
    pytest.param({"nodetune_ipoib_mtu": 4096, "nodetune_ipoib_mtu_change_allowed": True},
                 ["nodetune_ipoib_mtu=4096", "ib0", "4092", "'max'", "EINVAL"], id="ipoib-4096-datagram"),
    pytest.param({"nodetune_ipoib_mtu": 4092},
                 ["nodetune_ipoib_mtu_change_allowed: true"], id="ipoib-change-not-allowed"),
    pytest.param({"nodetune_nvme_nr_requests": 4096},
                 ["nodetune_nvme_nr_requests=4096", "scheduler 'none'", "1023", "mq-deadline"], id="nr-requests-none"),
    pytest.param({"nodetune_nvme_scheduler": "mq-deadline", "nodetune_nvme_nr_requests": 4096},
                 ["nodetune_nvme_nr_requests=4096", "2048"], id="nr-requests-elevator"),
    pytest.param({"nodetune_nvme_scheduler": "bfq"},
                 ["nodetune_nvme_scheduler='bfq'", "not offered by nvme0n1", "none, mq-deadline, kyber",
                  "modprobe bfq"], id="scheduler-not-offered"),
    pytest.param({"nodetune_nvme_scheduler": "noop"},
                 ["nodetune_nvme_scheduler='noop'", "legacy single-queue", "'none'"], id="scheduler-legacy-name"),
    pytest.param({"nodetune_cpu_governor": "ondemand"},
                 ["nodetune_cpu_governor='ondemand'", "amd-pstate-epp", "performance, powersave"],
                 id="governor-not-offered"),
    pytest.param({"nodetune_cpu_epp": "balance_power"},
                 ["nodetune_cpu_epp='balance_power'", "active mode", "EBUSY", "powersave"], id="epp-under-performance"),
    pytest.param({"nodetune_smt_policy": "offline_siblings"},
                 ["offlines 4 CPUs", "nodetune_smt_offline_allowed: true"], id="smt-not-allowed"),
    pytest.param({"nodetune_nvme_nr_queues": 32},
                 ["nodetune_nvme_nr_queues is not a setting", "no /sys/block/<dev>/queue/nr_queues",
                  "nodetune_nvme_module_options"], id="unknown-nr-queues"),
    pytest.param({"nodetune_cpu_governer": "performance"},
                 ["nodetune_cpu_governer is not a setting of the cpu area", "nodetune_cpu_governor"],
                 id="unknown-misspelt"),
    pytest.param({"nodetune_vm_dirty_bytes": 1 << 30},
                 ["nodetune_vm_dirty_ratio=20 and nodetune_vm_dirty_bytes=1073741824 are both set",
                  "set the other to null"], id="dirty-both-forms"),
    pytest.param({"nodetune_sysctl_extra": {"vm.dirty_bytes": 1 << 30}},
                 ["nodetune_sysctl_extra['vm.dirty_bytes'] is not valid", "nodetune_vm_dirty_bytes"],
                 id="dirty-bytes-through-extra"),
    pytest.param({"nodetune_vm_dirty_ratio": None, "nodetune_vm_dirty_bytes": 4096},
                 ["nodetune_vm_dirty_bytes=4096 is out of range", "8192"], id="dirty-bytes-below-two-pages"),
    pytest.param({"nodetune_vm_dirty_ratio": None, "nodetune_vm_dirty_background_ratio": None,
                  "nodetune_vm_dirty_bytes": 1 << 30, "nodetune_vm_dirty_background_bytes": 1 << 31},
                 ["nodetune_vm_dirty_background_bytes=2147483648 must be below nodetune_vm_dirty_bytes=1073741824"],
                 id="dirty-background-bytes-above-bytes"),
    pytest.param({"nodetune_vm_dirty_ratio": 10, "nodetune_vm_dirty_background_ratio": 20},
                 ["nodetune_vm_dirty_background_ratio=20 must be below nodetune_vm_dirty_ratio=10"],
                 id="dirty-background-above-ratio"),
    pytest.param({"nodetune_neigh_gc_thresh3": 256},
                 ["gc_thresh2", "256", "gc_thresh1 <= gc_thresh2 <= gc_thresh3"], id="gc-thresh-order"),
    pytest.param({"nodetune_rocm_env": {"RCCL_ALGO": "Ring"}}, ["RCCL_ALGO is read by nothing", "use NCCL_ALGO"],
                 id="rocm-wrong-name"),
    pytest.param({"nodetune_rocm_env": {"NCCL_SOCKET_IFNAME": "ib0;reboot"}},
                 ["NCCL_SOCKET_IFNAME", "'ib0;reboot' is not valid", "interface or HCA names"], id="iface-shell-meta"),
    pytest.param({"nodetune_rocm_env": {"NCCL_IB_HCA": "mlx5_0:1,$(id)"}},
                 ["NCCL_IB_HCA", "is not valid"], id="hca-shell-meta"),
    pytest.param({"nodetune_rocm_env": {"NCCL_DEBUG": "WARN"}, "nodetune_rocm_profile_file": "/etc/../../root/.x"},
                 ["nodetune_rocm_profile_file='/etc/../../root/.x' is not valid", "no '..'"], id="path-escape"),
    pytest.param({"nodetune_rocm_env": {"NCCL_DEBUG": "WARN"}, "nodetune_rocm_env_file": "etc/rocm.env"},
                 ["nodetune_rocm_env_file='etc/rocm.env' is not valid", "absolute"], id="path-relative"),
    pytest.param({"nodetune_nvme_module_options": {"nr_queues": 32}},
                 ["nodetune_nvme_module_options.nr_queues is not a setting"], id="module-option-nr-queues"),
]


@pytest.mark.parametrize(("overrides", "expected"), CATALOGUE)
def test_bad_role_variables_are_refused_with_the_true_fix(node: Path, overrides: dict, expected: list[str]) -> None:
    message = refused(node, areas_from_roles(overrides))
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"


def test_every_problem_is_reported_in_one_run(node: Path) -> None:
    message = refused(node, areas_from_roles({"nodetune_cpu_governor": "ondemand", "nodetune_nvme_scheduler": "bfq",
                                              "nodetune_ipoib_mtu": 4096}))
    assert "nodetune_cpu_governor" in message and "nodetune_nvme_scheduler" in message
    assert "nodetune_ipoib_mtu" in message


def test_unknown_area_is_refused(node: Path) -> None:
    assert "unknown area 'no_such_area'" in refused(node, {"no_such_area": {}})  # gpu is an area now


def test_layout_offlining_cpu0_is_refused(node: Path) -> None:
    layout = copy.deepcopy(LAYOUT)
    layout["smt_offline"] = [0, 4]
    message = refused(node, areas_from_roles({"nodetune_smt_policy": "offline_siblings",
                                              "nodetune_smt_offline_allowed": True}), layout=layout)
    assert "CPU0" in message and "nothing written" in message


def test_layout_offlining_a_cpu_that_takes_a_pinned_irq_is_refused(node: Path) -> None:
    layout = copy.deepcopy(LAYOUT)
    layout["irq_affinity"][0]["cpus"] = [5]
    message = refused(node, areas_from_roles({"nodetune_smt_policy": "offline_siblings",
                                              "nodetune_smt_offline_allowed": True}), layout=layout)
    assert "take pinned IRQs" in message and "[5]" in message


def test_a_cpu_that_cannot_go_offline_is_refused(node: Path) -> None:
    (node / f"{CPU}/cpu6/online").unlink()  # not hotpluggable
    message = refused(node, areas_from_roles({"nodetune_smt_policy": "offline_siblings",
                                              "nodetune_smt_offline_allowed": True}))
    assert "cpu6 cannot be offlined" in message


def test_garbage_cpulists_in_the_layout_policy_are_refused() -> None:
    from ansible_collections.nodetune.instinct.plugins.module_utils.plan.layout import PolicyError, validate_policy

    for bad in ("0-", "3-1", "a,b", "0;reboot"):
        with pytest.raises(PolicyError, match="housekeeping"):
            validate_policy({"housekeeping": bad})
    with pytest.raises(PolicyError, match="irq_cores"):
        validate_policy({"irq_cores": "x"})


def test_a_path_outside_the_root_stays_inside_it(node: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Even a Setting built with '..' (no role variable can produce one) is written inside the root."""
    from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import FILE, Setting

    outside = tmp_path_factory.mktemp("outside")
    before = tree_digest(outside)
    escape = "../" * (len(node.parts) + 2) + str(outside).lstrip("/") + "/evil"
    root = Root(str(node))
    engine.apply(root, [Setting("rocm.env", "x", escape, "x\n", kind=FILE, compare="content")])
    assert tree_digest(outside) == before
    assert (node / str(outside).lstrip("/") / "evil").read_text() == "x\n"


def test_the_run_tags_select_areas() -> None:
    from ansible_collections.nodetune.instinct.plugins.plugin_utils.role_variables import any_selected, selected

    assert selected("nvme", {"ansible_run_tags": ["all"], "ansible_skip_tags": []})
    assert selected("nvme", {})
    assert selected("nvme", {"ansible_run_tags": ["nvme"]}) and not selected("cpu", {"ansible_run_tags": ["nvme"]})
    assert selected("cpu", {"ansible_run_tags": ["apply"]})
    assert not selected("smt", {"ansible_run_tags": ["all"], "ansible_skip_tags": ["smt"]})
    assert selected("cpu", {"ansible_run_tags": ["all"], "ansible_skip_tags": ["smt"]})
    assert not any_selected({"ansible_run_tags": ["verify"]}) and not any_selected({"ansible_run_tags": ["lab"]})


def test_every_check_id_is_documented_in_verify_md() -> None:
    """Every id a finding can carry (check_ids.known_ids: the areas' declared ids, the engine's, BIOS, health,
    inventory) is in docs/verify.md's tables, as itself or as a documented form (``<area>.applicable``,
    ``sysctl.<key>``)."""
    from ansible_collections.nodetune.instinct.plugins.module_utils.audit import check_ids

    text = (REPO / "docs" / "verify.md").read_text(encoding="utf-8")
    forms = {"applicable": "`<area>.applicable`"}
    missing = [check_id for check_id in check_ids.known_ids()
               if f"`{check_id}`" not in text and forms.get(check_id.rpartition(".")[2], "\0") not in text]
    assert missing == [], f"check ids not documented in docs/verify.md: {missing}"
