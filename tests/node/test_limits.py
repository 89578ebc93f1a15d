"""The limits area (issue 26 item 2): memlock (and nofile) for login sessions and systemd services.

The readers follow pam_limits and systemd as their sources say (areas/limits.py): limits.conf then limits.d by file
name, the later line of a domain winning, ``-`` for soft and hard; system.conf then the system.conf.d drop-ins by
name, /etc hiding a vendor file of the same name; a unit's drop-ins after its file. What is in effect comes from the
manager (``systemctl show``) and the unit's main process (``/proc/<pid>/limits``), never from PID 1's own limits.
The simulated node's systemd (simservices.py, its own parser) loads the default at boot and at daemon-reload, a unit
at load, and gives a process the unit's limit when it starts, so configured-but-not-in-effect shows as it would.
"""

from __future__ import annotations

import os
import resource
import shutil
from pathlib import Path

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.apply import engine
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import limits as area_limits
from ansible_collections.nodetune.instinct.plugins.module_utils.areas.common import Context
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import health
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.topology import discover
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.services import SystemdServices
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root
from ansible_collections.nodetune.lab.plugins.module_utils import simnode, simservices
from ansible_collections.nodetune.lab.plugins.module_utils.simkernel import sim_root

from tests.support.specs import small_spec
from tests.support.trees import tree_digest

pytestmark = pytest.mark.usefixtures("simulated_kernel")  # applies to simulated nodes in-process

