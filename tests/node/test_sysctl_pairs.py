"""The writeback pairs on the simulated kernel: revert restores the form that was in use, and nodetune leaves a pair
alone where a site's sysctl.d file sets the other form after nodetune's (issue 24 item 3, follow-up).

mm/page-writeback.c: writing one form zeroes the other (dirty_ratio_handler()/dirty_bytes_handler() when the value
changes, the background handlers always), and a bytes form refuses 0 (EINVAL: below dirty_bytes_min, two pages, or
below 1 for vm.dirty_background_bytes). The simulated kernel (simkernel.dirty_write) answers the same way.
"""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.apply import engine, node
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import verify
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.finding import OK
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import Setting
from ansible_collections.nodetune.lab.plugins.module_utils import simnode

from tests.support.specs import small_spec

pytestmark = pytest.mark.usefixtures("simulated_kernel")

GIB = 1 << 30
KEYS = ("dirty_ratio", "dirty_bytes", "dirty_background_ratio", "dirty_background_bytes")
RATIOS = {"nodetune_vm_dirty_ratio": 20, "nodetune_vm_dirty_background_ratio": 10}
BYTES = {"nodetune_vm_dirty_ratio": None, "nodetune_vm_dirty_background_ratio": None,
         "nodetune_vm_dirty_bytes": 32 * GIB, "nodetune_vm_dirty_background_bytes": 4 * GIB}
SITE = "etc/sysctl.d/99-site.conf"


def pairs(root: Path) -> tuple[str, ...]:
    """vm.dirty_ratio, vm.dirty_bytes, vm.dirty_background_ratio, vm.dirty_background_bytes as the kernel shows them."""
    return tuple((root / "proc/sys/vm" / key).read_text().strip() for key in KEYS)


def built(tmp_path: Path, **spec: object) -> Path:
    root = tmp_path / "node"
    simnode.build(small_spec(**spec), str(root))
    return root


def apply(root: Path, variables: dict) -> dict:
    state = node.load(str(root), {"sysctl": variables})
    return engine.apply(state.root, state.settings, services=state.services)


def runtime_findings(root: Path, variables: dict) -> list:
    """verify of the runtime sysctls alone (revert removes nodetune's files, so their checks would drift)."""
    state = node.load(str(root), {"sysctl": variables}, persist=False)
    return [f for f in verify.verify_settings(state, {"sysctl": variables}) if f.id.startswith("sysctl.vm.dirty")]


# ------------------------------------------------------------------------------------------ revert (defect 1)
def test_revert_of_the_bytes_form_writes_the_ratios_back(tmp_path: Path) -> None:
    """Before: revert wrote vm.dirty_bytes=0 back, which the kernel refuses (EINVAL), and never the ratio."""
    root = built(tmp_path)
    assert pairs(root) == ("20", "0", "10", "0")
    assert apply(root, BYTES)["changed"]
    assert pairs(root) == ("0", str(32 * GIB), "0", str(4 * GIB))
    state = node.load(str(root), {"sysctl": BYTES})
    # check mode shows both forms of each pair coming back, and writes nothing
    plan = engine.revert(state.root, check_mode=True)
    shown = dict((c["key"], (c["before"], c["after"])) for c in plan["changes"] if c["key"].startswith("proc/sys/vm"))
    assert shown == {"proc/sys/vm/dirty_ratio": ("0", "20"), "proc/sys/vm/dirty_bytes": (str(32 * GIB), "0"),
                     "proc/sys/vm/dirty_background_ratio": ("0", "10"),
                     "proc/sys/vm/dirty_background_bytes": (str(4 * GIB), "0")}
    assert pairs(root) == ("0", str(32 * GIB), "0", str(4 * GIB))
    engine.revert(state.root)
    assert pairs(root) == ("20", "0", "10", "0")
    assert not (root / engine.JOURNAL).exists()
    found = runtime_findings(root, RATIOS)
    assert found and all(f.status == OK for f in found), [(f.id, f.actual) for f in found]


