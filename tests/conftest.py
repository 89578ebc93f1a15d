from __future__ import annotations

import pytest

from tests import realdata


def pytest_sessionfinish(session, exitstatus):
    realdata.cleanup()


@pytest.fixture
def real_capture():
    """Factory: ``real_capture("knit")`` -> extracted node root (skips where ../shared is absent)."""
    return realdata.capture_root
