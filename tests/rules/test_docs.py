"""docs/rules.md is generated from the rules' docstrings and must not go stale."""

from __future__ import annotations

from pathlib import Path

from pdprobe.rules import docs
from pdprobe.rules.catalog import ALL_RULES, render_explanation


def test_docs_rules_md_is_up_to_date() -> None:
    assert docs.DEFAULT_PATH.exists(), "run: python -m pdprobe.rules.docs"
    assert not docs.is_stale(), "docs/rules.md is stale: run python -m pdprobe.rules.docs"


def test_page_holds_every_explanation_and_the_ranking_graph() -> None:
    page = docs.render()
    for rule in ALL_RULES:
        assert f"### {rule.code}" in page
        body = render_explanation(rule).splitlines()[2:]
        assert "\n".join(line.rstrip() for line in body) in page
    assert "| `rdma-retransmits` | `kv-transfer-bandwidth` | always |" in page
    assert docs.NO_ACCURACY in page


def test_accuracy_section_survives_regeneration(tmp_path: Path) -> None:
    path = tmp_path / "rules.md"
    assert docs.write(path, accuracy="| cause | top-1 |\n| --- | --- |\n| x | 1/1 |")
    assert not docs.is_stale(path)
    assert not docs.write(path)  # unchanged: the accuracy table is kept
    assert "| x | 1/1 |" in path.read_text()
    assert docs.extract_accuracy(path.read_text()) == "| cause | top-1 |\n| --- | --- |\n| x | 1/1 |"
    path.write_text(path.read_text().replace("PD101", "PD999", 1))
    assert docs.is_stale(path)
    assert docs.main(["--check", "--output", str(path)]) == 1
    assert docs.main(["--output", str(path)]) == 0
    assert docs.main(["--check", "--output", str(path)]) == 0
