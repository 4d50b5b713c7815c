"""The renderer interface: a function from a ``Report`` to text (one file per format)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from pdprobe.report.model import Report

RenderFn = Callable[["Report", "RenderOptions"], str]

FORMATS: Final[dict[str, str]] = {
    "text": "pdprobe.report.text:render",
    "json": "pdprobe.report.json_format:render",
    "markdown": "pdprobe.report.markdown:render",
    "html": "pdprobe.report.html:render",
    "prometheus": "pdprobe.report.prometheus_format:render",
}


class RenderOptions:
    """Presentation options (not part of the report's content)."""

    def __init__(self, *, width: int = 100, color: bool = False, verbose: bool = False,
                 quiet: bool = False) -> None:
        self.width = width
        self.color = color
        self.verbose = verbose
        self.quiet = quiet


def renderer_for(fmt: str) -> RenderFn:
    """The render function of a format, imported only when it is used (the CLI stays light)."""
    module_name, func = FORMATS[fmt].split(":")
    fn: RenderFn = getattr(importlib.import_module(module_name), func)
    return fn
