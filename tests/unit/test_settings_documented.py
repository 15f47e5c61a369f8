"""Every setting has its row in the configuration reference: a setting added to
``agentic_api/settings.py`` without one in docs/configuration.md fails here."""

from __future__ import annotations

import re
from pathlib import Path

from agentic_api.settings import Settings

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def documented_variables(text: str) -> set[str]:
    """The variables the reference's table gives a row of their own (first column)."""
    return set(re.findall(r"^\| `(AGENTIC_[A-Z0-9_]+)` \|", text, re.MULTILINE))


def test_every_setting_has_a_row_in_the_configuration_reference() -> None:
    variables = {f"AGENTIC_{name.upper()}" for name in Settings.model_fields}
    documented = documented_variables(REFERENCE.read_text())
    assert sorted(variables - documented) == [], "settings without a row"
    assert sorted(documented - variables) == [], "rows for settings that do not exist"
