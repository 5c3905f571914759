"""Long outlined loop bodies cut into functions of their own.

gcc's dataflow and register allocation grow faster than a function's length: the
attention of a transformer layer whose sequence length is symbolic is one parallel loop
whose body, every partial tile in its own variant, ran to 3700 lines, and gcc took 13 s
for it (``df live regs`` alone 2 s).  A body longer than ``SPLIT_LINES`` has its loop
nests of ``PIECE_LINES`` or more moved into static functions of their own, called where
they stood with the body's parameters and the iterators of the loops around them, and
the same again inside a piece that is still long.  A nest that uses a variable declared
in the body around it (a register tile's accumulators, a cursor) stays where it is,
unless that is a ``restrict`` pointer (a contracted buffer's): the piece takes it as an
argument (an LSTM whose 32 time steps run in one parallel loop, each step's product and
gates over the buffers of its rows); only whole loops and conditions holding loops move,
so that a call runs at least a loop, not one statement of a hot one, and an OpenMP
construct that shares work among its team (``omp for``) stays in its region's function.
A region and its pieces compile in one unit (``compiler._parts``) where the source's
head declares thread-local buffers (``static``), which they share; else the pieces are
shared out between the units like regions (that LSTM: gcc 2.9 s in one function, 2.1 s
in 33 pieces, 1.4 s on two cores).  That attention kernel: gcc 13 ->
4.8 s of CPU, in two units on two cores 12 -> 5.2 s; the model's first run 13.3 ->
9.1 s, its run times within 2% at lengths 1 to 128 (A/B)."""
from __future__ import annotations

import re

import cgen as c

#: a body this long (lines of C) is cut
SPLIT_LINES = 400
#: the shortest nest that becomes a function of its own
PIECE_LINES = 60

_DECL = re.compile(r"^\s*(?:const\s+|static\s+|unsigned\s+|volatile\s+)*[A-Za-z_]\w*"
                   r"(?:\s*\*\s*(?:restrict\s+|const\s+)*|\s+)([A-Za-z_]\w*)\s*"
                   r"(?:\[[^\]]*\]\s*)*(?:__attribute__\(\(.*?\)\)\s*)?(?:=|$)")
_ITER = re.compile(r"^\s*long\s+([A-Za-z_]\w*)\s*=")
#: a pointer the body declares (a contracted buffer's, ``float *restrict pt_l_t = ...``):
#: a piece that uses it takes it as an argument
_POINTER = re.compile(r"^\s*((?:const\s+)?[A-Za-z_]\w*)\s*\*\s*restrict\s+([A-Za-z_]\w*)\s*=")
_WORD = re.compile(r"\b[A-Za-z_]\w*\b")
_KEYWORDS = {"return", "else", "goto", "case"}


def cut(name: str, params: list, names: list, body: list, pieces: list) -> list:
    """``body`` (cgen items of the function ``name``, whose parameters are the cgen
    ``Value``s ``params``, named ``names`` in it) with its long nests moved into
    functions appended to ``pieces`` (to be defined before it); unchanged when it is not
    longer than ``SPLIT_LINES``."""
    cutter = _Cutter(name, params, names, pieces)
    if cutter.lines(body) <= SPLIT_LINES:
        return body
    return cutter.items(body, [], {})


def declared(item) -> str | None:
    """The variable a statement declares (``float pt_t[256] = ...``), if it is one."""
    if not isinstance(item, c.Statement):
        return None
    m = _DECL.match(item.text)
    return m.group(1) if m and item.text.split()[0] not in _KEYWORDS else None


