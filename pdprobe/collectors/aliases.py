"""User-stated instance matches: ``--alias NAME=INSTANCE`` options and an aliases TOML file.

``parse_aliases`` reads both into one ``AliasMap`` (alias name -> canonical instance name, and
where each was stated); the identity step (``collectors/identity.py``) applies it before any
other match. A name mapped to two instances is an error naming both places.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pdprobe.errors import InputError, UsageError


@dataclass(frozen=True)
class AliasMap:
    """User-stated matches: alias name -> canonical instance name, and where each was stated."""

    names: Mapping[str, str] = field(default_factory=dict)
    origin: Mapping[str, str] = field(default_factory=dict)  # alias -> "--alias" or "file:line"

    @property
    def empty(self) -> bool:
        """True when no alias was stated (no --alias option and no aliases file)."""
        return not self.names


def parse_aliases(pairs: Sequence[str], file: Path | None) -> AliasMap:
    """``--alias NAME=INSTANCE`` options and a TOML mapping file into one ``AliasMap``.

    The file holds ``[aliases]`` with ``"name" = "instance"`` entries and/or
    ``[instances."NAME"]`` tables with ``names = [...]``. A name mapped to two instances is an
    error (exit 3) naming both places.
    """
    names: dict[str, str] = {}
    origin: dict[str, str] = {}

    def add(alias: str, target: str, where: str) -> None:
        alias, target = alias.strip(), target.strip()
        if not alias or not target:
            raise UsageError(f"{where}: an alias needs a name and an instance ({alias!r} = "
                             f"{target!r})", hint="write NAME=INSTANCE, e.g. h100-node-3=10.0.0.5:8000")
        if alias in names and names[alias] != target:
            raise InputError(f"{where}: {alias!r} is mapped to two instances, {names[alias]!r} "
                             f"({origin[alias]}) and {target!r}",
                             hint="map each name to one instance")
        names[alias] = target
        origin[alias] = where

    for pair in pairs:
        alias, sep, target = pair.partition("=")
        if not sep:
            raise UsageError(f"--alias {pair!r}: expected NAME=INSTANCE",
                             hint="e.g. --alias h100-node-3=10.0.0.5:8000")
        add(alias, target, "--alias")
    if file is not None:
        for alias, target, where in _read_alias_file(file):
            add(alias, target, where)
    return AliasMap(names, origin)


def _read_alias_file(path: Path) -> list[tuple[str, str, str]]:
    import tomllib

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})", hint="check the path") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not valid TOML ({exc})",
                         hint='write [aliases] with "name" = "instance" lines') from exc
    out: list[tuple[str, str, str]] = []
    unknown = sorted(set(data) - {"aliases", "instances"})
    if unknown:
        raise InputError(f"{path}: unknown table {unknown[0]!r}",
                         hint='use [aliases] ("name" = "instance") or [instances."NAME"] '
                              "(names = [...])")
    aliases = data.get("aliases", {})
    if not isinstance(aliases, dict):
        raise InputError(f"{path}: [aliases] must be a table", hint='"name" = "instance" lines')
    for alias, target in aliases.items():
        if not isinstance(target, str):
            raise InputError(f"{path}: [aliases] {alias!r} must name one instance as a string",
                             hint='e.g. "h100-node-3" = "10.0.0.5:8000"')
        out.append((alias, target, f"{path} [aliases]"))
    instances = data.get("instances", {})
    if not isinstance(instances, dict):
        raise InputError(f"{path}: [instances] must be a table", hint='[instances."NAME"]')
    for target, table in instances.items():
        names = table.get("names") if isinstance(table, dict) else None
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise InputError(f"{path}: [instances.{target!r}] needs names = [\"...\", ...]",
                             hint="list the other names of this instance")
        out.extend((n, target, f"{path} [instances.{target!r}]") for n in names)
    return out
