"""RE2 patterns (Triton's header-forward flags) read as RE2 reads them, through Python's re."""

from __future__ import annotations

import re

import pytest

from triton_core.frontends.re2_patterns import compile_re2


@pytest.mark.parametrize(
    ("pattern", "matches", "misses"),
    [
        # a flag group holds to the end of its group, in every later alternative
        ("(?-i)MY_HEADER.*", ["MY_HEADER_1"], ["my_header_1"]),
        ("a(?-i)B|c", ["aB", "AB", "c"], ["ab", "C"]),
        ("(x(?-i)Y|w)z", ["XYZ", "wz"], ["xyz", "Wz"]),
        ("(?-i:Y)y", ["YY", "Yy"], ["yY"]),
        # the rest as in re, case-insensitive as Triton's (?i) prefix makes it
        ("^x-tenant", ["X-Tenant-Id"], ["my-x-tenant"]),
        ("[[:digit:]]+\\z", ["id42"], ["42id"]),
        ("\\Qa.b\\E", ["A.B"], ["axb"]),
        ("[a[]", ["["], ["b"]),
        ("x}+", ["x}}"], ["x"]),
    ],
)
def test_re2_patterns_mean_what_they_mean_in_re2(
    pattern: str, matches: list[str], misses: list[str]
) -> None:
    compiled = compile_re2(pattern, re.IGNORECASE)
    assert [name for name in matches if compiled.search(name)] == matches
    assert [name for name in misses if compiled.search(name)] == []


#: pattern -> RE2's words for it (where re has other words or accepts it)
REFUSED = {
    "a(?=b)": "invalid perl operator: (?=",
    "a(?<!b)": "invalid perl operator: (?<!",
    "(?>a)": "invalid perl operator: (?>",
    "(?P<n>a)(?P=n)": "invalid perl operator: (?P=",
    "(a)\\1": "invalid escape sequence: \\1",
    "a*+": "bad repetition operator: *+",
    "a{2}+": "bad repetition operator: }+",
    "(?U)a*": "the ungreedy flag U is not supported here",
    "\\pL": "\\p is not supported here",
    "[[:nope:]]": "invalid character class range: [:nope:]",
    "[abc": "missing ]",
    "a)": "unexpected )",
    "(": "missing ), unterminated subpattern",
}


@pytest.mark.parametrize("pattern", list(REFUSED))
def test_what_re2_refuses_is_refused(pattern: str) -> None:
    with pytest.raises(ValueError) as info:
        compile_re2(pattern)
    assert REFUSED[pattern] in str(info.value)
