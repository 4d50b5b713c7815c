"""``pdprobe explain CODE`` and ``pdprobe rules``: the rule catalog's own words."""

from __future__ import annotations

from typing import Annotated

import typer


def explain_command(
    code: Annotated[str, typer.Argument(help="Finding code (e.g. PD001) or cause name.")],
) -> int:
    """Print the full explanation of one finding code."""
    from pdprobe.errors import UsageError
    from pdprobe.rules.catalog import find_rules, render_explanation

    rules = find_rules(code)
    if not rules:
        raise UsageError(f"no rule has code or cause {code!r}", hint="see 'pdprobe rules'")
    typer.echo("\n\n".join(render_explanation(r) for r in rules))
    return 0


def rules_command() -> int:
    """List every rule: code, cause and title."""
    from pdprobe.rules.catalog import ALL_RULES

    for rule in ALL_RULES:
        typer.echo(f"{rule.code}  {rule.cause:<22} {rule.title()}")
    return 0


def register(app: typer.Typer) -> None:
    """Add ``pdprobe explain`` and ``pdprobe rules`` to the application."""
    app.command("explain")(explain_command)
    app.command("rules")(rules_command)
