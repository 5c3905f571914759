"""``kernel.explain(*inputs)``: what the compiler decided for these sizes, and why.

Six topics, each a list of ``Fact``s (a sentence and the isl fact behind it):

* **sizes**: which sizes stay symbolic (none: the code is specialised to the sizes);
* **fusion**: which statements share a loop nest (and with which shifts), and for two
  consecutive nests why they stay apart: the tiler split them, the strategy never fuses,
  no dependence links them, or what fusing them would do, found by trying it on the
  schedule with ``poly.handsched`` and checking the result with ``poly.legality``;
* **parallel**: every loop, parallel or not, with the dependence it carries;
* **tiling**: the tiler's decisions and where the sizes came from (user, tuning cache,
  cost model);
* **memory**: the temporaries kept per parallel iteration instead of in memory;
* **vectorize**: the loops marked ``simd``/promoted, and the loops gcc reports vectorised.

The facts are recomputed by running the pipeline (no C compiler), so they describe the
same schedule as the cached binary.
"""
from __future__ import annotations

import html
import re
from dataclasses import dataclass

import islpy as isl

from .codegen_c.chains import CHAINS, interleaved
from .codegen_c.compiler import vectorizer_report
from .compiler import pipeline
from .tiling.extents import GENERIC, statement_points
from .codegen_c.fewrows import bounds
from .diagnostics import ScheduleError
from .poly import handsched as H
from .poly import legality as L
from .poly import privatize
from .poly.privatize import shared_matrix
from .poly.recipe import member_exprs, _expr_text, _sorted, _stmt_text
from .poly.schedule import has_contraction, strided_reduction
from .machine import host
from .poly.transform import statements_below

TOPICS = ("sizes", "fusion", "parallel", "tiling", "memory", "vectorize")


@dataclass(frozen=True)
class Fact:
    topic: str
    text: str
    isl: str = ""  # the isl fact behind the sentence


class Explanation:
    def __init__(self, name: str, env: dict, facts: list):
        self.name, self.env, self.facts = name, env, list(facts)

    def about(self, topic: str) -> list:
        """The sentences on one topic."""
        return [f.text for f in self.facts if f.topic == topic]

    def __str__(self):
        out = [f"{self.name} for {', '.join(f'{k}={v}' for k, v in self.env.items())}"]
        for t in TOPICS:
            facts = [f for f in self.facts if f.topic == t]
            if facts:
                out.append(f"{t}:")
                for f in facts:
                    out.append(f"  - {f.text}")
                    if f.isl:
                        out.append(f"      isl: {f.isl}")
        return "\n".join(out)

    __repr__ = __str__

    def _repr_html_(self):
        parts = [f"<b>{html.escape(str(self).splitlines()[0])}</b>"]
        for t in TOPICS:
            items = "".join(
                f"<li>{html.escape(f.text)}" + (f"<br><code style='font-size:85%;color:#555'>"
                                                 f"{html.escape(f.isl)}</code>" if f.isl else "")
                + "</li>" for f in self.facts if f.topic == t)
            if items:
                parts.append(f"<h4 style='margin:6px 0 2px'>{t}</h4><ul>{items}</ul>")
        return "<div>" + "".join(parts) + "</div>"


def explain(program, env: dict, options, source: str = "the cost model",
            vectorizer: bool = True) -> Explanation:
    with pipeline.LOCK:  # the facts read the build's isl objects
        b = pipeline.run(program, env, options)
        facts = _sizes(b) + _Explainer(b, source).facts()
    facts += _code_facts(b.code)
    if vectorizer:
        facts += _gcc(b.code)
    return Explanation(program.name, env, facts)


def _sizes(b) -> list:
    """Which sizes the code keeps symbolic (``Options.symbolic``, docs/dynamic.md)."""
    sym = b.scop.symbolic
    if not sym:  # specialised to the sizes of the header
        return []
    return [Fact("sizes", f"{', '.join(sym)} {'is' if len(sym) == 1 else 'are'} symbolic: "
                 f"one kernel serves every value (at least 1, and no tensor extent below "
                 f"0); its tiles are made for loops of at least {GENERIC} iterations, full "
                 "tiles isolated from the partial last one; this explanation is at "
                 f"{', '.join(f'{n}={b.env[n]}' for n in sym)}.", str(b.scop.context))]