INF = area_limits.INFINITY
SLURMD = ("[Unit]\nDescription=Slurm node daemon\n\n[Service]\nType=simple\nExecStart=/usr/sbin/slurmd -D -s\n"
          "LimitNOFILE=131072\nLimitSTACK=infinity\n\n[Install]\nWantedBy=multi-user.target\n")


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A node as a stock HPC image leaves it: 64 MiB locked memory in limits.d and systemd, slurmd enabled and
    running since boot."""
    dest = tmp_path_factory.mktemp("limits") / "node"
    simnode.build(small_spec(faults__memlock=65536), str(dest))
    write(dest, "usr/lib/systemd/system/slurmd.service", SLURMD)
    os.symlink("/usr/lib/systemd/system/slurmd.service",
               dest / "etc/systemd/system/multi-user.target.wants/slurmd.service")
    simnode.reboot(str(dest))
    return dest


@pytest.fixture
def node(template: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "node"
    shutil.copytree(template, dest, symlinks=True)
    return dest


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def context(node: Path) -> Context:
    root = sim_root(str(node))
    return Context(root, {}, {}, simservices.SimServices(root))


def build(node: Path, **variables: object) -> tuple[Context, list]:
    ctx = context(node)
    settings = area_limits.build(ctx, dict(("nodetune_limits_" + k, v) for k, v in variables.items()))
    return ctx, settings


def effective(node: Path, settings: list) -> dict[str, tuple[str, str]]:
    root = sim_root(str(node))
    return {f.target: (f.status, f.actual) for f in
            area_limits.effective_findings(root, settings, simservices.SimServices(root))}


# ------------------------------------------------------------------------------------------------ the files
def test_the_files_say_what_pam_limits_and_systemd_take(node: Path) -> None:
    ctx, settings = build(node, units=["slurmd.service"], nofile=65536)
    assert ctx.errors == [] and ctx.warnings == []
    files = {s.id: (s.path, s.value) for s in settings}
    assert files["limits.pam"][0] == "etc/security/limits.d/99-nodetune-limits.conf"
    assert [line for line in files["limits.pam"][1].splitlines() if not line.startswith("#")] == [
        "*\tsoft\tmemlock\tunlimited", "*\thard\tmemlock\tunlimited", "*\tsoft\tnofile\t65536",
        "*\thard\tnofile\t65536", "root\tsoft\tmemlock\tunlimited", "root\thard\tmemlock\tunlimited",
        "root\tsoft\tnofile\t65536", "root\thard\tnofile\t65536"]
    assert files["limits.systemd"] == ("etc/systemd/system.conf.d/99-nodetune-limits.conf", files["limits.systemd"][1])
    assert files["limits.systemd"][1].endswith("[Manager]\nDefaultLimitMEMLOCK=infinity\n")
    assert files["limits.unit"] == ("etc/systemd/system/slurmd.service.d/nodetune-limits.conf",
                                    files["limits.unit"][1])
    assert files["limits.unit"][1].endswith("[Service]\nLimitMEMLOCK=infinity\n")
    # a size is KiB in limits.conf and takes the K suffix (base 1024) for systemd
    _, sized = build(node, memlock=1048576, domains=["@rdma"], systemd_default=True)
    text = {s.id: s.value for s in sized}
    assert "@rdma\thard\tmemlock\t1048576" in text["limits.pam"]
    assert "DefaultLimitMEMLOCK=1048576K\n" in text["limits.systemd"]
    assert area_limits.systemd_limit("1048576K") == (1073741824.0, 1073741824.0)
    assert area_limits.pam_value("memlock", "1048576") == 1073741824.0


@pytest.mark.parametrize(("variables", "words"), [
    ({"memlock": 0}, ["nodetune_limits_memlock=0", "'unlimited' or a size in KiB"]),
    ({"memlock": "64G"}, ["nodetune_limits_memlock='64G'", "KiB"]),
    ({"memlock": -1}, ["nodetune_limits_memlock=-1"]),
    ({"memlock": True}, ["nodetune_limits_memlock=True"]),
    ({"memlock": "infinity"}, ["nodetune_limits_memlock='infinity'", "'unlimited'"]),
    ({"nofile": "unlimited"}, ["nodetune_limits_nofile='unlimited'", "1 to 1048576", "fs.nr_open"]),
    ({"nofile": 2097152}, ["nodetune_limits_nofile=2097152", "1 to 1048576"]),
    ({"units": ["slurmd"]}, ["nodetune_limits_units has 'slurmd'", "did you mean 'slurmd.service'?"]),
    ({"units": ["../../etc/passwd.service"]}, ["nodetune_limits_units has '../../etc/passwd.service'"]),
    ({"units": ["slurm d.service"]}, ["not a systemd service unit name"]),
    ({"units": ["@.service"]}, ["nodetune_limits_units has '@.service'"]),
    ({"units": "slurmd.service"}, ["nodetune_limits_units='slurmd.service' is not valid: expected a list"]),
    ({"domains": ["*", "bad user"]}, ["nodetune_limits_domains has 'bad user'", "'@group'"]),
    ({"domains": ["#"]}, ["nodetune_limits_domains has '#'"]),
    ({"systemd_default": "yes"}, ["nodetune_limits_systemd_default='yes' is not valid"]),
    ({"memloc": "unlimited"}, ["nodetune_limits_memloc is not a setting of the limits area"]),
])
def test_bad_values_are_refused_naming_the_variable(template: Path, variables: dict, words: list) -> None:
    ctx, settings = build(template, **variables)  # reads only
    assert settings == []
    message = " ".join(ctx.errors)
    for word in words:
        assert word in message, message


def test_nofile_is_checked_against_the_nodes_own_nr_open(node: Path) -> None:
    write(node, "proc/sys/fs/nr_open", "4096\n")
    ctx, _ = build(node, nofile=8192)
    assert "from 1 to 4096" in ctx.errors[0]
    ctx, settings = build(node, nofile=4096)
    assert ctx.errors == [] and settings


def test_a_unit_that_is_not_installed_gets_its_drop_in_with_a_warning(node: Path) -> None:
    ctx, settings = build(node, units=["slurmd.service", "munge.service"])
    assert [s.target for s in settings if s.id == "limits.unit"] == ["slurmd.service", "munge.service"]
    assert ctx.warnings == ["limits: munge.service is not installed on this node; its drop-in takes effect when it "
                            "is"]
    assert any("restarts nothing" in note for note in ctx.notes)


# ------------------------------------------------------------------------------------------------ the readers
def test_pam_limits_order_later_line_wins_and_dash_sets_both(tmp_path: Path) -> None:
    write(tmp_path, "etc/security/limits.conf", "*  hard  memlock  1024   # comment\n* soft memlock 512\n")
    write(tmp_path, "etc/security/limits.d/50-site.conf", "*\t-\tmemlock\t2048\n")
    write(tmp_path, "etc/security/limits.d/70-bad.conf", "* soft memlock lots\n")  # pam skips a wrong value
    write(tmp_path, "usr/etc/security/limits.d/80-vendor.conf", "* hard memlock 4096\n")
    write(tmp_path, "usr/etc/security/limits.d/50-site.conf", "* - memlock 1\n")  # hidden by /etc's 50-site.conf
    write(tmp_path, "etc/security/limits.d/90-other.txt", "* - memlock 7\n")  # not *.conf: not read
    root = Root(str(tmp_path))
    assert area_limits.pam_files(root) == ["etc/security/limits.conf", "etc/security/limits.d/50-site.conf",
                                           "etc/security/limits.d/70-bad.conf",
                                           "usr/etc/security/limits.d/80-vendor.conf"]
    found = area_limits.pam_limit(root, "*", "memlock")
    assert found == {"soft": (2048 * 1024.0, "/etc/security/limits.d/50-site.conf:1"),
                     "hard": (4096 * 1024.0, "/usr/etc/security/limits.d/80-vendor.conf:1")}
    # other domains are other lines: root's own line, and "<domain> -" which stops pam_limits for that domain
    write(tmp_path, "etc/security/limits.d/60-root.conf", "root hard memlock unlimited\nroot -\n")
    assert area_limits.pam_limit(root, "root", "memlock")["none"][1] == "/etc/security/limits.d/60-root.conf:2"
    assert area_limits.pam_limit(root, "@rdma", "memlock") == {"soft": None, "hard": None}


def test_systemd_drop_ins_go_by_file_name_and_etc_hides_the_vendors(tmp_path: Path) -> None:
    write(tmp_path, "etc/systemd/system.conf", "[Manager]\n#DefaultLimitMEMLOCK=\nDefaultLimitMEMLOCK=1M\n")
    write(tmp_path, "usr/lib/systemd/system.conf.d/10-vendor.conf", "[Manager]\nDefaultLimitMEMLOCK=2M\n")
    write(tmp_path, "etc/systemd/system.conf.d/50-site.conf", "[Manager]\nDefaultLimitMEMLOCK=3M\n")
    write(tmp_path, "usr/lib/systemd/system.conf.d/60-vendor.conf", "[Manager]\nDefaultLimitMEMLOCK=4M:8M\n")
    write(tmp_path, "usr/lib/systemd/system.conf.d/50-site.conf", "[Manager]\nDefaultLimitMEMLOCK=infinity\n")
    root = Root(str(tmp_path))
    assert area_limits.manager_memlock(root) == ("4M:8M", "/usr/lib/systemd/system.conf.d/60-vendor.conf")
    assert area_limits.systemd_limit("4M:8M") == (4 << 20, 8 << 20)
    # an empty assignment resets to the default; a key outside [Manager] is not the manager's
    write(tmp_path, "run/systemd/system.conf.d/70-reset.conf", "[Manager]\nDefaultLimitMEMLOCK=\n[Other]\n"
                                                               "DefaultLimitMEMLOCK=infinity\n")
    assert area_limits.manager_memlock(root) is None
    for text, value in (("infinity", (INF, INF)), ("8388608", (8388608.0,) * 2), ("64K:infinity", (65536.0, INF)),
                        ("", None), ("-1", None), ("1:2:3", None), ("8 M", None)):
        assert area_limits.systemd_limit(text) == value, text


def test_a_units_later_drop_in_wins_over_nodetunes(node: Path) -> None:
    _, settings = build(node, units=["slurmd.service"])
    root = sim_root(str(node))
    engine.apply(root, settings, services=simservices.SimServices(root))
    assert area_limits.unit_memlock(root, "slurmd.service")[1] == (
        "infinity", "/etc/systemd/system/slurmd.service.d/nodetune-limits.conf")
    # what "systemctl edit slurmd" writes: override.conf sorts after nodetune-limits.conf
    write(node, "etc/systemd/system/slurmd.service.d/override.conf", "[Service]\nLimitMEMLOCK=64M\n")
    assert area_limits.unit_memlock(root, "slurmd.service")[1] == (
        "64M", "/etc/systemd/system/slurmd.service.d/override.conf")
    found = effective(node, settings)["slurmd.service"]
    assert found[0] == "drift" and "override.conf" in found[1]
    assert area_limits.unit_memlock(root, "munge.service") == (None, None)


def test_proc_limits_reads_the_kernels_own_format(tmp_path: Path) -> None:
    """This process's real /proc/self/limits, read in a tree, is the oracle: what getrlimit(2) says."""
    with open("/proc/self/limits") as handle:
        write(tmp_path, "proc/4242/limits", handle.read())
    root = Root(str(tmp_path))
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    assert area_limits.proc_limits(root, 4242, "memlock") == tuple(
        INF if v == resource.RLIM_INFINITY else float(v) for v in (soft, hard))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert area_limits.proc_limits(root, 4242, "nofile") == (float(soft), float(hard))
    assert area_limits.proc_limits(root, 4243, "memlock") is None


