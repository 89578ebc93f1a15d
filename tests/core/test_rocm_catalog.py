"""The rocm_env area's catalogue: the articles' wrong names, DOMAIN.md's valid values, profiles, precedence, quoting.

The expectations are written from DOMAIN.md ("RCCL / NCCL / HSA / PyTorch environment" and the parameter matrix) and
from RCCL's own rules (its /etc/rccl.conf reader, strtoll for numbers), not from the catalogue's tables: a test here
fails when the catalogue disagrees with the truth, not merely when it changes. Where the shared folder is present,
the names are also read from DOMAIN.md itself.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import declarations as areas
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import rocm_catalog
from ansible_collections.nodetune.instinct.plugins.module_utils.areas.common import Context
from ansible_collections.nodetune.instinct.plugins.module_utils.areas.tuning import desired_settings
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import SettingError
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root

REPO = Path(__file__).resolve().parents[2]
DOMAIN = REPO.parent / "shared" / "DOMAIN.md"
# The area's own variables with their declared defaults (the role's defaults also carry the common ones).
DEFAULTS = {name: areas.defaults("rocm_env")[name] for name in areas.area_variables("rocm_env")}
NCCL_ENV = {"NCCL_IB_HCA": "=mlx5_0,mlx5_1", "NCCL_SOCKET_IFNAME": "=ib0,ib1"}  # a Layout's node-wide NIC lists


# ------------------------------------------------------------------------------------------------ helpers
def context(tmp_path: Path, layout: dict | None = None) -> Context:
    return Context(Root(str(tmp_path)), {}, {"nccl_env": dict(NCCL_ENV)} if layout is None else layout)


def build(tmp_path: Path, layout: dict | None = None, **overrides: Any) -> tuple[dict[str, str], Context]:
    """The area's files ({target: content}) for the role defaults with ``overrides``; raises SettingError."""
    ctx = context(tmp_path, layout)
    config = dict(DEFAULTS, **overrides)
    settings = desired_settings(ctx, {"rocm_env": config}, persist=False)
    return {s.target: s.value for s in settings}, ctx


def refused(tmp_path: Path, **overrides: Any) -> str:
    with pytest.raises(SettingError) as info:
        build(tmp_path, **overrides)
    return str(info.value)


def rccl_reads(conf: str) -> dict[str, str]:
    """What RCCL's setEnvFile() makes of /etc/rccl.conf: every line with '=' is KEY=VALUE, the value verbatim."""
    out: dict[str, str] = {}
    for line in conf.split("\n"):
        if "=" in line:
            key, _, value = line.partition("=")
            out.setdefault(key, value)  # setenv(..., 0): the first one wins
    return out


def shell_env(script: str, names: list[str], tmp_path: Path, prelude: str = ". ./f") -> dict[str, str]:
    """Source ``script`` in a POSIX shell (cwd tmp_path) and read the variables back through `env -0`."""
    (tmp_path / "f").write_text(script)
    result = subprocess.run(["sh", "-c", prelude + "; env -0"], cwd=tmp_path, capture_output=True, check=True,
                            env={"PATH": os.environ["PATH"]})
    env = dict(item.split("=", 1) for item in result.stdout.decode().split("\0") if "=" in item)
    return {n: env[n] for n in names if n in env}


