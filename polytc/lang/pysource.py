"""The Python-syntax front end's reading of a function (``pyfront.py`` translates it):
its source found with :mod:`inspect` and parsed with Python's :mod:`ast`, positions mapped
back into the user's file, and the TC types written in string annotations."""
from __future__ import annotations

import ast as pyast
import difflib
import inspect
import re
import textwrap

from ..diagnostics import Source, Span, TCSyntaxError
from . import ast as A
from .types import TYPE_NAMES

#: every type spelling accepted in annotations and as a cast
_TYPES = set(TYPE_NAMES)
#: Python spellings of casts that differ from TC's
_CAST_ALIASES = {"int": "int32"}
#: Python operators: TC's spelling where it has one, Python's for messages
_BINOPS = {pyast.Add: "+", pyast.Sub: "-", pyast.Mult: "*", pyast.Div: "/",
           pyast.FloorDiv: "/", pyast.Mod: "%"}
_BINOP_SYMBOLS = {pyast.Add: "+", pyast.Sub: "-", pyast.Mult: "*", pyast.Div: "/",
                  pyast.FloorDiv: "//", pyast.Mod: "%", pyast.Pow: "**",
                  pyast.MatMult: "@", pyast.LShift: "<<", pyast.RShift: ">>",
                  pyast.BitAnd: "&", pyast.BitOr: "|", pyast.BitXor: "^"}
_CMPOPS = {pyast.Eq: "==", pyast.NotEq: "!=", pyast.Lt: "<", pyast.Gt: ">",
           pyast.LtE: "<=", pyast.GtE: ">="}
_TC_HINT = 'write the kernel as TC text with polytc.tc("def ...") instead'


# --------------------------------------------------------------------------------------
# Reading the source
# --------------------------------------------------------------------------------------
def _read_source(fn):
    """The module ast of the dedented source and the position converter; the
    converter's Source holds the original (indented) text, so columns are the file's."""
    name = getattr(fn, "__name__", None)
    if name == "<lambda>":
        raise TCSyntaxError("a lambda cannot be a kernel",
                            hint="define it with 'def', or " + _TC_HINT)
    if not (inspect.isfunction(fn) or inspect.ismethod(fn)):
        raise TCSyntaxError(f"expected a Python function, got {type(fn).__name__}",
                            hint="decorate a 'def' function, or " + _TC_HINT)
    try:
        lines, first = inspect.getsourcelines(fn)
        filename = inspect.getsourcefile(fn) or inspect.getfile(fn)
    except (OSError, TypeError) as e:
        raise TCSyntaxError(
            f"cannot read the source of '{name}' ({e})",
            hint="define the kernel in a file (the REPL and exec() keep no source), or "
            + _TC_HINT) from None
    text = "".join(lines)
    dedented = textwrap.dedent(text)
    # dedent keeps the number of lines; remember how many columns it took off each one
    olines, dlines = text.split("\n"), dedented.split("\n")
    if len(olines) != len(dlines):  # pragma: no cover - dedent keeps lines
        olines = dlines
        text = dedented
    margins = [len(o) - len(d) for o, d in zip(olines, dlines)]
    source = Source(text, filename, line_offset=max(first, 1) - 1)
    ctx = _Positions(source, dlines, margins)
    try:
        module = pyast.parse(dedented, filename)
    except SyntaxError as e:
        span = None
        if e.lineno:
            off = ctx.offset(e.lineno, max((e.offset or 1) - 1, 0), chars=True)
            span = Span(source, off, off + 1)
        raise TCSyntaxError(f"cannot parse the source of '{name}': {e.msg}", span,
                            hint=_TC_HINT) from None
    return module, ctx


class _Positions:
    """Converts Python ast positions (1-based lines, UTF-8 byte columns of the dedented
    text) to character offsets of the original text."""

    def __init__(self, source: Source, dlines, margins):
        self.source = source
        self.dlines = dlines
        self.margins = margins
        starts, pos = [], 0
        for line in source.text.split("\n"):
            starts.append(pos)
            pos += len(line) + 1
        self.starts = starts

    def offset(self, lineno: int, col: int, chars: bool = False) -> int:
        i = min(max(lineno - 1, 0), len(self.starts) - 1)
        line = self.dlines[i] if i < len(self.dlines) else ""
        if not chars:
            col = len(line.encode("utf-8")[:col].decode("utf-8", errors="ignore"))
        col = min(col, len(line))
        return self.starts[i] + self.margins[i] + col

    def span(self, node) -> Span:
        start = self.offset(node.lineno, node.col_offset)
        end_line = getattr(node, "end_lineno", None) or node.lineno
        end_col = getattr(node, "end_col_offset", None)
        end = self.offset(end_line, end_col) if end_col is not None else start + 1
        return Span(self.source, start, max(end, start + 1))


