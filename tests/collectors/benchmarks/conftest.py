"""Helpers for the benchmark-output readers' tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from pdprobe.collectors.base import ReadContext, reader_for
from pdprobe.collectors.io import sniff
from pdprobe.dataset import Partial
from tests.conftest import FIXTURES

BENCH = FIXTURES / "benchmarks"


@pytest.fixture
def bench_dir() -> Path:
    return BENCH


def read(path: Path) -> Partial:
    """Sniff and read ``path`` the way ``diagnose`` does."""
    kind = sniff(path)
    assert kind.kind == "benchmark", kind
    return reader_for(kind.kind)(path, ReadContext())
