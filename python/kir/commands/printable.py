"""Text read from files that others may write (cache metadata, a record's kernel
names, file names), made safe to print on a terminal: a character that is not
printable — a control character (ESC opens terminal escapes, CR and LF fake lines),
a format character (bidirectional overrides), a lone surrogate from an undecodable
file name — and the backslash itself are written as Python escapes (`\\x1b`,
`\\u202e`, `\\\\`). What is shown is what the file holds, and one line printed is
one line on the screen. JSON output needs none of this: json.dumps escapes them."""
from __future__ import annotations

__all__ = ["printable"]


def printable(text: str) -> str:
    """`text` with every non-printable character and backslash escaped."""
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(c if c.isprintable() and c != "\\" else _escape(c) for c in text)


def _escape(c: str) -> str:
    n = ord(c)
    if c == "\\":
        return "\\\\"
    if n < 0x100:
        return f"\\x{n:02x}"
    return f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"
