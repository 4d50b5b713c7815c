"""Role resolution: options > labels > names > evidence; conflicts are input errors."""

from __future__ import annotations

import pytest

from pdprobe.collectors.roles import (
    RoleOptions,
    node_of,
    resolve_roles,
    role_from_label_value,
    role_from_name,
)
from pdprobe.dataset import ROLE_FROM_EVIDENCE, ROLE_FROM_LABEL, RoleHint
from pdprobe.errors import InputError, UsageError


@pytest.mark.parametrize(
    ("name", "role"),
    [
        ("vllm-prefill-0:8000", "prefill"),
        ("llm-decode-7d9f-abcde", "decode"),
        ("ctx-worker-1", "prefill"),
        ("gen-3", "decode"),
        ("node-3:8000", None),
        ("prefill-decode-proxy", None),  # ambiguous names decide nothing
        ("generic-engine", None),  # "gen" only as a whole word
    ],
)
def test_role_from_name(name: str, role: str | None) -> None:
    assert role_from_name(name) == role


@pytest.mark.parametrize(("value", "role"), [("prefill", "prefill"), ("Decode", "decode"),
                                              ("kv_consumer", "decode"), ("unified", None),
                                              ("backend", None)])
def test_role_from_label_value(value: str, role: str | None) -> None:
    assert role_from_label_value(value) == role


def _resolve(names, hints=(), options=None):
    infos, warnings = resolve_roles(names, hints, options or RoleOptions(), {}, {})
    return {i.name: i for i in infos}, warnings


def test_label_beats_name_and_evidence_with_warning() -> None:
    hints = [RoleHint("decode-0:8000", "prefill", "label role=prefill", ROLE_FROM_LABEL, "m.prom"),
             RoleHint("decode-0:8000", "decode", "one output token", ROLE_FROM_EVIDENCE)]
    infos, warnings = _resolve(["decode-0:8000"], hints)
    assert infos["decode-0:8000"].role == "prefill"
    assert "label role=prefill" in infos["decode-0:8000"].role_source
    assert warnings and "overrides" in warnings[0]


def test_conflicting_labels_are_an_input_error_naming_both_sources() -> None:
    hints = [RoleHint("a:1", "prefill", "label role=prefill", ROLE_FROM_LABEL, "one.prom"),
             RoleHint("a:1", "decode", "label engine_type=decode", ROLE_FROM_LABEL, "two.prom")]
    with pytest.raises(InputError) as err:
        _resolve(["a:1"], hints)
    msg = err.value.one_line()
    assert "one.prom" in msg and "two.prom" in msg and "--prefill-match" in msg


def test_options_override_everything() -> None:
    hints = [RoleHint("a:1", "decode", "label", ROLE_FROM_LABEL)]
    infos, _ = _resolve(["a:1", "b:1"], hints, RoleOptions(prefill_match=r"^a:"))
    assert infos["a:1"].role == "prefill"
    assert infos["a:1"].role_source.startswith("--prefill-match")
    assert infos["b:1"].role == "unknown"


def test_overlapping_options_and_bad_regex_are_usage_errors() -> None:
    with pytest.raises(UsageError):
        _resolve(["x"], options=RoleOptions(prefill_match="x", decode_match="x"))
    with pytest.raises(UsageError):
        _resolve(["x"], options=RoleOptions(prefill_match="("))


def test_node_of() -> None:
    assert node_of("10.0.0.5:8000") == "10.0.0.5"
    assert node_of("[fe80::1]:9100") == "fe80::1"
    assert node_of("decode-0") == "decode-0"


def test_a_role_pattern_matching_no_instance_is_a_warning_naming_them() -> None:
    names = [f"10.0.1.{10 + i}:8000" for i in range(6)]
    _, warnings = _resolve(names, options=RoleOptions(prefill_match="ctx-", decode_match="1[45]:"))
    assert warnings == ("--prefill-match 'ctx-' matched none of the 6 instances "
                        "(10.0.1.10:8000, 10.0.1.11:8000, 10.0.1.12:8000, 10.0.1.13:8000, ...)",)
    _, warnings = _resolve(["a:1"], options=RoleOptions(decode_match="gen"))
    assert warnings == ("--decode-match 'gen' matched none of the 1 instance (a:1)",)
    _, warnings = _resolve([], options=RoleOptions(decode_match="gen"))
    assert warnings == ("--decode-match 'gen' matched nothing: the inputs name no instance",)
    _, warnings = _resolve(names, options=RoleOptions(prefill_match="0:", decode_match="1[2-5]"))
    assert warnings == ()
