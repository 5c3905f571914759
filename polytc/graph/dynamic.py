"""A model's symbolic input dimensions (a dynamic batch, a sequence length) kept symbolic
in its groups' programs, so that one compiled kernel per group serves every value.

A model is bound to concrete shapes (``bind``: shape computations fold to numbers), so a
group's program text names no dimension: ``float(8,784) a0``.  Which of its numbers come
from a symbolic input dimension is read off two bindings: the same group (its text with
every number blanked, ``skeleton``) at two values of the dimensions differs exactly in
those numbers.  Where each differing number equals one dimension's value in both
bindings, the number becomes that dimension's size name (``float(D0,784) a0``), and where
it is a multiple of it in both (``8 * 128`` rows of a flattened batch of sequences), or
else of the product of two dimensions' values (``N * S`` rows, ``S * S`` scores), a size
name of its own (``D0x128``, ``D0xD1``), bound like any size from the arrays of a call;
the group compiles with those sizes symbolic (``docs/dynamic.md``).  A number that follows
the dimension otherwise leaves the group specialised at each value, and so does a
generic kernel whose output shapes are not those of the binding (``Plan``).  Groups alike
but for their numbers (two layers) share a skeleton: a text is compared with the binding
it differs from in the fewest numbers.  The first binding of a skeleton is a reference; a
model seen at one shape compiles exactly as before.
"""
from __future__ import annotations

import itertools
import math
import re

#: a number of a program's text: not part of a name, nor of a float literal (kept by
#: ``split``: ``_parts``)
_NUMBER = re.compile(r"((?<![\w.])\d+(?![\w.]))")


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
    return "#".join(_parts(text)[0])


def _parts(text: str) -> tuple:
    """``(the text between its numbers, its numbers)``, in one scan of ``text``."""
    parts = _NUMBER.split(text)
    return parts[0::2], parts[1::2]


class Generaliser:
    """Turns a group's text at some values of the symbolic dimensions into a text over
    their size names (``generic``), from the first binding of the same skeleton."""

    def __init__(self, graph):
        self.dims = symbolic_dims(graph)
        self.names = sorted({name for _, _, name in self.dims})
        self._refs: dict = {}  # skeleton -> [(values, text)]: its first bindings
        self._memo: dict = {}  # text -> (generic text, names) found for it
        #: skeleton -> [(generic text, names, name -> (dimension, factor), slots)]: the
        #: generic texts found, which a later binding of the group matches at its values
        #: (``slots``: per number of the skeleton, the number or the size name there)
        self._templates: dict = {}

    def probe(self, shapes: dict) -> dict | None:
        """Input shapes with every symbolic dimension one larger: bound and grouped
        (``remember``) before the first plan, so that its groups compile symbolic at
        once; None when there is no symbolic dimension, or the first values are 1 (a
        batch of one keeps its specialised kernels: a one-row product, a one-image
        convolution on every thread)."""
        values = self.values(shapes)
        if not values or min(values.values()) < 2:
            return None
        out = {v: list(s) for v, s in shapes.items()}
        for v, axis, name in self.dims:
            out[v][axis] = values[name] + 1
        return {v: tuple(s) for v, s in out.items()}

    def remember(self, texts, shapes: dict) -> None:
        """Take the group texts of a binding at ``shapes`` as references."""
        values = self.values(shapes)
        if values is not None:
            for text in texts:
                refs = self._refs.setdefault(skeleton(text), [])
                if not any(old == text for _, old in refs):
                    refs.append((values, text))

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
        if text in self._memo:
            return self._memo[text]
        between, numbers = _parts(text)
        skel = "#".join(between)
        for gtext, names, binding, slots in self._templates.get(skel, ()):  # a generic
            if _matches(slots, binding, values, numbers):  # text found before, these values
                self._memo[text] = (gtext, names)
                return gtext, names
        refs = self._refs.setdefault(skel, [])
        # groups alike but for their numbers (two layers) share a skeleton: the binding
        # this text differs from in the fewest numbers is its own group's
        found = [f for f in (self._generalise(v, old, values, text) + (old,)
                             for v, old in list(refs)) if len(f) > 1]
        if not found:
            if not any(old == text for _, old in refs):
                refs.append((values, text))  # a reference: the first binding of its group
            return None
        gtext, names, _, binding, slots, old = min(found, key=lambda f: f[2])
        self._templates.setdefault(skel, []).append((gtext, names, binding, slots))
        # the reference is that group too (a later binding equal to it: the probe's)
        self._memo[text] = self._memo[old] = (gtext, names)
        return gtext, names

    def _generalise(self, old_values, old, values, text) -> tuple:
        """``(generic text, names, numbers that differ, name -> (dimension, factor),
        slots)``, or ``()`` (``slots``: per number of ``text``, itself or its size name)."""
        if old == text:
            return ()
        sizes = _sizes(self.names, text)
        (parts_old, nums_old), (parts, nums) = _parts(old), _parts(text)
        if parts_old != parts or len(nums_old) != len(nums):
            return ()
        used, out, binding = set(), [], {}
        for a, b in zip(nums_old, nums):
            if a == b:
                out.append(b)
                continue
            # a dimension's value times a constant (a flattened batch of sequences:
            # N * 128 rows) in both bindings, else a product of two dimensions' (N * S
            # rows, S * S scores) times one: a size name of its own
            match = _monomial(int(a), int(b), old_values, values, self.names)
            if match is None:
                return ()
            dims, k = match
            name = "x".join([sizes[n] for n in dims] + ([str(k)] if k != 1 else []))
            used.add(name)
            out.append(name)
            binding[name] = (dims, k)
        merged = [x for pair in zip(parts, out + [""]) for x in pair]
        return "".join(merged), tuple(sorted(used)), \
            sum(a != b for a, b in zip(nums_old, nums)), binding, tuple(out)


def _matches(slots: tuple, binding: dict, values: dict, numbers: list) -> bool:
    """Whether a text whose numbers are ``numbers`` is the generic text of ``slots`` (its
    skeleton's) at ``values``: each size name's number there, each other number itself."""
    if len(slots) != len(numbers):
        return False
    at = {name: str(k * math.prod(values[n] for n in dims))
          for name, (dims, k) in binding.items()}
    return all(at.get(s, s) == n for s, n in zip(slots, numbers))


def _monomial(a: int, b: int, old: dict, new: dict, names) -> tuple | None:
    """``(dimensions, k)``: the one product of dimensions (one, else two, a dimension
    twice included) that ``a`` is ``k`` times at the values ``old`` and ``b`` at
    ``new``; None when there is none, or more than one of the fewest dimensions."""
    for degree in (1, 2):
        found = []
        for dims in itertools.combinations_with_replacement(names, degree):
            at_old = math.prod(old[n] for n in dims)
            if at_old and a % at_old == 0 and a // at_old * \
                    math.prod(new[n] for n in dims) == b:
                found.append((dims, a // at_old))
        if found:
            return found[0] if len(found) == 1 else None
    return None


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
