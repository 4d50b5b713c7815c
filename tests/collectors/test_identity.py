"""The identity step: one instance per engine process across sources, never a silent guess."""

from __future__ import annotations

from pathlib import Path

import pytest

from pdprobe.collectors.identity import AliasMap, SourceKeys, parse_aliases, resolve
from pdprobe.dataset import InstanceKey
from pdprobe.errors import InputError, UsageError


def K(name: str, origin: str = "", **facts: str) -> InstanceKey:
    return InstanceKey(name, tuple(facts.items()), origin)


def src(path: str, kind: str, *keys: InstanceKey) -> SourceKeys:
    return SourceKeys(path, kind, keys)


def canonical_of(resolution, source_index: int, name: str) -> str:
    return resolution.renames[source_index].get(name, name)


def test_same_host_with_one_port_joins_a_port_less_gateway_name() -> None:
    # The first example: the gateway says h100-node-3, Prometheus h100-node-3:8000.
    r = resolve([src("requests.jsonl", "requests", K("h100-node-3"), K("h100-node-4")),
                 src("metrics.om", "metrics", K("h100-node-3:8000"), K("h100-node-4:8000"))])
    assert canonical_of(r, 0, "h100-node-3") == "h100-node-3:8000"
    assert canonical_of(r, 0, "h100-node-4") == "h100-node-4:8000"
    assert len(r.identities) == 2
    how = {a.name: a.how for i in r.identities for a in i.aliases}
    assert how["h100-node-3"] == "same host with one instance"
    assert how["h100-node-3:8000"] == "canonical name"
    assert not r.warnings


def test_two_ports_on_one_host_are_reported_not_guessed() -> None:
    r = resolve([src("requests.jsonl", "requests", K("10.0.0.9")),
                 src("metrics.om", "metrics", K("10.0.0.9:8000"), K("10.0.0.9:8001"))])
    assert canonical_of(r, 0, "10.0.0.9") == "10.0.0.9"
    assert len(r.identities) == 2  # the host name stands for both: not a third instance
    assert r.umbrellas == {"10.0.0.9"}
    assert len(r.warnings) == 1
    assert "10.0.0.9:8000, 10.0.0.9:8001" in r.warnings[0]
    assert "--alias 10.0.0.9=HOST:PORT" in r.warnings[0]


def test_pod_label_links_a_kubectl_stream_to_the_scrape_address() -> None:
    r = resolve([
        src("metrics.om", "metrics",
            K("10.0.0.5:8000", "label instance", pod="vllm-decode-6d8f9-x2k4q", namespace="llm",
              node="gpu-3")),
        src("cluster.log", "engine-log",
            K("vllm-decode-6d8f9-x2k4q", "kubectl prefix", pod="vllm-decode-6d8f9-x2k4q",
              container="vllm")),
        src("requests.jsonl", "requests", K("10.0.0.5")),
    ])
    assert canonical_of(r, 1, "vllm-decode-6d8f9-x2k4q") == "10.0.0.5:8000"
    assert canonical_of(r, 2, "10.0.0.5") == "10.0.0.5:8000"
    (ident,) = r.identities
    how = {a.name: a.how for a in ident.aliases}
    assert how["vllm-decode-6d8f9-x2k4q"] == "same pod; named by kubectl prefix"


def test_pod_in_two_namespaces_is_ambiguous() -> None:
    r = resolve([
        src("metrics.om", "metrics", K("10.0.0.5:8000", pod="vllm-0", namespace="prod"),
            K("10.0.1.5:8000", pod="vllm-0", namespace="staging")),
        src("vllm-0.log", "engine-log", K("vllm-0", "file name", pod="vllm-0")),
    ])
    assert canonical_of(r, 1, "vllm-0") == "vllm-0"
    assert len(r.identities) == 2
    assert r.umbrellas == {"vllm-0"}
    assert any("prod, staging" in w for w in r.warnings)