# --------------------------------------------------------------------------------------
# Annotations: the small grammar  TYPE | TYPE '(' [DIM (',' DIM)*] ')'
# --------------------------------------------------------------------------------------
def _string_body(ctx: _Positions, node: pyast.Constant):
    """The offset of the first character of a string literal's value in the source, or
    None when the literal is not a plain one-line string whose text equals its value."""
    if node.lineno != node.end_lineno:
        return None
    sp = ctx.span(node)
    seg = sp.text
    k = 0
    while k < len(seg) and seg[k] in "rRuUbBfF":
        k += 1
    q = 3 if seg[k:k + 3] in ('"""', "'''") else 1
    inner = seg[k + q:len(seg) - q]
    if inner != node.value:
        return None
    return sp.start + k + q


_NUMBER = re.compile(r"[0-9]*\.?[0-9]*(?:[eE][+-]?[0-9]+)?")


def _tokens(text: str):
    i, out = 0, []
    while i < len(text):
        c = text[i]
        if c.isspace():
            i += 1
        elif c.isalpha() or c == "_":
            j = i
            while j < len(text) and (text[j].isalnum() or text[j] == "_"):
                j += 1
            out.append(("id", text[i:j], i, j))
            i = j
        elif c.isdigit() or (c == "." and text[i + 1:i + 2].isdigit()):
            m = _NUMBER.match(text, i)
            assert m is not None  # the pattern matches the empty string
            j = m.end()
            out.append(("int" if text[i:j].isdigit() else "num", text[i:j], i, j))
            i = j
        else:
            out.append(("op", c, i, i + 1))
            i += 1
    out.append(("end", "", len(text), len(text)))
    return out


def _parse_type(ctx: _Positions, node, what: str, example: str):
    """``(type_name, dims)`` of an annotation node holding a TC type in a string."""
    whole = ctx.span(node)
    if not (isinstance(node, pyast.Constant) and isinstance(node.value, str)):
        hint = f'annotate {what} with a TC type in a string, e.g. {example}'
        if isinstance(node, (pyast.Name, pyast.Call, pyast.Subscript, pyast.Attribute)):
            try:
                hint = f'put the type in quotes: "{pyast.unparse(node)}"'
            except Exception:  # noqa: BLE001 - only for the hint
                pass
        raise TCSyntaxError(f"the type of {what} must be a string", whole, hint=hint)
    text = node.value
    base = _string_body(ctx, node)

    def sub(a, b):
        if base is None:
            return whole
        return Span(ctx.source, base + a, base + max(b, a + 1))

    toks = _tokens(text)
    pos = 0

    def fail(tok, msg, hint=f"write a TC type such as {example}"):
        raise TCSyntaxError(msg, sub(tok[2], tok[3]), hint=hint)

    t = toks[pos]
    if t[0] != "id":
        fail(t, f"expected a type name in the type of {what}")
    if t[1] not in _TYPES:
        close = [_CAST_ALIASES[t[1]]] if t[1] in _CAST_ALIASES else \
            difflib.get_close_matches(t[1], sorted(_TYPES), n=1)
        fail(t, f"unknown type '{t[1]}'",
             f"did you mean '{close[0]}'?" if close else
             "types are " + ", ".join(sorted(TYPE_NAMES)))
    type_name = t[1]
    pos += 1
    dims = []
    if toks[pos][1] == "(" and toks[pos][0] == "op":
        pos += 1
        if not (toks[pos][0] == "op" and toks[pos][1] == ")"):
            while True:
                d = toks[pos]
                if d[0] == "id":
                    dims.append(A.Dim(d[1], sub(d[2], d[3])))
                elif d[0] == "int":
                    dims.append(A.Dim(int(d[1]), sub(d[2], d[3])))
                else:
                    fail(d, "expected a size name or an integer",
                         f"dimensions are size names or integers, e.g. {example}")
                pos += 1
                if toks[pos][0] == "op" and toks[pos][1] == ",":
                    pos += 1
                    continue
                if toks[pos][0] == "op" and toks[pos][1] == ")":
                    break
                fail(toks[pos], "expected ',' or ')'")
        pos += 1
    end = toks[pos]
    if end[0] != "end":
        if end[0] == "id":
            fail(end, f"unexpected '{end[1]}' after the type",
                 "the name comes from the Python parameter or the returned variable; "
                 f"write only the type, e.g. {example}")
        fail(end, f"unexpected '{end[1]}' in the type of {what}")
    return type_name, tuple(dims), whole