# ------------------------------------------------------------------------------------------------ wrong names
# Every environment variable the three articles set, with the value they give (seed file, what it claims), and
# what DOMAIN.md says is true: the real name, or "no effect" with the words the message must carry.
SEED_NAMES = [
    ("RCCL_PROTO", "LL", "NCCL_PROTO", []),                                     # 000: protocol per test case
    ("RCCL_PROTO", "LL128", "NCCL_PROTO", []),
    ("RCCL_TOPO_FILE", "/opt/rocm/share/rccl/topos/mi250_2node.xml", "NCCL_TOPO_FILE", []),
    ("RCCL_NET_PLUGIN", "libtl_rccl.so", "NCCL_NET_PLUGIN", []),
    ("RCCL_SOCKET_IFNAME", "ib0", "NCCL_SOCKET_IFNAME", []),
    ("RCCL_ALGO", "RING", "NCCL_ALGO", []),
    ("RCCL_ALGO", "TREE,RING", "NCCL_ALGO", []),
    ("RCCL_BUFFSIZE", "4M", "NCCL_BUFFSIZE", ["'4M' would be read as 4", "4194304"]),
    ("RCCL_BUFFSIZE", "8M", "NCCL_BUFFSIZE", ["8388608"]),
    ("RCCL_NSOCKS_PERTHREAD", 4, "NCCL_NSOCKS_PERTHREAD", []),
    ("RCCL_TOPO_DUMP_FILE", "/tmp/rccl_topo.log", "NCCL_TOPO_DUMP_FILE", []),
    ("RCCL_NET_GDR_LEVEL", 3, "NCCL_NET_GDR_LEVEL", ["PHB"]),                   # "disable cross-NUMA access"
    ("HCCL_OVER_OFI", 1, None, ["Habana Gaudi"]),
    ("HSA_AMD_ENABLE_ASYNC_IO", 1, None, []),                                   # 002: "async IO"
    ("HSA_AMD_ENABLE_UM_PRE_REGISTER", 1, None, []),
    ("HSA_AMD_SEVM_PRE_ALLOC", "4G", None, []),
    ("AMD_ZSTD_ACCELERATION", 1, None, []),
    ("AMD_LZ4_ACCELERATION", 1, None, []),
    ("ZSTD_NBTHREADS", 4, None, ["zstd command-line tool"]),
    ("NCCL_TIMEOUT", 3600, None, ["init_process_group(timeout="]),             # 003: deadlock "fix"
    ("RCCL_TIMEOUT", 3600, None, ["init_process_group(timeout="]),
    ("RCCL_BUFFSIZE", 8388608, "NCCL_BUFFSIZE", []),
    ("RCCL_NET_PLUGIN", "librccl-net.so", "NCCL_NET_PLUGIN", []),
    ("RCCL_DEBUG", "WARN", "NCCL_DEBUG", []),
    ("RCCL_DEBUG", "INFO", "NCCL_DEBUG", []),
    ("RCCL_DEBUG_SUBSYS", "ALL", "NCCL_DEBUG_SUBSYS", []),
]
SEED_IDS = [f"{name}={value}" for name, value, _, _ in SEED_NAMES]


@pytest.mark.parametrize(("name", "value", "real", "extra"), SEED_NAMES, ids=SEED_IDS)
def test_every_wrong_name_from_the_seeds_is_refused_with_the_truth(tmp_path: Path, name: str, value: Any,
                                                                   real: str | None, extra: list[str]) -> None:
    message = refused(tmp_path, nodetune_rocm_env={name: value})
    assert f"nodetune_rocm_env: {name} " in message
    if real:
        assert f"use {real}" in message
    else:
        assert f"{name} has no effect" in message
    for part in extra:
        assert part in message, f"{part!r} not in {message!r}"


@pytest.mark.parametrize(("name", "value", "real", "extra"), SEED_NAMES, ids=SEED_IDS)
def test_under_the_warn_policy_a_wrong_name_is_kept_with_a_warning(tmp_path: Path, name: str, value: Any,
                                                                   real: str | None, extra: list[str]) -> None:
    files, ctx = build(tmp_path, nodetune_rocm_env={name: value}, nodetune_rocm_env_policy="warn")
    warnings = [w for w in ctx.warnings if name in w]
    assert len(warnings) == 1 and "kept because nodetune_rocm_env_policy is 'warn'" in warnings[0]
    assert (f"use {real}" if real else "has no effect") in warnings[0]
    assert f"export {name}=" in files["profile"]


def test_the_per_rank_gomp_affinity_is_refused_node_wide(tmp_path: Path) -> None:
    message = refused(tmp_path, nodetune_rocm_env={"GOMP_CPU_AFFINITY": "0-7,16-23"})  # seed 000
    assert "GOMP_CPU_AFFINITY should not be set node-wide" in message and "nodetune-bind" in message