def test_same_pod_name_in_two_namespaces_with_namespace_facts_stays_two() -> None:
    r = resolve([
        src("a.om", "metrics", K("prod/vllm-0", pod="vllm-0", namespace="prod")),
        src("b.om", "metrics", K("staging/vllm-0", pod="vllm-0", namespace="staging")),
    ])
    assert len(r.identities) == 2


def test_short_dns_name_joins_the_fqdn_with_one_port() -> None:
    r = resolve([src("requests.csv", "requests", K("h100-node-3")),
                 src("m.om", "metrics", K("h100-node-3.cluster.local:8000"))])
    assert canonical_of(r, 0, "h100-node-3") == "h100-node-3.cluster.local:8000"


def test_router_url_and_ipv6_normalise_to_one_address() -> None:
    r = resolve([src("router.prom", "metrics", K("[2001:db8::5]:8000", url="http://[2001:db8:0::5]:8000")),
                 src("requests.jsonl", "requests", K("http://[2001:DB8::5]:8000/"))])
    assert len(r.identities) == 1
    assert canonical_of(r, 1, "http://[2001:DB8::5]:8000/") == "[2001:db8::5]:8000"


def test_two_addresses_are_never_merged_through_a_shared_pod_fact() -> None:
    # One pod with two engines on two ports: a pod-named log cannot belong to both.
    r = resolve([
        src("m.om", "metrics", K("10.0.0.5:8000", pod="p-abcde-fghij", namespace="x"),
            K("10.0.0.5:8001", pod="p-abcde-fghij", namespace="x")),
    ])
    assert len(r.identities) == 2
    assert any("name different engines" in w for w in r.warnings)


def test_node_and_job_never_merge_instances() -> None:
    r = resolve([src("m.om", "metrics", K("10.0.0.5:8000", node="gpu-1", job="vllm"),
                     K("10.0.0.6:8000", node="gpu-1", job="vllm"))])
    assert len(r.identities) == 2


def test_alias_option_joins_what_no_rule_can() -> None:
    aliases = parse_aliases(["gw-backend-7=10.0.0.5:8000"], None)
    r = resolve([src("requests.jsonl", "requests", K("gw-backend-7")),
                 src("m.om", "metrics", K("10.0.0.5:8000"))], aliases)
    assert canonical_of(r, 0, "gw-backend-7") == "10.0.0.5:8000"
    how = {a.name: a.how for i in r.identities for a in i.aliases}
    assert how["gw-backend-7"] == "--alias"


def test_alias_resolves_the_two_port_ambiguity() -> None:
    aliases = parse_aliases(["10.0.0.9=10.0.0.9:8001"], None)
    r = resolve([src("requests.jsonl", "requests", K("10.0.0.9")),
                 src("m.om", "metrics", K("10.0.0.9:8000"), K("10.0.0.9:8001"))], aliases)
    assert canonical_of(r, 0, "10.0.0.9") == "10.0.0.9:8001"
    assert len(r.identities) == 2
    assert not r.warnings


def test_alias_file_both_forms(tmp_path: Path) -> None:
    f = tmp_path / "names.toml"
    f.write_text('[aliases]\n"gw-7" = "10.0.0.5:8000"\n\n'
                 '[instances."10.0.0.6:8000"]\nnames = ["gw-8", "decode-b"]\n')
    m = parse_aliases([], f)
    assert m.names == {"gw-7": "10.0.0.5:8000", "gw-8": "10.0.0.6:8000",
                       "decode-b": "10.0.0.6:8000"}


def test_alias_file_naming_one_name_twice_is_an_error(tmp_path: Path) -> None:
    f = tmp_path / "names.toml"
    f.write_text('[instances."a:1"]\nnames = ["x"]\n[instances."b:1"]\nnames = ["x"]\n')
    with pytest.raises(InputError, match="'x' is mapped to two instances"):
        parse_aliases([], f)