def test_revert_of_the_ratio_form_brings_back_a_sites_bytes(tmp_path: Path) -> None:
    """The converse: a site's bytes form, set by a file read before nodetune's (so nodetune's ratio wins at boot),
    and the ratios applied over it; revert writes the bytes back, which zeroes the ratios."""
    root = built(tmp_path, sysctl={"vm.dirty_bytes": 32 * GIB, "vm.dirty_background_bytes": 4 * GIB})
    (root / "etc/sysctl.d/10-site.conf").write_text(
        f"vm.dirty_bytes = {32 * GIB}\nvm.dirty_background_bytes = {4 * GIB}\n")
    site = ("0", str(32 * GIB), "0", str(4 * GIB))
    assert pairs(root) == site
    assert apply(root, RATIOS)["changed"]
    assert pairs(root) == ("20", "0", "10", "0")
    state = node.load(str(root), {"sysctl": RATIOS})
    plan = engine.revert(state.root, check_mode=True)
    assert {"proc/sys/vm/dirty_bytes", "proc/sys/vm/dirty_ratio"} <= set(plan["restored"])
    engine.revert(state.root)
    assert pairs(root) == site
    found = runtime_findings(root, BYTES)
    assert found and all(f.status == OK for f in found), [(f.id, f.actual) for f in found]


def test_a_failed_apply_rolls_the_pair_back_too(tmp_path: Path) -> None:
    """The rollback of a run that fails after writing vm.dirty_bytes restores the ratio the same way."""
    root = built(tmp_path)
    state = node.load(str(root), {"sysctl": {"nodetune_vm_dirty_ratio": None, "nodetune_vm_dirty_bytes": GIB}})

    def fault(setting: Setting) -> None:
        if setting.id == "persist.sysctl_d":
            raise OSError(errno.EIO, "injected")

    with pytest.raises(engine.ApplyError) as caught:
        engine.apply(state.root, state.settings, services=state.services, fault=fault)
    assert caught.value.rollback_errors == [] and "could NOT restore" not in str(caught.value)
    assert pairs(root) == ("20", "0", "10", "0")


def test_a_journal_without_the_other_form_says_what_to_do(tmp_path: Path) -> None:
    """A journal of an earlier nodetune holds only vm.dirty_bytes=0: the ratio it zeroed is unknown. Revert says so,
    keeps the journal, and goes through once the operator has set the ratio."""
    root = built(tmp_path)
    apply(root, {"nodetune_vm_dirty_ratio": None, "nodetune_vm_dirty_bytes": GIB})
    journal = json.loads((root / engine.JOURNAL).read_text())
    journal["baseline"].pop("proc/sys/vm/dirty_ratio", None)  # (the earlier engine did not journal it)
    (root / engine.JOURNAL).write_text(json.dumps(journal))
    state = node.load(str(root), {})
    with pytest.raises(engine.ApplyError) as caught:
        engine.revert(state.root)
    text = str(caught.value)
    assert "vm.dirty_ratio/vm.dirty_bytes is 0/1073741824, not unknown/0" in text
    assert "refuses vm.dirty_bytes=0 (below 8192" in text and "set vm.dirty_ratio to the node's own value" in text
    assert (root / engine.JOURNAL).exists()
    state.root.write("proc/sys/vm/dirty_ratio", "20")
    engine.revert(state.root)
    assert pairs(root) == ("20", "0", "10", "0") and not (root / engine.JOURNAL).exists()


