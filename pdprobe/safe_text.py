"""Text from untrusted sources made safe for a terminal (and for one-line messages).

File names, instance names and server messages can carry terminal escape sequences (colours,
cursor moves, OSC 8 hyperlinks, window titles), control characters (a newline splits a
one-line error; a carriage return overwrites it), bidirectional overrides that make text read
differently from what it is, and lone surrogates (a non-UTF-8 file name) that cannot even be
printed. ``clean`` removes the escape sequences and shows every other such character as a
visible escape (``\\n``, ``\\x07``, ``\\u202e``), so the text stays recognisable and cannot act.
"""

from __future__ import annotations

import re

# ECMA-48 sequences: OSC (incl. OSC 8 hyperlinks, ended by BEL or ST), DCS/SOS/PM/APC strings
# (ended by ST), CSI (colours, cursor), and the two-byte ESC forms; plus their 8-bit C1 forms.
_SEQUENCE = re.compile(
    r"\x1b\][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[PX^_][^\x1b\x9c]*(?:\x1b\\|\x9c)?"
    r"|\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b[ -/]*[0-~]"
    r"|\x9d[^\x07\x9c]*(?:\x07|\x9c)?"
    r"|[\x90\x98\x9e\x9f][^\x9c]*\x9c?"
    r"|\x9b[0-?]*[ -/]*[@-~]"
)
# Characters that act instead of showing: C0/C1 controls and DEL, line/paragraph separators,
# bidi embeddings/overrides/isolates and marks, zero-width and BOM, lone surrogates.
_INVISIBLE = "\u061c\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u2069\ufeff\ud800-\udfff"
_UNSAFE_LINE = re.compile(f"[\x00-\x1f\x7f-\x9f{_INVISIBLE}]")
_UNSAFE_TEXT = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_INVISIBLE}]")
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    ch = match.group()
    if ch in _SHORT:
        return _SHORT[ch]
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:  # a byte of a non-UTF-8 name (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def clean(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` without escape sequences, its other unsafe characters shown as escapes.

    One-line use (errors, warnings, names) is the default: a newline becomes ``\\n``. With
    ``keep_newlines`` (multi-line reports) newlines and tabs stay.
    """
    if not text:
        return text
    text = _SEQUENCE.sub("", text)
    pattern = _UNSAFE_TEXT if keep_newlines else _UNSAFE_LINE
    return pattern.sub(_escape, text)
