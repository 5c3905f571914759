"""A register tile of few accumulators, its reduction loop interleaved over several sets;
a tile of few rows, its operand vectors held in registers (``pinned``).

Each step of a register tile's reduction adds into every accumulator, and waits for the
last step's sum in it: an FMA's result comes some cycles after it starts (4 on the x86
cores met so far) and a core starts two a cycle, so ``CHAINS`` independent sums keep
its FMA units busy.  A tile of fewer vectors (a product 16 columns wide: one a row)
waits on latency, not on its loads.  ``interleave`` gives such a tile's innermost
reduction loop ``copies`` sets of accumulators, step ``s`` of each group of ``copies``
adding into set ``s``, and adds the sets into the first after the loop.  The sums are
reassociated, as vectorised reductions are (``promote.Promotion._split_sum``); integer
dot products (VNNI) sum exactly.

A 16 wide product over a reduction of 4096, in-process against the same code without
it: 1 row 4.1 -> 1.8 us, 3 rows 6.7 -> 5.1, 6 rows 6.8 -> 6.0 (with the rows symbolic
8.1 -> 4.6, 7.9 -> 7.1, 11.3 -> 8.7); bench_cpu's gevm 0.96x.  Memory-bound tiles gain
nothing (a generic M x 512 x 512 product's last row, its 512 x 512 operand streamed).
"""
from __future__ import annotations

import re
from typing import NamedTuple

import cgen as c
import islpy as isl

_OP = isl.ast_expr_op_type

#: independent accumulators that keep a core's FMA units busy: 4 cycles of latency
#: times 2 units
CHAINS = 8


class Interleaved(NamedTuple):
    decls: list  # the other sets' accumulators, at zero
    loop: list  # the innermost reduction loop's code
    combine: list  # the sets added into the first, after the loops


def interleave(em, loop, nest: list, accs: dict, registers: int) -> Interleaved | None:
    """The innermost reduction loop ``loop`` (of constant bounds) of a register tile
    whose step is ``nest`` (cgen statements) over the accumulators ``accs`` (name -> its
    vector type), interleaved over enough sets of them for ``CHAINS`` chains, at most
    half of the ``registers``; None where it has enough (or too few steps)."""
    if not accs or len(accs) >= CHAINS:
        return None
    lo, hi = const_bounds(loop)
    if lo is None:
        return None
    copies = min(-(-CHAINS // len(accs)), (hi - lo + 1) // 2,
                 max(1, registers // 2 // len(accs)))
    if copies < 2:
        return None
    it = em.for_header(loop)[0]
    names = re.compile(r"\b(" + "|".join(map(re.escape, accs)) + r")\b")
    text = [str(s) for s in nest]

    def step(s: int) -> c.Block:
        at = f"{it}_c" if s == 0 else f"{it}_c + {s}L"
        lines = text if s == 0 else [names.sub(rf"\1_c{s}", t) for t in text]
        return c.Block([c.Statement(f"long {it} = {at}")] + [c.Line(t) for t in lines])

    end = lo + (hi - lo + 1) // copies * copies
    code = [c.For(f"long {it}_c = {lo}L", f"{it}_c < {end}L", f"{it}_c += {copies}L",
                  c.Block([step(s) for s in range(copies)]))]
    if end <= hi:
        code.append(c.For(f"long {it} = {end}L", f"{it} <= {hi}L", f"{it} += 1",
                          c.Block([c.Line(t) for t in text])))
    decls = [c.Statement(f"{vt} {a}_c{s} = ({vt}){{}}") for a, vt in accs.items()
             for s in range(1, copies)]
    combine = [c.Statement(f"{a} += " + " + ".join(f"{a}_c{s}" for s in range(1, copies)))
               for a in accs]
    return Interleaved(decls, code, combine)


#: the most rows of a register tile whose operand vectors are pinned in registers
#: (``pinned``): pinned in every tile, SqueezeNet ran 1.14x and 1.13x its time in two
#: in-process A/Bs (its 8- to 14-row convolution tiles), with these ones 0.99-1.01x
PIN_ROWS = 4


def pinned(loads: list, rows: int, accumulators: int, registers: int) -> list:
    """The statements of a register tile's loads (``loads``: C declarations), each
    vector load followed by an empty ``asm`` that holds its value in a register
    (``PT_PIN``, the prelude's: none on a machine it does not know), where
    the tile has 2 to ``PIN_ROWS`` rows and the registers hold its accumulators, those
    vectors and a broadcast: gcc folds a vector load into every FMA that uses it (one
    memory operand per row), and a tile of few rows is then bound by its loads (at 3
    rows, 15 loads a step for 12 FMAs: 3 broadcasts and 4 vectors are 7).  M x 512 x
    512 products, inputs 16 bytes past a 64-byte boundary, in-process A/B: at 3 and 4
    rows 9.3 -> 6.5 and 11.9 -> 7.8 us, with M symbolic 9.8 -> 7.1 and 11.1 -> 7.1; at
    9 rows (6 and 3) 17.5 -> 15.0; aligned 0.85-1.0x; tiles of more rows unchanged."""
    vectors = [re.fullmatch(r"const (pt_v\w+) (pt_r\d+) = (.*)", d, re.S) for d in loads]
    if not 1 < rows <= PIN_ROWS or \
            accumulators + sum(v is not None for v in vectors) + 1 > registers:
        return [c.Statement(d) for d in loads]
    return [s for d, v in zip(loads, vectors) for s in (
        [c.Statement(d)] if v is None else
        [c.Statement(f"{v[1]} {v[2]} = {v[3]}"), c.Statement(f"PT_PIN({v[2]})")])]


def interleaved(code: str) -> list:
    """The sets of accumulators of each interleaved loop in the C ``code`` (``explain``)."""
    return [int(n) for n in re.findall(
        r"for \(long \w+_c = -?\d+L; \w+_c < -?\d+L; \w+_c \+= (\d+)L\)", code)]


def const_bounds(for_node):
    """``(lo, hi)`` of a ``for (it = lo; it <= hi; it += 1)`` with constant bounds."""
    init, cond = for_node.for_get_init(), for_node.for_get_cond()
    inc = for_node.for_get_inc()
    if init.get_type() != isl.ast_expr_type.int or inc.get_type() != isl.ast_expr_type.int \
            or inc.int_get_val().to_python() != 1:
        return None, None
    if cond.get_type() != isl.ast_expr_type.op or \
            cond.op_get_type() not in (_OP.le, _OP.lt):
        return None, None
    bound = cond.op_get_arg(1)
    if bound.get_type() != isl.ast_expr_type.int:
        return None, None
    hi = bound.int_get_val().to_python() - (1 if cond.op_get_type() == _OP.lt else 0)
    return init.int_get_val().to_python(), hi