def test_both_forms_at_zero_come_back_where_the_kernel_lets_them(tmp_path: Path) -> None:
    """Ratio and bytes both 0 before nodetune: dirty_background_ratio_handler() zeroes the background bytes on every
    write, so that pair comes back; dirty_ratio_handler() zeroes vm.dirty_bytes only when the ratio changes, so revert
    says how to get there and keeps the journal."""
    root = built(tmp_path, sysctl={"vm.dirty_ratio": 0, "vm.dirty_background_ratio": 0})
    assert pairs(root) == ("0", "0", "0", "0")
    apply(root, {**BYTES, "nodetune_vm_dirty_bytes": GIB, "nodetune_vm_dirty_background_bytes": GIB // 4})
    assert pairs(root) == ("0", str(GIB), "0", str(GIB // 4))
    state = node.load(str(root), {})
    with pytest.raises(engine.ApplyError) as caught:
        engine.revert(state.root)
    text = str(caught.value)
    assert text.count("vm.dirty_ratio/vm.dirty_bytes is 0/1073741824, not 0/0") == 1, text
    assert "write another vm.dirty_ratio, then 0" in text and "dirty_background" not in text
    assert pairs(root) == ("0", str(GIB), "0", "0")
    state.root.write("proc/sys/vm/dirty_ratio", "1")
    state.root.write("proc/sys/vm/dirty_ratio", "0")
    engine.revert(state.root)
    assert pairs(root) == ("0", "0", "0", "0") and not (root / engine.JOURNAL).exists()


# ------------------------------------------------------------------------------------------ a site's form (defect 2)
def test_a_later_site_file_with_the_bytes_form_keeps_its_pair(tmp_path: Path) -> None:
    """Before: the default ratio 20 zeroed the site's bytes at each apply, the site's 99-site.conf zeroed the ratio
    at each boot, and verify drifted in between."""
    root = built(tmp_path, sysctl={"vm.dirty_bytes": 32 * GIB})
    (root / SITE).write_text(f"vm.dirty_bytes = {32 * GIB}\n")
    site = ("0", str(32 * GIB), "10", "0")
    assert pairs(root) == site
    state = node.load(str(root), {"sysctl": RATIOS})
    assert not [s for s in state.settings if s.target in ("vm.dirty_ratio", "vm.dirty_bytes")]
    assert any(s.target == "vm.dirty_background_ratio" for s in state.settings)  # no site line: still nodetune's
    warned = [w for w in state.context.warnings if "nodetune leaves vm.dirty_ratio/vm.dirty_bytes" in w]
    assert len(warned) == 1
    assert f"/{SITE} sets vm.dirty_bytes={32 * GIB}" in warned[0]
    assert "set nodetune_vm_dirty_bytes (and nodetune_vm_dirty_ratio: null)" in warned[0]
    assert f"or remove that line from /{SITE}" in warned[0]
    engine.apply(state.root, state.settings, services=state.services)
    assert pairs(root) == site
    conf = (root / "etc/sysctl.d/90-nodetune-sysctl.conf").read_text()
    assert "vm.dirty_ratio" not in conf and "vm.dirty_bytes" not in conf and "vm.dirty_background_ratio = 10" in conf
    state = node.load(str(root), {"sysctl": RATIOS})
    findings = verify.verify_settings(state, {"sysctl": RATIOS})
    assert [(f.id, f.target, f.actual) for f in findings if f.status != OK] == []
    simnode.reboot(str(root))
    assert pairs(root) == site
    assert apply(root, RATIOS)["changed"] is False


def test_the_bytes_variable_still_applies_beside_the_sites_file(tmp_path: Path) -> None:
    """The form the site's file uses, set explicitly, is nodetune's to write (the site's own value then decides the
    boot, which persist.sysctl_boot reports as for any key)."""
    root = built(tmp_path, sysctl={"vm.dirty_bytes": 32 * GIB})
    (root / SITE).write_text(f"vm.dirty_bytes = {32 * GIB}\n")
    variables = {"nodetune_vm_dirty_ratio": None, "nodetune_vm_dirty_bytes": 16 * GIB}
    state = node.load(str(root), {"sysctl": variables})
    assert [s.value for s in state.settings if s.target == "vm.dirty_bytes"] == [str(16 * GIB)]
    assert not [w for w in state.context.warnings if "nodetune leaves" in w]
    engine.apply(state.root, state.settings, services=state.services)
    assert pairs(root)[:2] == ("0", str(16 * GIB))


def test_an_earlier_site_file_loses_to_nodetunes_ratio(tmp_path: Path) -> None:
    """The same line in a file read before nodetune's: nodetune's ratio, written after it, wins at boot too."""
    root = built(tmp_path, sysctl={"vm.dirty_bytes": 32 * GIB})
    (root / "etc/sysctl.d/10-site.conf").write_text(f"vm.dirty_bytes = {32 * GIB}\n")
    assert apply(root, RATIOS)["changed"]
    assert pairs(root)[:2] == ("20", "0")
    simnode.reboot(str(root))
    assert pairs(root)[:2] == ("20", "0")
    assert apply(root, RATIOS)["changed"] is False