def test_the_simulated_limits_file_is_the_kernels_format() -> None:
    with open("/proc/self/limits") as handle:
        real = handle.read().splitlines()
    simulated = simservices.limits_text([1024, "infinity"]).splitlines()
    assert [line[:26] for line in simulated] == [line[:26] for line in real]  # the names, padded as the kernel does
    assert simulated[9].split()[3:] == ["1024", "unlimited", "bytes"]


# ------------------------------------------------------------------------------------------------ systemd answers
def test_systemctl_show_is_asked_with_fixed_arguments_and_only_where_systemd_runs(tmp_path: Path) -> None:
    calls = []

    def run(argv: list) -> tuple:
        calls.append(argv)
        return 0, "LimitMEMLOCK=infinity\nLimitMEMLOCKSoft=infinity\nMainPID=4242\n", ""

    (tmp_path / "run/systemd/system").mkdir(parents=True)
    services = SystemdServices(run, root=str(tmp_path))
    assert services.show("slurmd.service", ["LimitMEMLOCK", "MainPID"]) == {
        "LimitMEMLOCK": "infinity", "LimitMEMLOCKSoft": "infinity", "MainPID": "4242"}
    assert calls == [["systemctl", "show", "--no-pager", "--property=LimitMEMLOCK", "--property=MainPID", "--",
                      "slurmd.service"]]
    services.show(None, ["DefaultLimitMEMLOCK"])
    assert calls[-1] == ["systemctl", "show", "--no-pager", "--property=DefaultLimitMEMLOCK"]
    offline = SystemdServices(run, root=str(tmp_path / "elsewhere"))
    assert offline.show(None, ["DefaultLimitMEMLOCK"]) == {} and len(calls) == 2


