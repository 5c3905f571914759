"""Inlining of temporaries: ``f(program) -> program``.

A temporary ``T`` written by one plain ``=`` statement over its whole shape, and read
once (or, where its value costs at most two operations, several times at the same
element, by one statement), by a statement that reads each element of ``T`` at most
once (its subscripts are distinct indices, or 0 along a dimension of extent 1, and every
index of the reading statement that they do not name has a single value; an index plus
a constant is distinct too, a box read shifted, outside a select), is
substituted into that read.  The value is then computed in a register where it is used
instead of going through memory: a chain of elementwise ops (bias, activation, scaling)
costs one pass over the data.  Reads that would recompute an element (a broadcast, a
contraction operand) are left alone, so no work is repeated and register-tiled products
keep their shape.

The last of several writers of ``T`` inlines the same way when it updates ``T`` in place,
reading it only at the element it writes (``T = T + b``, a convolution's bias after its
reduction): its one later reader then reads what the earlier writers left, and the
reduction keeps a single epilogue (bias and activation fold into its register tiles).
"""
from __future__ import annotations

import dataclasses

from . import program as P
from . import sizes as S


def _substitute(e, env: dict):
    """``e`` with index variables replaced by the expressions in ``env``."""
    if isinstance(e, P.Index):
        return env.get(e.name, e)
    if isinstance(e, P.Read):
        return dataclasses.replace(e, indices=tuple(_substitute(i, env) for i in e.indices))
    if isinstance(e, P.Apply):
        return dataclasses.replace(e, args=tuple(_substitute(a, env) for a in e.args))
    if isinstance(e, (P.Convert, P.Neg, P.Not)):
        return dataclasses.replace(e, value=_substitute(e.value, env))
    if isinstance(e, P.Bin):
        return dataclasses.replace(e, lhs=_substitute(e.lhs, env), rhs=_substitute(e.rhs, env))
    if isinstance(e, P.Select):
        return dataclasses.replace(e, cond=_substitute(e.cond, env),
                                   then=_substitute(e.then, env),
                                   other=_substitute(e.other, env))
    return e


def _replace_read(e, tensor: str, make):
    """``e`` with the read of ``tensor`` replaced by ``make(read)``."""
    if isinstance(e, P.Read):
        if e.tensor == tensor:
            return make(e)
        return dataclasses.replace(e, indices=tuple(_replace_read(i, tensor, make)
                                                    for i in e.indices))
    if isinstance(e, P.Apply):
        return dataclasses.replace(e, args=tuple(_replace_read(a, tensor, make)
                                                 for a in e.args))
    if isinstance(e, (P.Convert, P.Neg, P.Not)):
        return dataclasses.replace(e, value=_replace_read(e.value, tensor, make))
    if isinstance(e, P.Bin):
        return dataclasses.replace(e, lhs=_replace_read(e.lhs, tensor, make),
                                   rhs=_replace_read(e.rhs, tensor, make))
    if isinstance(e, P.Select):
        return dataclasses.replace(e, cond=_replace_read(e.cond, tensor, make),
                                   then=_replace_read(e.then, tensor, make),
                                   other=_replace_read(e.other, tensor, make))
    return e


def _covers(stmt, shape) -> bool:
    """Whether ``stmt`` writes every element of a tensor of ``shape``."""
    if len(set(stmt.indices)) != len(stmt.indices):
        return False
    for var, dim in zip(stmt.indices, shape):
        r = stmt.range_of(var)
        if not (S.is_const(r.lo) and S.evaluate(r.lo, {}) == 0 and r.hi == dim):
            return False
    return True


