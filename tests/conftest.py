from __future__ import annotations

import pytest

from tests import realdata


def pytest_sessionfinish(session, exitstatus):
    realdata.cleanup()


@pytest.fixture
def real_capture():
    """Factory: ``real_capture("knit")`` -> extracted node root (skips where ../shared is absent)."""
    return realdata.capture_root


@pytest.fixture(scope="module")
def simulated_kernel():
    """Every Root created in the module's tests answers writes with the lab's simulated kernel, as nodetune.lab's
    modules do on a lab node (``pytestmark = pytest.mark.usefixtures("simulated_kernel")``): tests that apply to
    simulated nodes in-process say so, nothing on the node does."""
    from ansible_collections.nodetune.instinct.plugins.module_utils import rootfs
    from ansible_collections.nodetune.lab.plugins.module_utils import simkernel

    simkernel.install()
    try:
        yield simkernel.BACKEND
    finally:
        rootfs.use_backend(None)