def test_the_simulated_systemd_loads_at_boot_and_reload_and_starts_with_the_loaded_limit(node: Path) -> None:
    root = sim_root(str(node))
    services = simservices.SimServices(root)
    pid = int(services.show("slurmd.service", ["MainPID"])["MainPID"])
    assert pid > 1 and area_limits.proc_limits(root, pid, "memlock") == (64 << 20, 64 << 20)
    assert services.show(None, ["DefaultLimitMEMLOCK"]) == {"DefaultLimitMEMLOCK": str(64 << 20)}
    write(node, "etc/systemd/system.conf.d/99-x.conf", "[Manager]\nDefaultLimitMEMLOCK=infinity\n")
    assert services.show(None, ["DefaultLimitMEMLOCK"]) == {"DefaultLimitMEMLOCK": str(64 << 20)}  # not yet
    assert services.show("slurmd.service", ["NeedDaemonReload"]) == {"NeedDaemonReload": "no"}
    simservices.daemon_reexec(root)
    assert services.show(None, ["DefaultLimitMEMLOCK"]) == {"DefaultLimitMEMLOCK": "infinity"}
    # the unit took the new default at the reload; its running process did not
    assert services.show("slurmd.service", ["LimitMEMLOCK"]) == {"LimitMEMLOCK": "infinity"}
    assert area_limits.proc_limits(root, pid, "memlock") == (64 << 20, 64 << 20)
    new = simservices.restart(root, "slurmd.service")
    assert new != pid and not (node / "proc" / str(pid)).exists()
    assert area_limits.proc_limits(root, new, "memlock") == (INF, INF)
    # a reboot starts it from the files again
    simnode.reboot(str(node))
    pid = int(services.show("slurmd.service", ["MainPID"])["MainPID"])
    assert area_limits.proc_limits(root, pid, "memlock") == (INF, INF)


