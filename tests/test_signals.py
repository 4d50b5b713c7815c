"""The signal vocabulary's promises that code elsewhere relies on."""

from __future__ import annotations

import re
from pathlib import Path

from pdprobe import signals as S

PACKAGE = Path(S.__file__).parent


def test_unanalysed_signals_are_read_by_no_analysis_rule_or_report() -> None:
    """The live collector skips these: an analysis that starts reading one must drop it here."""
    names = {value: name for name, value in vars(S).items()
             if name.isupper() and isinstance(value, str)}
    readers = [p for layer in ("analysis", "rules", "report", "services")
               for p in (PACKAGE / layer).rglob("*.py")]
    assert readers
    for signal in S.UNANALYSED_SIGNALS:
        pattern = re.compile(rf"\bS\.{names[signal]}\b|\bsignals\.{names[signal]}\b")
        users = [str(p.relative_to(PACKAGE)) for p in readers if pattern.search(p.read_text())]
        assert not users, f"{names[signal]} is read by {users}: remove it from UNANALYSED_SIGNALS"
