"""Names from file names and what a name says by its shape."""

from __future__ import annotations

import pytest

from pdprobe.collectors.names import facts_of, name_from_file, split_address


@pytest.mark.parametrize("file_name, expected", [
    ("10.0.0.5_8000.prom", "10.0.0.5:8000"),  # never cut at the first dot ("10")
    ("10.0.0.5_8000.log.gz", "10.0.0.5:8000"),
    ("10.0.0.5:8000.om", "10.0.0.5:8000"),
    ("[2001:db8::5]:8000.log", "[2001:db8::5]:8000"),
    ("2001:db8::5_8000.prom", "[2001:db8::5]:8000"),
    ("node-3_8000.txt", "node-3:8000"),
    ("localhost_8001.log", "localhost:8001"),
    ("vllm-decode-6d8f9-x2k4q.log", "vllm-decode-6d8f9-x2k4q"),
    ("h100-node-3.example.com.log", "h100-node-3.example.com"),
    ("decode-2.log.1", "decode-2"),
    ("metrics_20.prom", "metrics_20"),  # not a host: kept as written
    ("engine.log", "engine"),
])
def test_name_from_file(file_name: str, expected: str) -> None:
    assert name_from_file(file_name)[0] == expected


@pytest.mark.parametrize("name, expected", [
    ("http://10.0.0.5:8000", ("10.0.0.5", "8000")),
    ("https://Node-3.Example.com/v1/completions", ("node-3.example.com", "443")),
    ("http://user:secret@10.0.0.5:8000/", ("10.0.0.5", "8000")),
    ("[::1]:80", ("::1", "80")),
    ("2001:DB8:0::5", ("2001:db8::5", None)),
    ("h100-node-3", ("h100-node-3", None)),
    ("pod/x/y", None),
    ("two words", None),
])
def test_split_address(name: str, expected: tuple[str, str | None] | None) -> None:
    assert split_address(name) == expected


def test_facts_of_a_deployment_pod_name() -> None:
    facts = dict(facts_of("vllm-decode-6d8f9c7b5-x2k4q"))
    assert facts["pod"] == "vllm-decode-6d8f9c7b5-x2k4q"
    assert "address" not in facts


def test_facts_of_an_address() -> None:
    assert dict(facts_of("10.0.0.5:08000")) == {"address": "10.0.0.5:8000", "port": "8000",
                                                 "host": "10.0.0.5"}
