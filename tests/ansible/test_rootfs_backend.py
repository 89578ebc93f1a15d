"""The root layer's write backend is chosen by the lab, never guessed from the node; real nodes get no simulator.

Issue 13 item 3: the simulator lives in the lab collection (nodetune.lab), the payload of the production modules
holds none of it, and a marker file on a node never turns its writes into simulated ones.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils import rootfs
from ansible_collections.nodetune.instinct.plugins.module_utils.plan import services
from ansible_collections.nodetune.instinct.plugins.plugin_utils.lab_backend import module_for
from ansible_collections.nodetune.lab.plugins.module_utils import simkernel, simnode
from ansible_collections.nodetune.lab.plugins.module_utils.simservices import SimServices

from tests.support.payload import payload_files
from tests.support.specs import small_spec

REPO = Path(__file__).resolve().parents[2]
CPU = "sys/devices/system/cpu"


def simulation_in(files: dict[str, bytes]) -> list[str]:
    return sorted(name for name, data in files.items()
                  if "nodetune/lab/" in name or re.search(r"/sim[a-z_]*\.py$", name)
                  or re.search(rb"\bsim(kernel|node|boot|services)\b|SimServices", data))


@pytest.mark.parametrize("module", ["nodetune.instinct.tune", "nodetune.instinct.verify",
                                    "nodetune.instinct.topology_facts"])
def test_production_payload_holds_no_simulation_code(module: str) -> None:
    files = payload_files(module)
    assert any(name.endswith("module_utils/rootfs.py") for name in files)  # the payload was read
    assert simulation_in(files) == []


def test_lab_payload_runs_the_production_module_with_the_simulated_kernel() -> None:
    files = payload_files("nodetune.lab.tune")
    names = {name.replace("ansible_collections/nodetune/", "") for name in files}
    assert {"lab/plugins/module_utils/simkernel.py", "lab/plugins/module_utils/simservices.py",
            "lab/plugins/module_utils/production/tune.py", "instinct/plugins/module_utils/apply/engine.py"} <= names
    production = files["ansible_collections/nodetune/lab/plugins/module_utils/production/tune.py"]
    source = REPO / "collection/ansible_collections/nodetune/instinct/plugins/modules/tune.py"
    assert production == source.read_bytes()


@pytest.fixture
def node(tmp_path: Path) -> Path:
    dest = tmp_path / "tiny"
    simnode.build(small_spec(), str(dest))
    return dest


def test_a_marker_on_the_node_does_not_select_the_simulated_kernel(node: Path) -> None:
    assert (node / simnode.MARKER).is_file()
    root = rootfs.Root(str(node))
    assert root.backend is None and services.for_root(root) is None
    online = (node / CPU / "online").read_text()
    root.write(CPU + "/smt/control", "off")  # a plain write: no simulated kernel offlines the siblings
    assert (node / CPU / "smt/control").read_text() == "off"
    assert (node / CPU / "online").read_text() == online


def test_the_lab_selects_the_simulated_kernel_explicitly(node: Path) -> None:
    root = simkernel.sim_root(str(node))
    assert root.backend is simkernel.BACKEND and isinstance(services.for_root(root), SimServices)
    root.write(CPU + "/smt/control", "off")
    assert (node / CPU / "online").read_text() == "0-15\n" and (node / CPU / "offline").read_text() == "16-31\n"


def test_install_is_process_wide_and_refuses_the_host(node: Path) -> None:
    simkernel.install()
    try:
        assert rootfs.Root(str(node)).backend is simkernel.BACKEND
        with pytest.raises(rootfs.RootError, match="lab nodes; it never writes to '/'"):
            rootfs.Root("/")
    finally:
        rootfs.use_backend(None)
    assert rootfs.Root(str(node)).backend is None


def test_the_action_picks_the_module_from_the_lab_variable_only() -> None:
    from ansible.errors import AnsibleActionFail

    assert module_for("nodetune.instinct.tune", {}) == "nodetune.instinct.tune"
    assert module_for("nodetune.instinct.tune", {"nodetune_lab_backend": "kernel"}) == "nodetune.instinct.tune"
    assert module_for("nodetune.instinct.verify", {"nodetune_lab_backend": "simulated"}) == "nodetune.lab.verify"
    with pytest.raises(AnsibleActionFail, match=r"nodetune_lab_backend 'simulate' is not valid: expected one of "
                                                r"kernel, simulated"):
        module_for("nodetune.instinct.tune", {"nodetune_lab_backend": "simulate"})


def test_the_production_collection_ships_no_simulator() -> None:
    instinct = REPO / "collection/ansible_collections/nodetune/instinct"
    shipped = [p.relative_to(instinct).as_posix() for p in instinct.rglob("*.py") if "tests/output" not in str(p)]
    assert not [p for p in shipped if re.search(r"(^|/)sim[a-z_]*\.py$", p)]
    for path in shipped:
        text = (instinct / path).read_text()
        assert not re.search(r"(from|import) +ansible_collections\.nodetune\.lab", text), path
        assert ".nodetune-simnode.json" not in text, path