def test_an_unknown_name_is_refused_with_a_suggestion_or_kept_under_warn(tmp_path: Path) -> None:
    message = refused(tmp_path, nodetune_rocm_env={"NCCL_BUFSIZE": 8388608})
    assert "NCCL_BUFSIZE is not in nodetune's catalogue" in message and "did you mean NCCL_BUFFSIZE?" in message
    assert "nodetune_rocm_env_policy: warn" in message
    files, ctx = build(tmp_path, nodetune_rocm_env={"MIOPEN_USER_DB_PATH": "/scratch/miopen"},
                       nodetune_rocm_env_policy="warn")
    assert "export MIOPEN_USER_DB_PATH='/scratch/miopen'\n" in files["profile"]
    assert "MIOPEN_USER_DB_PATH" not in rccl_reads(files["rccl.conf"])  # RCCL's file holds NCCL_*/RCCL_* names only
    assert any("MIOPEN_USER_DB_PATH" in w for w in ctx.warnings)


def test_every_problem_is_reported_in_one_run(tmp_path: Path) -> None:
    message = refused(tmp_path, nodetune_rocm_env={"RCCL_ALGO": "Ring", "NCCL_TIMEOUT": 3600, "NCCL_BUFFSIZE": "8M"})
    assert "use NCCL_ALGO" in message and "NCCL_TIMEOUT has no effect" in message and "8388608" in message


# ------------------------------------------------------------------------------------------------ DOMAIN.md itself
def domain_section() -> str:
    if not DOMAIN.is_file():
        pytest.skip(f"{DOMAIN} is absent (it lives in the team's shared/ folder beside the checkout)")
    text = DOMAIN.read_text()
    return text.split("## RCCL / NCCL / HSA / PyTorch environment", 1)[1].split("\n## ", 1)[0]


def bullet(section: str, start: str) -> str:
    return next(b for b in section.split("\n- ") if b.startswith(start))


def test_every_variable_domain_calls_real_is_in_the_catalogue() -> None:
    section = domain_section()
    text = bullet(section, "Real and useful") + bullet(section, "PyTorch")
    names = set(re.findall(r"\b((?:NCCL|RCCL|HSA|TORCH)_[A-Z0-9_]+)\b", text))
    assert len(names) >= 25
    assert sorted(names - set(rocm_catalog.VARIABLES)) == []


def test_every_name_domain_calls_unread_is_a_wrong_name() -> None:
    text = bullet(domain_section(), "NOT read by anything")
    names = set(re.findall(r"\b([A-Z][A-Z0-9]*_[A-Z0-9_]+)\b", text.split("The product flags")[0]))
    assert {"RCCL_PROTO", "NCCL_TIMEOUT", "HCCL_OVER_OFI"} <= names
    assert sorted(names - set(rocm_catalog.WRONG_NAMES)) == []
    for name in names:
        real = rocm_catalog.WRONG_NAMES[name]
        assert real is None or real in rocm_catalog.VARIABLES, (name, real)


