"""AIPerf ``profile_export.jsonl`` read as request records.

Fixture: tests/fixtures/benchmarks/aiperf_profile_export.jsonl, written by make_fixtures.py the
way ai-dynamo/aiperf ``aiperf/post_processors/record_export_results_processor.py`` writes
``MetricRecordInfo`` lines (``aiperf/common/models/record_models.py``; the layout of
``docs/tutorials/working-with-profile-exports.md``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pdprobe.errors import InputError
from tests.collectors.benchmarks.conftest import read


def test_reads_records_in_their_own_units(bench_dir: Path) -> None:
    part = read(bench_dir / "aiperf_profile_export.jsonl")
    req = part.requests
    assert part.source.format == "aiperf"
    assert len(req) == 7  # the warmup record is left out
    assert any("1 warmup" in n for n in part.source.notes)
    assert req["arrival_ts"].iloc[0] == pytest.approx(1748858400.0)
    assert list(req["status"]) == ["ok"] * 5 + ["error", "aborted"]  # 499 / was_cancelled
    assert req["prompt_tokens"].tolist() == [512, 1024, 256, 2048, 768, 900, 1500]
    assert req["ttft_s"].iloc[0] == pytest.approx(0.12)
    assert req["tpot_s"].iloc[0] == pytest.approx(np.mean([0.020, 0.022, 0.021, 0.025]))
    assert req["e2e_s"].iloc[3] == pytest.approx(0.481)
    assert req["request_id"].iloc[0] == "00000000-0000-4000-8000-000000000001"
    assert any("worker_id is AIPerf's client worker" in n for n in part.source.notes)


def test_the_doc_example_record(tmp_path: Path) -> None:
    """The successful record of docs/tutorials/working-with-profile-exports.md, verbatim keys."""
    record = {
        "metadata": {"session_num": 45, "x_request_id": "7609a2e7-aa53-4ab1-98f4-f35ecafefd25",
                     "x_correlation_id": "32ee4f33-cfca-4cfc-988f-79b45408b909",
                     "conversation_id": "77aa5b0e-b305-423f-88d5-c00da1892599",
                     "turn_index": 0, "request_start_ns": 1759813207532900363,
                     "request_ack_ns": 1759813207650730976,
                     "request_end_ns": 1759813207838764604, "worker_id": "worker_359d423a",
                     "record_processor_id": "record_processor_1fa47cd7",
                     "benchmark_phase": "profiling", "was_cancelled": False,
                     "cancellation_time_ns": None},
        "metrics": {"input_sequence_length": {"value": 550, "unit": "tokens"},
                    "time_to_first_token": {"value": 255.88656799999998, "unit": "ms"},
                    "request_latency": {"value": 297.52522799999997, "unit": "ms"},
                    "output_token_count": {"value": 9, "unit": "tokens"},
                    "inter_chunk_latency": {"value": [4.898437, 5.316006, 4.801489, 5.674918,
                                                      4.811467, 5.097998, 5.504797, 5.533548],
                                            "unit": "ms"},
                    "output_sequence_length": {"value": 9, "unit": "tokens"},
                    "inter_token_latency": {"value": 5.2048325, "unit": "ms"},
                    "output_token_throughput_per_user": {"value": 192.1291415237666,
                                                         "unit": "tokens/sec/user"}},
        "error": None,
    }
    path = tmp_path / "profile_export.jsonl"
    path.write_text(json.dumps(record) + "\n")
    req = read(path).requests
    assert req["arrival_ts"].iloc[0] == pytest.approx(1759813207.5329)
    assert req["ttft_s"].iloc[0] == pytest.approx(0.25588656)
    assert req["tpot_s"].iloc[0] == pytest.approx(0.0052048325)
    assert (req["prompt_tokens"].iloc[0], req["output_tokens"].iloc[0]) == (550, 9)


def test_cut_file_keeps_whole_records(bench_dir: Path, tmp_path: Path) -> None:
    text = (bench_dir / "aiperf_profile_export.jsonl").read_text()
    path = tmp_path / "cut.jsonl"
    path.write_text(text[: len(text) - 200])
    part = read(path)
    assert len(part.requests) == 6
    assert any("broken" in w and "cut" in w for w in part.warnings)


def test_only_a_broken_line_is_one_line_error(bench_dir: Path, tmp_path: Path) -> None:
    first = (bench_dir / "aiperf_profile_export.jsonl").read_text().splitlines()[1]
    path = tmp_path / "cut.jsonl"
    path.write_text(first[:300])
    with pytest.raises(InputError, match="no readable AIPerf record"):
        read(path)
