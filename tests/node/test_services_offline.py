"""Services where systemd is not running (a container, a chroot, an image build): systemctl answers as systemctl 252
does on a machine whose PID 1 is not systemd. Only unit files change there (enabled and disabled offline with
``--root``); nothing is reloaded, started or stopped, and a revert tries every entry and counts the ones it restored."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.apply import engine
from ansible_collections.nodetune.instinct.plugins.module_utils.areas.persist import (
    SCRIPT_FILE,
    UNIT,
    UNIT_FILE,
    UNIT_TEXT,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.plan import services
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import FILE, INT, SERVICE, Setting
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root

from tests.support.trees import tree_digest

# systemctl 252 without systemd as PID 1, word for word
NOT_BOOTED = ("System has not been booted with systemd as init system (PID 1). Can't operate.\n"
              "Failed to connect to bus: Host is down\n")
BUS_VERBS = ("daemon-reload", "start", "stop", "is-active", "restart")


class Systemctl252:
    """A fake ``run_command`` for systemctl over the unit files under ``root``, the stand-in for the node's ``/``.

    Not booted (no ``run/systemd/system``): the bus verbs fail with systemctl's message, and enable, disable and
    is-enabled act on the unit files offline, with or without ``--root`` (systemctl does them client-side when not
    booted). Booted: every verb works, except the ones named in ``failing``."""

    def __init__(self, root: Path, failing: dict[str, str] | None = None) -> None:
        self.root = root
        self.failing = failing or {}
        self.calls: list[list[str]] = []
        self.active: set[str] = set()

    def __call__(self, argv: list[str]) -> tuple[int, str, str]:
        self.calls.append(list(argv))
        args = list(argv[1:])
        with_root = args[0].startswith("--root=")
        if with_root:
            assert args.pop(0) == f"--root={self.root}"
        verb, unit = args[0], args[-1]
        booted = (self.root / "run/systemd/system").is_dir()
        if verb in BUS_VERBS and with_root:
            return 1, "", f"Verb '{verb}' cannot be used with --root= or --image=.\n"
        if verb in BUS_VERBS and not booted:
            return 1, "", NOT_BOOTED
        if verb in self.failing:
            return 1, "", self.failing[verb]
        unit_file = self.root / "etc/systemd/system" / unit
        link = self.root / services.WANTS / unit
        if verb == "is-active":
            return (0, "active\n", "") if unit in self.active else (3, "inactive\n", "")
        if verb in ("start", "stop"):
            (self.active.add if verb == "start" else self.active.discard)(unit)
            return 0, "", ""
        if verb == "daemon-reload":
            return 0, "", ""
        if verb == "is-enabled":
            if link.is_symlink():
                return 0, "enabled\n", ""
            if unit_file.is_file():
                return 1, "disabled\n", ""
            return 1, "", f"Failed to get unit file state for {unit}: No such file or directory\n"
        if verb == "list-unit-files":
            return (0, f"{unit} disabled enabled\n", "") if unit_file.is_file() else (1, "", "")
        if verb == "enable":
            if not unit_file.is_file():
                return 1, "", f"Failed to enable unit, unit {unit} does not exist.\n"
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.is_symlink():
                link.symlink_to("/etc/systemd/system/" + unit)
            return 0, "", f"Created symlink {link} \u2192 /etc/systemd/system/{unit}.\n"
        if verb == "disable":
            said = "" if unit_file.is_file() else f"Failed to disable unit, unit {unit} does not exist.\n"
            if link.is_symlink():
                link.unlink()
                said += f'Removed "{link}".\n'
            return 0, "", said
        raise AssertionError(f"unexpected systemctl call {argv}")

    def verbs(self) -> set[str]:
        return {next(a for a in call[1:] if not a.startswith("--")) for call in self.calls}


def host_services(root: Path, systemctl: Systemctl252) -> object:
    """The service manager nodetune picks for a real node, with ``root`` standing for its ``/``."""
    return services.for_root(SimpleNamespace(backend=None, is_host=True, path=str(root)), systemctl)


@pytest.fixture
def node(tmp_path: Path) -> Path:
    (tmp_path / "proc/sys/vm").mkdir(parents=True)
    (tmp_path / "proc/sys/vm/dirty_ratio").write_text("20")
    (tmp_path / services.WANTS).mkdir(parents=True)  # as on every systemd machine
    return tmp_path


def boot_restore() -> list[Setting]:
    """What the persist area plans for the boot-time restore, with one runtime setting."""
    return [
        Setting("sysctl.vm.dirty_ratio", "vm.dirty_ratio", "proc/sys/vm/dirty_ratio", "40", compare=INT),
        Setting("persist.boot_restore", "script", SCRIPT_FILE, "#!/usr/bin/python3\n", kind=FILE, compare="content",
                mode=0o755),
        Setting("persist.boot_restore", "unit", UNIT_FILE, UNIT_TEXT, kind=FILE, compare="content"),
        Setting("persist.boot_restore", UNIT, "", "enabled=yes", kind=SERVICE, after=(UNIT_FILE, SCRIPT_FILE)),
    ]


def test_apply_and_revert_without_systemd_running_change_unit_files_only(node: Path) -> None:
    """The first apply in a container ran `systemctl daemon-reload`, which failed and rolled everything back."""
    before = tree_digest(node)
    systemctl = Systemctl252(node)
    manager = host_services(node, systemctl)
    root = Root(str(node))
    result = engine.apply(root, boot_restore(), services=manager)
    assert result["changed"]
    assert (node / services.WANTS / UNIT).is_symlink() and (node / UNIT_FILE).is_file()
    assert manager.state(UNIT) == {"enabled": "yes", "active": "no"}
    assert engine.apply(root, boot_restore(), services=manager)["changed"] is False
    reverted = engine.revert(root, services=manager)
    assert len(reverted["restored"]) == 4
    assert tree_digest(node) == before  # no link, no unit, no journal
    assert systemctl.verbs() <= {"is-enabled", "enable", "disable"}
    assert all(call[1] == f"--root={node}" for call in systemctl.calls)


def test_stopping_a_unit_that_cannot_run_is_a_no_op(node: Path) -> None:
    """irqbalance stopped and disabled in a container: disabled offline, and the revert enables it again."""
    (node / "etc/systemd/system/irqbalance.service").write_text("[Install]\nWantedBy=multi-user.target\n")
    systemctl = Systemctl252(node)
    manager = host_services(node, systemctl)
    manager.set_state("irqbalance.service", {"enabled": "yes"})
    before = tree_digest(node)
    stop = [Setting("irq.irqbalance", "irqbalance.service", "", "active=no,enabled=no", kind=SERVICE)]
    root = Root(str(node))
    result = engine.apply(root, stop, services=manager)
    assert result["actions"][0]["before"] == "active=no,enabled=yes"
    assert manager.state("irqbalance.service") == {"enabled": "no", "active": "no"}
    engine.revert(root, services=manager)
    assert tree_digest(node) == before
    assert "stop" not in systemctl.verbs()


def test_starting_a_unit_without_systemd_is_refused_by_name(node: Path) -> None:
    (node / "etc/systemd/system/irqbalance.service").write_text("[Install]\nWantedBy=multi-user.target\n")
    manager = host_services(node, Systemctl252(node))
    with pytest.raises(OSError, match="cannot start irqbalance.service: systemd is not running under"):
        manager.set_state("irqbalance.service", {"enabled": "yes", "active": "yes"})
    assert manager.state("irqbalance.service")["enabled"] == "yes"  # the enable was still done


def test_a_failed_stop_does_not_leave_the_unit_enabled(node: Path) -> None:
    """With systemd running: every step is tried and each failure named (a stop that failed used to skip the
    disable after it, leaving the multi-user.target.wants link)."""
    (node / "run/systemd/system").mkdir(parents=True)
    (node / UNIT_FILE).write_text(UNIT_TEXT)
    systemctl = Systemctl252(node, failing={"stop": "Failed to stop nodetune-restore.service: Access denied\n"})
    manager = host_services(node, systemctl)
    manager.set_state(UNIT, {"enabled": "yes"})
    with pytest.raises(OSError, match="stop nodetune-restore.service failed .*Access denied"):
        manager.set_state(UNIT, {"active": "no", "enabled": "no"})
    assert not (node / services.WANTS / UNIT).is_symlink()
    assert ["systemctl", "daemon-reload"] in systemctl.calls  # booted: reloaded before the enable, no --root


def test_a_revert_goes_on_after_a_failed_entry_and_counts_what_it_restored(node: Path) -> None:
    """One entry cannot be restored (its file was edited since): every other entry is, the failure is named and
    the journal kept, and ``rolled_back`` (the module's ``restored``) lists the entries put back, not none."""
    manager = host_services(node, Systemctl252(node))
    root = Root(str(node))
    engine.apply(root, boot_restore(), services=manager)
    (node / SCRIPT_FILE).write_text("#!/usr/bin/python3\n# edited by hand\n")
    with pytest.raises(engine.ApplyError) as info:
        engine.revert(root, services=manager)
    assert [problem.split(":")[0] for problem in info.value.rollback_errors] == [SCRIPT_FILE]
    assert sorted(info.value.rolled_back) == sorted(["proc/sys/vm/dirty_ratio", UNIT_FILE, "service:" + UNIT])
    assert not (node / services.WANTS / UNIT).is_symlink() and not (node / UNIT_FILE).exists()
    assert (node / "proc/sys/vm/dirty_ratio").read_text() == "20"
    assert (node / engine.JOURNAL).is_file()
