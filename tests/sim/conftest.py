"""Shared pieces of the simulator tests: a small, fast base configuration."""

from __future__ import annotations

import pytest

from pdprobe.profiles import BUILTIN_PROFILES
from pdprobe.sim.config import LengthDist, SimConfig

CHAT_PROMPT = LengthDist("lognormal", median=1500.0, sigma=0.7, max_tokens=16384)
CHAT_OUTPUT = LengthDist("lognormal", median=150.0, sigma=0.6, max_tokens=2048)


@pytest.fixture
def small_config() -> SimConfig:
    """3P/2D Llama-70B at a moderate 8 req/s for two simulated minutes."""
    return SimConfig(profile=BUILTIN_PROFILES["llama3-70b-h100-tp4"], prefill=3, decode=2,
                     duration_s=120.0, rate_rps=8.0, prompt=CHAT_PROMPT, output=CHAT_OUTPUT,
                     seed=7)
