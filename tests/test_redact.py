"""pdprobe/redact.py: which extra headers are secrets."""

from __future__ import annotations

import pytest

from pdprobe.redact import secret_header


@pytest.mark.parametrize(("name", "value"), [
    ("Authorization", "Bearer abc"),
    ("Proxy-Authorization", "Basic Ym9iOnB3"),
    ("Cookie", "sid=1"),
    ("X-Api-Key", "k1"),
    ("X-Auth-Token", "t"),
    ("X-Amz-Security-Token", "FwoGZX"),
    ("CF-Access-Client-Secret", "s3"),
    ("X-Vault-Token", "hvs.x"),
    ("X-Custom", "Bearer eyJhbGciOi"),
    ("X-Custom", "5f9a2c1e8b7d4a6f9e0c3b2a"),  # a key-like value under any name
])
def test_credential_headers_are_secrets(name: str, value: str) -> None:
    assert secret_header(name, value)


@pytest.mark.parametrize(("name", "value"), [
    ("X-Scope-OrgID", "prod"),
    ("X-Scope-OrgID", "tenant-1"),
    ("Accept-Encoding", "gzip"),
    ("X-Grafana-Org-Id", "1"),
    ("X-Forwarded-Proto", "https"),
    ("X-Cluster", "a-rather-long-cluster-name"),  # long but no digits: a name, not a key
])
def test_plain_headers_are_not_secrets(name: str, value: str) -> None:
    assert not secret_header(name, value)
