# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The GPU area: performance determinism, power cap, compute and memory partitions of AMD Instinct GPUs.

Everything is opt-in (each variable off or null by default) and written through amdgpu's sysfs files, as the ROCm
tools do (docs/rocm.md, "GPU area"):

- performance determinism, as rocm_smi_lib's ``rsmi_perf_determinism_mode_set()`` (src/rocm_smi.cc) does it:
  ``perf_determinism`` to ``power_dpm_force_performance_level``, then ``s 1 <MHz>`` and ``c`` (commit) to
  ``pp_od_clk_voltage``. amdgpu takes the clock only in the manual and perf_determinism levels and only between the
  GFX clock table's minimum and maximum (smu_v13_0_6_usr_edit_dpm_table, aldebaran_usr_edit_dpm_table: EINVAL
  otherwise); it enters determinism at that clock on the commit (SMU_MSG_EnableDeterminism), and leaves it, the
  clock back to the table's maximum, when another level is written (smu_v13_0_6_set_performance_level). So the
  level is journaled and written first, the clock second (committed again whenever the level is written), and
  revert puts the level back first: the clock then reads as before without a write.
- the power cap, hwmon ``power1_cap`` in microwatts, which amdgpu truncates to whole watts and refuses outside
  ``[power1_cap_min, power1_cap_max]`` with EINVAL (amdgpu_hwmon_set_power_cap, smu_set_power_limit).
