"""inference-perf ``per_request_lifecycle_metrics.json`` read as request records.

Fixture: tests/fixtures/benchmarks/inference_perf_per_request_lifecycle_metrics.json, written
by make_fixtures.py the way kubernetes-sigs/inference-perf ``inference_perf/reportgen/base.py``
builds the list and ``inference_perf/client/filestorage/local.py`` saves it (``indent=2``);
``info`` is ``InferenceInfo.model_dump()`` of ``inference_perf/apis/base.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from tests.collectors.benchmarks.conftest import read

NAME = "inference_perf_per_request_lifecycle_metrics.json"


def test_reads_token_times(bench_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / NAME
    path.write_text((bench_dir / NAME).read_text())
    os.utime(path, (1748858410.0, 1748858410.0))
    part = read(path)
    req = part.requests
    assert part.source.format == "inference-perf"
    assert len(req) == 7
    assert list(req["status"]) == ["ok"] * 5 + ["error", "timeout"]  # HTTP Error 504
    assert req["arrival_ts"].max() < 1748858410.0
    assert np.diff(req["arrival_ts"].to_numpy())[0] == pytest.approx(0.4)
    assert req["ttft_s"].iloc[0] == pytest.approx(0.12)
    assert req["tpot_s"].iloc[2] == pytest.approx(np.mean([0.018, 0.019, 0.020, 0.021, 0.090]))
    assert any("a guess" in n for n in part.source.notes)


@pytest.mark.parametrize("shape", ["2025", "response_info"])
def test_older_info_shapes(bench_dir: Path, tmp_path: Path, shape: str) -> None:
    """``InferenceInfo`` before the multimodal rewrite (git history of apis/base.py)."""
    items = json.loads((bench_dir / NAME).read_text())
    for item in items:
        resp = item["info"]["response_metrics"]
        if shape == "2025":
            item["info"] = {"input_tokens": item["info"]["input_tokens"],
                            "output_tokens": resp["output_tokens"],
                            "output_token_times": resp["output_token_times"], "extra_info": {}}
        else:
            item["info"] = {"input_tokens": item["info"]["input_tokens"], "extra_info": {},
                            "lora_adapter": None,
                            "response_info": {"response_chunks": resp["response_chunks"],
                                              "chunk_times": resp["chunk_times"],
                                              "output_tokens": resp["output_tokens"],
                                              "output_token_times": resp["output_token_times"]}}
    path = tmp_path / NAME
    path.write_text(json.dumps(items))
    req = read(path).requests
    assert req["output_tokens"].tolist() == [5, 4, 6, 3, 5, 0, 0]
    assert req["ttft_s"].iloc[1] == pytest.approx(0.21)
