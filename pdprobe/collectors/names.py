"""What an instance name says about itself: address, host, port, pod; names from file names.

Sources name the same engine differently: Prometheus' ``instance="10.0.0.5:8000"``, a router's
``server="http://10.0.0.5:8000/"``, a gateway's ``10.0.0.5`` or ``h100-node-3``, a log file
``10.0.0.5_8000.log`` or a ``kubectl logs --prefix`` stream ``[pod/vllm-decode-0/vllm]``. These
helpers turn one such name into facts (``InstanceKey.facts``) that the identity step
(``collectors/identity.py``) matches across sources. Pure string work, no pandas.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Final

# File-name endings dropped to get an instance name (decode-2.log.gz -> decode-2). Only these:
# a name is never cut at its first dot (10.0.0.5_8000.prom is 10.0.0.5:8000, not 10).
NAME_SUFFIXES: Final = (".gz", ".zst", ".zstd", ".log", ".txt", ".prom", ".om", ".metrics",
                        ".openmetrics", ".jsonl", ".json", ".csv", ".tsv", ".parquet", ".out")
# host_port as written in a file name (':' is awkward in file names and rejected by some tools).
_HOST_PORT_FILE: Final = re.compile(r"^(?P<host>.+?)_(?P<port>\d{2,5})$")
_HOST_PORT: Final = re.compile(r"^(?P<host>[A-Za-z0-9_.\-]+):(?P<port>\d{1,5})$")
_BRACKETED_V6: Final = re.compile(r"^\[(?P<host>[0-9A-Fa-f:.%a-zA-Z]+)\](?::(?P<port>\d{1,5}))?$")
_URL: Final = re.compile(r"^(?P<scheme>[a-zA-Z][a-zA-Z0-9+.\-]*)://(?:[^@/]*@)?(?P<netloc>[^/?#]+)")
_DEFAULT_PORTS: Final = {"http": "80", "https": "443", "grpc": "80", "grpcs": "443"}
# DNS-1123 label/subdomain: what Kubernetes accepts as a pod name.
_DNS_NAME: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# A pod of a Deployment (name-<replicaset hash>-<5 chars>); StatefulSet pods (name-<ordinal>) are
# not recognised by shape because host names (node-1) look the same.
_POD_NAME: Final = re.compile(r"^[a-z0-9][-a-z0-9]*-[a-z0-9]{5,10}-[a-z0-9]{5}$")


def is_ip(host: str) -> bool:
    """True for an IPv4 or IPv6 literal (without brackets or port)."""
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True


def normal_host(host: str) -> str:
    """Lower case, no trailing dot, IPv6 in its compressed form (2001:DB8:0::5 -> 2001:db8::5)."""
    host = host.strip().rstrip(".").lower()
    if ":" in host:
        try:
            return str(ipaddress.IPv6Address(host.split("%", 1)[0]))
        except ValueError:
            return host
    return host


def address(host: str, port: str) -> str:
    """``host:port`` as Prometheus prints it; IPv6 hosts in brackets."""
    host = normal_host(host)
    return f"[{host}]:{int(port)}" if ":" in host else f"{host}:{int(port)}"


def split_address(name: str) -> tuple[str, str | None] | None:
    """``(host, port or None)`` if ``name`` is a host, ``host:port``, ``[v6]:port``, a bare IPv6
    address or a URL; None for anything else (a pod name is a host name too, so it parses)."""
    name = name.strip()
    if not name or any(c.isspace() for c in name):
        return None
    url = _URL.match(name)
    if url:
        netloc = url.group("netloc")
        parsed = split_address(netloc)
        if parsed is None:
            return None
        host, port = parsed
        return host, port or _DEFAULT_PORTS.get(url.group("scheme").lower())
    v6 = _BRACKETED_V6.match(name)
    if v6:
        return normal_host(v6.group("host")), v6.group("port")
    if name.count(":") >= 2 and is_ip(name):
        return normal_host(name), None
    hp = _HOST_PORT.match(name)
    if hp:
        return normal_host(hp.group("host")), hp.group("port")
    if re.fullmatch(r"[A-Za-z0-9_.\-]+", name):
        return normal_host(name), None
    return None


def facts_of(name: str) -> tuple[tuple[str, str], ...]:
    """Facts a name carries by its shape alone: ``address``/``host``/``port``, ``pod``."""
    parsed = split_address(name)
    if parsed is None:
        return ()
    host, port = parsed
    out: list[tuple[str, str]] = []
    if port is not None:
        out.append(("address", address(host, port)))
        out.append(("port", str(int(port))))
    out.append(("host", host))
    if port is None and not is_ip(host) and _POD_NAME.match(host):
        out.append(("pod", host))
    return tuple(out)


def strip_suffixes(file_name: str) -> str:
    """``decode-2.log.gz`` -> ``decode-2``; rotated ``x.log.1`` -> ``x``; other dots are kept."""
    name = re.sub(r"(\.log)\.\d+$", r"\1", file_name)
    changed = True
    while changed:
        changed = False
        for suffix in NAME_SUFFIXES:
            if name.lower().endswith(suffix) and len(name) > len(suffix):
                name = name[: -len(suffix)]
                changed = True
    return name


def name_from_file(path: Path | str) -> tuple[str, str]:
    """The instance name a per-instance file's name gives, and how it was read.

    ``10.0.0.5_8000.prom`` -> ``10.0.0.5:8000`` (host_port read as the Prometheus instance
    label), ``[2001:db8::5]:8000.log`` and ``2001_db8__5_8000``-style names are left readable,
    ``vllm-decode-6d8f9-x2k4q.log`` -> the pod name. Never cut at the first dot.
    """
    stem = strip_suffixes(Path(path).name)
    hp = _HOST_PORT_FILE.match(stem)
    if hp:
        host = hp.group("host")
        parsed = split_address(host)
        if parsed is not None and parsed[1] is None and _plausible_host(parsed[0]):
            return address(parsed[0], hp.group("port")), "host_port file name read as host:port"
    parsed = split_address(stem)
    if parsed is not None and parsed[1] is not None:
        return address(*parsed), "file name"  # type: ignore[arg-type]
    return stem, "file name"


def _plausible_host(host: str) -> bool:
    """An IP or a DNS name (pods, nodes, compose services); not ``metrics`` of ``metrics_2``."""
    if is_ip(host) or host == "localhost":
        return True
    return bool(_DNS_NAME.match(host)) and (any(c.isdigit() for c in host) or "." in host
                                            or "-" in host)


__all__ = [
    "NAME_SUFFIXES",
    "address",
    "facts_of",
    "is_ip",
    "name_from_file",
    "normal_host",
    "split_address",
    "strip_suffixes",
]