# ------------------------------------------------------------------------------------------------ valid values
# Values DOMAIN.md gives or describes as valid: each one alone must pass and reach the files unchanged (booleans
# become 1/0 for 0/1 flags).
VALID = [
    *[("NCCL_ALGO", a) for a in ("Ring", "Tree", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree")],
    ("NCCL_ALGO", "ring"), ("NCCL_ALGO", "Tree,Ring"), ("NCCL_ALGO", "^Tree"), ("NCCL_ALGO", "TREE,RING"),
    *[("NCCL_PROTO", p) for p in ("LL", "LL128", "Simple", "simple", "^LL128", "LL,Simple")],
    ("NCCL_BUFFSIZE", 4194304), ("NCCL_BUFFSIZE", "8388608"), ("NCCL_BUFFSIZE", 1048576), ("NCCL_BUFFSIZE", 2097152),
    ("NCCL_SOCKET_IFNAME", "ib0"), ("NCCL_SOCKET_IFNAME", "=ib0,ib1"), ("NCCL_SOCKET_IFNAME", "^docker"),
    ("NCCL_IB_HCA", "mlx5_0:1,mlx5_1:1"), ("NCCL_IB_HCA", "=mlx5_0"), ("NCCL_IB_HCA", "^mlx5_8"),
    ("NCCL_IB_GID_INDEX", 3), ("NCCL_IB_TIMEOUT", 22), ("NCCL_IB_RETRY_CNT", 7),
    *[("NCCL_NET_GDR_LEVEL", level) for level in ("LOC", "XGMI", "PIX", "PXB", "PHB", "SYS")],
    ("NCCL_TOPO_FILE", "/opt/rocm/share/rccl/topo.xml"), ("NCCL_TOPO_DUMP_FILE", "/tmp/rccl_topo.xml"),
    *[("NCCL_DEBUG", level) for level in ("VERSION", "WARN", "INFO", "TRACE", "warn")],
    ("NCCL_DEBUG_SUBSYS", "INIT,NET"), ("NCCL_DEBUG_SUBSYS", "^COLL"), ("NCCL_DEBUG_SUBSYS", "ALL"),
    ("NCCL_NSOCKS_PERTHREAD", 4), ("NCCL_SOCKET_NTHREADS", 16), ("NCCL_MIN_NCHANNELS", 112),
    ("NCCL_CROSS_NIC", 0), ("NCCL_CROSS_NIC", 1), ("NCCL_IGNORE_CPU_AFFINITY", 1),
    ("RCCL_LL128_FORCE_ENABLE", 1), ("RCCL_LL128_FORCE_ENABLE", True), ("RCCL_MSCCL_ENABLE", 0),
    ("HSA_FORCE_FINE_GRAIN_PCIE", 1), ("HSA_OVERRIDE_CPU_AFFINITY_DEBUG", 0), ("HSA_ENABLE_SDMA", 0),
    ("HSA_NO_SCRATCH_RECLAIM", 1),
    ("TORCH_NCCL_ASYNC_ERROR_HANDLING", 1), ("TORCH_NCCL_ASYNC_ERROR_HANDLING", 3), ("TORCH_NCCL_BLOCKING_WAIT", 0),
    ("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", 600), ("TORCH_NCCL_DUMP_ON_TIMEOUT", 1),
    ("TORCH_NCCL_TRACE_BUFFER_SIZE", 2000),
    # issue 14.7: real variables that used to be refused as unknown (AMD's MI300X guide, RCCL/NCCL docs)
    ("GPU_MAX_HW_QUEUES", 2), ("TORCH_NCCL_HIGH_PRIORITY", 1), ("NCCL_IB_QPS_PER_CONNECTION", 4),
    ("NCCL_NCHANNELS_PER_NET_PEER", 2), ("NCCL_IB_PCI_RELAXED_ORDERING", 1), ("NCCL_IB_SPLIT_DATA_ON_QPS", 0),
    ("NCCL_IB_ADAPTIVE_ROUTING", 1), ("NCCL_P2P_LEVEL", "SYS"), ("NCCL_NET_GDR_READ", 1),
    ("NCCL_SOCKET_FAMILY", "AF_INET6"), ("HSA_XNACK", 1), ("PYTORCH_TUNABLEOP_ENABLED", 1),
    ("PYTORCH_HIP_ALLOC_CONF", "expandable_segments:True,max_split_size_mb:512"),
    ("TORCH_BLAS_PREFER_HIPBLASLT", 0), ("AMD_LOG_LEVEL", 3),
]


@pytest.mark.parametrize(("name", "value"), VALID, ids=[f"{n}={v}" for n, v in VALID])
def test_every_valid_value_passes_and_is_written_as_given(tmp_path: Path, name: str, value: Any) -> None:
    files, _ = build(tmp_path, nodetune_rocm_env={name: value})
    expected = {True: "1", False: "0"}.get(value, str(value)) if isinstance(value, bool) else str(value)
    assert f"export {name}='{expected}'\n" in files["profile"]
    assert f'{name}="{expected}"\n' in files["env_file"]
    if name.startswith(("NCCL_", "RCCL_")):
        assert rccl_reads(files["rccl.conf"])[name] == expected
    else:  # ROCr and PyTorch read their variables at start-up: RCCL's file would come too late
        assert name not in rccl_reads(files["rccl.conf"])


def test_socket_threads_times_sockets_at_the_limit_passes(tmp_path: Path) -> None:
    build(tmp_path, nodetune_rocm_env={"NCCL_SOCKET_NTHREADS": 4, "NCCL_NSOCKS_PERTHREAD": 16})


# ------------------------------------------------------------------------------------------------ invalid values
INVALID = [
    ({"NCCL_ALGO": "AUTO"}, ["NCCL_ALGO", "leave NCCL_ALGO unset"]),                     # the seed matrix's "AUTO"
    ({"NCCL_ALGO": "SHM"}, ["SHM is a transport"]),                                       # seed 003 "force SHM"
    ({"NCCL_ALGO": "Ring;Tree"}, ["'Ring;Tree' is not an algorithm"]),
    ({"NCCL_ALGO": "Ring, Tree"}, ["' Tree' is not an algorithm"]),                    # RCCL compares whole items
    ({"NCCL_ALGO": "^ring,tree,collnetdirect,collnetchain,nvls,nvlstree"}, ["excludes every algorithm"]),
    ({"NCCL_PROTO": "LL256"}, ["'LL256' is not a protocol", "LL, LL128, Simple"]),
    ({"NCCL_PROTO": True}, ["YAML boolean"]),
    ({"NCCL_BUFFSIZE": "4M"}, ["would be read as 4", "4194304"]),
    ({"NCCL_BUFFSIZE": "010"}, ["leading zeros", "octal"]),
    ({"NCCL_BUFFSIZE": 0}, ["out of range"]),
    ({"NCCL_BUFFSIZE": 1.5}, ["decimal number is not valid"]),
    ({"NCCL_NET_GDR_LEVEL": "phb"}, ["write 'PHB'", "case-sensitively"]),
    ({"NCCL_NET_GDR_LEVEL": "2"}, ["old numbering", "write PXB"]),
    ({"NCCL_NET_GDR_LEVEL": "NVL"}, ["XGMI"]),
    ({"NCCL_NET_GDR_LEVEL": "HOST"}, ["LOC|XGMI|PIX|PXB|PHB|SYS"]),
    ({"NCCL_DEBUG": "VERBOSE"}, ["NONE|VERSION|WARN|INFO|ABORT|TRACE"]),
    ({"NCCL_SOCKET_NTHREADS": 32}, ["1 to 16"]),
    ({"NCCL_SOCKET_NTHREADS": 8, "NCCL_NSOCKS_PERTHREAD": 16}, ["8 x 16 = 128", "at most 64"]),
    ({"NCCL_MIN_NCHANNELS": 200, "NCCL_MAX_NCHANNELS": 100}, ["NCCL_MIN_NCHANNELS=200 is above"]),
    ({"RCCL_LL128_FORCE_ENABLE": "true"}, ["expected 0 or 1", "'true' would be read as 0"]),
    ({"NCCL_IB_TIMEOUT": 32}, ["1 to 31"]),
    ({"NCCL_TOPO_FILE": "topo.xml"}, ["absolute"]),
    ({"NCCL_TOPO_FILE": "/etc/../root/x.xml"}, ["normalised"]),
    ({"NCCL_SOCKET_IFNAME": "ib0;reboot"}, ["'ib0;reboot' is not valid", "interface or HCA names"]),
    ({"TORCH_NCCL_ASYNC_ERROR_HANDLING": 4}, ["0|1|2|3"]),
    ({"NCCL_DEBUG": None}, ["single value"]),
    ({"GPU_MAX_HW_QUEUES": 0}, ["out of range"]),
    ({"NCCL_IB_QPS_PER_CONNECTION": 129}, ["1 to 128"]),
    ({"NCCL_IB_PCI_RELAXED_ORDERING": 3}, ["0|1|2"]),
    ({"TORCH_NCCL_HIGH_PRIORITY": "yes"}, ["expected 0 or 1"]),
    ({"NCCL_P2P_LEVEL": "NVL"}, ["XGMI"]),
    ({"PYTORCH_HIP_ALLOC_CONF": "expandable:True"}, ["expandable_segments", "'expandable:True' is not one"]),
]


def test_the_audited_variables_name_their_source() -> None:
    """Issue 14.7: each variable the audit added says where it is documented or read."""
    for name in ("GPU_MAX_HW_QUEUES", "TORCH_NCCL_HIGH_PRIORITY", "NCCL_IB_QPS_PER_CONNECTION",
                 "NCCL_NCHANNELS_PER_NET_PEER", "NCCL_IB_PCI_RELAXED_ORDERING"):
        assert rocm_catalog.VARIABLES[name].source, name


@pytest.mark.parametrize(("env", "expected"), INVALID, ids=[str(e) for e, _ in INVALID])
def test_invalid_values_are_refused_with_what_is_valid(tmp_path: Path, env: dict, expected: list[str]) -> None:
    message = refused(tmp_path, nodetune_rocm_env=env)
    assert next(iter(env)) in message
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"


def test_invalid_values_are_refused_under_the_warn_policy_too(tmp_path: Path) -> None:
    assert "would be read as 4" in refused(tmp_path, nodetune_rocm_env={"NCCL_BUFFSIZE": "4M"},
                                           nodetune_rocm_env_policy="warn")


# ------------------------------------------------------------------------------------------------ profiles
# DOMAIN.md's matrix with real names (and seed 3's stability settings), as RCCL must read them from /etc/rccl.conf
MATRIX = {
    "single_node_small": {"NCCL_PROTO": "LL", "NCCL_BUFFSIZE": str(1 << 20)},
    "single_node_large": {"NCCL_PROTO": "LL128", "NCCL_ALGO": "Tree", "NCCL_BUFFSIZE": str(4 << 20)},
    "multi_node": {"NCCL_PROTO": "LL128", "NCCL_ALGO": "Ring", "NCCL_BUFFSIZE": str(8 << 20)},
    "mixed_precision": {"NCCL_PROTO": "Simple", "NCCL_ALGO": "Ring", "NCCL_BUFFSIZE": str(2 << 20)},
    "multi_node_stable": {"NCCL_ALGO": "Ring", "NCCL_BUFFSIZE": "8388608", "NCCL_DEBUG": "WARN"},
}


@pytest.mark.parametrize("profile", sorted(MATRIX))
def test_each_profile_gives_the_matrix_with_real_names(tmp_path: Path, profile: str) -> None:
    files, ctx = build(tmp_path, layout={}, nodetune_rocm_profile=profile)
    assert rccl_reads(files["rccl.conf"]) == MATRIX[profile]
    ll128 = [w for w in ctx.warnings if "RCCL_LL128_FORCE_ENABLE" in w]
    assert bool(ll128) == (MATRIX[profile].get("NCCL_PROTO") == "LL128")
    assert "RCCL_LL128_FORCE_ENABLE" not in files["profile"]  # said, never set silently


def test_an_explicit_ll128_decision_silences_the_note(tmp_path: Path) -> None:
    files, ctx = build(tmp_path, layout={}, nodetune_rocm_profile="multi_node",
                       nodetune_rocm_env={"RCCL_LL128_FORCE_ENABLE": 1})
    assert not [w for w in ctx.warnings if "LL128" in w]
    assert rccl_reads(files["rccl.conf"])["RCCL_LL128_FORCE_ENABLE"] == "1"
    _, ctx = build(tmp_path, layout={}, nodetune_rocm_env={"NCCL_PROTO": "^LL128"})
    assert not [w for w in ctx.warnings if "LL128" in w]  # excluding LL128 needs no note


def test_an_unknown_profile_is_refused(tmp_path: Path) -> None:
    message = refused(tmp_path, nodetune_rocm_profile="multinode")
    assert "nodetune_rocm_profile='multinode' is not valid" in message and "multi_node" in message


def test_precedence_profile_then_layout_then_user(tmp_path: Path) -> None:
    files, _ = build(tmp_path, nodetune_rocm_profile="multi_node",
                     nodetune_rocm_env={"NCCL_ALGO": "Tree", "NCCL_IB_HCA": "=mlx5_1"})
    conf = rccl_reads(files["rccl.conf"])
    assert conf["NCCL_ALGO"] == "Tree"                       # the user's value over the profile's
    assert conf["NCCL_IB_HCA"] == "=mlx5_1"                  # ... and over the Layout's
    assert conf["NCCL_SOCKET_IFNAME"] == NCCL_ENV["NCCL_SOCKET_IFNAME"]  # the Layout's where the user said nothing
    assert conf["NCCL_BUFFSIZE"] == "8388608"                # the profile's where nobody else did
    files, _ = build(tmp_path, nodetune_rocm_profile="multi_node", nodetune_rocm_layout_env=["NCCL_IB_HCA"])
    assert "NCCL_SOCKET_IFNAME" not in rccl_reads(files["rccl.conf"])


def test_nothing_asked_writes_no_env_file(tmp_path: Path) -> None:
    files, _ = build(tmp_path)  # the defaults: profile none, no variables; the Layout's NICs alone write nothing
    assert files == {}


def test_the_layout_env_names_are_checked(tmp_path: Path) -> None:
    message = refused(tmp_path, nodetune_rocm_layout_env=["NCCL_TOPO_FILE"])
    assert "nodetune_rocm_layout_env" in message and "NCCL_IB_HCA, NCCL_SOCKET_IFNAME only" in message


def test_a_missing_topology_file_is_a_warning(tmp_path: Path) -> None:
    _, ctx = build(tmp_path, nodetune_rocm_env={"NCCL_TOPO_FILE": "/etc/rccl/topo.xml"})
    assert any("NCCL_TOPO_FILE=/etc/rccl/topo.xml does not exist" in w for w in ctx.warnings)
    (tmp_path / "etc/rccl").mkdir(parents=True)
    (tmp_path / "etc/rccl/topo.xml").write_text("<system/>")
    _, ctx = build(tmp_path, nodetune_rocm_env={"NCCL_TOPO_FILE": "/etc/rccl/topo.xml"})
    assert not ctx.warnings


# ------------------------------------------------------------------------------------------------ files and quoting
HOSTILE = {
    "NT_QUOTE": "it's \"quoted\"",
    "NT_SUBST": "$(touch PWNED)",
    "NT_BACKTICK": "`touch PWNED2`",
    "NT_VARS": "${HOME} $PATH \\n \\",
    "NT_SEMI": "a; touch PWNED3 # b",
    "NT_SPACES": "  two  spaces  ",
}


def test_hostile_values_reach_the_shell_and_systemd_forms_verbatim(tmp_path: Path) -> None:
    files, _ = build(tmp_path, layout={}, nodetune_rocm_env=HOSTILE, nodetune_rocm_env_policy="warn")
    work = tmp_path / "shell"
    work.mkdir()
    assert shell_env(files["profile"], sorted(HOSTILE), work) == HOSTILE
    assert shell_env(files["env_file"], sorted(HOSTILE), work, prelude="set -a; . ./f; set +a") == HOSTILE
    assert not list(work.glob("PWNED*"))


@pytest.mark.parametrize("value", ["a\nb", "ib0\rreboot", "x\x00y", "tab\there"])
def test_control_characters_are_refused_whatever_the_policy(tmp_path: Path, value: str) -> None:
    for policy in ("error", "warn"):
        message = refused(tmp_path, nodetune_rocm_env={"NT_VALUE": value, "NCCL_DEBUG": "WARN"},
                          nodetune_rocm_env_policy=policy)
        assert "nodetune_rocm_env['NT_VALUE']" in message and "control character" in message


def test_rccl_conf_holds_exactly_the_variables_and_no_comment_rccl_would_read(tmp_path: Path) -> None:
    files, _ = build(tmp_path, nodetune_rocm_profile="mixed_precision",
                     nodetune_rocm_env={"NCCL_MIN_NCHANNELS": 112, "HSA_NO_SCRATCH_RECLAIM": 1})
    assert rccl_reads(files["rccl.conf"]) == {**MATRIX["mixed_precision"], "NCCL_MIN_NCHANNELS": "112", **NCCL_ENV}
    assert all(line.startswith("#") or "=" in line for line in files["rccl.conf"].splitlines())


def test_files_are_the_same_for_the_same_input(tmp_path: Path) -> None:
    """Verify compares file contents: the rendering must not depend on dict order or run."""
    one, _ = build(tmp_path, nodetune_rocm_profile="multi_node",
                   nodetune_rocm_env={"NCCL_DEBUG": "WARN", "NCCL_ALGO": "Tree"})
    two, _ = build(tmp_path, nodetune_rocm_profile="multi_node",
                   nodetune_rocm_env={"NCCL_ALGO": "Tree", "NCCL_DEBUG": "WARN"})
    assert one == two


def test_docs_cover_every_variable_wrong_name_and_profile() -> None:
    docs = (REPO / "docs/rocm.md").read_text()
    names = [*rocm_catalog.VARIABLES, *rocm_catalog.WRONG_NAMES, *rocm_catalog.PER_RANK, *rocm_catalog.PROFILES]
    assert [n for n in names if f"`{n}`" not in docs] == []
    for profile in rocm_catalog.PROFILES.values():  # the table shows each profile's values
        row = next(line for line in docs.splitlines() if line.startswith(f"| `{profile.name}` |"))
        assert all(f"`{value}`" in row or f"`{name}={value}`" in row for name, value in profile.env.items()), row