- compute and memory partitions of MI300-series GPUs, disruptive, behind a second opt-in: a compute partition
  switch re-creates the GPU's KFD nodes and is refused with EBUSY while any KFD process is open
  (aqua_vanjaram_switch_partition_mode -> kgd2kfd_check_and_lock_kfd); nodetune refuses it first, naming the
  processes (``/sys/class/kfd/kfd/proc/<pid>/``, kfd_process.c). A memory partition write is only a request: the
  file keeps showing the current mode until the driver reloads (current_memory_partition_store: "NPS mode change
  requested, please remove and reload the driver"), so it is reported as needing a reboot and verified at the
  current mode while the request is pending.

amdgpu resets all of these when it loads, and nodetune does not re-apply them at boot: verify reports them after a
reboot until the next apply.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ansible_collections.nodetune.instinct.plugins.module_utils.areas.common import (
    role_variables,
    Context,
    unknown_keys,
    want_bool,
    want_int,
    want_str,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import clock_levels, od_range, parse_int
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import EXACT, INT, OD_CLOCK, Setting

# The area's declaration: its role (ROLE), variables as an Ansible argument spec, check ids and docs; its
# role's files are generated from it (scripts/gen_role_docs.py) and declarations.py collects every area's.
ROLE = "gpu"
DECLARATION = {
    'kind': 'area',
    'order': 75,
    'steps': ['gpu.compute_partition', 'gpu.memory_partition', 'gpu.power_cap', 'gpu.perf_level',
              'gpu.determinism_clock'],
    'builder': 'gpu',
    'setting_area': 'gpu',
    'finding_prefix': 'gpu',
    'check_ids': ['gpu.compute_partition', 'gpu.memory_partition', 'gpu.power_cap', 'gpu.perf_level',
                  'gpu.determinism_clock'],
    'galaxy_tags': ['gpu', 'rocm'],
    'severity': 'medium',
    'short_description': 'AMD GPU performance determinism, power cap, compute and memory partitions (opt-in)',
    'description': [
        (
            "Performance determinism as C(rocm-smi --setperfdeterminism) sets it (rocm_smi_lib's "
            'rsmi_perf_determinism_mode_set): C(perf_determinism) to C(power_dpm_force_performance_level), '
            'then C(s 1 <MHz>) and C(c) to C(pp_od_clk_voltage). The power cap through hwmon C(power1_cap) '
            '(microwatts, within C(power1_cap_min) and C(power1_cap_max)). The compute and memory partitions '
            'of MI300-series GPUs (C(current_compute_partition), C(current_memory_partition)).'
        ),
        (
            'Everything is off by default. A partition switch is disruptive and needs '
            'C(nodetune_gpu_partition_allowed=true) too: a compute partition switch is refused while KFD '
            'processes are open (amdgpu refuses it with EBUSY; nodetune names the PIDs first), and a memory '
            'partition is a request amdgpu applies when the driver reloads, reported as C(reboot_required). '
            'Every previous value is journaled and a revert puts it back, the level before the clock.'
        ),
        (
            'amdgpu resets all of these when it loads; nodetune does not re-apply them at boot, so verify '
            'reports them after a reboot until the next apply. See docs/rocm.md, "GPU area".'
        ),
    ],
    'variables': {
        'nodetune_gpu_enabled': {
            'type': 'bool',
            'default': True,
            'description': [
                'Tune this area. When false the area is left exactly as it is.',
            ],
        },
        'nodetune_gpu_perf_determinism': {
            'type': 'bool',
            'default': False,
            'description': [
                (
                    'Put every AMD GPU in performance determinism at C(nodetune_gpu_perf_determinism_mhz) '
                    '(C(false) leaves the performance level and clocks alone).'
                ),
            ],
        },
        'nodetune_gpu_perf_determinism_mhz': {
            'type': 'int',
            'default': None,
            'description': [
                (
                    'The maximum GFX clock of performance determinism, in MHz. C(null) takes the clock AMD '
                    'validates for the model (MI300X: 1900, as its pre-training validation runs '
                    'C(rocm-smi --setperfdeterminism 1900)); other models need it set.'
                ),
                (
                    "It must lie in the GPU's GFX clock range (C(pp_od_clk_voltage)'s C(OD_RANGE), or the "
                    'levels of C(pp_dpm_sclk)): others are refused before any write, naming the range.'
                ),
            ],
        },
        'nodetune_gpu_power_cap_w': {
            'type': 'int',
            'default': None,
            'description': [
                (
                    'Power cap of every AMD GPU in watts, written to hwmon C(power1_cap) in microwatts. It '
                    "must lie within the GPU's C(power1_cap_min) and C(power1_cap_max) (750 W on MI300X), "
                    'else it is refused before any write. C(null) leaves the cap alone.'
                ),
            ],
        },
        'nodetune_gpu_compute_partition': {
            'type': 'str',
            'default': None,
            'choices': [None, 'SPX', 'DPX', 'TPX', 'QPX', 'CPX'],
            'description': [
                (
                    'Compute partition of every MI300-series GPU; it must be one the GPU lists in '
                    'C(available_compute_partition) for its memory partition. Refused while KFD processes '
                    'are open. Needs C(nodetune_gpu_partition_allowed). C(null) leaves it alone.'
                ),
            ],
        },
        'nodetune_gpu_memory_partition': {
            'type': 'str',
            'default': None,
            'choices': [None, 'NPS1', 'NPS2', 'NPS3', 'NPS4', 'NPS6', 'NPS8'],
            'description': [
                (
                    'Memory partition of every MI300-series GPU, one of C(available_memory_partition). amdgpu '
                    'takes it as a request that applies when the driver reloads: the run reports '
                    'C(reboot_required) and verify checks the current mode until then. Needs '
                    'C(nodetune_gpu_partition_allowed). C(null) leaves it alone.'
                ),
            ],
        },
        'nodetune_gpu_partition_allowed': {
            'type': 'bool',
            'default': False,
            'description': [
                (
                    'Opt-in for the disruptive part: without it a compute or memory partition that differs '
                    "from the GPU's is refused before any write, naming the GPUs and the switch."
                ),
            ],
        },
    },
}

AREA = "gpu"
VARIABLES = role_variables(ROLE, DECLARATION)
LEVEL = "power_dpm_force_performance_level"
OD_FILE = "pp_od_clk_voltage"
DPM_SCLK = "pp_dpm_sclk"
DETERMINISM = "perf_determinism"
COMPUTE = "current_compute_partition"
MEMORY = "current_memory_partition"
# amdgpu_gfx_compute_mode_desc(), nps_desc[] in amdgpu_gmc.c
COMPUTE_MODES = ("SPX", "DPX", "TPX", "QPX", "CPX")
MEMORY_MODES = ("NPS1", "NPS2", "NPS3", "NPS4", "NPS6", "NPS8")
# The determinism clock AMD validates per model, in MHz: MI300X at 1900 (AMD's pre-training validation,
# 'rocm-smi --setperfdeterminism 1900'; amd-smi's docs use the same value). Other models take an explicit clock.
DETERMINISM_MHZ = {"MI300X": 1900}
KFD_PROC = "sys/class/kfd/kfd/proc"
U32_MAX = (1 << 32) - 1  # power1_cap is parsed with kstrtou32
MICRO = 1000000


def _upper(config: Dict[str, Any], name: str) -> Dict[str, Any]:
    """amdgpu matches partition names case-insensitively (strncasecmp): so does nodetune."""
    value = config.get(name)
    return dict(config, **{name: value.upper()}) if isinstance(value, str) else config


def build(ctx: Context, config: Dict[str, Any]) -> List[Setting]:
    unknown_keys(ctx, config, VARIABLES, AREA)
    determinism = want_bool(ctx, config, "nodetune_gpu_perf_determinism", False)
    mhz = want_int(ctx, config, "nodetune_gpu_perf_determinism_mhz", 1, 0xffff)  # SetSoftMaxGfxClk: 16 bits
    cap_w = want_int(ctx, config, "nodetune_gpu_power_cap_w", 1, U32_MAX // MICRO)
    config = _upper(_upper(config, "nodetune_gpu_compute_partition"), "nodetune_gpu_memory_partition")
    compute = want_str(ctx, config, "nodetune_gpu_compute_partition", COMPUTE_MODES)
    memory = want_str(ctx, config, "nodetune_gpu_memory_partition", MEMORY_MODES)
    allowed = want_bool(ctx, config, "nodetune_gpu_partition_allowed", False)
    if mhz is not None and not determinism:
        ctx.error("nodetune_gpu_perf_determinism_mhz=%d is set but nodetune_gpu_perf_determinism is false: set "
                  "nodetune_gpu_perf_determinism: true to enter performance determinism at that clock, or leave the "
                  "clock null" % mhz)
    if not (determinism or cap_w is not None or compute or memory):
        ctx.notes.append("gpu: nothing requested (nodetune_gpu_perf_determinism is false and the power cap and "
                         "partition variables are null)")
        return []
    gpus = [g for g in ctx.topology.get("gpus") or [] if g.get("vendor") == "amd"]
    if not gpus:
        ctx.notes.append("gpu: no AMD GPU on this node; nothing to tune")
        return []
    users = kfd_users(ctx)
    settings: List[Setting] = []
    changes: List[str] = []  # the partition switches this plan makes, for the opt-in
    for gpu in gpus:
        dev = "sys/bus/pci/devices/%s/" % gpu["bdf"]
        if compute:
            settings.extend(_compute(ctx, gpu, dev, compute, users, changes))
        if memory:
            settings.extend(_memory(ctx, gpu, dev, memory, changes))
        if cap_w is not None:
            settings.extend(_power_cap(ctx, gpu, cap_w))
        if determinism:
            settings.extend(_determinism(ctx, gpu, dev, mhz))
    if changes and not allowed:
        ctx.error("gpu: %s: a partition switch is disruptive (a compute partition switch re-creates the GPU's KFD "
                  "devices, a memory partition takes effect only when amdgpu reloads): set "
                  "nodetune_gpu_partition_allowed: true to allow it" % "; ".join(changes))
    return settings


def _name(gpu: Dict[str, Any]) -> str:
    model = gpu.get("name") or gpu.get("device") or "AMD GPU"
    card = gpu.get("drm_card")
    return "%s (%s%s)" % (gpu["bdf"], "%s, " % card if card else "", model)


def _determinism(ctx: Context, gpu: Dict[str, Any], dev: str, mhz: Optional[int]) -> List[Setting]:
    model = gpu.get("name") or ""
    clock = mhz if mhz is not None else DETERMINISM_MHZ.get(model)
    if clock is None:
        ctx.error("nodetune_gpu_perf_determinism: set nodetune_gpu_perf_determinism_mhz for %s: nodetune knows the "
                  "clock AMD validates for %s only (%s)" % (_name(gpu), ", ".join(sorted(DETERMINISM_MHZ)),
                                                            ", ".join("%s: %d MHz" % kv for kv in
                                                                      sorted(DETERMINISM_MHZ.items()))))
        return []
    if not ctx.root.exists(dev + LEVEL) or not ctx.root.exists(dev + OD_FILE):
        ctx.error("nodetune_gpu_perf_determinism: %s has no %s and %s (amdgpu without power management, or a "
                  "virtual function): performance determinism cannot be set there" % (_name(gpu), LEVEL, OD_FILE))
        return []
    span = clock_range(ctx, dev)
    if span is None:
        ctx.error("nodetune_gpu_perf_determinism: the GFX clock range of %s cannot be read (no OD_RANGE in %s, no "
                  "levels in %s): nothing is written" % (_name(gpu), OD_FILE, DPM_SCLK))
        return []
    if not span[0] <= clock <= span[1]:
        ctx.error("nodetune_gpu_perf_determinism_mhz=%d is outside the GFX clock range of %s: valid values are %d to "
                  "%d MHz (amdgpu refuses others with EINVAL)" % (clock, _name(gpu), span[0], span[1]))
        return []
    why = "%d MHz%s, as 'rocm-smi --setperfdeterminism %d' sets it" % (
        clock, "" if mhz is not None else " (AMD's validated clock for %s)" % model, clock)
    return [
        Setting("gpu.perf_level", gpu["bdf"], dev + LEVEL, DETERMINISM, compare=EXACT, area=AREA, runtime=False,
                reason="performance determinism at " + why),
        Setting("gpu.determinism_clock", gpu["bdf"], dev + OD_FILE, "s 1 %d" % clock, compare=OD_CLOCK, area=AREA,
                runtime=False, after=(dev + LEVEL,),
                reason="maximum GFX clock of performance determinism, committed ('c') after the level: " + why),
    ]


def clock_range(ctx: Context, dev: str) -> Optional[Tuple[int, int]]:
    """The GFX clock range amdgpu takes for the determinism clock: OD_RANGE's SCLK line where the driver prints one,
    else the lowest and highest level of pp_dpm_sclk (the GFX DPM table, which bounds it in
    smu_v13_0_6_set_soft_freq_limited_range; MI300X and MI250 print no OD_RANGE)."""
    span = od_range(ctx.root.read(dev + OD_FILE, strip=False))
    if span is not None:
        return span
    levels = clock_levels(ctx.root.read(dev + DPM_SCLK, strip=False))
    if not levels:
        return None
    return min(levels)[1], max(levels)[1]


def _power_cap(ctx: Context, gpu: Dict[str, Any], watts: int) -> List[Setting]:
    hwmon = gpu.get("hwmon")
    path = "%s/power1_cap" % hwmon if hwmon else None
    if path is None or not ctx.root.exists(path):
        ctx.error("nodetune_gpu_power_cap_w=%d: %s has no hwmon power1_cap: its power cap cannot be set"
                  % (watts, _name(gpu)))
        return []
    high = ctx.root.read_int("%s/power1_cap_max" % hwmon)
    low = ctx.root.read_int("%s/power1_cap_min" % hwmon, 0) or 0
    if high == 0:
        # aldebaran (MI250): the package's limit is the primary die's; the other die shows 0 and refuses a write
        ctx.notes.append("gpu: %s shows a power1_cap_max of 0 (the second die of an MI250 package, whose cap is its "
                         "primary die's): power cap not set there" % _name(gpu))
        return []
    value = watts * MICRO
    if high is None or not low <= value <= high:
        ctx.error("nodetune_gpu_power_cap_w=%d is outside what %s takes: valid values are %s to %s W "
                  "(power1_cap_min and power1_cap_max; amdgpu refuses others with EINVAL)"
                  % (watts, _name(gpu), _watts(low, up=True), "?" if high is None else _watts(high)))
        return []
    return [Setting("gpu.power_cap", gpu["bdf"], path, str(value), compare=INT, area=AREA, runtime=False,
                    reason="power cap %d W (power1_cap in microwatts, %s to %s W)"
                    % (watts, _watts(low, up=True), _watts(high)))]


def _watts(microwatts: int, up: bool = False) -> str:
    """Whole watts amdgpu can hold within a microwatt bound (it truncates to watts)."""
    return str(-(-microwatts // MICRO) if up else microwatts // MICRO)


def _modes(text: Optional[str]) -> List[str]:
    """``"SPX, DPX, QPX, CPX"`` (available_*_partition) -> the modes; ``"Not supported"`` -> []."""
    modes = [word.strip().upper() for word in (text or "").replace(",", " ").split()]
    return [m for m in modes if m in COMPUTE_MODES + MEMORY_MODES]


def _compute(ctx: Context, gpu: Dict[str, Any], dev: str, mode: str, users: Dict[int, List[str]],
             changes: List[str]) -> List[Setting]:
    name = "nodetune_gpu_compute_partition"
    current = ctx.root.read(dev + COMPUTE)
    if current is None:
        ctx.error("%s=%s: %s has no %s: amdgpu offers compute partitions on MI300-series GPUs only"
                  % (name, mode, _name(gpu), COMPUTE))
        return []
    available = _modes(ctx.root.read(dev + "available_compute_partition"))
    if mode not in available:
        ctx.error("%s=%s is not available on %s: it offers %s in its current memory partition "
                  "(available_compute_partition; amdgpu refuses others with EINVAL)"
                  % (name, mode, _name(gpu), ", ".join(available) or "none"))
        return []
    if current.upper() != mode:
        changes.append("%s %s -> %s" % (gpu["bdf"], current, mode))
        ids = set(str(i) for i in gpu.get("gpu_ids") or [])
        if users:
            shown = ", ".join("%d%s" % (pid, " (uses this GPU)" if ids.intersection(gpus) else "")
                              for pid, gpus in sorted(users.items()))
            ctx.error("%s=%s cannot be applied to %s while KFD processes are open: pid %s. amdgpu refuses a compute "
                      "partition switch with EBUSY while any KFD process exists (kgd2kfd_check_and_lock_kfd): stop "
                      "them and run again" % (name, mode, _name(gpu), shown))
            return []
    return [Setting("gpu.compute_partition", gpu["bdf"], dev + COMPUTE, mode, compare=EXACT, area=AREA,
                    runtime=False, disruptive=True,
                    reason="compute partition %s: amdgpu re-creates the GPU's KFD devices (%s of them); ranks are "
                           "planned from them at the next run" % (mode, _partitions(mode)))]


def _partitions(mode: str) -> str:
    return {"SPX": "one", "DPX": "two", "TPX": "three", "QPX": "four", "CPX": "one per XCD"}.get(mode, "some")


def _memory(ctx: Context, gpu: Dict[str, Any], dev: str, mode: str, changes: List[str]) -> List[Setting]:
    name = "nodetune_gpu_memory_partition"
    current = ctx.root.read(dev + MEMORY)
    if current is None:
        ctx.error("%s=%s: %s has no %s: amdgpu offers memory partitions on MI300-series GPUs only"
                  % (name, mode, _name(gpu), MEMORY))
        return []
    current = current.upper()
    if not ctx.root.exists(dev + "available_memory_partition"):
        if current != mode:
            ctx.error("%s=%s: %s supports %s only (amdgpu makes %s read-only and shows no "
                      "available_memory_partition where one mode is supported)"
                      % (name, mode, _name(gpu), current, MEMORY))
            return []
    else:
        available = _modes(ctx.root.read(dev + "available_memory_partition"))
        if mode not in available:
            ctx.error("%s=%s is not supported by %s: it supports %s (available_memory_partition; amdgpu refuses "
                      "others with EINVAL)" % (name, mode, _name(gpu), ", ".join(available) or "none"))
            return []
    value = mode
    reason = "memory partition %s" % mode
    record = ctx.effective_records().get("gpu.memory_partition[%s]" % gpu["bdf"]) or {}
    earlier = str(record.get("requested") or "").upper()
    if current == mode and earlier not in ("", mode) and str(record.get("effective")).upper() == current:
        ctx.warn("gpu: %s: memory partition %s, requested by an earlier run, is still pending in amdgpu and applies "
                 "at the next driver reload: amdgpu skips a write of the current mode (%s), so it cannot be "
                 "withdrawn; after the reload nodetune asks for %s again" % (_name(gpu), earlier, current, mode))
    if current != mode:
        if earlier == mode and str(record.get("effective")).upper() == current:
            # written by an earlier run: amdgpu holds the request until it reloads, and the file shows the current
            # mode meanwhile; verified at that mode so that every run does not write the request again
            value = current
            reason += " requested, pending: amdgpu applies it when the driver reloads (reboot); verified at %s " \
                      "until then" % current
            ctx.warn("gpu: %s: memory partition %s was requested by an earlier run and takes effect when amdgpu "
                     "reloads (reboot); the GPU is in %s until then" % (_name(gpu), mode, current))
        else:
            changes.append("%s %s -> %s (at the next driver reload)" % (gpu["bdf"], current, mode))
            reason += ": written as a request, which amdgpu applies when the driver reloads (reboot)"
            ctx.warn("gpu: %s: memory partition %s is a request amdgpu applies when the driver reloads (reboot); "
                     "until then a revert cannot withdraw it (amdgpu skips a write of the current mode, "
                     "current_memory_partition_store): revert after the reload to go back to %s"
                     % (_name(gpu), mode, current))
    # effective_ok: while the request is pending the checker expects the mode amdgpu shows, from the first apply on
    return [Setting("gpu.memory_partition", gpu["bdf"], dev + MEMORY, value, compare=EXACT, area=AREA,
                    runtime=False, disruptive=True, reboot_required=value != current, reason=reason,
                    effective_ok=True)]


def kfd_users(ctx: Context) -> Dict[int, List[str]]:
    """KFD processes: pid -> the KFD gpu_ids it has opened (its ``vram_<gpu_id>`` files,
    kfd_process.c: kfd_procfs_add_sysfs_files)."""
    users: Dict[int, List[str]] = {}
    for entry in ctx.root.listdir(KFD_PROC):
        pid = parse_int(entry)
        if pid is None or not ctx.root.isdir("%s/%s" % (KFD_PROC, entry)):
            continue
        users[pid] = sorted(name[len("vram_"):] for name in ctx.root.listdir("%s/%s" % (KFD_PROC, entry))
                            if name.startswith("vram_"))
    return users


def takes_over(areas: Optional[Dict[str, Any]], check: str) -> Optional[str]:
    """Why health.gpu_perf_level (``check`` perf_level) or health.gpu_power_cap (power_cap) is this area's to check
    on this run, or None: where the area sets the level or the cap, its Settings are the expectation, checked by its
    own findings, so that verify holds one expectation per file."""
    config = (areas or {}).get(AREA)
    if not isinstance(config, dict) or config.get("nodetune_%s_enabled" % AREA, True) is False:
        return None
    if check == "perf_level" and config.get("nodetune_gpu_perf_determinism") is True:
        return ("the gpu area is on: gpu.perf_level and gpu.determinism_clock check %s (perf_determinism) and the "
                "clock, against the Settings apply writes" % LEVEL)
    if check == "power_cap" and config.get("nodetune_gpu_power_cap_w") is not None:
        return ("the gpu area is on: gpu.power_cap checks power1_cap against nodetune_gpu_power_cap_w, the Setting "
                "apply writes")
    return None


__all__ = ["build", "clock_range", "kfd_users", "takes_over"]
