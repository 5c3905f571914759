"""A plan's steps as one C function: the model's native entry point.

The Python executor (``Plan._execute``) calls every group's compiled kernel from Python:
a few microseconds of argument handling per group, which a small model (an MLP at batch
1, a recurrent cell unrolled over time) pays dozens of times per run.  ``Driver`` writes
the whole run as one C function instead::

    int polytc_plan(void *const *fn, void *const *p, int *step)

``fn`` holds the groups' kernel functions (each loaded from its own shared object) and
``p`` every buffer a step touches: the constants, the arena's slots and the kernels'
scratch, set once when the plan is made, and the feeds and the fresh outputs, set at
each run.  The function fills the arena slots whose kernel reads them first, calls the
kernels in order with their exact signatures, and returns the first non-zero code with
the failing step in ``*step``.  A view is a reshape: it shares its source's pointer.
Python's part of a run is writing the per-run pointers and one call (cffi releases the
GIL for it).  The C text is ``Plan.driver.code``; it is built like a kernel (same
flags, same disk cache, keyed by its text).
"""
from __future__ import annotations

import time

import numpy as np

from .. import config
from ..codegen_c.compiler import build_shared_object
from ..diagnostics import KernelRuntimeError
from ..machine import threads
from ..runtime.memory import aligned_copy, allocator, is_aligned
from ..runtime.ffi import Library, ffi
from ..runtime.native import set_threads
from .governor import Governor
from .group import Group, View

_UINT = {1: "uint8_t", 2: "uint16_t", 4: "uint32_t", 8: "uint64_t"}


#: the same steps, each one's seconds (its fills and its kernel) added to ``t[step]``
_TIMED = """
/* the same, timed: each step's seconds added to t[step] (Plan.profile) */
#undef PT_TIC
#undef PT_TOC
#define PT_TIC clock_gettime(CLOCK_MONOTONIC, &pt_t0)
#define PT_TOC(k) (clock_gettime(CLOCK_MONOTONIC, &pt_t1), \\
  t[k] += (double)(pt_t1.tv_sec - pt_t0.tv_sec) + 1e-9 * (double)(pt_t1.tv_nsec - pt_t0.tv_nsec))
"""


def fill_code(index: int, n: int, dtype, fill) -> str:
    """C that sets all ``n`` elements of buffer ``p[index]`` to ``fill``, bit-exactly:
    the element's bytes written as an unsigned integer of its width."""
    raw = np.full(1, fill, dtype).tobytes()
    if not any(raw):
        return f"memset(p[{index}], 0, {n * len(raw)}u);"
    t = _UINT[len(raw)]
    word = int.from_bytes(raw, "little")
    return f"{{ {t} *b = p[{index}]; for (size_t i = 0; i < {n}u; ++i) b[i] = {word:#x}u; }}"