def _code_facts(code: str) -> list:
    """What the C generator added to the schedule's loops: versions by alignment
    (``codegen_c/aligned.py``) and polytc's own vector ``expf`` (``codegen_c/vmath.py``)."""
    out = []
    conds = re.findall(r"if \(\(\(((?:\(uintptr_t\)\w+(?: \| )?)+)\) & 63\) == 0\)", code)
    if conds:
        names = sorted({n for cond in conds for n in re.findall(r"\(uintptr_t\)(\w+)", cond)})
        out.append(Fact("vectorize", f"{len(conds)} vector loop(s) reading {', '.join(names)} "
                        "are emitted twice: at full width when those arrays start on a "
                        "64-byte boundary, at half width otherwise (numpy puts a large "
                        "array 16 bytes past one, where every full-width load straddles "
                        "two cache lines).", conds[0]))
    sets = interleaved(code)
    if sets:
        out.append(Fact("vectorize", f"{len(sets)} register tile(s) of fewer than "
                        f"{CHAINS} accumulator vectors run their reduction over "
                        f"{' or '.join(map(str, sorted(set(sets))))} sets of accumulators, "
                        "added together after it, so that the FMA units are not left "
                        "waiting for each sum in turn (codegen_c/chains.py).",
                        f"interleaved by {sets[0]}"))
    if "_ZGVeN16v_expf" in code and host().lanes(4) >= 16:
        out.append(Fact("vectorize", "exp: polytc's vector expf (a degree-6 polynomial and "
                        "vscalefps, at most 1.06 ulp) takes the place of libmvec's in the "
                        "vectorised loops, where gcc targets AVX-512."))
    return out


def _gcc(code: str) -> list:
    lines, by_msg = code.split("\n"), {}
    for n, msg in vectorizer_report(code):
        by_msg.setdefault(msg, []).append(n)
    out = []
    for msg, where in by_msg.items():
        where.sort()
        many = f"{len(where)} loops (C lines {', '.join(map(str, where))})" \
            if len(where) > 1 else f"the loop of C line {where[0]}"
        out.append(Fact("vectorize", f"gcc vectorised {many}: {msg}.",
                        lines[where[0] - 1].strip()[:100]))
    if not out:
        out.append(Fact("vectorize", "gcc vectorised no loop of this kernel."))
    return out


