"""A real Prometheus for the live tests: generated OpenMetrics -> promtool blocks -> server.

The session fixture writes a vLLM 0.33 P/D cluster (2 prefill + 4 decode instances, histograms,
counters with a restart and a partial DP reset, node_infiniband counters, an in-house "acme"
stack) ending three hours ago, builds a TSDB with ``promtool tsdb create-blocks-from
openmetrics``, starts ``prometheus`` on a free 127.0.0.1 port and stops it by its pid at the end.
Without promtool/prometheus the tests are skipped, unless PDPROBE_REQUIRE_LIVE=1.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pdprobe.collectors.prometheus_target import PrometheusTarget
from tests.live.omgen import ClusterSpec, Generated, generate
from tests.live.prom_server import PromServer, binaries, create_blocks

# promtool only backfills the past, and Prometheus' head covers the last ~2 h: end well before.
END_BEFORE_NOW_S = 3 * 3600


@dataclass(frozen=True)
class LiveCluster:
    url: str
    openmetrics: Path
    generated: Generated

    @property
    def spec(self) -> ClusterSpec:
        return self.generated.spec

    def target(self, **kw: object) -> PrometheusTarget:
        """The whole generated window, ending at its last sample."""
        args: dict[str, object] = {"url": self.url, "since_s": float(self.spec.duration_s),
                                   "until_ts": self.generated.end_ts, "timeout_s": 60.0}
        args.update(kw)
        return PrometheusTarget(**args)  # type: ignore[arg-type]

    def cli_args(self) -> list[str]:
        return ["--prometheus", self.url, "--since", f"{self.spec.duration_s}s",
                "--until", f"{self.generated.end_ts:.0f}", "--timeout", "60"]


def require_prometheus() -> tuple[str, str]:
    found = binaries()
    if found is None:
        if os.environ.get("PDPROBE_REQUIRE_LIVE") == "1":
            pytest.fail("promtool/prometheus are not installed but PDPROBE_REQUIRE_LIVE=1")
        pytest.skip("promtool/prometheus not installed (apt-get install prometheus)")
    return found


@pytest.fixture(scope="session")
def live_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCluster]:
    promtool, prometheus = require_prometheus()
    root = tmp_path_factory.mktemp("live")
    end = (int(time.time()) // 15) * 15 - END_BEFORE_NOW_S
    spec = ClusterSpec(end_ts=end, dp_partial_reset=(2, 0.5), acme=True)
    om = root / "cluster.om"
    generated = generate(spec, om)
    create_blocks(om, root / "tsdb", promtool)
    server = PromServer.start(root / "tsdb", root / "server", prometheus)
    try:
        yield LiveCluster(server.url, om, generated)
    finally:
        server.stop()


@pytest.fixture(scope="session")
def offline_dataset(live_cluster: LiveCluster):  # type: ignore[no-untyped-def]
    """The same cluster read offline from its OpenMetrics file (the reference)."""
    from pdprobe.services.diagnose import DiagnoseRequest, load_dataset

    dataset, _ = load_dataset(DiagnoseRequest(paths=(live_cluster.openmetrics,)))
    return dataset
