"""RE2 patterns (the syntax of Triton's ``--*-header-forward-pattern``) as Python ``re`` ones.

Triton compiles these flags with RE2. Python's ``re`` reads most of RE2's syntax the same way;
what it reads differently is translated here, and what RE2 refuses is refused in RE2's words
(ValueError), where ``re`` would accept it:

* a flag group ``(?i)``, ``(?-i)``, ``(?s-m)`` applies from there to the end of its group in
  RE2 (each later alternative too); ``re`` allows global flags only at the start and no
  ``(?-i)``: the rest of each alternative becomes ``(?flags:...)``. ``(?flags:...)`` is the
  same in both;
* ``\\z`` (end of text) is ``re``'s ``\\Z``; ``\\Q...\\E`` quotes literal text; POSIX classes
  such as ``[[:alpha:]]`` become their ranges;
* backreferences, lookarounds, atomic groups, comments and possessive quantifiers are not
  RE2 and are refused; the ungreedy flag ``U`` and ``\\p`` classes, which ``re`` lacks, too.

RE2 has no other flag syntax: a text left as it is means the same in both.
"""

from __future__ import annotations

import re

#: POSIX bracket classes RE2 accepts inside ``[...]``, as ``re`` ranges
_POSIX_CLASSES = {
    "alnum": "0-9A-Za-z",
    "alpha": "A-Za-z",
    "ascii": "\\x00-\\x7f",
    "blank": "\\t ",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "graph": "!-~",
    "lower": "a-z",
    "print": " -~",
    "punct": "!-/:-@\\[-`{-~",
    "space": "\\t\\n\\v\\f\\r ",
    "upper": "A-Z",
    "word": "0-9A-Za-z_",
    "xdigit": "0-9A-Fa-f",
}
_FLAG_GROUP = re.compile(r"\(\?([imsU]*)(?:-([imsU]*))?([:)])")
_NOT_RE2 = ("(?=", "(?!", "(?<=", "(?<!", "(?>", "(?#", "(?P=")
_SET_OPERATORS = frozenset("[&~|")
_COUNTED = re.compile(r"\{\d+(?:,\d*)?\}$")


def compile_re2(pattern: str, flags: int = 0) -> re.Pattern[str]:
    """``re.compile`` of what ``pattern`` means in RE2 (ValueError when RE2 or ``re`` refuse it)."""
    try:
        return re.compile(_Translation(pattern).run(), flags)
    except re.error as exc:
        raise ValueError(str(exc)) from None


class _Translation:
    """One pass over an RE2 pattern, writing the ``re`` source."""

    def __init__(self, pattern: str) -> None:
        self.text = pattern
        self.at = 0
        self.out: list[str] = []
        #: per open group (the pattern itself first): the flag scopes opened inside it
        self.scopes: list[list[str]] = [[]]

    def run(self) -> str:
        while self.at < len(self.text):
            char = self.text[self.at]
            if char == "\\":
                self._escape()
            elif char == "[":
                self._bracket()
            elif char == "(":
                self._open()
            elif char == ")":
                self._close()
            elif char == "|":
                self._alternative()
            else:
                self._literal_or_repeat(char)
        self.out.append(")" * len(self.scopes.pop()))
        return "".join(self.out)

    def _escape(self) -> None:
        pair = self.text[self.at : self.at + 2]
        if pair == "\\Q":
            end = self.text.find("\\E", self.at + 2)
            quoted = self.text[self.at + 2 : end if end >= 0 else len(self.text)]
            self.out.append(re.escape(quoted))
            self.at = end + 2 if end >= 0 else len(self.text)
            return
        if len(pair) == 2 and pair[1] in "123456789":
            raise ValueError(f"invalid escape sequence: {pair}")
        if pair in ("\\p", "\\P", "\\C"):
            raise ValueError(f"{pair} is not supported here (Python's re lacks it)")
        self.out.append("\\Z" if pair == "\\z" else pair)
        self.at += len(pair)

    def _bracket(self) -> None:
        """A character class, copied with its POSIX classes spelled out."""
        end = self.at + 1
        if self.text[end : end + 1] == "^":
            end += 1
        if self.text[end : end + 1] == "]":
            end += 1
        parts = ["["]
        parts.append(self.text[self.at + 1 : end])
        while end < len(self.text) and self.text[end] != "]":
            if self.text.startswith("[:", end):
                close = self.text.find(":]", end + 2)
                name = self.text[end + 2 : close] if close >= 0 else ""
                if name not in _POSIX_CLASSES:
                    raise ValueError(f"invalid character class range: {self.text[end : close + 2]}")
                parts.append(_POSIX_CLASSES[name])
                end = close + 2
                continue
            step = 2 if self.text[end] == "\\" else 1
            piece = self.text[end : end + step]
            # literal in RE2; re reads (or will read) these as set operations
            parts.append("\\" + piece if piece in _SET_OPERATORS else piece)
            end += step
        if end >= len(self.text):
            raise ValueError(f"missing ]: {self.text[self.at :]}")
        parts.append("]")
        self.out.append("".join(parts))
        self.at = end + 1

    def _open(self) -> None:
        rest = self.text[self.at :]
        refused = next((form for form in _NOT_RE2 if rest.startswith(form)), None)
        if refused is not None:
            raise ValueError(f"invalid perl operator: {refused}")
        flags = _FLAG_GROUP.match(rest)
        if flags is None:
            self.out.append("(")
            self.scopes.append([])
            self.at += 1
            return
        on, off, end = flags.group(1), flags.group(2) or "", flags.group(3)
        if "U" in on + off:
            raise ValueError("the ungreedy flag U is not supported here (Python's re lacks it)")
        if not (on or off) and end == ")":
            raise ValueError(f"invalid perl operator: {flags.group(0)}")
        scope = f"(?{on}{'-' + off if off else ''}:"
        self.out.append(scope)
        if end == ":":
            self.scopes.append([])
        else:  # (?flags): to the end of the enclosing group
            self.scopes[-1].append(scope)
        self.at += flags.end()

    def _close(self) -> None:
        if len(self.scopes) == 1:
            raise ValueError(f"unexpected ): {self.text}")
        self.out.append(")" * len(self.scopes.pop()) + ")")
        self.at += 1

    def _alternative(self) -> None:
        """``|`` splits the group, not the flag scopes: each alternative keeps them."""
        scopes = self.scopes[-1]
        self.out.append(")" * len(scopes) + "|" + "".join(scopes))
        self.at += 1

    def _literal_or_repeat(self, char: str) -> None:
        following = self.text[self.at + 1 : self.at + 2]
        repeats = char in "*+?" or (char == "}" and _COUNTED.search(self.text, 0, self.at + 1))
        if repeats and following == "+":  # possessive: re takes it, RE2 does not
            raise ValueError(f"bad repetition operator: {char}+")
        self.out.append(char)
        self.at += 1
