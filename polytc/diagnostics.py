"""Every error polytc raises, in one place.

Each language error carries a :class:`Span` into the user's source.  Its message names
``file:line:col``, quotes the line with a caret under the offending text and ends with a
hint saying how to fix it::

    matmul.tc:3:17: index 'k' has no range
        C(m, n) +=! A(m, k) * B(k, n) + D(k)
                    ^~~~~~~
    hint: add 'where k in 0:K'

Public entry points wrap their bodies in :func:`user_boundary`, which turns any stray
internal exception (an isl error, a bug) into :class:`InternalError` and cuts polytc's own
frames off the traceback, so a user sees their line and the message, nothing else.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass


class Source:
    """A text a program came from, with a name used in messages."""

    __slots__ = ("text", "filename", "line_offset", "_line_starts")

    def __init__(self, text: str, filename: str = "<tc>", line_offset: int = 0):
        self.text = text
        self.filename = filename
        self.line_offset = line_offset  # added to line numbers (Python front end)
        starts = [0]
        for i, ch in enumerate(text):
            if ch == "\n":
                starts.append(i + 1)
        self._line_starts = starts

    def line_col(self, offset: int) -> tuple[int, int]:
        """1-based line and column of a character offset."""
        lo, hi = 0, len(self._line_starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._line_starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1, offset - self._line_starts[lo] + 1

    def line_text(self, line: int) -> str:
        start = self._line_starts[line - 1]
        end = self.text.find("\n", start)
        return self.text[start:] if end < 0 else self.text[start:end]

    def __repr__(self):
        return f"Source({self.filename!r})"


@dataclass(frozen=True, eq=False)
class Span:
    """A half-open character range ``[start, end)`` of a :class:`Source`."""

    source: Source
    start: int
    end: int

    @property
    def text(self) -> str:
        return self.source.text[self.start:self.end]

    def to(self, other: "Span") -> "Span":
        """The span from the start of ``self`` to the end of ``other``."""
        return Span(self.source, min(self.start, other.start), max(self.end, other.end))

    def location(self) -> str:
        line, col = self.source.line_col(self.start)
        return f"{self.source.filename}:{line + self.source.line_offset}:{col}"

    def quote(self) -> str:
        """The line of the span with a caret line under it."""
        line, col = self.source.line_col(self.start)
        text = self.source.line_text(line)
        end_line, _ = self.source.line_col(max(self.start, self.end - 1))
        width = max(1, (self.end - self.start) if end_line == line else len(text) - col + 1)
        width = min(width, max(1, len(text) - col + 1))
        pad = "".join(ch if ch == "\t" else " " for ch in text[:col - 1])  # keep tabs
        caret = pad + "^" + "~" * (width - 1)
        return f"    {text}\n    {caret}"

    def __eq__(self, other):  # spans never take part in program equality
        return isinstance(other, Span)

    def __hash__(self):
        return 0

    def __repr__(self):
        return f"Span({self.location()})"


class PolytcError(Exception):
    """Base of every error polytc raises on purpose."""

    def __init__(self, message: str, span: Span | None = None, hint: str | None = None):
        self.message = message
        self.span = span
        self.hint = hint
        super().__init__(self._format())

    def _format(self) -> str:
        parts = []
        if self.span is not None:
            parts.append(f"{self.span.location()}: {self.message}")
            parts.append(self.span.quote())
        else:
            parts.append(self.message)
        if self.hint:
            parts.append(f"hint: {self.hint}")
        return "\n".join(parts)


# --- language errors -------------------------------------------------------------------
class TCSyntaxError(PolytcError):
    """The text is not a well-formed TC program (lexer or parser)."""


class TCSemanticError(PolytcError):
    """The program parses but breaks a rule of the language."""


class UndefinedNameError(TCSemanticError):
    pass


class RangeInferenceError(TCSemanticError):
    """An index has no range, or its range is empty."""


class TCTypeError(TCSemanticError):
    pass


class UnsupportedError(PolytcError):
    """Valid input that polytc does not handle (yet); the message says what instead."""


class NeedsValue(UnsupportedError):
    """Binding a model met a value that decides a shape (a Reshape's shape, an If's
    condition) but is known only at run time (``values``: their names), or an op whose
    outputs' shapes depend on its input's data (``node``: NonZero): a session runs the
    model in stages around them (``graph/staged.py``)."""

    def __init__(self, message: str, values: tuple = (), node=None):
        super().__init__(message)
        self.values = tuple(values)
        self.node = node


# --- call-time errors ------------------------------------------------------------------
class ArgumentError(PolytcError):
    """Wrong number, dtype, rank, shape or layout of the arrays given to a kernel."""


class KernelRuntimeError(PolytcError):
    """A kernel detected a fault while running (indirect index out of bounds, division by
    zero in integer arithmetic)."""


class ModelError(PolytcError):
    """An ONNX model polytc cannot take: malformed or truncated, an opset or op it does not
    support, or inputs at ``run`` that do not match the model (name, dtype, shape)."""


# --- compiler errors -------------------------------------------------------------------
class CompilationError(PolytcError):
    """The C/OpenCL/CUDA compiler rejected generated code: a polytc bug, reported clearly."""


class ScheduleError(PolytcError):
    """A schedule transformation would violate a dependence, or isl gave up."""


class InternalError(PolytcError):
    """An unexpected failure inside polytc: please report it with the program."""


def user_boundary(fn):
    """Decorator for public entry points: only polytc errors leave, with short tracebacks."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except PolytcError as e:
            raise e.with_traceback(None) from None
        except (KeyboardInterrupt, SystemExit, MemoryError):
            raise
        except Exception as e:  # noqa: BLE001 - the boundary turns bugs into reports
            from . import config

            if config.debug_level() >= 3:
                raise
            err = InternalError(
                f"internal error in polytc ({type(e).__name__}: {e})",
                hint="this is a polytc bug; set POLYTC_DEBUG=3 for the full traceback and "
                "report it with your program",
            )
            raise err.with_traceback(None) from None

    return wrapper
