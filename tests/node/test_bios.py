"""BIOS-level checks (module_utils/audit/bios.py) on hand-made node trees read by the real discovery.

Each tree states its own truth (a link trained at x8, a BAR below 4 GiB, the kernel command line); the tests check
the findings against that truth and against DOMAIN.md's platform rules.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import bios
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.topology import discover

from tests import realdata
from tests.support.hwtree import Tree

MI300X = "0x74a1"
MI250 = "0x740c"
GEN5_X16 = ("32.0 GT/s PCIe", "32.0 GT/s PCIe", 16, 16)


def by_key(findings: list) -> dict[tuple[str, str], bios.Finding]:
    out = {}
    for finding in findings:
        key = (finding.id, finding.target)
        assert key not in out, f"duplicate finding {key}"
        out[key] = finding
    return out


def node(tmp_path: Path, *, device: str = MI300X, gpus: int = 2, packages: int = 2, nodes_per_package: int = 1,
         cores_per_node: int = 2, threads: int = 1, smt_control: str | None = "notsupported",
         cmdline: str = "ro iommu=pt pci=realloc=off", iommu: bool = True, **gpu_args) -> Tree:
    tree = Tree(tmp_path)
    tree.cpus(packages, nodes_per_package, cores_per_node, threads, smt_control)
    for index in range(gpus):
        tree.gpu(f"0000:{0x11 + index:02x}:00.0", device=device, **gpu_args)
    tree.cmdline(cmdline)
    if iommu:
        tree.iommu()
    return tree


def run(tree: Tree, config: dict | None = None, layout: dict | None = None) -> dict:
    return by_key(bios.check(discover(str(tree.root)), layout or {}, config or {}))


# ------------------------------------------------------------------------------------------------ platform
@pytest.mark.parametrize(("devices", "platform"), [
    ([MI300X] * 8, "mi300x"),
    (["0x74a5"], "mi300x"),
    ([MI250] * 8, "mi250"),
    (["0x740f", "0x7408"], "mi250"),
    ([MI250, MI300X, MI300X], "mi300x"),  # the most common one wins
    (["0x74a0"], None),  # MI300A: its own guide, no assumption
    ([], None),
])
def test_platform_comes_from_the_gpu_device_ids(devices: list[str], platform: str | None) -> None:
    topology = {"gpus": [{"vendor": "amd", "device": d, "bdf": str(i)} for i, d in enumerate(devices)]}
    assert bios.detect_platform(topology)[0] == platform


def test_platform_override_beats_detection(tmp_path: Path) -> None:
    tree = node(tmp_path, device=MI300X, cmdline="ro")
    # as an MI250 node with 4 logical CPUs, the IOMMU should be off: on without iommu=pt is drift
    found = run(tree, {"nodetune_bios_platform": "mi250"})
    assert found[("bios.iommu", "iommu")].status == "drift"
    assert ("bios.iommu", "pci=realloc") not in found  # MI300X-only rule not applied
    generic = run(tree, {"nodetune_bios_platform": "generic"})
    assert generic[("bios.iommu", "-")].status == "not_applicable"
    assert generic[("bios.nps", "-")].status == "not_applicable"


# ------------------------------------------------------------------------------------------------ IOMMU
@pytest.mark.parametrize(("device", "threads_total", "iommu", "cmdline", "status"), [
    (MI300X, 8, True, "iommu=pt", "ok"),
    (MI300X, 8, True, "iommu.passthrough=1", "ok"),
    (MI300X, 8, True, "", "drift"),  # on, but translated DMA
    (MI300X, 8, True, "iommu=pt iommu=nopt", "drift"),  # the last one wins
    (MI300X, 8, False, "iommu=pt", "drift"),  # off in the BIOS
    (MI250, 8, False, "", "ok"),  # below 256 threads: off
    (MI250, 8, True, "", "drift"),
    (MI250, 8, True, "iommu=pt", "ok"),  # on with passthrough is equivalent
    (MI250, 256, False, "", "drift"),  # x2APIC needs the IOMMU from 256 logical CPUs
    (MI250, 256, True, "", "drift"),
    (MI250, 256, True, "iommu=pt", "ok"),
])
def test_iommu_rules_per_platform(tmp_path: Path, device: str, threads_total: int, iommu: bool, cmdline: str,
                                  status: str) -> None:
    tree = node(tmp_path, device=device, packages=2, cores_per_node=threads_total // 4, threads=2,
                smt_control="on", cmdline=cmdline, iommu=iommu)
    finding = run(tree)[("bios.iommu", "iommu")]
    assert finding.status == status, (finding.expected, finding.actual)
    if status == "drift":
        assert "BIOS" in finding.remedy or "iommu=pt" in finding.remedy


def test_pci_realloc_off_is_required_on_mi300x_only(tmp_path: Path) -> None:
    found = run(node(tmp_path / "a", cmdline="iommu=pt pci=noaer,realloc=off"))
    assert found[("bios.iommu", "pci=realloc")].status == "ok"
    found = run(node(tmp_path / "b", cmdline="iommu=pt pci=realloc"))
    assert found[("bios.iommu", "pci=realloc")].status == "drift"
    assert found[("bios.iommu", "pci=realloc")].actual == "pci=realloc"
    found = run(node(tmp_path / "c", device=MI250, cmdline="", iommu=False))
    assert ("bios.iommu", "pci=realloc") not in found
    forced = run(node(tmp_path / "d", device=MI250, cmdline="", iommu=False), {"nodetune_bios_pci_realloc_off": True})
    assert forced[("bios.iommu", "pci=realloc")].status == "drift"


@pytest.mark.parametrize("value", ["on", "on,fullflush"])
def test_amd_iommu_on_is_flagged_with_the_truth(tmp_path: Path, value: str) -> None:
    finding = run(node(tmp_path, cmdline=f"amd_iommu={value} iommu=pt pci=realloc=off"))[("bios.iommu", "amd_iommu")]
    assert finding.status == "drift"
    assert "not a valid value" in finding.remedy and "iommu=pt" in finding.remedy
    assert "on" in finding.actual


def test_valid_amd_iommu_options_are_not_flagged(tmp_path: Path) -> None:
    found = run(node(tmp_path, cmdline="amd_iommu=force_isolation iommu=pt pci=realloc=off"))
    assert ("bios.iommu", "amd_iommu") not in found
    assert all(f.status == "ok" for k, f in found.items() if k[0] == "bios.iommu")


def test_cmdline_parsing_handles_quotes_and_init_arguments() -> None:
    params = bios.cmdline_params('root=/dev/sda "acpi_osi=Linux" iommu=pt -- iommu=nopt')
    assert ("acpi_osi", "Linux") in params
    assert bios.iommu_passthrough(params) is True  # what follows "--" is for init
    assert bios.pci_realloc(bios.cmdline_params("pci=realloc=on pci=realloc=off")) == "off"


# ------------------------------------------------------------------------------------------------ PCIe link
def test_links_below_max_speed_or_width_are_drift(tmp_path: Path) -> None:
    tree = node(tmp_path, gpus=0)
    tree.gpu("0000:11:00.0", link=GEN5_X16)
    tree.gpu("0000:12:00.0", link=("32.0 GT/s PCIe", "32.0 GT/s PCIe", 8, 16))
    tree.gpu("0000:13:00.0", link=("16 GT/s", "32.0 GT/s PCIe", 16, 16))  # kernels <= 5.6 print "16 GT/s"
    tree.ib("mlx5_0", "0000:21:00.0", {1: ("4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)")},
            link=("2.5 GT/s PCIe", "32.0 GT/s PCIe", 16, 16))
    found = run(tree)
    assert found[("bios.pcie_link", "0000:11:00.0")].status == "ok"
    narrow = found[("bios.pcie_link", "0000:12:00.0")]
    assert (narrow.status, narrow.severity) == ("drift", "high")
    assert "x8 of x16" in narrow.remedy
    slow = found[("bios.pcie_link", "0000:13:00.0")]
    assert (slow.status, slow.severity) == ("drift", "medium")
    assert "Gen4" in slow.actual and "Gen5" in slow.expected
    nic = found[("bios.pcie_link", "0000:21:00.0")]
    assert nic.status == "drift" and nic.actual.startswith("NIC Gen1")


def test_links_without_sysfs_attributes_are_unsupported_not_ok(tmp_path: Path) -> None:
    found = run(node(tmp_path, gpus=2, link=None))
    assert found[("bios.pcie_link", "-")].status == "unsupported"


def test_no_gpu_no_nic_is_not_applicable(tmp_path: Path) -> None:
    found = run(node(tmp_path, gpus=0))
    assert found[("bios.pcie_link", "-")].status == "not_applicable"
    assert found[("bios.above_4g", "-")].status == "not_applicable"


# ------------------------------------------------------------------------------------------------ ASPM
def test_aspm_on_a_gpu_link_is_drift_and_the_cmdline_myth_is_explained(tmp_path: Path) -> None:
    tree = node(tmp_path, gpus=0, cmdline="iommu=pt pci=realloc=off pcie_aspm=off")
    tree.gpu("0000:11:00.0", aspm=(0, 1))
    tree.gpu("0000:12:00.0", aspm=(0, 0))
    tree.aspm_policy("[default] performance powersave powersupersave")
    found = run(tree)
    on = found[("bios.aspm", "0000:11:00.0")]
    assert on.status == "drift" and "L1 on" in on.actual
    assert "does NOT disable ASPM" in on.remedy
    assert found[("bios.aspm", "0000:12:00.0")].status == "ok"
    assert found[("bios.aspm", "policy")].status == "ok"


@pytest.mark.parametrize(("policy", "status"), [("powersupersave", "drift"), ("powersave", "drift"),
                                                 ("performance", "ok")])
def test_aspm_policy(tmp_path: Path, policy: str, status: str) -> None:
    tree = node(tmp_path)
    tree.aspm_policy(" ".join(f"[{p}]" if p == policy else p
                              for p in ("default", "performance", "powersave", "powersupersave")))
    assert run(tree)[("bios.aspm", "policy")].status == status


def test_aspm_invisible_is_unsupported_and_any_disables_it(tmp_path: Path) -> None:
    tree = node(tmp_path)
    assert run(tree)[("bios.aspm", "-")].status == "unsupported"
    assert not [k for k in run(tree, {"nodetune_bios_aspm": "any"}) if k[0] == "bios.aspm"]


# ------------------------------------------------------------------------------------------------ SMT
def test_smt_on_is_drift_against_the_default_policy(tmp_path: Path) -> None:
    finding = run(node(tmp_path, threads=2, smt_control="on"))[("bios.smt", "smt")]
    assert finding.status == "drift" and finding.actual.startswith("on")


def test_smt_planned_off_by_the_layout_satisfies_the_check(tmp_path: Path) -> None:
    tree = node(tmp_path, threads=2, smt_control="on")
    finding = run(tree, layout={"smt_offline": [4, 5, 6, 7], "smt_control": None})[("bios.smt", "smt")]
    assert finding.status == "ok" and "offline at apply" in finding.actual


@pytest.mark.parametrize(("threads", "control", "offline", "wanted", "status"), [
    (1, "notsupported", (), "off", "ok"),  # off in the BIOS
    (2, "off", (4, 5, 6, 7), "off", "ok"),  # off at run time
    (2, "on", (4, 5, 6, 7), "off", "ok"),  # every sibling offlined one by one
    (2, "on", (5,), "off", "drift"),  # one core still has both threads
    (2, "on", (), "on", "ok"),
    (1, "notsupported", (), "on", "drift"),
])
def test_smt_state_from_siblings(tmp_path: Path, threads: int, control: str, offline: tuple, wanted: str,
                                 status: str) -> None:
    tree = Tree(tmp_path)
    tree.cpus(packages=2, nodes_per_package=1, cores_per_node=2, threads=threads, smt_control=control,
              offline=offline)
    assert run(tree, {"nodetune_bios_smt": wanted})[("bios.smt", "smt")].status == status


# ------------------------------------------------------------------------------------------------ NPS
@pytest.mark.parametrize(("device", "nodes_per_package", "config", "status", "severity"), [
    (MI300X, 1, {}, "ok", "medium"),
    (MI300X, 4, {}, "drift", "medium"),
    (MI250, 4, {}, "ok", "low"),
    (MI250, 1, {}, "drift", "low"),  # only suggested on MI250
    (MI300X, 2, {"nodetune_bios_nps": 2}, "ok", "medium"),
    (MI300X, 2, {"nodetune_bios_nps": "4"}, "drift", "medium"),
])
def test_numa_nodes_per_socket(tmp_path: Path, device: str, nodes_per_package: int, config: dict, status: str,
                               severity: str) -> None:
    tree = node(tmp_path, device=device, nodes_per_package=nodes_per_package)
    finding = run(tree, config)[("bios.nps", "numa")]
    assert (finding.status, finding.severity) == (status, severity)
    assert finding.actual.startswith(f"NPS{nodes_per_package}")


def test_memory_only_nodes_do_not_count_as_nps(tmp_path: Path) -> None:
    tree = node(tmp_path)
    tree.memory_node(7)  # a CXL expander
    assert run(tree)[("bios.nps", "numa")].status == "ok"


# ------------------------------------------------------------------------------------------------ Above 4G
def test_gpu_bars_below_4g_mean_above_4g_decoding_is_off(tmp_path: Path) -> None:
    tree = node(tmp_path, gpus=0)
    tree.gpu("0000:11:00.0")
    tree.gpu("0000:12:00.0", bar_start=0x80000000)  # 2 GiB: a 32-bit window
    found = run(tree)
    assert found[("bios.above_4g", "0000:11:00.0")].status == "ok"
    below = found[("bios.above_4g", "0000:12:00.0")]
    assert (below.status, below.severity) == ("drift", "high")
    assert "Above 4G Decoding" in below.remedy


# ------------------------------------------------------------------------------------------------ config
def test_a_clean_mi300x_node_has_no_drift(tmp_path: Path) -> None:
    found = run(node(tmp_path))
    assert [k for k, f in found.items() if f.status == "drift"] == []
    assert {k[0] for k in found} == {"bios.pcie_link", "bios.aspm", "bios.iommu", "bios.smt", "bios.nps",
                                     "bios.above_4g"}
    assert all(f.source == "bios" for f in found.values())


def test_checks_can_be_chosen_and_the_role_can_be_disabled(tmp_path: Path) -> None:
    tree = node(tmp_path)
    only = run(tree, {"nodetune_bios_checks": ["nps", "smt"]})
    assert {k[0] for k in only} == {"bios.nps", "bios.smt"}
    assert run(tree, {"nodetune_bios_check_enabled": False}) == {}


@pytest.mark.parametrize(("config", "message"), [
    ({"nodetune_bios_smt": "of"}, "nodetune_bios_smt='of' is not valid: choose one of off, on, any"),
    ({"nodetune_bios_policy": "strict"}, "nodetune_bios_policy='strict' is not valid: choose one of warn, fail"),
    ({"nodetune_bios_nps": 3}, "nodetune_bios_nps=3 is not valid"),
    ({"nodetune_bios_platform": "mi100"}, "choose one of auto, mi250, mi300x, generic"),
    ({"nodetune_bios_pci_realloc_off": "yes"}, "choose true, false or 'auto'"),
    ({"nodetune_bios_checks": ["iommu", "sriov"]}, "unknown check 'sriov'"),
    ({"nodetune_bios_smt_control": "off"}, "nodetune_bios_smt_control is not a setting of the bios_check area"),
    ({"nodetune_bios_check_enabled": "yes"}, "expected true or false"),
])
def test_invalid_variables_are_named_with_what_is_valid(config: dict, message: str) -> None:
    with pytest.raises(bios.BiosConfigError) as caught:
        bios.check({}, {}, config)
    assert message in str(caught.value)


def test_unquoted_yaml_off_and_on_mean_the_words() -> None:
    config = bios.validate_config({"nodetune_bios_smt": False, "nodetune_bios_iommu": True,
                                   "nodetune_bios_aspm": False})
    assert (config["smt"], config["iommu"], config["aspm"]) == ("off", "on", "off")


def test_every_invalid_variable_is_reported_at_once() -> None:
    with pytest.raises(bios.BiosConfigError) as caught:
        bios.validate_config({"nodetune_bios_smt": "x", "nodetune_bios_nps": "x", "nodetune_bios_aspm": "x"})
    assert len(caught.value.errors) == 3


# ------------------------------------------------------------------------------------------------ real data
@pytest.mark.real_fixtures
def test_real_capture_without_amd_gpu_gets_no_platform_guesses() -> None:
    topology = discover(str(realdata.capture_root("hwloc-e5")))  # 2x Xeon E5, SMT off, ConnectX-3, no GPU
    found = by_key(bios.check(topology, {}, {}))
    assert found[("bios.iommu", "-")].status == "not_applicable"
    assert found[("bios.nps", "-")].status == "not_applicable"
    assert found[("bios.above_4g", "-")].status == "not_applicable"
    assert found[("bios.smt", "smt")].status == "ok"  # 16 CPUs, one thread per core


@pytest.mark.real_fixtures
def test_real_epyc_7451_capture_is_nps4() -> None:
    topology = discover(str(realdata.capture_root("utillinux-epyc7451")))  # 2 sockets, 8 NUMA nodes (lscpu)
    found = by_key(bios.check(topology, {}, {"nodetune_bios_nps": 4, "nodetune_bios_smt": "on"}))
    assert found[("bios.nps", "numa")].status == "ok", found[("bios.nps", "numa")].actual
    assert found[("bios.smt", "smt")].status == "ok"
    assert by_key(bios.check(topology, {}, {"nodetune_bios_nps": 1}))[("bios.nps", "numa")].status == "drift"


# ------------------------------------------------------------------------------------------------ ACS (issue 24.9)
# health.pcie_acs (module_utils/audit/stability.py) on simulated nodes: with the IOMMU on the kernel sets ACS
# SV/RR/CR/UF
# on every root and switch downstream port at boot (drivers/pci/pci.c pci_std_enable_acs()); only RR/CR/EC redirect
# peer traffic, and pci=disable_acs_redir= clears exactly those.
GENOA_PORTS = "pci:1022:14ab;pci:1000:c030"  # the simulated EPYC 9654 root ports and PEX switch ports


def acs_node(tmp_path: Path, cmdline: str = "ro iommu=pt pci=realloc=off", iommu: bool = True,
             **faults: bool) -> Path:
    from ansible_collections.nodetune.lab.plugins.module_utils import simnode

    from tests.support.specs import AUDIT_SPEC as SPEC

    dest = tmp_path / "node"
    simnode.build(dict(SPEC, kernel={"cmdline": cmdline}, iommu=iommu, faults=faults), str(dest))
    return dest


def acs_ports(root: Path, bdf: str) -> dict[str, int]:
    """The ACS control register of every port above ``bdf`` (switch downstream port, root port)."""
    from ansible_collections.nodetune.instinct.plugins.module_utils.audit import stability

    real = (root / "sys/bus/pci/devices" / bdf).resolve()
    ports = [p for p in real.parents if (p / "config").is_file() and len((p / "config").read_bytes()) == 4096]
    return {p.name: stability.acs_control((p / "config").read_bytes()) for p in ports}


def acs_findings(root: Path) -> dict[str, object]:
    from ansible_collections.nodetune.instinct.plugins.module_utils.audit import health
    from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root

    found = health.check(Root(str(root)), discover(str(root)), {"nodetune_health_checks": ["pcie_acs"]})
    return {f.target: f for f in found}


def test_with_the_iommu_on_the_kernel_turns_acs_redirect_on_at_every_boot(tmp_path: Path) -> None:
    root = acs_node(tmp_path)
    gpu = "0000:05:00.0"
    assert set(acs_ports(root, gpu).values()) == {0x001d}  # SV RR CR UF, as pci_std_enable_acs() leaves them
    finding = acs_findings(root)[gpu]
    assert finding.status == "drift" and finding.actual.startswith("on at ")
    assert "the IOMMU is on" in finding.remedy
    assert "pci=disable_acs_redir=pci:1000:c030;pci:1022:14ab" in finding.remedy  # this path's ports, by id
    assert "ECAP_ACS+0x6.w=0000:002c" in finding.remedy


def test_without_the_iommu_acs_stays_as_the_firmware_left_it(tmp_path: Path) -> None:
    assert set(acs_ports(acs_node(tmp_path / "off", iommu=False), "0000:05:00.0").values()) == {0}
    assert {f.status for f in acs_findings(tmp_path / "off" / "node").values()} == {"ok"}
    # a port left with redirect on (the spec's fault) and no IOMMU: the remedy does not blame the kernel
    finding = acs_findings(acs_node(tmp_path / "fw", iommu=False, pcie_acs=True))["0000:05:00.0"]
    assert finding.status == "drift" and "the firmware left it on" in finding.remedy


def test_disable_acs_redir_clears_only_the_redirect_bits_and_that_is_ok(tmp_path: Path) -> None:
    root = acs_node(tmp_path, cmdline=f"ro iommu=pt pci=realloc=off pci=disable_acs_redir={GENOA_PORTS}")
    assert set(acs_ports(root, "0000:05:00.0").values()) == {0x0011}  # SV and UF kept
    found = acs_findings(root)
    assert {f.status for f in found.values()} == {"ok"}
    assert "no redirect bit at" in found["0000:05:00.0"].actual and "SV UF" in found["0000:05:00.0"].actual


def test_disable_acs_redir_takes_device_paths_and_the_last_parameter_wins(tmp_path: Path) -> None:
    """drivers/pci/pci.c pci_dev_str_match(): a path from the root bus names one port; pci_setup() keeps the last
    disable_acs_redir=."""
    first = acs_ports(acs_node(tmp_path / "a"), "0000:05:00.0")
    root_port = list(first)[-1]  # nearest first: the root port (0000:00:01.1) is the last
    path = root_port[5:]  # bus:dev.fn on domain 0000
    root = acs_node(tmp_path / "b", cmdline=f"ro iommu=pt pci=disable_acs_redir=pci:1000:c030 "
                                            f"pci=realloc=off,disable_acs_redir={path}")
    ports = acs_ports(root, "0000:05:00.0")
    assert ports[root_port] == 0x0011 and {v for k, v in ports.items() if k != root_port} == {0x001d}


@pytest.mark.parametrize("control, status", [
    (0x0000, "ok"), (0x0001, "ok"), (0x0010, "ok"), (0x0011, "ok"), (0x0002, "ok"),  # SV, UF, TB: no redirect
    (0x0004, "drift"), (0x0008, "drift"), (0x0020, "drift"), (0x001d, "drift"), (0x007f, "drift"),  # RR, CR, EC
], ids=lambda value: f"{value:#06x}" if isinstance(value, int) else value)
def test_only_request_completion_redirect_and_egress_control_are_drift(tmp_path: Path, control: int,
                                                                       status: str) -> None:
    import struct

    root = acs_node(tmp_path, iommu=False)
    for port in acs_ports(root, "0000:05:00.0"):
        config = next(p for p in (root / "sys/devices").rglob(port) if p.is_dir()) / "config"
        data = bytearray(config.read_bytes())
        struct.pack_into("<H", data, 0x106, control)
        config.write_bytes(bytes(data))
    assert acs_findings(root)["0000:05:00.0"].status == status