def _candidate(program, temp, reads=P.reads):
    """(defining statement, reading statement) if ``temp`` can be inlined; ``reads``:
    ``P.reads``, or a memo of it."""
    stmts = program.statements
    writers = [k for k, s in enumerate(stmts) if s.tensor == temp.name]
    if not writers:
        return None
    w = writers[-1]
    d = stmts[w]
    if d.op is not None or d.reduction_vars or not _covers(d, temp.shape):
        return None
    if len(writers) > 1 and not _updates_in_place(d, temp.name):
        return None
    sites = [(k, r) for k, s in enumerate(stmts) for r in reads(s.rhs)
             if r.tensor == temp.name and k != w]
    if len(sites) != 1 and not (sites and _cheap(d.rhs) and None not in _subscripts(
            sites[0][1]) and len({(k, _subscripts(r)) for k, r in sites}) == 1):
        return None  # (a cheap value read at one element several times: a GELU's x)
    k, read = sites[0]
    user = stmts[k]
    if k <= w or any(temp.name in {x.tensor for x in P.reads(i)}
                     for r in reads(user.rhs) for i in r.indices):
        return None  # read before written, or used as a subscript
    names = []
    shifted = not any(isinstance(x, P.Select) and any(read is r for b in (x.then, x.other)
                                                      for r in P.reads(b))
                      for x in P.walk(user.rhs))
    for sub, dim in zip(read.indices, temp.shape):
        # an index plus a constant reads a shifted box (the epilogue of a result written
        # into a padded buffer), unless a select reads it: a concatenation's second part
        # (``c < 8 ? X(c) : T(c - 8)``) whose T, left alone, folds into its product
        at = P.offset_index(sub) if shifted else \
            (sub.name, 0) if isinstance(sub, P.Index) else None
        if at is not None:
            names.append(at[0])
        elif not (isinstance(sub, P.Const) and sub.value == 0 and _extent(dim) == 1):
            return None
    if len(set(names)) != len(names) or any(
            _extent(r.hi, r.lo) != 1 for r in user.ranges if r.var not in names):
        return None  # the read could touch an element twice
    return w, k


def _subscripts(read) -> tuple:
    """The read's subscripts as index names and constants (None for any other)."""
    return tuple(i.name if isinstance(i, P.Index) else i.value if isinstance(i, P.Const)
                 else None for i in read.indices)


def _cheap(e) -> bool:
    """Whether ``e`` costs at most two arithmetic operations and calls no function, so
    that substituting it at each of several reads repeats next to nothing (a bias add
    read twice by a GELU, which then folds into a product's register tiles: BERT-2L's
    feed-forward product at batch 64 no longer writes and reads back 32 MB)."""
    nodes = list(P.walk(e))
    return not any(isinstance(x, (P.Apply, P.Select)) for x in nodes) and \
        sum(isinstance(x, (P.Bin, P.Neg, P.Not)) for x in nodes) <= 2


def _updates_in_place(d, name: str) -> bool:
    """Whether the statement ``d`` (writing ``name``) reads ``name`` only at the element
    it writes, and not in a subscript: ``T(i, j) = T(i, j) + b(j)``.  Substituting it into
    the one later reader of ``T`` leaves ``T`` as its earlier writers left it, which is
    exactly what ``d`` read (a convolution's bias, then its activation, become one
    epilogue of the reduction)."""
    for r in P.reads(d.rhs):
        if any(name in {x.tensor for x in P.reads(i)} for i in r.indices):
            return False
        if r.tensor == name and (len(r.indices) != len(d.indices) or not all(
                isinstance(i, P.Index) and i.name == v for i, v in zip(r.indices, d.indices))):
            return False
    return True


def _extent(hi, lo=None):
    """The constant ``hi - lo``, or None."""
    if not S.is_const(hi) or (lo is not None and not S.is_const(lo)):
        return None
    return S.evaluate(hi, {}) - (S.evaluate(lo, {}) if lo is not None else 0)


def inline_temporaries(program: P.Program) -> P.Program:
    """The program with every inlinable temporary substituted into its reader.  The reads
    of each right-hand side are listed once (expressions are immutable): the search
    for candidates walked every statement's tree again for each temporary, after each
    substitution (an unrolled LSTM: 0.48 s of every load, from the disk cache too)."""
    memo: dict = {}

    def reads(e):
        hit = memo.get(id(e))
        if hit is None or hit[0] is not e:
            hit = memo[id(e)] = (e, P.reads(e))
        return hit[1]

    changed = True
    while changed:
        changed = False
        for temp in program.temporaries:
            found = _candidate(program, temp, reads)
            if found is None:
                continue
            w, k = found
            d = program.statements[w]

            def make(read, d=d, temp=temp):
                env = {v: i for v, i in zip(d.indices, read.indices)}
                value = _substitute(d.rhs, env)
                return value if value.dtype == temp.dtype else P.Convert(value, temp.dtype)

            user = program.statements[k]
            user = dataclasses.replace(user, rhs=_replace_read(user.rhs, temp.name, make))
            stmts = tuple(user if j == k else s for j, s in enumerate(program.statements)
                          if j != w)
            still = any(s.tensor == temp.name for s in stmts)  # an in-place update went
            program = dataclasses.replace(
                program, statements=stmts,
                temporaries=tuple(t for t in program.temporaries
                                  if still or t.name != temp.name))
            changed = True
            break
    return program
