"""Within tests/report every JSON report built is validated against the shipped schema."""

from tests.report.schema_check import validate_json_reports

__all__ = ["validate_json_reports"]