class _Explainer:
    def __init__(self, b, source):
        self.b, self.scop, self.deps, self.source = b, b.scop, b.deps, source
        self.out: list = []

    def say(self, topic, text, fact=""):
        self.out.append(Fact(topic, text, fact))

    def facts(self) -> list:
        self.nests = nests(self.b.schedule, self.scop)
        self.fusion()
        self.parallel()
        self.tiling()
        return self.out

    def label(self, name) -> str:
        return f"{name} ({L._line(self.scop, name)}: {_stmt_text(self.scop, name)})"

    # --- fusion ------------------------------------------------------------------------
    def strategy(self) -> str:
        f = self.b.options.fusion
        if self.b.options.schedule:
            return "your hand schedule"
        if "schedule" in self.b.options.disable:
            return "program order (the scheduler is disabled)"
        if f != "auto":
            return f"isl's scheduler with fusion='{f}' (your option)"
        strided = strided_reduction(self.scop)
        if self.b.fusion == "shared":
            matrix, columns = shared_matrix(self.scop)
            why = (f"one pass over '{matrix}' for all its statements: each row is read "
                   "from memory once, by the statements that reduce along it and those "
                   "that reduce down the columns" if columns else
                   f"one pass over '{matrix}', {privatize.ROWS} rows at a time: their "
                   "dot products run side by side and share each load of the other "
                   "operand")
        elif self.b.fusion == "rows":
            why = ("one block of rows per thread for the whole chain of products: every "
                   "statement keeps the rows of the products, so each thread runs "
                   "the chain for its own rows in one parallel loop, with no join between "
                   "the products")
        elif has_contraction(self.scop):
            why = ("'preserve', as the program has a contraction (fusing around it would "
                   "prevent tiling it)")
        elif strided is not None:
            why = (f"'preserve', as {self.label(strided[0])} reduces down the columns of "
                   f"'{strided[1]}' (fused row by row, its inner loop would stride through "
                   "memory)")
        elif self.b.fusion == "preserve":
            why = ("'preserve', as fusing the rows ('max') would make the outermost loop "
                   "sequential")
        else:
            why = "'max' (row-wise program: no contraction)"
        return f"isl's scheduler with fusion='auto', which chose {why}"

    def fusion(self):
        self.say("fusion", f"Loop structure from {self.strategy()}.")
        for stmts, band in self.nests:
            if len(stmts) < 2:
                continue
            exprs = member_exprs(band, self.scop) if band is not None else []
            loops = ", ".join(_expr_text(e) for e in exprs)
            text = (f"{' and '.join(self.label(s) for s in stmts)} are fused: one loop nest "
                    f"runs them over ({loops})")
            shifted = [e for e in exprs if len(set(e.values())) > 1]
            if shifted:
                text += "; their loops are aligned with a shift (" + "; ".join(
                    _expr_text(e) for e in shifted) + ") so that every value is written " \
                    "before it is read in the same iteration"
            self.say("fusion", text + ".", self.links(stmts, stmts))
            if shifted:
                self.unshifted(stmts)
        for (a, na), (b, nb) in zip(self.nests, self.nests[1:]):
            self.apart(a, na, b, nb)

    def links(self, src, dst) -> str:
        """The dependences from statements ``src`` to other statements ``dst``, as isl
        text (a statement's dependences on itself are not links)."""
        d = self.deps.validity
        out = [m for m in L._maps(d) if m.get_tuple_name(isl.dim_type.in_) in src and
               m.get_tuple_name(isl.dim_type.out) in dst and
               m.get_tuple_name(isl.dim_type.in_) != m.get_tuple_name(isl.dim_type.out)]
        return "" if not out else str(H.union_all(
            [isl.UnionMap.from_map(m) for m in out]).coalesce())

    def unshifted(self, stmts):
        """Say why the shift is needed: program order fused without one is illegal."""
        sch = H.program_order(self.scop)
        idx = [k for k, n in enumerate(H.bands(sch))
               if len(statements_below(n)) == 1 and statements_below(n)[0] in stmts]
        if len(idx) == 2:
            _, err = self.fuse_trial(sch, *idx)
            if err is not None and "is illegal" in err.message:
                self.say("fusion", "Without the shift, fusing them would be illegal: it "
                         f"{_broken(err)}.")

    def fuse_trial(self, sch, ia, ib):
        """Fuse bands ``ia`` < ``ib`` of ``sch`` (the deeper one split first):
        ``(schedule, None)``, or ``(None, the ScheduleError)``."""
        found = H.bands(sch)
        depth = min(found[ia].band_n_member(), found[ib].band_n_member())
        steps = [("split", k, depth) for k in (ib, ia) if found[k].band_n_member() > depth]
        try:
            for st in steps:
                sch = H.apply(sch, st, self.scop, self.deps)
            ib += sum(1 for st in steps if st[1] < ib)
            return H.apply(sch, ("fuse", ia, ib), self.scop, self.deps), None
        except ScheduleError as e:
            return None, e

    def apart(self, a, na, b, nb):
        sa = ", ".join(self.label(s) for s in a)
        sb = ", ".join(self.label(s) for s in b)
        head = f"{sb} runs in its own loop nest after {sa}"
        for d in self.b.tiling:
            if d.kind != "split":
                continue
            groups = d.facts["groups"]
            ga = next((k for k, g in enumerate(groups) if set(a) & set(g)), None)
            gb = next((k for k, g in enumerate(groups) if set(b) & set(g)), None)
            if ga is not None and gb is not None and ga != gb:
                self.say("fusion", f"{head}: the tiler split them so that the contraction "
                         "is a band of its own, as cache and register tiling need.",
                         f"split groups {groups}")
                return
        if self.b.options.fusion == "min" and not self.b.options.schedule:
            self.say("fusion", f"{head}: fusion='min' never fuses statements.")
            return
        links = self.links(a, b)
        if not links:
            self.say("fusion", f"{head}: no dependence links them, so no proximity "
                     "constraint pulls their loops together.")
            return
        self.say("fusion", f"{head}. {self.try_fuse(a, b)}", links)

    def try_fuse(self, a, b) -> str:
        """What fusing the outer loops of two nests of the scheduler's schedule would do,
        checked with isl."""
        sch = self.b.isl_schedule
        if sch is None:
            return "The scheduler is off: statements run in program order."
        sch = strip_marks(sch)
        outer = nests(sch, self.scop)
        na = next((n for names, n in outer if set(a) <= set(names)), None)
        nb = next((n for names, n in outer if set(b) <= set(names)), None)
        if na is None or nb is None or na.is_equal(nb):
            return "One of them has no loop to fuse."
        ia, ib = _index(sch, na), _index(sch, nb)
        fused, err = self.fuse_trial(sch, ia, ib)
        if err is not None:
            if "is illegal" in err.message:
                return f"Fusing their outer loops without a shift would be illegal: it " \
                       f"{_broken(err)}."
            return ("In isl's schedule their loops are not neighbouring bands of one "
                    "sequence, so fusing them is more than one step; the strategy kept "
                    "them apart.")
        band = H.bands(fused)[ia]
        lost = [m for m in range(band.band_n_member())
                if (na.band_member_get_coincident(m) or nb.band_member_get_coincident(m))
                and L.carried(band, m, self.scop, self.deps)]
        if lost:
            dep = L.carried(band, lost[0], self.scop, self.deps)[0]
            return (f"Fusing them would be legal, but the fused loop {lost[0]} would carry "
                    f"the {dep.describe(self.scop)} and lose its parallelism; the "
                    "strategy keeps parallel loops parallel.")
        return ("Fusing them would be legal and keep the loops parallel; the strategy "
                "chose not to (try Options(fusion='max') or schedule.fuse).")

    # --- parallel loops ----------------------------------------------------------------
    def parallel(self):

        o = self.b.options
        points = sum(statement_points(s, self.b.env, self.scop.symbolic) for s in self.scop.stmts)
        for node, marks, inside in loops(self.b.schedule):
            exprs = member_exprs(node, self.scop)
            names = _sorted(self.scop, statements_below(node))
            nested = []
            for m in range(node.band_n_member()):
                if all(_constant(e) for e in exprs[m].values()):
                    continue  # a loop of one iteration (a tile of size 1)
                loop = _expr_text(exprs[m])
                what = f"The loop over {loop} ({', '.join(names)})"
                found = L.carried(node, m, self.scop, self.deps)
                mark = marks.get(m)
                if found and mark == "parallel":  # only a reduction, into private copies
                    names = sorted({d.tensor for d in found})
                    self.say("parallel", f"{what} runs in parallel (omp parallel for) with "
                             f"a private copy of {', '.join(names)} per thread, added up "
                             f"at its end: it carries only the "
                             f"{found[0].describe(self.scop)}.",
                             str(L.carried_relation(node, m, self.deps)))
                elif found:
                    self.say("parallel", f"{what} is sequential: it carries the "
                             f"{found[0].describe(self.scop)}.",
                             str(L.carried_relation(node, m, self.deps)))
                elif mark == "parallel":
                    self.say("parallel", f"{what} runs in parallel (omp parallel for): no "
                             "dependence crosses its iterations.",
                             "the band member is coincident" if
                             node.band_member_get_coincident(m) else "")
                elif mark == "simd":
                    self.say("parallel", f"{what} is parallel and vectorised (omp simd).")
                elif inside or marks:
                    nested.append(loop)
                else:
                    why = ("Options(parallel=False)" if not o.parallel else
                           f"the kernel has {points} statement instances, fewer than "
                           f"parallel_min_points={o.parallel_min_points}"
                           if points < o.parallel_min_points else
                           "an outer loop of the nest is already chosen" if m else
                           "your hand schedule does not mark it" if o.schedule else
                           "it is not the outermost parallel loop of its nest")
                    self.say("parallel", f"{what} could run in parallel but runs "
                             f"sequentially: {why}.")
            if nested:
                many = len(nested) > 1
                self.say("parallel", f"The loop{'s' * many} over {', '.join(nested)} "
                         f"({', '.join(names)}) {'are' if many else 'is'} parallel too, but "
                         f"run{'' if many else 's'} sequentially inside the parallel loop "
                         "(one parallel region per loop nest).")

    def words(self, name) -> str:
        """What the micro-kernel does with a ``dot4`` statement's step, or ''."""
        sst = next((s for s in self.scop.stmts if s.name == name), None)
        if sst is None or getattr(sst.stmt.rhs, "func", None) != "dot4":
            return ""
        how = ("one vpdpbusd per vector (this CPU has an int8 dot-product instruction)"
               if host().int8_dot else "exact shifts and products (this CPU has no int8 "
               "dot-product instruction: AVX512-VNNI or AVX-VNNI)")
        return f" Each reduction step multiplies four 8-bit pairs per lane (dot4): {how}."

    # --- tiling ------------------------------------------------------------------------
    def tiling(self):
        o = self.b.options
        for entry in self.b.tiling:
            kind = entry.kind
            if kind == "contraction":
                d = entry.facts
                src = self.source
                if src == "the cost model":
                    m = host()
                    src += (f" (register tile from {m.vector_registers} vector registers "
                            f"of {m.vector_bytes} bytes, cache tiles from L1 {m.l1 // 1024}"
                            f" KiB and L2 {m.l2 // 1024} KiB, tile height balanced over "
                            f"{m.cores} cores)")
                cache = [c if c < 1 << 24 else "(all)" for c in d["cache"]]
                self.say("tiling", f"{self.label(entry.subject)} is a contraction: cache tiles "
                         f"{'x'.join(map(str, cache))} and register tiles "
                         f"{'x'.join(map(str, d['register']))} over its loops in the order "
                         f"{d['order']}; sizes from {src}." + (
                             f" The lanes of its register tiles run over {d['lanes']}: the "
                             "result's unit-stride index is narrower than two vectors, so "
                             "the accumulators are loaded and stored with the result's "
                             "stride, once per register tile." if "lanes" in d else "") + (
                             " Its symbolic rows form one cache tile, so its operand is "
                             "packed once per call, not again for every tile of rows; " + (
                                 "the cores share its column tiles, which split evenly"
                                 if d["rows"] is None else "the cores share its column "
                                 f"tiles below {d['rows']} rows, and from there each runs "
                                 "every column tile while they share its rows (the column "
                                 "tiles do not split evenly)") + " (sizes.all_rows)."
                             if "rows" in d else "") + (
                             " Its packed panels are the outermost loop of a cache tile: "
                             "together they leave L2, so each is read from memory once and "
                             "serves every row of the tile from L2." if "panels" in d else "")
                         + self.words(entry.subject), str(entry))
            elif kind == "pack":
                d = entry.facts
                kt, nr = d["panel"]
                how = (f"a copy packed once, before the first call ({d['buffer']}, a parameter "
                       f"filled by polytc_pre{d['_name']}: {d['tensor']} is in Options.constants"
                       "): its cache tiles lie one after the other, each" if d["copy"] == "once"
                       else f"a packed copy ({d['buffer']}, one per thread): each cache tile "
                       f"of {d['tensor']} is copied ({d['copy']}) into")
                self.say("tiling", f"{self.label(entry.subject)} reads {d['tensor']} through "
                         f"{how} {d['panels']} micro-panels of {kt}x{nr} elements laid out as "
                         f"the micro-kernel reads them, so its {nr} lanes load as contiguous "
                         "vectors and a panel stays in L1 while the register tiles of the "
                         "other dimension pass over it (BLIS's packing; a transposed operand "
                         "becomes unit-stride).", str(entry))
            elif kind == "fold":
                d = entry.facts
                parts = []
                if d["init"]:
                    parts.append("its accumulators start at zero on the first reduction "
                                 f"tile instead of a pass that zeroes the result ({d['init']})")
                if d["epilogue"]:
                    parts.append(f"{self.label(d['epilogue'])} runs on each register tile "
                                 "right after its last reduction tile, while it is in L1, "
                                 "instead of in a pass of its own")
                self.say("fusion", f"{self.label(entry.subject)} folds its init and epilogue "
                         f"into its register tiles: {'; '.join(parts)} (switch off with "
                         "Options(disable=('fold',))).", str(entry))
            elif kind == "contract":
                d = entry.facts
                where = ("its thread's own part of the temporary's array (too large for "
                         "a stack), reused by every iteration the thread runs: it stays in "
                         "L2 where a fresh part per iteration went to memory") \
                    if d.get("slot") else ("on the running thread's stack (array "
                                            "contraction: it stays in L1/L2)")
                self.say("memory", f"The temporary {entry.subject} never goes to memory: each "
                         f"iteration of the parallel loop {d['loop']} touches only its own part "
                         f"of it, which is kept in a buffer of {d['buffer']} elements, {where}.",
                         str(entry))
            elif kind == "alias":
                self.say("memory", f"The temporary {entry.subject} holds only partial sums "
                         "between reduction tiles: they are kept in "
                         f"{entry.facts['into']}'s array, element for element, which the "
                         "epilogue then overwrites with its result (no array of its own "
                         "to write, read back and page in).", str(entry))
            elif kind == "simd":
                self.say("vectorize", f"The innermost loop of {', '.join(entry.subjects)} is "
                         "parallel and unit-stride for the writes: marked omp simd.",
                         str(entry))
            elif kind == "transpose":
                tile = "x".join(map(str, entry.facts["tile"]))
                self.say("tiling", f"{self.label(entry.subject)} writes along one index and "
                         f"reads along another (a transpose): tiles of {tile} keep the lines "
                         "the reads touch in L1 while the rows of a tile are written.",
                         str(entry))
            elif kind == "sink":
                d = entry.facts
                self.say("vectorize", f"{', '.join(entry.subjects)}: a window of {d['window']} "
                         f"points per result; the loop over {d['member']} (the result's last "
                         "index) runs inside the window loops, so each window offset updates "
                         "a whole row of results as one vector operation.", str(entry))
            elif kind == "window":
                d = entry.facts
                self.say("vectorize", f"{', '.join(entry.subjects)}: a max or min over a "
                         f"window of {d['window']} points per result; the loop over "
                         f"{d['member']} (the result's last index) is a vector loop around "
                         "the window, spelt out: each lane accumulates its result's window "
                         "in a register, with a flag for a NaN operand (the result is then "
                         "NaN).", str(entry))
            elif kind == "promote":
                self.say("vectorize", f"{self.label(entry.subject)}: its innermost loop is a "
                         "reduction into one element, accumulated in a register (a "
                         "vectorised reduction for + and *).", str(entry))
        if self.b.few is not None:
            least, most = bounds(self.b)
            few = next(d for d in self.b.few.tiling if d.kind == "contraction")
            self.say("tiling", f"From {least + 1} to {most} rows the kernel runs a second "
                     "tiling of the same loops, chosen at run time: register tiles of "
                     f"{'x'.join(map(str, few.facts['register']))}, all its rows in one "
                     "pass over the operand it reads where it lies, instead of a tile of "
                     f"{least} rows and a partial one after it (codegen_c/fewrows.py; switch "
                     "off with Options(disable=('few_rows',))).", str(few))
        if not any(e.kind in ("contraction", "transpose") for e in self.b.tiling):
            split = any(e.kind == "split" for e in self.b.tiling)
            why = ("your hand schedule decides the tiles" if o.schedule else
                   "tiling is switched off (Options(tile=()))" if o.tile == () else
                   "the tiler split the contractions from the statements around them, but "
                   "none has a parallel loop that is unit-stride for its result and for an "
                   "input (vector loads would be gathers), so none is tiled" if split else
                   "no band is a contraction (a reduction with reuse across its result "
                   "dimensions), so no band is cache-tiled")
            self.say("tiling", f"Nothing is cache-tiled: {why}.")


