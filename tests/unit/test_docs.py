"""The plugin guide documents every hook, so it cannot drift from hookspecs.py."""

from __future__ import annotations

import inspect
import re

from tests.support import ROOT
from triton_core.plugins import hookspecs


def test_every_hook_has_a_docstring_and_a_heading_in_the_guide():
    guide = (ROOT / "docs" / "writing_plugins.md").read_text()
    headings = set(re.findall(r"^### (\w+)\(", guide, flags=re.MULTILINE))
    hooks = {
        name: function
        for name, function in inspect.getmembers(hookspecs, inspect.isfunction)
        if name.startswith("triton_")
    }
    assert hooks, "no hooks found"
    for name, function in hooks.items():
        assert function.__doc__ and "Called" in function.__doc__, name
        assert name in headings, f"docs/writing_plugins.md has no heading for {name}"
    assert headings <= set(hooks), f"the guide documents hooks that do not exist: {headings}"


def test_every_public_name_is_in_the_guides_table():
    import triton_core

    guide = (ROOT / "docs" / "writing_plugins.md").read_text()
    table = guide[guide.index("## The public API") : guide.index("Everything else (")]
    documented = set(re.findall(r"`(\w+)`", table))
    missing = set(triton_core.__all__) - documented - {"__version__"}
    assert not missing, f"public names missing from the guide's table: {sorted(missing)}"
