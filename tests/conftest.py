"""Shared test fixtures: paths to the public traces and small helpers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Every JSON report built in-process is validated against the shipped JSON Schema.
pytest_plugins = ["tests.report.schema_check"]

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURES = REPO_ROOT / "tests" / "fixtures"


def _shared_dir() -> Path | None:
    env = os.environ.get("PDPROBE_SHARED")
    candidates = [Path(env)] if env else []
    candidates += [REPO_ROOT.parent / "shared", REPO_ROOT / ".." / "shared"]
    for c in candidates:
        if (c / "traces").is_dir():
            return c.resolve()
    return None


# The one reason every test needing the public traces gives when they are absent.
SHARED_TRACES_SKIP = "public traces not found beside the repository (../shared/traces): skipped"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The folder holding the public traces (``traces/``: Azure LLM-inference 2023 and Mooncake),
    beside the checkout as ``../shared`` (CI lays it there). Without it the tests needing it are
    skipped (README: "Without the public traces"); in CI they fail loudly."""
    found = _shared_dir()
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(f"{SHARED_TRACES_SKIP[:-len(': skipped')]} (CI must provide them)")
        pytest.skip(SHARED_TRACES_SKIP)
    return found


@pytest.fixture(scope="session")
def traces_dir(shared_dir: Path) -> Path:
    return shared_dir / "traces"


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES
