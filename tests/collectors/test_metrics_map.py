"""The --metrics-map TOML: parsing, validation errors (one line naming the file), lookups."""

from __future__ import annotations

from pathlib import Path

import pytest

from pdprobe import signals as S
from pdprobe.collectors import promql_plan as pp
from pdprobe.collectors.metrics_map import known_signals, load_metrics_map
from pdprobe.errors import InputError


def test_fixture_map_parses(fixtures_dir: Path) -> None:
    m = load_metrics_map(fixtures_dir / "live" / "acme-map.toml")
    assert m.network_selector == 'job="node"' and m.selector == ""
    assert m.role_labels == ("tier",)
    assert m.role_of_value("CTX") == "prefill" and m.role_of_value("gen") == "decode"
    assert m.role_of_value("other") is None
    assert [(r.role, r.matchers) for r in m.role_selectors] == [("decode", 'acme_pool="decode-pool"')]
    by_name: dict[str, list] = {}
    for spec in m.specs:
        by_name.setdefault(spec.name, []).append(spec)
    (inflight,) = by_name["acme_inflight"]
    assert (inflight.signal, inflight.kind, inflight.engine) == (S.REQUESTS_RUNNING, "gauge", "vllm")
    (ttft,) = by_name["acme_ttft_ms"]
    assert (ttft.kind, ttft.scale, ttft.engine) == ("histogram", 0.001, "custom")
    failed = [s for s in by_name["acme_requests_total"] if s.label_filter]
    assert failed[0].label_filter == (("outcome", "error|timeout"),)


def test_map_specs_are_found_by_discovery(fixtures_dir: Path) -> None:
    m = load_metrics_map(fixtures_dir / "live" / "acme-map.toml")
    index = pp.SpecIndex.build(m)
    assert set(index.custom_names()) >= {"acme_inflight", "acme_ttft_ms_bucket",
                                         "acme_requests_total"}
    engine, _ = pp.discovery_matchers("", m.network_selector, index)
    assert "acme_ttft_ms_bucket" in engine
    fams = pp.families_from_names(["acme_inflight", "acme_ttft_ms_bucket", "acme_ttft_ms_sum",
                                   "acme_ttft_ms_count", "acme_requests_total"], index)
    assert {f.exposed: f.kind for f in fams} == {
        "acme_inflight": "gauge", "acme_ttft_ms": "histogram", "acme_requests_total": "counter"}


@pytest.mark.parametrize(("text", "message"), [
    ("version = 2", "version: 2 is not supported"),
    ("colour = 1", "key 'colour' is not part of the metrics-map format"),
    ("[[metric]]\nname = 'x'\nsignal = 'nope'\ntype = 'gauge'",
     "[[metric]] #1: signal 'nope' is not a pdprobe signal"),
    ("[[metric]]\nname = 'x'\nsignal = 'ttft_s'\ntype = 'summary'",
     "[[metric]] #1: type 'summary' must be gauge, counter or histogram"),
    ("[[metric]]\nname = 'x'\nsignal = 'ttft_s'\ntype = 'histogram'\nscale = 0",
     "scale 0 must be a positive number"),
    ("[rename]\n'x' = 'vllm:does_not_exist'", "'vllm:does_not_exist' is not a metric pdprobe knows"),
    ("[scope]\nselector = 'namespace=llm'", "is not a list of PromQL label matchers"),
    ("[[roles.selector]]\nrole = 'boss'\nmatch = 'a=\"b\"'", "role 'boss' must be prefill"),
    ("[roles]\nprefill_values = ['x']\ndecode_values = ['X']", "listed for both prefill and decode"),
    ("version = ", "not valid TOML"),
])
def test_invalid_maps_fail_with_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "map.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as info:
        load_metrics_map(path)
    line = info.value.one_line()
    assert line.startswith(f"{path}: ") and message in line and "\n" not in line


def test_missing_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read the metrics map"):
        load_metrics_map(tmp_path / "absent.toml")


def test_known_signals_cover_the_catalog() -> None:
    from pdprobe.collectors.metric_catalog import ALL_SPECS

    assert {s.signal for s in ALL_SPECS} <= known_signals()
    assert "gauge" not in known_signals() and S.EV_PREEMPTION not in known_signals()
