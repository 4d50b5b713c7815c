"""The engine table (pdprobe/collectors/engines.py) covers every engine the catalog names.

A new engine is its specs plus one ``EngineNames`` line; these checks fail when the line is
missing or disagrees with the specs, instead of the engine silently ranking last or never being
discovered live.
"""

from __future__ import annotations

import re
from typing import get_args

from pdprobe.collectors import engines
from pdprobe.collectors import metric_catalog as mc
from pdprobe.collectors import promql_plan as pp
from pdprobe.collectors.metric_spec import Engine


def test_every_engine_of_the_catalog_has_a_line() -> None:
    listed = {e.engine for e in engines.ENGINES}
    assert {s.engine for s in mc.ALL_SPECS} <= listed
    assert set(get_args(Engine)) == listed
    assert set(engines.ENGINE_PREFERENCE) <= listed


def test_prefixes_name_the_engine_of_its_specs() -> None:
    for spec in mc.ALL_SPECS:
        found = mc.engine_of(spec.name)
        if found is not None and spec.engine not in ("rdma-exporter", "custom"):
            assert found == spec.engine, spec.name


def test_live_discovery_finds_every_catalog_family() -> None:
    pattern = re.compile(f"{engines.DISCOVERY_RE}|{pp.NETWORK_NAME_RE}")
    for spec in mc.ALL_SPECS:
        names = [spec.name + s for s, _ in pp.HIST_SUFFIXES] if spec.kind == "histogram" \
            else [spec.name]
        for name in names:
            assert pattern.fullmatch(name), name