class _Cutter:
    def __init__(self, name, params, names, pieces):
        self.name, self.params, self.names, self.pieces = name, params, names, pieces
        self.count = 0
        #: id(node) -> (node, its lines of C, the words in it, whether it holds a loop),
        #: made once from its children's: the text of every nest at every depth again
        #: had doubled the emitter's time on that attention kernel (0.38 -> 0.75 s)
        self.memo: dict = {}

    def measure(self, node) -> tuple:
        """``(lines, words, holds a loop)`` of ``node`` as cgen prints it."""
        hit = self.memo.get(id(node))
        if hit is not None:
            return hit[1:]
        if isinstance(node, c.For):
            parts, head, extra = [node.body], f"{node.start} {node.condition} {node.update}", 1
        elif isinstance(node, c.If):
            parts = [node.then_] + ([node.else_] if node.else_ is not None else [])
            head, extra = str(node.condition), len(parts)
        elif isinstance(node, c.Block):
            parts, head, extra = node.contents, "", 2
        else:  # a statement, a pragma, a literal line: printed as it is
            text = str(node)
            parts, head, extra = [], text, text.count("\n") + 1
        inner = [self.measure(x) for x in parts]
        out = (extra + sum(n for n, _, _ in inner),
               frozenset(_WORD.findall(head)).union(*(w for _, w, _ in inner)),
               isinstance(node, c.For) or any(loop for _, _, loop in inner))
        self.memo[id(node)] = (node, *out)  # (the node kept: its id is not reused)
        return out

    def lines(self, items) -> int:
        return sum(self.measure(x)[0] for x in items)

    def items(self, items: list, iters: list, scope: dict) -> list:
        """``items`` with their long nests cut out; ``iters``: the iterators of the loops
        around them, ``scope``: the variables declared around them -> the type of the
        restrict pointer each is, or None (both only reachable from a piece as
        arguments, which the iterators and the pointers are)."""
        if any(isinstance(x, c.Line) for x in items):  # (#ifdef blocks keep their parts)
            return items
        scope = dict(scope)
        out: list = []
        k = 0
        while k < len(items):
            x = items[k]
            unit = [x]
            if isinstance(x, c.Pragma) and k + 1 < len(items):  # a pragma and its loop
                unit.append(items[k + 1])
            k += len(unit)
            name = declared(x)
            if name is not None:
                m = _POINTER.match(x.text)
                scope[name] = m.group(1) if m and m.group(2) == name else None
            out += self.unit(unit, iters, scope)
        return out

    def unit(self, unit: list, iters: list, scope: dict) -> list:
        head = unit[-1]
        if not isinstance(head, (c.For, c.If, c.Block)) or self.lines(unit) < PIECE_LINES:
            return unit
        _, words, loop = self.measure(head)
        used = {n: scope[n] for n in sorted(words & scope.keys())}
        if loop and None not in used.values() and not _shares_work(unit[0]):
            return [self.piece(unit, iters, used)]
        return unit[:-1] + [self.inside(head, iters, scope)]

    def inside(self, node, iters: list, scope: dict):
        """``node`` (a loop, condition or block) with the long nests in it cut out."""
        if isinstance(node, c.For):
            m = _ITER.match(str(node.start))
            inner = iters + [m.group(1)] if m else iters
            body = node.body.contents if isinstance(node.body, c.Block) else [node.body]
            return c.For(node.start, node.condition, node.update,
                         c.Block(self.items(body, inner, scope)))
        if isinstance(node, c.If):
            return c.If(node.condition, self.block(node.then_, iters, scope),
                        None if node.else_ is None else self.block(node.else_, iters, scope))
        return c.Block(self.items(node.contents, iters, scope))

    def block(self, node, iters, scope):
        if isinstance(node, c.Block):
            return c.Block(self.items(node.contents, iters, scope))
        return self.inside(node, iters, scope) if isinstance(node, (c.For, c.If)) else node

    def piece(self, unit: list, iters: list, pointers: dict):
        """The nest ``unit`` as a function of its own (cut again where still long), and
        its call; ``pointers``: the body's pointers it uses -> their types."""
        name = f"{self.name}_{self.count}"
        self.count += 1
        params = [c.Value("long", i) for i in iters] + \
            [c.Value(f"{t} *restrict", p) for p, t in pointers.items()] + self.params
        if self.lines(unit) > SPLIT_LINES:  # (its nests: the piece itself stays one)
            unit = unit[:-1] + [self.inside(unit[-1], iters, pointers)]
        body = [c.Statement("int err = 0"), *unit,
                c.If("err", c.Statement("__atomic_store_n(pt_err, err, __ATOMIC_RELAXED)"))]
        self.pieces.append(c.FunctionBody(
            c.FunctionDeclaration(c.Value("static __attribute__((noinline)) void", name),
                                  params), c.Block(body)))
        return c.Statement(f"{name}({', '.join(iters + list(pointers) + self.names)})")


def _shares_work(x) -> bool:
    """An OpenMP construct other than ``simd`` (``omp for``, ``omp parallel``): it stays
    in its region's function, where its team's work is read, and only its loop's body
    may be cut."""
    return isinstance(x, c.Pragma) and x.value.startswith("omp ") and \
        not x.value.startswith("omp simd")
