"""The C target: C with OpenMP and SIMD pragmas (``codegen_c``), compiled by gcc into a
shared object and called through cffi (``runtime/native.py``)."""
from __future__ import annotations

from .. import config
from ..codegen_c.cexpr import PRELUDE
from ..codegen_c.compiler import build_facts, build_shared_object, warm_probes
from ..codegen_c.emit import CEmitter
from ..codegen_c.pack import packs_of
from ..tiling.extents import least_symbolic, statement_points
from ..codegen_c.fewrows import bounds
from ..lang import program as P
from ..machine import threads
from ..poly.schedule import BAND_SHIFT
from ..tiling.contract import text as contract_text
from ..runtime.compiled import build_meta
from ..runtime.executor import executor
from ..runtime.native import CompiledKernel
from .base import Backend

FUNCTION_NAME = "polytc_kernel"


#: a kernel of symbolic sizes longer than this many lines of C is built without gcc's
#: peeling of small loops (``CBackend.generate``)
PEEL_MOST_LINES = 4000


class C(Backend):
    name = "c"
    host = True
    packing = True
    prepacking = True
    contracting = True
    folding = True
    private_reductions = True
    symbolic = True
    compiler = "gcc"

    def warm(self) -> None:
        super().warm()
        warm_probes(then=executor)  # and the plans' executor

    def cache_facts(self) -> dict:
        # the thread count from the environment shapes the parallel loops and tiles; the
        # CPU, its ISA and the compiler, the binary
        return {"threads": config.num_threads(), **build_facts()}

    def generate(self, b):
        decisions = tuple(b.tiling)
        while True:
            # only an explicit count is a num_threads clause: the environment's is the
            # team size OpenMP starts with, which a model's run may lower (governor.py)
            em = CEmitter(b.scop, b.options.num_threads,
                          b.options.vectorize, decisions, b.options.reciprocal,
                          parallel_sum=_parallel_sum(b.options), parallel_if=_parallel_if(b),
                          team=threads(b.options.num_threads),
                          band_points=b.options.parallel_min_points >> BAND_SHIFT,
                          aligned=b.options.aligned)
            rows = bounds(b)
            code = em.function(b.ast, FUNCTION_NAME, b.fills,
                               rows and (b.few.tiling, b.few.ast, rows))
            if not em.escaped:
                break
            # a contracted temporary that isl's AST reads outside its parallel loop
            # stays an array
            decisions = tuple(d for d in decisions
                              if d.kind != "contract" or d.subject not in em.escaped)
            b = b.stage("contraction", contract_text(decisions))
        # gcc options of this kernel's own (after the precompiled prelude): a window's
        # (``microkernel._window``), and a long kernel of symbolic sizes, whose small
        # loops have symbolic bounds that gcc peeled whole by its estimate of them, each
        # 16 times (a transformer layer's attention over a symbolic sequence length:
        # 7400 lines of C, gcc 14 -> 8 s, as fast; shorter ones keep it: a generic row
        # program of 10 statements ran 5-10% slower without)
        off = ["no-predictive-commoning"] if em.windows else []
        if b.scop.symbolic and code.count("\n") > PEEL_MOST_LINES:
            off.append("no-peel-loops")
        if off:
            at = len(PRELUDE) if code.startswith(PRELUDE) else 0
            pragma = ", ".join(f'"{o}"' for o in off)
            code = code[:at] + f"#pragma GCC optimize ({pragma})\n" + code[at:]
        if not b.options.fp_contract:
            code = '#pragma GCC optimize ("fp-contract=off")\n' + code
        return b.stage("c", code, code=code, sites=tuple(em.sites), tiling=decisions)

    def compile(self, b):
        so = build_shared_object(b.code, {"name": b.program.name})
        with open(so, "rb") as f:
            files = {"kernel.so": f.read()}
        local = {d.subject for d in b.tiling if d.kind == "alias" or
                 d.kind == "contract" and "slot" not in d.facts}
        return files, build_meta(b, align_inputs=align_inputs(b), local_temps=sorted(local),
                                 prepacked=prepacked(b), symbolic=list(b.scop.symbolic))

    def load(self, program, env, options, entry, build=None):
        return CompiledKernel(program, env, options, f"{entry['dir']}/kernel.so",
                              entry["meta"], build)


def prepacked(b) -> list:
    """``[input position, elements, function]`` per operand packed once, in the order
    of the kernel's parameters (``codegen_c/pack.py``)."""
    names = [t.name for t in b.program.inputs]
    return [[names.index(p.tensor), p.size, p.function]
            for p in packs_of(b.tiling, b.scop).values() if p.box is not None and not p.alias]


#: the reuse of each element of an input (statement instances over its elements) from
#: which a register-tiled contraction gets an aligned copy of it (``align_inputs``)
ALIGN_REUSE = 64


def align_inputs(b) -> list:
    """Inputs of a register-tiled contraction whose every element is reused at least
    ``ALIGN_REUSE`` times: only then does an aligned copy pay for itself.  A matrix-vector
    product reads each element once, and the copy would cost as much as the kernel; a
    product of 17 to 32 rows streams its other operand unpacked (``tiling/pack``), where
    a fresh aligned copy of a 512 x 512 one (its pages faulted in at every call) took
    3-6x the time of the kernel, which loses 7-15% to unaligned loads (17 rows: 112 ->
    21 us with the copy left out, 32 rows: 64 -> 35).  Not those of a contraction with a
    packed operand: the packed copy is aligned; nor the operands a tile broadcasts
    (scalar loads, for which alignment does not matter: the 17 rows' 34 KB)."""
    out = set()
    packed = {d.subject for d in b.tiling if d.kind == "pack"}
    for d in b.tiling:
        if d.kind != "contraction" or d.subject in packed:
            continue
        sst = next(s for s in b.scop.stmts if s.name == d.subject)
        points = statement_points(sst, b.env, b.scop.symbolic)
        for e in P.reads(sst.stmt.rhs):  # (vector loads: reads along the lanes)
            if len(e.indices) >= 2 and d.facts.get("_j") in P.index_names(*e.indices):
                size = 1
                for n in b.scop.shapes[e.tensor]:
                    size *= n
                if points >= ALIGN_REUSE * size:
                    out.add(e.tensor)
    return [i for i, t in enumerate(b.program.inputs) if t.name in out]


BACKEND = C()


def _parallel_if(b) -> str:
    """The run-time test of a kernel with symbolic sizes that its parallel loops run in
    parallel: its statement instances (as at the build's hint sizes, scaled by the
    symbolic sizes' product) reach ``Options.parallel_min_points``; "" when always.
    Forking for a generic kernel's one-row call cost more than the row (5 -> 12 us)."""
    sym = b.scop.symbolic
    if not sym:
        return ""
    least = least_symbolic(b.scop.stmts, b.env, sym, b.options.parallel_min_points)
    return "" if least <= 1 else f"({' * '.join(sym)}) >= {least}L"


def _parallel_sum(options) -> int | None:
    """The fewest terms of a sum outside every loop that the threads share, or None
    (parallel loops switched off, or one thread)."""
    from ..machine import threads

    if not options.parallel or threads(options.num_threads) < 2:
        return None
    return max(options.parallel_min_points, 1 << 16)
