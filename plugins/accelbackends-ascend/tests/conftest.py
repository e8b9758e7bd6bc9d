"""Every test starts without launcher or ACCELBACKENDS_* variables (the kit's fixture)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _isolated(accelbackends_clean_env: None) -> None:
    """Use the accelbackends kit's clean environment in every test."""