class Driver:
    """The native entry point of a host ``Plan`` (see the module docstring)."""

    def __init__(self, plan):
        self.plan = plan
        refs = plan.bound.refs
        self.root: dict = {}  # a view -> the value whose storage it shares
        self.shape: dict = {}  # a view -> its shape
        for s in plan.steps:
            if isinstance(s, View):
                self.root[s.value] = self.root.get(s.source, s.source)
                self.shape[s.value] = tuple(s.shape)
        index: dict = {}  # stored value (or a kernel's scratch) -> its position in p
        fixed: list = []  # (position, array): set once
        self.feeds: list = []  # (position, graph input): set at each run
        self.fresh: list = []  # (position, value, allocator, shape, dtype): likewise
        fills = {v: f for s in plan.steps if isinstance(s, Group)
                 for v, f in zip(s.outputs, plan.kernels[s.name].out_fill)}
        inputs = set(plan.bound.graph.inputs)

        def slot(v):
            v = self.root.get(v, v)
            if v not in index:
                k = index[v] = len(index)
                if v in plan.placed:
                    fixed.append((k, plan.placed[v]))
                elif v in plan.constants:
                    fixed.append((k, plan.constants[v]))
                elif v in inputs:
                    self.feeds.append((k, v))
                else:  # returned to the user: fresh at each run
                    r = refs[v]
                    self.fresh.append((k, v, allocator(r.shape, r.dtype, fills.get(v)),
                                       tuple(r.shape), r.dtype))
            return index[v]

        lines: list = []
        self.kernels: list = []  # the kernel of each fn[k]
        self.steps: list = []  # and its group
        self.aligned: set = set()  # values some kernel wants 64-byte aligned
        for s in plan.steps:
            if not isinstance(s, Group):  # a view, or a concatenation written in place
                continue
            ck = plan.kernels[s.name]
            args = [slot(v) for v in s.inputs + s.outputs]
            for t in list(ck._new_scratch() if ck.temps else ()) + \
                    plan.prepacked.get(s.name, []):  # and its packed weights
                index[(s.name, len(args))] = len(index)
                fixed.append((len(index) - 1, t))
                args.append(len(index) - 1)
            self.aligned.update(self.root.get(s.inputs[i], s.inputs[i])
                                for i in ck.align_inputs)
            k = len(self.kernels)
            self.kernels.append(ck)
            self.steps.append(s)
            lines.append(f"  /* {s.name}: {' + '.join(s.ops)} */")
            lines.append("  PT_TIC;")
            for v, f in zip(s.outputs, ck.out_fill):
                if f is not None and v in plan.placed:
                    lines.append("  " + fill_code(index[v], refs[v].size, refs[v].dtype, f))
            sig = ", ".join(["void *"] * len(args)) or "void"
            lines.append(f"  rc = ((int (*)({sig}))fn[{k}])"
                         f"({', '.join(f'p[{a}]' for a in args)});")
            lines.append(f"  PT_TOC({k});")
            lines.append(f"  if (rc) {{ *step = {k}; return rc; }}")
        body = "\n".join(lines) + "\n  return 0;\n}\n"
        self.code = ("/* the model's steps in order (polytc.graph.native) */\n"
                     "#include <stddef.h>\n#include <stdint.h>\n#include <string.h>\n"
                     "#include <time.h>\n\n#define PT_TIC\n#define PT_TOC(k)\n"
                     "int polytc_plan(void *const *fn, void *const *p, int *step)\n{\n"
                     "  int rc;\n" + body + _TIMED +
                     "int polytc_plan_timed(void *const *fn, void *const *p, int *step, "
                     "double *t)\n{\n  int rc;\n  struct timespec pt_t0, pt_t1;\n" + body)
        self.copies: dict = {}  # graph input -> its aligned buffer, when it needs one
        self._load(fixed, len(index))
        self.full = threads()
        self.governor = Governor(self.full) if config.adaptive_threads() and self.full > 1 \
            else None

    def _load(self, fixed, n):
        self._lib = Library(build_shared_object(self.code, {"name": "polytc_plan"}))
        self._fn = self._lib.function("polytc_plan", 3)
        self._fns = ffi.new("void *[]", [ffi.cast("void *", ffi.cast("uintptr_t", ck._fn))
                                         for ck in self.kernels] or 1)
        self._p = ffi.new("void *[]", max(n, 1))
        self._keep = []  # the buffers p points to stay alive with the driver
        for k, a in fixed:  # constants and the arena are aligned (Plan); scratch need not be
            self._keep.append(a)
            self._p[k] = ffi.from_buffer(a)
        self._step = ffi.new("int *")

    def run(self, feeds: dict, names) -> list:
        """The outputs ``names`` for ``feeds``; the caller holds the plan's lock."""
        keep, store = self._bind(feeds)
        gov = self.governor
        n = gov.threads() if gov is not None else self.full
        set_threads(n)
        t0 = time.perf_counter()
        rc = self._fn(self._fns, self._p, self._step)
        if gov is not None:
            gov.record(n, time.perf_counter() - t0)
        del keep  # the feeds' buffers lived through the call
        if rc:
            self._raise(rc)
        out = []
        for n in names:
            r = self.root.get(n, n)
            a = store.get(r)
            if a is None:  # a feed or a constant: the user gets a copy
                a = np.array(feeds[r] if r in feeds else self.plan.constants[r])
            out.append(a.reshape(self.shape[n]) if n in self.shape else a)
        return out

    def profile(self, feeds: dict, repeat: int) -> list:
        """(step name, ops, median seconds) per group over ``repeat`` runs of the native
        entry point on all threads (``polytc_plan_timed``): a step's time is its fills
        and its kernel, as the model runs them; the caller holds the plan's lock."""
        times: list = [[] for _ in self.steps]
        set_threads(self.full)
        for _ in range(repeat):
            keep, _store = self._bind(feeds)
            t = ffi.new("double[]", max(len(self.steps), 1))
            rc = self._lib.function("polytc_plan_timed", 4)(self._fns, self._p, self._step, t)
            if rc:
                self._raise(rc)
            for k, ts in enumerate(times):
                ts.append(t[k])
            del keep  # likewise
        return [(s.name, s.ops, sorted(ts)[len(ts) // 2]) for s, ts in zip(self.steps, times)]

    def _raise(self, rc: int):
        k = self._step[0]
        try:
            self.kernels[k]._fail(rc)
        except KernelRuntimeError as e:
            raise self.plan.fault(self.steps[k], e) from None

    def _bind(self, feeds: dict):
        """Point ``p`` at this run's feeds (aligned copies where a kernel wants them)
        and fresh outputs: ``(buffers to keep alive, value -> fresh output)``."""
        buf, p = ffi.from_buffer, self._p
        keep, store = [], {}
        for k, v in self.feeds:
            a = feeds[v]
            if v in self.aligned and not is_aligned(a):
                c = self.copies.get(v)
                if c is None:
                    c = self.copies[v] = aligned_copy(a, always=True)
                else:
                    np.copyto(c, a)
                a = c
            b = buf(a)
            keep.append(b)
            p[k] = b
        for k, v, alloc, shape, dtype in self.fresh:
            a = store[v] = alloc(shape, dtype)
            b = buf(a)
            keep.append(b)
            p[k] = b
        return keep, store
