# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""BIOS-level checks: what firmware settings look like from Linux, read-only.

The OS cannot change BIOS settings, only observe their consequences: a PCIe link trained below its maximum,
ASPM left on by firmware, the IOMMU on or off and the kernel command line that goes with it, SMT, the number of
NUMA nodes per socket (NPS), GPU BARs mapped above 4 GiB (Above 4G decoding). AMD's Instinct guides (as corrected in
DOMAIN.md) say what each should be per platform; this module turns a Topology into Findings against those
expectations, so apply can warn or refuse before tuning a badly set up node and verify can report it.

Check ids: ``bios.pcie_link``, ``bios.aspm``, ``bios.iommu``, ``bios.smt``, ``bios.nps``, ``bios.above_4g``.
The configuration is the bios_check role's variables (``nodetune_bios_*``), validated with errors that name the
variable, its value and what is valid.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ansible_collections.nodetune.instinct.plugins.module_utils.areas import declarations as areas
from ansible_collections.nodetune.instinct.plugins.module_utils.discover import cmdline as _cmdline
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.cmdline import AMD_IOMMU_OPTIONS
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.devices import detect_platform
from ansible_collections.nodetune.instinct.plugins.module_utils.areas.common import (
    Errors,
    choices,
    describe,
    unknown_keys,
    want_bool,
    want_list,
    want_str,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.finding import (
    DRIFT,
    NOT_APPLICABLE,
    OK,
    PENDING,
    UNSUPPORTED,
    Finding,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import pcie_generation
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import SettingError

AREA = "bios_check"
SOURCE = "bios"
# the allowed values, as the role's declaration writes them once (areas/declarations.py)
CHECKS = choices(areas.ROLES[AREA], "nodetune_bios_checks")
POLICIES = choices(areas.ROLES[AREA], "nodetune_bios_policy")
PLATFORM_CHOICES = choices(areas.ROLES[AREA], "nodetune_bios_platform")
SMT_CHOICES = choices(areas.ROLES[AREA], "nodetune_bios_smt")
IOMMU_CHOICES = choices(areas.ROLES[AREA], "nodetune_bios_iommu")
NPS_CHOICES = choices(areas.ROLES[AREA], "nodetune_bios_nps")
ASPM_CHOICES = choices(areas.ROLES[AREA], "nodetune_bios_aspm")
VARIABLES = areas.area_variables(AREA)

PLATFORM_NAMES = {"mi250": "MI250 (MI200 series)", "mi300x": "MI300X"}
# The threshold in AMD's MI200 guide: with >= 256 logical CPUs x2APIC needs the IOMMU on.
X2APIC_THREADS = 256


class BiosConfigError(SettingError):
    """The nodetune_bios_* variables are invalid; ``errors`` lists every problem."""


_Errors = Errors


# ------------------------------------------------------------------------------------------------- config
def validate_config(config: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """The bios_check variables, checked and with defaults; raises BiosConfigError listing every problem."""
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise BiosConfigError(["bios must be a mapping of the nodetune_bios_* variables, got %s" % describe(config)])
    ctx: Any = _Errors()  # area_common's validators only call ctx.error()
    unknown_keys(ctx, config, VARIABLES, AREA)
    config = dict(config)
    for name in ("nodetune_bios_smt", "nodetune_bios_iommu", "nodetune_bios_aspm"):
        # YAML 1.1 reads an unquoted off/on as a boolean: take it as the word the user wrote
        if isinstance(config.get(name), bool):
            config[name] = "on" if config[name] else "off"
    out: Dict[str, Any] = {
        "enabled": want_bool(ctx, config, "nodetune_bios_check_enabled", True),
        "policy": want_str(ctx, config, "nodetune_bios_policy", POLICIES) or "warn",
        "platform": want_str(ctx, config, "nodetune_bios_platform", PLATFORM_CHOICES) or "auto",
        "smt": want_str(ctx, config, "nodetune_bios_smt", SMT_CHOICES) or "off",
        "iommu": want_str(ctx, config, "nodetune_bios_iommu", IOMMU_CHOICES) or "auto",
        "aspm": want_str(ctx, config, "nodetune_bios_aspm", ASPM_CHOICES) or "off",
    }
    nps = config.get("nodetune_bios_nps")
    if nps is None:
        out["nps"] = "auto"
    elif isinstance(nps, bool) or str(nps).strip().lower() not in NPS_CHOICES:
        ctx.error("nodetune_bios_nps=%s is not valid: choose one of %s (NUMA nodes per socket, or 'auto' for the "
                  "platform's advice)" % (describe(nps), ", ".join(NPS_CHOICES)))
        out["nps"] = "auto"
    else:
        text = str(nps).strip().lower()
        out["nps"] = int(text) if text.isdigit() else text
    realloc = config.get("nodetune_bios_pci_realloc_off", "auto")
    if realloc is None or realloc == "auto":
        out["pci_realloc_off"] = "auto"
    elif isinstance(realloc, bool):
        out["pci_realloc_off"] = realloc
    else:
        ctx.error("nodetune_bios_pci_realloc_off=%s is not valid: choose true, false or 'auto' (required on MI300X)"
                  % describe(realloc))
        out["pci_realloc_off"] = "auto"
    checks = config.get("nodetune_bios_checks")
    if checks is None:
        out["checks"] = list(CHECKS)
    else:
        listed = want_list(ctx, config, "nodetune_bios_checks")
        bad = [c for c in listed if c not in CHECKS]
        if bad:
            ctx.error("nodetune_bios_checks has unknown check%s %s: valid checks are %s"
                      % ("s" if len(bad) > 1 else "", ", ".join(describe(c) for c in bad), ", ".join(CHECKS)))
        out["checks"] = [c for c in CHECKS if c in listed]
    if ctx.errors:
        raise BiosConfigError(ctx.errors)
    return out


def policy(config: Optional[Dict[str, Any]]) -> str:
    """``warn`` or ``fail``: what apply does with BIOS findings that drift."""
    return validate_config(config)["policy"]


# ------------------------------------------------------------------------------------------------- platform
def _platform(topology: Dict[str, Any], cfg: Dict[str, Any]) -> Tuple[Optional[str], str]:
    if cfg["platform"] == "generic":
        return None, "nodetune_bios_platform=generic"
    if cfg["platform"] != "auto":
        return cfg["platform"], "nodetune_bios_platform=%s" % cfg["platform"]
    platform, evidence = detect_platform(topology)
    return platform, "detected from GPU device ids (%s)" % evidence


# ------------------------------------------------------------------------------------------------- cmdline
# One parser of command lines for /proc/cmdline and the boot loader's entries alike (cmdline.py): the kernel_cmdline
# area judges the configured lines with the very functions these checks use on the running one.
cmdline_params = _cmdline.params
iommu_passthrough = _cmdline.iommu_passthrough
pci_realloc = _cmdline.pci_realloc
_last = _cmdline.last


# ------------------------------------------------------------------------------------------------- helpers
def _finding(check: str, target: str, expected: Any, actual: Any, good: bool, severity: str,
             remedy: str) -> Finding:
    return Finding("bios." + check, target, expected, actual, OK if good else DRIFT, severity=severity,
                   remedy="" if good else remedy, source=SOURCE)


def _not_applicable(check: str, why: str) -> Finding:
    return Finding("bios." + check, "-", "-", "-", NOT_APPLICABLE, severity="info", remedy=why, source=SOURCE)


def _unsupported(check: str, why: str) -> Finding:
    return Finding("bios." + check, "-", "-", "-", UNSUPPORTED, severity="info", remedy=why, source=SOURCE)


def _pci_by_bdf(topology: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    return dict((dev["bdf"], dev) for dev in topology.get("pci_devices") or [] if dev.get("bdf"))


def gpu_and_nic_devices(topology: Dict[str, Any]) -> List[Tuple[str, Dict[str, Any]]]:
    """(kind, PCI device) for every GPU and every NIC/HCA function, by BDF, each once."""
    pci = _pci_by_bdf(topology)
    out: List[Tuple[str, Dict[str, Any]]] = []
    seen = set()
    for gpu in topology.get("gpus") or []:
        bdf = gpu.get("bdf")
        if bdf and bdf not in seen:
            seen.add(bdf)
            out.append(("GPU", pci.get(bdf) or {"bdf": bdf, "link": gpu.get("link"), "aspm": None}))
    nic_bdfs = [n.get("bdf") for n in topology.get("nics") or []] + \
               [d.get("bdf") for d in topology.get("ib_devices") or []]
    for bdf in sorted(set(b for b in nic_bdfs if b)):
        if bdf not in seen and bdf in pci:
            seen.add(bdf)
            out.append(("NIC", pci[bdf]))
    return out


def _speed_text(gts: Optional[float]) -> str:
    if gts is None:
        return "unknown speed"
    gen = pcie_generation(gts)
    return ("Gen%d " % gen if gen else "") + ("%g GT/s" % gts)


def _link_text(gts: Optional[float], width: int) -> str:
    return "%s x%s" % (_speed_text(gts), width or "?")


def pcie_link_findings(devices: List[Tuple[str, Dict[str, Any]]], check_id: str, source: str,
                       what: str) -> List[Finding]:
    """One finding per device whose link is known: below its maximum speed or width is drift.

    Shared by bios.pcie_link (GPUs, NICs) and health.pcie_link (NVMe), so the two cannot disagree on what
    "below max" means. ``check_id`` is the full id.
    """
    findings: List[Finding] = []
    unknown = 0
    for kind, dev in devices:
        link: Dict[str, Any] = dev.get("link") or {}
        cur_gts: Optional[float] = link.get("current_gts")
        max_gts: Optional[float] = link.get("max_gts")
        cur_w: int = link.get("current_width") or 0
        max_w: int = link.get("max_width") or 0
        # width 0 is what virtual functions and powered-down links report: not a measurement
        if (cur_gts is None or max_gts is None) and not (cur_w and max_w):
            unknown += 1
            continue
        slow = cur_gts is not None and max_gts is not None and cur_gts < max_gts
        narrow = 0 < cur_w < max_w
        reasons = []
        if narrow:
            reasons.append("the link trained at x%d of x%d: reseat the card or riser and check the slot's "
                           "bifurcation setting in the BIOS (a narrow link is physical, not power management)"
                           % (cur_w, max_w))
        if slow:
            reasons.append("the link runs at %s of %s: set the slot's PCIe speed to Auto/max in the BIOS and check "
                           "risers and retimers; an idle device may lower its link speed to save power, so re-check "
                           "under load" % (_speed_text(cur_gts), _speed_text(max_gts)))
        findings.append(Finding(
            check_id, dev.get("bdf") or "-", "%s %s" % (kind, _link_text(max_gts, max_w)),
            "%s %s" % (kind, _link_text(cur_gts, cur_w)), DRIFT if (slow or narrow) else OK,
            severity="high" if narrow else "medium", remedy="; ".join(reasons), source=source))
    if not findings:
        if unknown:
            findings.append(Finding(check_id, "-", "-", "-", UNSUPPORTED, severity="info", source=source,
                                    remedy="%d device(s) do not expose current/max link speed and width in sysfs"
                                           % unknown))
        else:
            findings.append(Finding(check_id, "-", "-", "-", NOT_APPLICABLE, severity="info", source=source,
                                    remedy="no %s on this node" % what))
    return findings


# ------------------------------------------------------------------------------------------------- checks
def check_pcie_link(topology: Dict[str, Any]) -> List[Finding]:
    return pcie_link_findings(gpu_and_nic_devices(topology), "bios.pcie_link", SOURCE, "GPU or NIC")


def check_aspm(topology: Dict[str, Any], cfg: Dict[str, Any]) -> List[Finding]:
    """ASPM on GPU and NIC links (per device where sysfs shows it), and the kernel's ASPM policy."""
    if cfg["aspm"] == "any":
        return []
    findings: List[Finding] = []
    params = cmdline_params((topology.get("kernel") or {}).get("cmdline"))
    hint = ""
    if _last(params, "pcie_aspm") == "off":
        hint = ("; note: pcie_aspm=off on the kernel command line does NOT disable ASPM, it only leaves the "
                "firmware's setting in place")
    remedy = ("disable ASPM for the GPU and NIC slots in the BIOS (or boot with pcie_aspm.policy=performance)"
              + hint)
    for kind, dev in gpu_and_nic_devices(topology):
        aspm = dev.get("aspm")
        if not aspm:
            continue
        states = [name.upper() for name in ("l0s", "l1") if aspm.get(name)]
        findings.append(_finding("aspm", dev["bdf"], "%s link: L0s and L1 off" % kind,
                                 "%s link: %s" % (kind, " and ".join(states) + " on" if states else "L0s and L1 off"),
                                 not states, "medium", remedy))
    policy_value = (topology.get("pcie_aspm") or {}).get("policy")
    if policy_value is not None:
        power_saving = policy_value in ("powersave", "powersupersave")
        findings.append(_finding(
            "aspm", "policy", "performance or default (firmware's setting, checked per link)", policy_value,
            not power_saving, "low",
            "the kernel's ASPM policy is %s: it enables ASPM on every capable link; boot with "
            "pcie_aspm.policy=performance or write performance to /sys/module/pcie_aspm/parameters/policy"
            % policy_value + hint))
    if not findings:
        findings.append(_unsupported("aspm", "this kernel exposes neither /sys/module/pcie_aspm/parameters/policy nor "
                                             "per-device link/l0s_aspm, link/l1_aspm: check ASPM in the BIOS"))
    return findings


def _logical_cpus(topology: Dict[str, Any]) -> int:
    present = (topology.get("cpu_lists") or {}).get("present")
    if present:
        return len(present)
    return len(topology.get("cpus") or [])


def _pending_or(finding: Finding, boot: Optional[List[str]], fixed: Any, what: str) -> Finding:
    """``finding`` as pending where it drifts on the running command line but every configured boot entry (``boot``,
    judged by ``fixed`` with the same parser) has it right: the next boot runs with it."""
    if finding.status != DRIFT or not boot or not all(fixed(_cmdline.params(line)) for line in boot):
        return finding
    finding.status = PENDING
    finding.remedy = ("pending: every boot entry has %s, the running kernel booted without it (/proc/cmdline); reboot "
                      "the node" % what)
    return finding


def check_iommu(topology: Dict[str, Any], cfg: Dict[str, Any], platform: Optional[str], why: str,
                boot: Optional[List[str]] = None) -> List[Finding]:
    """IOMMU state with iommu=pt, pci=realloc=off, and amd_iommu= values the kernel does not know, on the running
    command line (/proc/cmdline); ``boot``: the configured boot entries' arguments (bootloader.configured_lines),
    where a fix waiting for the next boot makes a drift pending."""
    findings: List[Finding] = []
    params = cmdline_params((topology.get("kernel") or {}).get("cmdline"))
    cmdline_known = (topology.get("kernel") or {}).get("cmdline") is not None
    iommu = topology.get("iommu") or {}
    present = bool(iommu.get("present"))
    passthrough = iommu_passthrough(params)
    threads = _logical_cpus(topology)

    wanted = cfg["iommu"]
    allow_pt_when_off = False
    if wanted == "auto":
        if platform == "mi300x":
            wanted, basis = "on", "AMD's MI300X guide: IOMMU on with iommu=pt"
        elif platform == "mi250":
            if threads >= X2APIC_THREADS:
                wanted, basis = "on", ("AMD's MI200 guide: %d logical CPUs (>= %d) need the IOMMU on for x2APIC, "
                                       "with iommu=pt" % (threads, X2APIC_THREADS))
            else:
                wanted, basis = "off", ("AMD's MI200 guide: IOMMU off below %d logical CPUs (this node has %d); "
                                        "on with iommu=pt is equivalent" % (X2APIC_THREADS, threads))
                allow_pt_when_off = True
        else:
            wanted, basis = "any", ""
    else:
        basis = "nodetune_bios_iommu=%s" % wanted
    if wanted == "any":
        findings.append(_not_applicable("iommu", "no platform advice for this node (%s); set nodetune_bios_iommu or "
                                                 "nodetune_bios_platform to check it" % why))
    else:
        actual = ("on (%d groups)" % iommu.get("groups", 0) if present else "off") + \
                 (", iommu=pt" if passthrough else (", no iommu=pt" if present else ""))
        if wanted == "on":
            expected = "on, iommu=pt"
            good = present and passthrough
            if not present:
                remedy = ("%s: enable the IOMMU in the BIOS (AMD CBS > NBIO > IOMMU) and boot with iommu=pt" % basis)
            else:
                remedy = ("%s: add iommu=pt to the kernel command line (the kernel_cmdline role, "
                          "nodetune_kernel_cmdline_allowed: true), so that GPU DMA is not translated" % basis)
        else:
            expected = "off (or on with iommu=pt)" if allow_pt_when_off else "off"
            good = not present or (allow_pt_when_off and passthrough)
            remedy = "%s: disable the IOMMU in the BIOS%s" % (
                basis, ", or keep it and boot with iommu=pt" if allow_pt_when_off else "")
        finding = _finding("iommu", "iommu", expected, actual, good, "medium", remedy)
        if present and (wanted == "on" or allow_pt_when_off):  # only iommu=pt is missing: the boot loader may have it
            finding = _pending_or(finding, boot, iommu_passthrough, "iommu=pt")
        findings.append(finding)

    realloc_wanted = cfg["pci_realloc_off"]
    if realloc_wanted == "auto":
        realloc_wanted = platform == "mi300x"
    if realloc_wanted:
        realloc = pci_realloc(params)
        shown = "absent" if realloc is None else ("pci=realloc" if realloc == "" else "pci=realloc=%s" % realloc)
        if not cmdline_known:
            findings.append(_unsupported("iommu", "no /proc/cmdline under this root: pci=realloc=off not checked"))
        else:
            finding = _finding(
                "iommu", "pci=realloc", "pci=realloc=off", shown, realloc == "off", "medium",
                "add pci=realloc=off to the kernel command line (the kernel_cmdline role): AMD's MI300X guide turns "
                "off the kernel's PCI resource reallocation, which can leave GPU BARs unassigned")
            findings.append(_pending_or(finding, boot, lambda found: pci_realloc(found) == "off", "pci=realloc=off"))

    amd_iommu = _cmdline.amd_iommu_values(params)
    bad = _invalid_amd_iommu(amd_iommu)
    if bad:
        finding = _finding(
            "iommu", "amd_iommu", "no invalid amd_iommu= option",
            "amd_iommu=%s" % ",".join(amd_iommu), False, "medium",
            "amd_iommu=%s is not a valid value: the kernel ignores it and logs 'AMD-Vi: Unknown option'. The AMD "
            "IOMMU is on whenever it is enabled in the BIOS; remove amd_iommu=%s (the kernel_cmdline role does) and "
            "use iommu=pt for passthrough (valid amd_iommu options: %s)"
            % (",".join(bad), ",".join(bad), ", ".join(AMD_IOMMU_OPTIONS)))
        findings.append(_pending_or(finding, boot, lambda found: not _invalid_amd_iommu(_cmdline.amd_iommu_values(
            found)), "no invalid amd_iommu= option"))
    return findings


def _invalid_amd_iommu(values: List[str]) -> List[str]:
    bad: List[str] = []
    for value in values:
        bad.extend(o for o in value.split(",") if o not in AMD_IOMMU_OPTIONS)
    return bad


def smt_state(topology: Dict[str, Any]) -> Tuple[Optional[bool], str]:
    """(SMT active?, description): active when some online CPU has an online sibling."""
    smt = topology.get("smt") or {}
    control = smt.get("control")
    cpus = topology.get("cpus") or []
    online = set(c["id"] for c in cpus if c.get("online"))
    pairs = 0
    known = False
    for cpu in cpus:
        siblings = cpu.get("thread_siblings")
        if not cpu.get("online") or siblings is None:
            continue
        known = True
        if len([s for s in siblings if s in online]) > 1:
            pairs += 1
    if known:
        active: Optional[bool] = pairs > 0
    else:
        active = smt.get("active")
    if control in ("notsupported", "notimplemented"):
        where = "off in the BIOS or not supported (smt/control=%s)" % control
    elif control in ("off", "forceoff"):
        where = "off (smt/control=%s)" % control
    elif active is False:
        where = "off (sibling threads offline%s)" % (", smt/control=%s" % control if control else "")
    elif active:
        where = "on (%d CPUs with an online sibling%s)" % (pairs, ", smt/control=%s" % control if control else "")
    else:
        where = "unknown"
    return active, where


def check_smt(topology: Dict[str, Any], layout: Dict[str, Any], cfg: Dict[str, Any]) -> List[Finding]:
    wanted = cfg["smt"]
    if wanted == "any":
        return []
    active, where = smt_state(topology)
    if active is None:
        return [_unsupported("smt", "no thread_siblings_list and no smt/active on this node: SMT state unknown")]
    planned_off = (layout or {}).get("smt_control") == "off" or bool((layout or {}).get("smt_offline"))
    if wanted == "off":
        good = not active or planned_off
        actual = where + ("; the smt area takes the siblings offline at apply" if active and planned_off else "")
        remedy = ("AMD's guides run Instinct nodes with SMT off: disable SMT in the BIOS (CPU Common Options > "
                  "Performance > CCD/Core/Thread Enablement > SMT Control), or let the smt role take the siblings "
                  "offline (nodetune_smt_policy: offline_siblings and nodetune_smt_offline_allowed: true); "
                  "set nodetune_bios_smt: on (or any) if SMT is wanted")
    else:
        good = bool(active) and not planned_off
        actual = where + ("; the smt area takes siblings offline at apply" if planned_off else "")
        remedy = ("nodetune_bios_smt is 'on' but SMT is off or planned off: enable SMT in the BIOS, or set "
                  "nodetune_smt_policy: keep")
    return [_finding("smt", "smt", wanted, actual, good, "low", remedy)]


def numa_per_socket(topology: Dict[str, Any]) -> Dict[int, List[int]]:
    """{package: sorted NUMA node ids holding its CPUs}; memory-only nodes (CXL, pmem) do not count."""
    per: Dict[int, set] = {}
    for cpu in topology.get("cpus") or []:
        package, node = cpu.get("package"), cpu.get("numa_node")
        if package is None or node is None or node < 0:
            continue
        per.setdefault(package, set()).add(node)
    return dict((pkg, sorted(nodes)) for pkg, nodes in per.items())


def check_nps(topology: Dict[str, Any], cfg: Dict[str, Any], platform: Optional[str], why: str) -> List[Finding]:
    wanted = cfg["nps"]
    severity = "medium"
    basis = "nodetune_bios_nps=%s" % wanted
    if wanted == "any":
        return []
    if wanted == "auto":
        if platform == "mi300x":
            wanted, basis = 1, "AMD's MI300X guide: NPS1"
        elif platform == "mi250":
            wanted, basis, severity = 4, "AMD's MI200 guide suggests NPS4", "low"
        else:
            return [_not_applicable("nps", "no platform advice for this node (%s); set nodetune_bios_nps or "
                                           "nodetune_bios_platform to check it" % why)]
    per = numa_per_socket(topology)
    if not per:
        return [_unsupported("nps", "CPUs carry no package or NUMA node here: NUMA nodes per socket unknown")]
    counts = sorted(set(len(nodes) for nodes in per.values()))
    actual = ("NPS%d" % counts[0] if len(counts) == 1 else "mixed (%s)" % ", ".join("NPS%d" % c for c in counts)) + \
        " (%d NUMA node(s) with CPUs on %d socket(s))" % (sum(len(n) for n in per.values()), len(per))
    good = counts == [wanted]
    remedy = ("%s: set NUMA nodes per socket to NPS%d in the BIOS (AMD CBS > DF Common Options > Memory "
              "Addressing > NUMA nodes per socket); an extra node per CCX means 'LLC as NUMA node' is on" %
              (basis, wanted))
    return [_finding("nps", "numa", "NPS%d" % wanted, actual, good, severity, remedy)]


def _bytes_text(size: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift:
            return "%g %s" % (round(size / float(1 << shift), 1), unit)
    return "%d bytes" % size


def check_above_4g(topology: Dict[str, Any]) -> List[Finding]:
    gpus = topology.get("gpus") or []
    if not gpus:
        return [_not_applicable("above_4g", "no GPU on this node")]
    pci = _pci_by_bdf(topology)
    findings = []
    for gpu in gpus:
        dev = pci.get(gpu["bdf"]) or {}
        above = dev.get("bars_above_4g")
        largest = dev.get("bar_bytes_max")
        size = (" (largest BAR %s)" % _bytes_text(largest)) if largest else ""
        if above is None:
            findings.append(Finding("bios.above_4g", gpu["bdf"], "64-bit BAR above 4 GiB", "unknown (no resource "
                                    "file)", UNSUPPORTED, severity="info", source=SOURCE,
                                    remedy="sysfs shows no BAR resources for this GPU"))
            continue
        findings.append(_finding(
            "above_4g", gpu["bdf"], "64-bit BAR above 4 GiB",
            ("64-bit BAR above 4 GiB" if above else "no BAR above 4 GiB") + size, above, "high",
            "the GPU's memory BARs sit below 4 GiB: enable Above 4G Decoding (and Re-Size BAR support) in the BIOS"))
    return findings


def check(topology: Dict[str, Any], layout: Optional[Dict[str, Any]],
          config: Optional[Dict[str, Any]], boot: Optional[List[str]] = None) -> List[Finding]:
    """Every enabled BIOS-level check of one node; raises BiosConfigError on invalid variables. Never writes.
    ``boot``: the configured boot entries' kernel arguments (bootloader.configured_lines), None where unknown."""
    cfg = validate_config(config)
    if not cfg["enabled"]:
        return []
    platform, why = _platform(topology, cfg)
    findings: List[Finding] = []
    for name in cfg["checks"]:
        if name == "pcie_link":
            findings += check_pcie_link(topology)
        elif name == "aspm":
            findings += check_aspm(topology, cfg)
        elif name == "iommu":
            findings += check_iommu(topology, cfg, platform, why, boot)
        elif name == "smt":
            findings += check_smt(topology, layout or {}, cfg)
        elif name == "nps":
            findings += check_nps(topology, cfg, platform, why)
        elif name == "above_4g":
            findings += check_above_4g(topology)
    return findings


def platform_summary(topology: Dict[str, Any], config: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """The platform the checks assumed and why (for reports)."""
    cfg = validate_config(config)
    platform, why = _platform(topology, cfg)
    return {"platform": platform, "name": PLATFORM_NAMES.get(platform or ""), "basis": why}
