"""A model's symbolic input dimensions (a dynamic batch, a sequence length) kept symbolic
in its groups' programs, so that one compiled kernel per group serves every value.

A model is bound to concrete shapes (``bind``: shape computations fold to numbers), so a
group's program text names no dimension: ``float(8,784) a0``.  Which of its numbers come
from a symbolic input dimension is read off two bindings: the same group (its text with
every number blanked, ``skeleton``) at two values of the dimensions differs exactly in
those numbers.  Where each differing number equals one dimension's value in both
bindings, the number becomes that dimension's size name (``float(D0,784) a0``) and the
group compiles with that size symbolic (``docs/dynamic.md``); a number derived otherwise
(``8 * 128`` rows of a flattened batch of sequences) leaves the group specialised at each
value.  The first binding of a skeleton is its reference; a model seen at one shape
compiles exactly as before.
"""
from __future__ import annotations

import re

#: a number of a program's text: not part of a name, nor of a float literal
_NUMBER = re.compile(r"(?<![\w.])\d+(?![\w.])")


def symbolic_dims(graph) -> list:
    """``(input, axis, name)`` per dimension of a graph input that is not a number."""
    out = []
    for v in graph.inputs:
        t = graph.types.get(v)
        if t is None or t.shape is None:
            continue
        for axis, d in enumerate(t.shape):
            if not isinstance(d, int):
                out.append((v, axis, d if isinstance(d, str) and d else f"{v}:{axis}"))
    return out


def skeleton(text: str) -> str:
    return _NUMBER.sub("#", text)


class Generaliser:
    """Turns a group's text at some values of the symbolic dimensions into a text over
    their size names (``generic``), from the first binding of the same skeleton."""

    def __init__(self, graph):
        self.dims = symbolic_dims(graph)
        self.names = sorted({name for _, _, name in self.dims})
        self._refs: dict = {}  # skeleton -> [(values, text)]: its first bindings

    def values(self, shapes: dict) -> dict | None:
        """Dimension name -> its value in ``shapes``; None when two uses disagree."""
        out: dict = {}
        for v, axis, name in self.dims:
            n = int(shapes[v][axis])
            if out.setdefault(name, n) != n:
                return None
        return out

    def generic(self, text: str, values: dict | None) -> tuple | None:
        """``(text over size names, the names it uses)`` for ``text`` bound at ``values``,
        or None (no symbolic dimension, the first binding, or numbers that do not map)."""
        if not self.dims or values is None:
            return None
        refs = self._refs.setdefault(skeleton(text), [])
        if not any(old == text for _, old in refs):
            refs.append((values, text))
        for old_values, old in list(refs):  # groups alike but for their numbers (two
            found = self._generalise(old_values, old, values, text)  # layers) share one
            if found is not None:
                return found
        return None

    def _generalise(self, old_values, old, values, text) -> tuple | None:
        if old == text:
            return None
        sizes = _sizes(self.names, text)
        parts_old, parts = _NUMBER.split(old), _NUMBER.split(text)
        nums_old, nums = _NUMBER.findall(old), _NUMBER.findall(text)
        if parts_old != parts or len(nums_old) != len(nums):
            return None
        used, out = set(), []
        for a, b in zip(nums_old, nums):
            if a == b:
                out.append(b)
                continue
            match = [n for n in self.names
                     if old_values[n] == int(a) and values[n] == int(b)]
            if len(match) != 1:
                return None
            used.add(match[0])
            out.append(sizes[match[0]])
        merged = [x for pair in zip(parts, out + [""]) for x in pair]
        return "".join(merged), tuple(sizes[n] for n in sorted(used))


def _sizes(names, text: str) -> dict:
    """A TC size name per dimension name, none of them a word of ``text``."""
    words = set(re.findall(r"\w+", text))
    out = {}
    for k, n in enumerate(names):
        base = f"D{k}"
        while base in words:
            base += "_"
        out[n] = base
    return out