# ------------------------------------------------------------------------------------------------ end to end
def test_apply_verify_reload_restart_second_run_and_revert(node: Path) -> None:
    root = sim_root(str(node))
    services = simservices.SimServices(root)
    _, settings = build(node, units=["slurmd.service"])
    pristine = tree_digest(node)

    dry = engine.apply(root, settings, check_mode=True, services=services)
    assert dry["changed"] and tree_digest(node) == pristine  # check mode writes nothing
    assert engine.apply(root, settings, services=services)["changed"]
    assert all(engine.plan_actions(root, [s], services) == [] for s in settings)

    found = effective(node, settings)
    assert found["pam * memlock"][0] == "ok" and found["pam root memlock"][0] == "ok"
    # configured, not in effect: the manager and slurmd still have 64 MiB
    assert found["DefaultLimitMEMLOCK"] == ("drift", "manager: 65536 KiB")
    assert found["slurmd.service"] == ("drift", "loaded: 65536 KiB")
    simservices.daemon_reload(root)
    found = effective(node, settings)
    assert found["DefaultLimitMEMLOCK"] == ("ok", "manager: unlimited")
    pid = int(services.show("slurmd.service", ["MainPID"])["MainPID"])
    assert found["slurmd.service"] == ("drift", f"main PID {pid}: 65536 KiB")  # needs a restart, not clean
    simservices.restart(root, "slurmd.service")
    assert {status for status, _ in effective(node, settings).values()} == {"ok"}

    assert not engine.apply(root, settings, services=services)["changed"]  # a second run changes nothing
    engine.revert(root, services=services)
    after = tree_digest(node)
    changed = {p for p in set(pristine) | set(after) if pristine.get(p) != after.get(p)}
    # only what the operator's reload and restart did (the manager's state and slurmd's process) differs
    assert changed and all(p.startswith(("run/", "proc/")) or p.startswith("var/lib/nodetune") for p in changed), \
        sorted(changed)
    assert not (node / "etc/systemd/system/slurmd.service.d").exists()
    assert not (node / area_limits.PAM_FILE).exists() and not (node / area_limits.SYSTEMD_FILE).exists()


def test_a_file_read_after_nodetunes_is_drift_naming_it(node: Path) -> None:
    root = sim_root(str(node))
    _, settings = build(node)
    engine.apply(root, settings, services=simservices.SimServices(root))
    simservices.daemon_reload(root)
    assert {status for status, _ in effective(node, settings).values()} == {"ok"}
    write(node, "etc/security/limits.d/99-zz-site.conf", "*\thard\tmemlock\t65536\n")
    write(node, "etc/systemd/system.conf.d/99-zz-site.conf", "[Manager]\nDefaultLimitMEMLOCK=64M\n")
    found = effective(node, settings)
    assert found["pam * memlock"] == ("drift", "soft unlimited, hard 65536 KiB (from /etc/security/limits.d/"
                                               "99-nodetune-limits.conf:2, /etc/security/limits.d/99-zz-site.conf:1)")
    assert found["pam root memlock"][0] == "ok"  # '*' is not root's line
    assert found["DefaultLimitMEMLOCK"] == ("drift", "64M (from /etc/systemd/system.conf.d/99-zz-site.conf)")
    # a file changed by hand is the file check's drift, not judged again here
    (node / area_limits.PAM_FILE).write_text("# edited\n")
    assert "pam * memlock" not in effective(node, settings)


# ------------------------------------------------------------------------------------------------ health.memlock
def health_memlock(node: Path, areas: dict | None = None) -> dict[str, tuple[str, str]]:
    root = Root(str(node))
    found = health.check(root, discover(root), {"nodetune_health_checks": ["memlock"]}, areas)
    return {f.target: (f.status, f.actual) for f in found}


def test_health_memlock_reads_the_same_facts(node: Path) -> None:
    assert health_memlock(node)["systemd"][0] == "drift"
    # a vendor drop-in sorts before the site's by name: systemd reads the site's last (the order of the directories
    # does not decide, the file names do)
    write(node, "etc/systemd/system.conf.d/90-memlock.conf", "[Manager]\nDefaultLimitMEMLOCK=infinity\n")
    write(node, "usr/lib/systemd/system.conf.d/10-vendor.conf", "[Manager]\nDefaultLimitMEMLOCK=8M\n")
    assert health_memlock(node)["systemd"] == ("ok", "infinity (/etc/systemd/system.conf.d/90-memlock.conf)")
    # '-' sets soft and hard at once, and the later line wins
    write(node, "etc/security/limits.d/95-site.conf", "* - memlock unlimited\n")
    assert health_memlock(node)["limits.d"][0] == "ok"
    write(node, "etc/security/limits.d/96-site.conf", "* hard memlock 1024\n")
    assert health_memlock(node)["limits.d"][0] == "drift"


def test_health_memlock_is_the_limits_areas_findings_when_the_area_is_on(node: Path) -> None:
    on = health_memlock(node, {"limits": {"nodetune_limits_enabled": True}})
    assert list(on.values()) == [("not_applicable", "-")]
    off = health_memlock(node, {"limits": {"nodetune_limits_enabled": False}})
    assert set(off) == {"limits.d", "systemd"}