def test_alias_option_and_file_disagreeing_is_an_error(tmp_path: Path) -> None:
    f = tmp_path / "names.toml"
    f.write_text('[aliases]\n"x" = "b:1"\n')
    with pytest.raises(InputError, match="two instances"):
        parse_aliases(["x=a:1"], f)


def test_alias_naming_an_unknown_instance_is_an_error() -> None:
    aliases = AliasMap({"gw-7": "10.9.9.9:8000"}, {"gw-7": "--alias"})
    with pytest.raises(InputError, match=r"'10\.9\.9\.9:8000' is not named by any input"):
        resolve([src("r.jsonl", "requests", K("gw-7")), src("m.om", "metrics", K("10.0.0.5:8000"))],
                aliases)


@pytest.mark.parametrize("bad", ["no-equals", "=x", "x="])
def test_malformed_alias_option(bad: str) -> None:
    with pytest.raises(UsageError):
        parse_aliases([bad], None)


@pytest.mark.parametrize("text, match", [
    ("[aliases\n", "not valid TOML"),
    ("[other]\nx = 1\n", "unknown table"),
    ('[aliases]\n"x" = 3\n', "as a string"),
    ('[instances."a:1"]\nnames = "x"\n', "needs names"),
])
def test_bad_alias_files(tmp_path: Path, text: str, match: str) -> None:
    f = tmp_path / "names.toml"
    f.write_text(text)
    with pytest.raises(InputError, match=match):
        parse_aliases([], f)


def test_canonical_name_prefers_the_metrics_address() -> None:
    r = resolve([src("r.jsonl", "requests", K("decode-1:8000")),
                 src("logs/decode-1.log", "engine-log", K("decode-1", "file name")),
                 src("m.om", "metrics", K("decode-1:8000", "label instance"))])
    (ident,) = r.identities
    assert ident.name == "decode-1:8000"
    assert {a.source for a in ident.aliases if a.how.startswith("canonical")} == {"m.om"}


def test_gateway_machine_name_joins_through_the_node_label() -> None:
    # Bare metal: the gateway knows machines, Prometheus scrapes IPs and labels the node.
    r = resolve([src("requests.jsonl", "requests", K("h100-node-0"), K("h100-node-1")),
                 src("metrics.om", "metrics", K("10.0.1.10:8000", node="h100-node-0"),
                     K("10.0.2.10:8000", node="h100-node-1"), K("10.0.2.10:8001", node="h100-node-1"))])
    assert canonical_of(r, 0, "h100-node-0") == "10.0.1.10:8000"
    assert canonical_of(r, 0, "h100-node-1") == "h100-node-1"  # two engines on that machine
    assert any("h100-node-1" in w and "2 instances" in w for w in r.warnings)


def test_templated_systemd_unit_gives_the_port() -> None:
    r = resolve([src("metrics.om", "metrics", K("10.0.2.10:8000", node="h100-node-1"),
                     K("10.0.2.10:8001", node="h100-node-1")),
                 src("journal.log", "engine-log",
                     K("h100-node-1/vllm-decode@8001.service", "journalctl", host="h100-node-1",
                       unit="vllm-decode@8001.service"))])
    assert canonical_of(r, 1, "h100-node-1/vllm-decode@8001.service") == "10.0.2.10:8001"


def test_inputs_whose_names_match_nothing_are_reported() -> None:
    # Pods in the records, bare addresses in per-target scrapes: no rule links them.
    r = resolve([src("requests.jsonl", "requests", K("vllm-decode-6d8f9-x2k4q"),
                     K("vllm-prefill-6d8f9-abcde")),
                 src("metrics/", "metrics", K("10.0.0.5:8000"), K("10.0.0.6:8000"))])
    assert len(r.identities) == 4
    (warning,) = r.warnings
    assert "requests.jsonl, metrics/" in warning and "--alias" in warning
