"""The apply engine on a small hand-made tree: check mode, journal, rollback, revert, lock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.apply import engine
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import (
    CHOICE,
    FILE,
    INT,
    LINE,
    SERVICE,
    Setting,
    SettingError,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import InvalidValueError, Root
from ansible_collections.nodetune.lab.plugins.module_utils.simservices import SimServices

from tests.support.trees import tree_digest


@pytest.fixture
def node(tmp_path: Path) -> Path:
    q = tmp_path / "sys/block/nvme0n1/queue"
    q.mkdir(parents=True)
    (q / "scheduler").write_text("[none] mq-deadline kyber\n")
    (q / "nr_requests").write_text("1023\n")
    vm = tmp_path / "proc/sys/vm"
    vm.mkdir(parents=True)
    (vm / "dirty_ratio").write_text("20\n")
    (tmp_path / "etc/default").mkdir(parents=True)
    (tmp_path / "etc/default/irqbalance").write_text("# irqbalance\nIRQBALANCE_ONESHOT=0\n")
    return tmp_path


def settings() -> list[Setting]:
    return [
        Setting("nvme.scheduler", "nvme0n1", "sys/block/nvme0n1/queue/scheduler", "mq-deadline", compare=CHOICE),
        Setting("nvme.nr_requests", "nvme0n1", "sys/block/nvme0n1/queue/nr_requests", "512", compare=INT),
        Setting("sysctl.vm.dirty_ratio", "vm.dirty_ratio", "proc/sys/vm/dirty_ratio", "40", compare=INT),
        Setting("persist.sysctl_d", "sysctl.d", "etc/sysctl.d/90-nodetune.conf", "vm.dirty_ratio = 40\n", kind=FILE,
                compare="content"),
        Setting("irq.irqbalance", "IRQBALANCE_BANNED_CPULIST", "etc/default/irqbalance", "0-3", kind=LINE,
                key="IRQBALANCE_BANNED_CPULIST"),
    ]


def test_check_mode_plans_and_writes_nothing(node: Path) -> None:
    before = tree_digest(node)
    result = engine.apply(Root(str(node)), settings(), check_mode=True)
    assert result["changed"] is True
    assert [a["id"] for a in result["actions"]] == [
        "nvme.scheduler", "nvme.nr_requests", "irq.irqbalance", "sysctl.vm.dirty_ratio", "persist.sysctl_d"]
    assert "nvme.scheduler[nvme0n1] /sys/block/nvme0n1/queue/scheduler = none" in result["diff"]["before"]
    assert tree_digest(node) == before


def test_apply_is_idempotent_and_journals_the_first_baseline(node: Path) -> None:
    root = Root(str(node))
    first = engine.apply(root, settings())
    assert first["changed"] and first["unconfirmed"] == []
    assert (node / "proc/sys/vm/dirty_ratio").read_text() == "40"
    assert "IRQBALANCE_BANNED_CPULIST=\"0-3\"" in (node / "etc/default/irqbalance").read_text()
    assert engine.apply(root, settings())["changed"] is False
    journal_path = node / engine.JOURNAL
    assert journal_path.stat().st_mode & 0o777 == 0o600
    # A second, different run keeps the very first baseline.
    again = settings()
    again[2] = Setting("sysctl.vm.dirty_ratio", "vm.dirty_ratio", "proc/sys/vm/dirty_ratio", "30", compare=INT)
    assert engine.apply(root, again)["changed"] is True
    journal = json.loads(journal_path.read_text())
    assert journal["baseline"]["proc/sys/vm/dirty_ratio"]["restore"] == "20"
    assert len(journal["runs"]) == 2


def test_revert_restores_the_tree_byte_identical(node: Path) -> None:
    # Plain files (not a simulated kernel): write the raw baseline forms back.
    (node / "sys/block/nvme0n1/queue/scheduler").write_text("none\n")
    before = tree_digest(node)
    root = Root(str(node))
    engine.apply(root, settings())
    assert tree_digest(node) != before
    result = engine.revert(root)
    assert result["changed"] is True
    after = tree_digest(node)
    # the plain-file tree gets values without trailing newline back: compare contents modulo that
    assert set(after) == set(before)
    for rel in before:
        if before[rel] != after[rel]:
            assert (node / rel).read_text().strip() == {
                "proc/sys/vm/dirty_ratio": "20", "sys/block/nvme0n1/queue/nr_requests": "1023",
                "sys/block/nvme0n1/queue/scheduler": "none"}[rel]
    assert not (node / "var").exists()
    assert engine.revert(root)["changed"] is False


def test_failed_write_rolls_back_this_run_and_names_the_setting(node: Path) -> None:
    before = tree_digest(node)

    def fault(setting: Setting) -> None:
        if setting.id == "sysctl.vm.dirty_ratio":
            raise InvalidValueError("writing failed: EIO (injected)", setting.path, 5)

    with pytest.raises(engine.ApplyError) as info:
        engine.apply(Root(str(node)), settings(), fault=fault)
    assert "sysctl.vm.dirty_ratio[vm.dirty_ratio]" in str(info.value)
    # restored in apply order: the scheduler before nr_requests (switching it back resets nr_requests)
    assert info.value.rolled_back == ["nvme.scheduler[nvme0n1]", "nvme.nr_requests[nvme0n1]",
                                      "irq.irqbalance[IRQBALANCE_BANNED_CPULIST]"]
    after = tree_digest(node)
    # scheduler came back as the active token (a plain file has no kernel to re-render the bracket list)
    changed = {k for k in before if before[k] != after.get(k)}
    assert changed <= {"sys/block/nvme0n1/queue/scheduler", "sys/block/nvme0n1/queue/nr_requests"}
    assert (node / "sys/block/nvme0n1/queue/scheduler").read_text().strip() == "none"
    assert (node / "sys/block/nvme0n1/queue/nr_requests").read_text().strip() == "1023"
    assert set(after) == set(before), "journal, lock and state dirs of a failed first run are removed"


def test_missing_attribute_and_conflicts_are_refused_before_any_write(node: Path) -> None:
    before = tree_digest(node)
    bad = settings() + [Setting("nvme.nr_queues", "nvme0n1", "sys/block/nvme0n1/queue/nr_queues", "32")]
    with pytest.raises(SettingError) as info:
        engine.apply(Root(str(node)), bad)
    assert "/sys/block/nvme0n1/queue/nr_queues does not exist" in str(info.value)
    clash = settings() + [Setting("sysctl.vm.dirty_ratio", "again", "proc/sys/vm/dirty_ratio", "10")]
    with pytest.raises(SettingError, match="both set"):
        engine.apply(Root(str(node)), clash)
    with pytest.raises(SettingError, match="ids look like"):
        engine.apply(Root(str(node)), [Setting("Bad Id", "x", "proc/sys/vm/dirty_ratio", "1")])
    assert tree_digest(node) == before


def test_service_settings_on_a_simulated_service_manager(node: Path) -> None:
    (node / "lib/systemd/system").mkdir(parents=True)
    (node / "lib/systemd/system/irqbalance.service").write_text("[Unit]\n")
    services = SimServices(Root(str(node)))
    services.set_state("irqbalance.service", {"enabled": "yes", "active": "yes"})
    before = tree_digest(node)
    stop = [Setting("irq.irqbalance", "irqbalance.service", "", "active=no,enabled=no", kind=SERVICE)]
    root = Root(str(node))
    result = engine.apply(root, stop, services=services)
    assert result["actions"][0]["before"] == "active=yes,enabled=yes"
    assert services.state("irqbalance.service") == {"enabled": "no", "active": "no"}
    assert engine.apply(root, stop, services=services)["changed"] is False
    engine.revert(root, services=services)
    assert tree_digest(node) == before


def test_a_unit_is_enabled_after_its_file_is_written(node: Path) -> None:
    """The enable names the unit file in ``after``: written first although "nodetune-restore.service" sorts before
    "unit" (the first real apply enabled first, systemctl said the unit does not exist, and all rolled back)."""
    from ansible_collections.nodetune.instinct.plugins.module_utils.areas.persist import (
        UNIT,
        UNIT_FILE,
        UNIT_TEXT,
    )

    root = Root(str(node))
    services = SimServices(root)
    enable = Setting("persist.boot_restore", UNIT, "", "enabled=yes", kind=SERVICE, after=(UNIT_FILE,))
    unit = Setting("persist.boot_restore", "unit", UNIT_FILE, UNIT_TEXT, kind=FILE, compare="content")
    planned = [a.setting.target for a in engine.plan_actions(root, [enable, unit], services)]
    assert planned == ["unit", UNIT]
    engine.apply(root, [enable, unit], services=services)
    assert services.state(UNIT)["enabled"] == "yes" and (node / UNIT_FILE).is_file()


def test_the_simulated_systemd_refuses_to_enable_a_unit_without_its_file(node: Path) -> None:
    """As systemctl 252 does (seen with `systemctl --root=DIR enable foo.service`: exit 1, "Failed to enable unit,
    unit foo.service does not exist."); the simulator used to link it anyway, so no test saw the order above."""
    services = SimServices(Root(str(node)))
    with pytest.raises(OSError, match="does not exist"):
        services.set_state("nodetune-restore.service", {"enabled": "yes"})
    assert not (node / "etc/systemd/system/multi-user.target.wants").exists()


def test_a_cycle_of_after_is_refused_before_any_write(node: Path) -> None:
    first = Setting("persist.sysctl_d", "a", "etc/a.conf", "a\n", kind=FILE, compare="content", after=("etc/b.conf",))
    second = Setting("persist.sysctl_d", "b", "etc/b.conf", "b\n", kind=FILE, compare="content", after=("etc/a.conf",))
    with pytest.raises(SettingError, match="cycle"):
        engine.apply(Root(str(node)), [first, second])
    assert not (node / "etc/a.conf").exists() and not (node / "etc/b.conf").exists()


def test_lock_serialises_runs(node: Path) -> None:
    root = Root(str(node))
    with engine.NodeLock(root), pytest.raises(engine.LockedError, match="another nodetune run"), \
            engine.NodeLock(root, timeout=0.2):
        pass


def test_a_journal_is_validated_once_per_text_and_a_changed_one_again(tmp_path: Path, monkeypatch) -> None:
    """node.load and apply read the same journal in one run: its text is validated once (plan/journal.py). A text
    that differs from the last one that validated is validated again, and refused where it is not valid."""
    from ansible_collections.nodetune.instinct.plugins.module_utils.plan import journal

    checked: list[object] = []
    validate = journal.journal_problems
    monkeypatch.setattr(journal, "journal_problems", lambda data: checked.append(data) or validate(data))
    path = tmp_path / journal.JOURNAL
    path.parent.mkdir(parents=True)
    good = dict(journal.empty_journal(), baseline={"proc/sys/vm/dirty_ratio": {"kind": "attr", "restore": "20"}})
    path.write_text(json.dumps(good))
    root = Root(str(tmp_path))
    assert journal.load_journal(root) == good and journal.load_journal(root) == good
    assert len(checked) == 1
    path.write_text(json.dumps(dict(good, baseline={"proc/sys/vm/dirty_ratio": {"kind": "attr"}})))
    with pytest.raises(journal.JournalError, match="has no 'restore'"):
        journal.load_journal(root)
    with pytest.raises(journal.JournalError, match="has no 'restore'"):  # not remembered as valid
        journal.load_journal(root)
    assert len(checked) == 3
