"""A vector loop calling ``expf``, in explicit vectors with the exponential inlined
(``math_loop``).

gcc vectorises such a loop by calling the vector variant ``_ZGVeN16v_expf`` once per
vector (``vmath.py``): every call spills what the loop keeps in registers (all vector
registers are the caller's to save) and reloads the polynomial's constants, and no two
vectors' exponentials overlap.  Spelt out with the polynomial inline (``pt_expv16``), the
constants stay in registers: softmax's ``exp(x - max)`` over 4096 x 1024 on one thread
1.16 -> 0.98 ms with its input 16 bytes past a cache line, as numpy puts it (0.94 ->
0.89 ms aligned).  Applies to a ``simd`` loop of constant bounds over one assignment of
float32 values (``+ - * /``, negation, ``exp`` of a lane-dependent value) whose reads
are unit-stride along the loop or do not move with it, writing unit-stride; on AVX-512
hosts (the inline form is ``vmath.py``'s, built on ``vscalefps``).  The last partial
vector runs as the plain loop."""
from __future__ import annotations

import re

import cgen as c
import islpy as isl

from ..lang import program as P
from ..lang.types import FLOAT32
from .cexpr import target_code
from .chains import const_bounds
from .microkernel import _lane_stride, vector_type
from .pack import PackPrinter

#: lanes of the inline exponential (``vmath.pt_expv16``)
LANES = 16


def math_loop(em, node, it: str, header, body: list) -> list | None:
    """The loop ``node`` (iterator ``it``, C ``header``, its statements ``body`` as the
    emitter made them) as an explicit vector loop and the plain loop over its last
    partial vector, or None where that does not apply (see above)."""
    user = node.for_get_body()
    if user.get_type() != isl.ast_node_type.user or em.lanes(4) != LANES or \
            not em.vectorize or not em.omp_reductions:
        return None
    lo, hi = const_bounds(node)
    if lo is None or hi - lo + 1 < LANES:
        return None
    em.iters.append(it)
    try:
        vector = _vector_statement(em, *em.instance(user), it)
    finally:
        em.iters.pop()
    if vector is None:
        return None
    end = lo + (hi - lo + 1) // LANES * LANES
    main = c.For(f"long {it} = {lo}L", f"{it} < {end}L", f"{it} += {LANES}L",
                 c.Block([c.Statement(vector)]))
    if end > hi:
        return [main]
    rest = c.For(f"long {it} = {end}L", header[1], header[2], c.Block(body))
    return [main, c.Pragma("omp simd"), rest]


def _vector_statement(em, sst, printer, it: str) -> str | None:
    """``*(vector *)&target = value`` for the instance, or None."""
    st = sst.stmt
    if sst.kind != "body" or st.op is not None or isinstance(printer, PackPrinter) or \
            st.rhs.dtype != FLOAT32 or not _has_exp(st.rhs) or printer.substitute:
        return None
    lanes = [v for v, x in printer.vars.items() if re.search(rf"\b{it}\b", x)]
    if len(lanes) != 1 or printer.vars[lanes[0]].strip("() ") != it:
        return None
    lane = lanes[0]
    if list(st.indices).count(lane) != 1 or st.indices[-1] != lane:
        return None  # the result is written unit-stride
    moving = set()
    for r in P.reads(st.rhs):
        stride = _lane_stride(r, lane)
        if stride is None or id(r) in sst.guarded or r.dtype != FLOAT32:
            return None
        if stride:
            moving.add(id(r))
    if not _vectorisable(st.rhs, moving):
        return None
    _, utype = vector_type("float", LANES)
    em.vector_types.add(("float", LANES, 4))
    printer.vector_reads, printer.vector_type = frozenset(moving), utype
    value = re.sub(r"\bexpf\(", "pt_expv16(", printer.expr(st.rhs))
    return f"*({utype} *)&{target_code(sst, printer)} = {value}"


def _has_exp(e) -> bool:
    return any(isinstance(x, P.Apply) and x.func == "exp" for x in P.walk(e))


def _vectorisable(e, moving: set) -> bool:
    """Whether ``e`` prints as a vector expression: float32 arithmetic on vector reads,
    scalars (broadcast by gcc) and ``exp`` of a vector."""
    if isinstance(e, (P.Read, P.Const)):
        return e.dtype == FLOAT32
    if isinstance(e, P.Bin):
        return e.dtype == FLOAT32 and e.op in ("+", "-", "*", "/") and \
            _vectorisable(e.lhs, moving) and _vectorisable(e.rhs, moving)
    if isinstance(e, P.Neg):
        return _vectorisable(e.value, moving)
    if isinstance(e, P.Apply):
        return e.func == "exp" and len(e.args) == 1 and _vectorisable(e.args[0], moving) \
            and _moves(e.args[0], moving)
    return False


def _moves(e, moving: set) -> bool:
    """Whether ``e`` depends on the lanes (its value is a vector)."""
    return any(id(r) in moving for r in P.reads(e))
