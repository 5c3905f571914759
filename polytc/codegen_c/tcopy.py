"""A transposing copy of a packed operand in blocks transposed in registers.

A packed operand read along its unit-stride reduction index (``B(j, k)`` of ``A Bᵀ``,
``K`` of a batched ``Q Kᵀ``) is copied by ``tiling/pack.py`` in blocks of a cache line
along ``k``: for each block, the panel's ``NR`` lanes ``l`` and the block's ``k`` loop
inside them, each element alone (the read is contiguous along ``k``, the buffer along
``l``).  Where both loops are whole (``NR`` and the block multiples of the vector
length), the copy here loads ``lanes`` rows of the operand as vectors along ``k``,
transposes them in registers (``microkernel.transposed``) and stores ``lanes`` vectors
along ``l``: sgemm ``A Bᵀ`` 1024³ 9.3 -> 8.9 ms on one thread, batched ``Q Kᵀ`` 0.575
-> 0.537 ms, kron2 0.207 -> 0.154 ms.  Not yet: blocks of a reduction that ends in a
partial one, or of a partial panel (isl bounds all of their loops by ``PT_MIN``)."""
from __future__ import annotations

import re

import cgen as c
import islpy as isl

from ..machine import host
from ..tiling.pack import unit_stride
from .cexpr import isl_expr
from .chains import const_bounds
from .microkernel import transposed, vector_type


def transposed_copy(em, n) -> list | None:
    """The code of the copy's lane loop ``n`` (its body the block's loop over ``k``, its
    body the copy statement) as transposed blocks, or None where the pattern or the
    vectors are not there (then the loops are generated as they are); blocks of 4 to 16
    lanes (wider ones, of bytes, would take 6 rounds of shuffles)."""
    T = isl.ast_node_type
    kloop = n.for_get_body()
    if not em.vectorize or kloop.get_type() != T.for_ or \
            kloop.for_get_body().get_type() != T.user:
        return None
    call = kloop.for_get_body().user_get_expr()
    p = em.packs.get(call.op_get_arg(0).id_get_id().get_name())
    if p is None or not p.transposing or p.box is not None:
        return None
    itemsize = p.read.dtype.np_dtype.itemsize
    lanes, line = host().lanes(itemsize), max(1, 64 // itemsize)
    lo, hi = const_bounds(n)
    if not 4 <= lanes <= 16 or lo != 0 or (hi + 1) % lanes or line % lanes or \
            not any(unit_stride(p.read, p.sst.vars[v]) for v, _t in p.red):
        return None
    lit, kit = em.for_header(n)[0], em.for_header(kloop)[0]
    start = isl_expr(kloop.for_get_init())
    klo, khi = const_bounds(kloop)
    if klo is None and em.for_header(kloop)[1][1] != f"{kit} <= ({start} + {line - 1}L)":
        return None  # not a whole block
    if klo is not None and khi - klo + 1 != line:
        return None
    args = [isl_expr(call.op_get_arg(i + 1)) for i in range(call.op_get_n_arg() - 1)]

    def copy(lane: str, k: str) -> tuple[str, str] | None:
        sub = [re.sub(rf"\b{kit}\b", k, re.sub(rf"\b{lit}\b", lane, a)) for a in args]
        dst, src = p.copy(sub, em).split(" = ", 1)
        return (dst, src) if re.fullmatch(r"\w+\[[^?]*\]", src) else None

    k0 = f"({start} + pt_kc)"
    first = [copy(f"(pt_lb + {t}L)", k0) for t in range(lanes)]
    if None in first:
        return None
    vtype, utype = vector_type(p.ctype, lanes)
    em.vector_types.add((p.ctype, lanes, itemsize))
    rows = [c.Statement(f"{vtype} pt_c{t} = *(const {utype} *)&{src}")
            for t, (_dst, src) in enumerate(first)]

    def store(at: int, vector: str):  # lane ``at / lanes`` of the rows: k0 + that
        dst = copy("pt_lb", f"({k0} + {at // lanes}L)")[0]
        return c.Statement(f"*({utype} *)&{dst} = {vector}")

    body = rows + transposed(vtype, lanes, lanes, 1,
                             {t: (lambda v, t=t: f"pt_c{t}") for t in range(lanes)}, store)
    inner = c.For("long pt_kc = 0", f"pt_kc < {line}L", f"pt_kc += {lanes}L", c.Block(body))
    return [c.For("long pt_lb = 0", f"pt_lb < {hi + 1}L", f"pt_lb += {lanes}L",
                  c.Block([inner]))]