def nests(schedule, scop) -> list:
    """The loop nests in execution order: ``(statement names, outer band or None)``."""
    out = []

    def visit(node):
        t = node.get_type()
        N = isl.schedule_node_type
        if t == N.band:
            out.append((statements_below(node), node.copy()))
            return
        if t == N.leaf:
            out.append((statements_below(node), None))
            return
        for i in range(node.n_children()):
            visit(node.child(i))

    visit(schedule.get_root())
    return [(_sorted(scop, n), b) for n, b in out]


def loops(schedule) -> list:
    """``(band, {member: mark kind}, inside a parallel loop)`` for every band."""
    out = []

    def visit(node, mark, inside):
        t = node.get_type()
        if t == isl.schedule_node_type.mark:
            kind = node.mark_get_id().get_name().partition(":")[0]
            return visit(node.child(0), kind, inside)
        if t == isl.schedule_node_type.band:
            out.append((node.copy(), {0: mark} if mark else {}, inside))
            inside = inside or mark == "parallel"
        for i in range(node.n_children()):
            visit(node.child(i), None, inside)

    visit(schedule.get_root(), None, False)
    return out


def strip_marks(schedule):
    """The schedule without its mark nodes."""
    def visit(node):
        while node.get_type() == isl.schedule_node_type.mark:
            node = node.delete()
        for i in range(node.n_children()):
            node = visit(node.child(i)).parent()
        return node

    return visit(schedule.get_root()).get_schedule()


def _index(schedule, band) -> int:
    """The pre-order number of ``band`` among the bands of ``schedule``."""
    return next(k for k, n in enumerate(H.bands(schedule)) if n.is_equal(band))


def _constant(text: str) -> bool:
    return text.lstrip("-").isdigit()


def _broken(err) -> str:
    """``would run the <dependence> backwards`` from an illegal step's error."""
    return "would " + err.message.split("is illegal: it ")[-1].replace("runs", "run", 1)
