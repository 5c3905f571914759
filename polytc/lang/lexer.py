"""Tokeniser for Tensor Comprehensions text.

It follows TC's reference lexer (``tc/lang/lexer.h``):

* whitespace (C ``isspace``) separates tokens; ``#`` starts a comment to the end of line;
* a number is what ``strtod`` reads, except that it never starts with ``+``, ``-`` or a
  letter (so ``1+3`` is three tokens); decimal (``1``, ``1.``, ``.5``, ``2.5e+4``) and
  hexadecimal (``0x1F``, ``0x1.8p3``) forms;
* otherwise the longest match of an identifier ``[A-Za-z_][A-Za-z0-9_]*`` and a keyword or
  operator wins, a keyword winning a tie: ``max`` is the keyword, ``maxval`` and ``min_x``
  are identifiers, ``max=!`` is one assignment token.

A token's ``kind`` is ``"number"``, ``"ident"``, ``"eof"``, or else its own text (``"def"``,
``"+=!"``, ``"float32"``, ``"("``).  ``;`` is a polytc extension (an optional statement
separator); TC does not have it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Union

from ..diagnostics import Source, Span, TCSyntaxError

TYPE_KEYWORDS = frozenset({
    "bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
    "float16", "half", "bfloat16", "float32", "float64", "float", "double",
})
KEYWORDS = frozenset({"def", "where", "exists", "in", "min", "max"}) | TYPE_KEYWORDS
MULTI_CHAR_OPS = frozenset({
    "->", "<=>", "+=", "*=", "min=", "max=", "+=!", "*=!", "min=!", "max=!",
    ">=", "<=", "==", "!=", "&&", "||",
})
SINGLE_CHAR_OPS = frozenset("+-*/()[]?:,={}><!%;")
#: every fixed token text, matched longest first
FIXED_TOKENS = KEYWORDS | MULTI_CHAR_OPS | SINGLE_CHAR_OPS

#: whitespace and comments
_SKIP = re.compile(r"(?:[ \t\n\v\f\r]+|#[^\n]*)*")
#: the longest fixed token at a position (alternatives tried longest first)
_FIXED = re.compile("|".join(re.escape(t) for t in sorted(FIXED_TOKENS, key=lambda t: -len(t))))
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEX = re.compile(r"0[xX](?:[0-9a-fA-F]+(?:\.[0-9a-fA-F]*)?|\.[0-9a-fA-F]+)(?:[pP][+-]?[0-9]+)?")
_DEC = re.compile(r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")

_BAD_CHAR_HINTS = {
    "&": "TC has no bitwise operators; did you mean '&&'?",
    "|": "TC has no bitwise operators; did you mean '||'?",
    "^": "TC has no power operator; use pow(a, b)",
    "~": "TC has no bitwise operators",
    ".": "a number needs a digit next to its '.': write 0.5 or 1.0",
    '"': "TC has no strings",
    "'": "TC has no strings",
    "@": "TC has no '@' operator; write a matrix product as a reduction, e.g. "
         "'C(i, j) +=! A(i, k) * B(k, j)'",
    "\\": "TC statements need no line continuation; a statement may span lines",
}
_GENERIC_HINT = ("TC text is made of names, numbers, the operators + - * / % < > <= >= == "
                 "!= && || ! ? : and the punctuation ( ) { } , -> = +=! ...; "
                 "comments start with '#'")


@dataclass(frozen=True)
class Token:
    kind: str  # "number" | "ident" | "eof" | the token's own text
    text: str
    span: Span
    value: Union[int, float, None] = None  # numbers only
    is_float: bool = False  # numbers only

    def describe(self) -> str:
        """How messages name this token: ``'where'`` or ``end of input``."""
        return "end of input" if self.kind == "eof" else f"'{self.text}'"


def _number(text: str, pos: int, source: Source) -> Token | None:
    """The number starting at ``pos``, as ``strtod`` reads it, or None."""
    m = _HEX.match(text, pos)
    if m:
        s = m.group()
        if "." in s or "p" in s or "P" in s:
            return Token("number", s, Span(source, pos, m.end()), float.fromhex(s), True)
        return Token("number", s, Span(source, pos, m.end()), int(s, 16), False)
    m = _DEC.match(text, pos)
    if not m:
        return None
    s = m.group()
    span = Span(source, pos, m.end())
    if "." in s or "e" in s or "E" in s:
        return Token("number", s, span, float(s), True)
    try:
        value = int(s)
    except ValueError:  # more digits than Python converts
        raise TCSyntaxError(f"integer literal of {len(s)} digits is too large", span,
                            "an integer literal must fit in 64 bits") from None
    if value >= 1 << 64:
        raise TCSyntaxError(f"integer literal {s} is too large", span,
                            "an integer literal must fit in 64 bits")
    return Token("number", s, span, value, False)


def tokenize(text: str, filename: str = "<tc>", source: Source | None = None) -> list:
    """The tokens of ``text``, ending with one ``eof`` token.

    The ``eof`` token's span is the last real token's (so an "unexpected end of input"
    points at the last thing written), or an empty span at 0 for a text with no tokens.
    """
    if source is None:
        source = Source(text, filename)
    tokens: list = []
    pos, n = 0, len(text)
    skip, ident, fixed = _SKIP.match, _IDENT.match, _FIXED.match
    while True:
        blank = skip(text, pos)  # always matches, maybe nothing
        pos = blank.end() if blank else pos
        if pos >= n:
            break
        ch = text[pos]
        if ch.isdigit() or ch == ".":
            tok = _number(text, pos, source)
            if tok is not None:
                tokens.append(tok)
                pos = tok.span.end
                continue
        m = ident(text, pos)
        ident_len = m.end() - pos if m else 0
        m = fixed(text, pos)
        fixed_len = m.end() - pos if m else 0
        if ident_len == 0 and fixed_len == 0:
            span = Span(source, pos, pos + 1)
            raise TCSyntaxError(f"invalid character {ch!r}", span,
                                _BAD_CHAR_HINTS.get(ch, _GENERIC_HINT))
        if ident_len > fixed_len:
            s = text[pos:pos + ident_len]
            tokens.append(Token("ident", s, Span(source, pos, pos + ident_len)))
            pos += ident_len
        else:
            s = text[pos:pos + fixed_len]
            tokens.append(Token(s, s, Span(source, pos, pos + fixed_len)))
            pos += fixed_len
    eof_span = tokens[-1].span if tokens else Span(source, 0, 0)
    tokens.append(Token("eof", "", eof_span))
    return tokens
