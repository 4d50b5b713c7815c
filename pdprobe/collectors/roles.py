"""Decide each instance's role (prefill / decode) from labels, names, evidence or options.

Precedence, highest first: ``--prefill-match``/``--decode-match`` options, an explicit label
(``role``, ``engine_type``, ``worker_type``, ...; a ``prefill_instance``/``decode_instance``
column), a name pattern in ``instance``/``job``/``pod``, then behavioural evidence (an instance
that emits one output token per request is a prefill instance). Two sources of the same
strength that disagree are an input error: the user must say which is right.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from pdprobe.collectors.metric_catalog import DECODE_VALUES, PREFILL_VALUES
from pdprobe.dataset import (
    ROLE_FROM_LABEL,
    ROLE_FROM_NAME,
    ROLE_FROM_OPTION,
    InstanceInfo,
    RoleHint,
)
from pdprobe.errors import InputError, UsageError
from pdprobe.signals import Role

PREFILL_NAME: Final = re.compile(r"(prefill|prefiller|producer|(^|[^a-z])ctx([^a-z]|$)|context)",
                                 re.IGNORECASE)
DECODE_NAME: Final = re.compile(r"(decode|decoder|consumer|(^|[^a-z])gen([^a-z]|$)|generation)",
                                re.IGNORECASE)


@dataclass(frozen=True)
class RoleOptions:
    """User overrides: regular expressions matched (search) against instance names."""

    prefill_match: str | None = None
    decode_match: str | None = None

    def compiled(self) -> tuple[re.Pattern[str] | None, re.Pattern[str] | None]:
        out: list[re.Pattern[str] | None] = []
        for opt, value in (("--prefill-match", self.prefill_match),
                           ("--decode-match", self.decode_match)):
            if not value:
                out.append(None)
                continue
            try:
                out.append(re.compile(value))
            except re.error as exc:
                raise UsageError(f"{opt} {value!r} is not a valid regular expression ({exc})",
                                 hint="quote it and escape special characters") from exc
        return out[0], out[1]


def role_from_label_value(value: str) -> Role | None:
    v = value.strip().lower()
    if v in PREFILL_VALUES or "prefill" in v:
        return "prefill"
    if v in DECODE_VALUES or "decode" in v:
        return "decode"
    return None


def role_from_name(name: str) -> Role | None:
    p, d = PREFILL_NAME.search(name), DECODE_NAME.search(name)
    if p and not d:
        return "prefill"
    if d and not p:
        return "decode"
    return None


def name_hints(names: Iterable[str], where: str, source: str = "") -> list[RoleHint]:
    """Hints from name patterns such as ``vllm-prefill-0`` or ``decode-3:8000``."""
    hints = []
    for name in names:
        role = role_from_name(name)
        if role:
            hints.append(RoleHint(name, role, f"name pattern in {where} {name!r}", ROLE_FROM_NAME,
                                  source))
    return hints


def resolve_roles(
    names: Iterable[str],
    hints: Iterable[RoleHint],
    options: RoleOptions,
    nodes: Mapping[str, str],
    engines: Mapping[str, str],
) -> tuple[tuple[InstanceInfo, ...], tuple[str, ...]]:
    """Instances with their roles, plus warnings; raises InputError on a real conflict."""
    prefill_re, decode_re = options.compiled()
    matched = {"--prefill-match": False, "--decode-match": False}
    by_instance: dict[str, list[RoleHint]] = {}
    for hint in hints:
        by_instance.setdefault(hint.instance, []).append(hint)
    all_names = sorted(set(names) | set(by_instance))
    infos: list[InstanceInfo] = []
    warnings: list[str] = []
    for name in all_names:
        candidates = list(by_instance.get(name, []))
        if prefill_re is not None and prefill_re.search(name):
            matched["--prefill-match"] = True
            candidates.append(RoleHint(name, "prefill", f"--prefill-match {prefill_re.pattern!r}",
                                       ROLE_FROM_OPTION))
        if decode_re is not None and decode_re.search(name):
            matched["--decode-match"] = True
            candidates.append(RoleHint(name, "decode", f"--decode-match {decode_re.pattern!r}",
                                       ROLE_FROM_OPTION))
        if not any(h.strength >= ROLE_FROM_NAME for h in candidates):
            candidates.extend(name_hints([name], "instance"))
        role: Role = "unknown"
        how = "no label, name pattern or evidence says; use --prefill-match/--decode-match"
        if candidates:
            top = max(h.strength for h in candidates)
            best = [h for h in candidates if h.strength == top]
            roles = {h.role for h in best}
            if len(roles) > 1:
                detail = "; ".join(f"{h.how}{' (' + h.source + ')' if h.source else ''}"
                                   for h in best)
                if top >= ROLE_FROM_OPTION:
                    raise UsageError(f"instance {name!r} matches both --prefill-match and "
                                     f"--decode-match", hint="make the two patterns disjoint")
                raise InputError(
                    f"inputs disagree on the role of instance {name!r}: {detail}",
                    hint="pass --prefill-match/--decode-match to decide",
                )
            role = best[0].role
            how = best[0].how
            weaker = [h for h in candidates if h.strength < top and h.role != role]
            if weaker:
                warnings.append(f"instance {name!r}: role {role} ({how}) overrides "
                                f"{weaker[0].role} ({weaker[0].how})")
        infos.append(InstanceInfo(name=name, role=role, role_source=how,
                                  node=nodes.get(name) or node_of(name),
                                  engine=engines.get(name)))
    for opt, pattern in (("--prefill-match", prefill_re), ("--decode-match", decode_re)):
        if pattern is not None and not matched[opt]:
            warnings.append(unmatched_pattern_warning(opt, pattern.pattern, all_names))
    return tuple(infos), tuple(warnings)


# How many instance names a warning about an unmatched role pattern lists.
NAMES_LISTED: Final = 4


def unmatched_pattern_warning(option: str, pattern: str, names: Sequence[str]) -> str:
    """``--prefill-match 'ctx-' matched none of the 6 instances (10.0.1.10:8000, ...)``: a
    pattern that matched nothing is most likely a typo, and the names show what to match."""
    if not names:
        return f"{option} {pattern!r} matched nothing: the inputs name no instance"
    shown = ", ".join(names[:NAMES_LISTED]) + (", ..." if len(names) > NAMES_LISTED else "")
    count = f"the {len(names)} instances" if len(names) > 1 else "the 1 instance"
    return f"{option} {pattern!r} matched none of {count} ({shown})"


def node_of(instance: str) -> str | None:
    """The host part of a Prometheus ``instance`` (``host:port``), to join network series."""
    if not instance:
        return None
    if instance.startswith("["):  # [ipv6]:port
        return instance[1:].split("]", 1)[0]
    host, sep, port = instance.rpartition(":")
    return host if sep and port.isdigit() else instance


LABEL_STRENGTH: Final = ROLE_FROM_LABEL
