"""The documentation stays true to the code where it can be checked mechanically."""

from __future__ import annotations

import re
from pathlib import Path

from conveyor.core.states import mermaid_diagram
from conveyor.testing import hook_names

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_state_diagram_in_concepts_is_generated_from_the_table() -> None:
    """docs/concepts.md holds exactly mermaid_diagram() between its markers."""
    text = (DOCS / "concepts.md").read_text(encoding="utf-8")
    block = re.search(
        r"<!-- states:begin -->\s*```mermaid\n(.*?)```\s*<!-- states:end -->", text, re.S
    )
    assert block is not None, "the states markers or the mermaid block are missing"
    assert block.group(1).strip() == mermaid_diagram().strip()


def test_hook_reference_documents_every_hook() -> None:
    """docs/hooks.md names every hook spec."""
    text = (DOCS / "hooks.md").read_text(encoding="utf-8")
    missing = [name for name in hook_names() if name not in text]
    assert missing == []


def test_user_docs_do_not_cite_a_spec_users_do_not_have() -> None:
    """No user-facing page (README, docs/, plugin READMEs) refers to a "SPEC" document."""
    root = DOCS.parent
    pages = [
        root / "README.md",
        *sorted(DOCS.glob("*.md")),
        *sorted(root.glob("plugins/*/README.md")),
    ]
    found = [
        f"{page.relative_to(root)}:{number}: {line.strip()}"
        for page in pages
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"\bSPEC\b", line)
    ]
    assert found == []
