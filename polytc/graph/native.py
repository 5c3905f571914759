"""A plan's steps run natively: the model's entry point.

The Python executor (``Plan._execute``) calls every group's compiled kernel from Python:
a few microseconds of argument handling per group, which a small model (an MLP at batch
1, a recurrent cell unrolled over time) pays dozens of times per run.  ``Driver`` runs
the whole plan in one C call instead::

    int polytc_exec(const int64_t *code, long n, void *const *fn, void *const *p,
                    int *step, double *t)

``code`` is the plan as ``n`` numbers: per group, the fills of the arena slots its
kernel reads before writing (``FILL``) and the call of its kernel (``CALL``) with the
positions in ``p`` of its arguments.  ``fn`` holds the kernels' ``polytc_kernel_argv``
entry points (each loaded from its own shared object; they take their arguments as one
array) and ``p`` every buffer a step touches: the constants, the arena's slots and the
kernels' scratch, set once when the plan is made, and the feeds and the fresh outputs,
set at each run.  The executor returns the first non-zero code with the failing step in
``*step``; given ``t``, it adds each step's seconds (its fills and its kernel) to
``t[step]`` (``profile``, and ``run`` when asked: a session's profiling).  A view is a
reshape: it shares its source's pointer.  ``run`` may be given the caller's arrays for
outputs (an onnxruntime ``IOBinding``'s): the kernel writes into them, filled first as
a fresh output would be, and no copy is made.
Python's part of a run is writing the per-run pointers and one call (cffi releases the
GIL for it).  The executor is the same C for every model, compiled once per machine (a
model's C had cost every cold compile a gcc run at its end, 75 ms for BERT-2L);
``Plan.driver.code`` lists the steps as text.
"""
from __future__ import annotations

import time

import numpy as np

from .. import config
from ..diagnostics import KernelRuntimeError
from ..machine import threads
from ..runtime import placement
from ..runtime.executor import CALL, FILL, RUNS, executor, fill_word
from ..runtime.ffi import ffi
from ..runtime.memory import aligned_copy, allocator, is_aligned
from ..runtime.native import set_threads
from .governor import Governor
from .group import Group, View


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

        code: list = [0]  # (``EXEC_SOURCE``)
        lines: list = []  # the same as text (``code``)
        self.kernels: list = []  # the kernel of each fn[k]
        self.steps: list = []  # and its group
        self.aligned: set = set()  # values some kernel wants 64-byte aligned
        for s in plan.steps:
            if not isinstance(s, Group):  # a view, or a concatenation written in place
                continue
            ck = plan.kernels[s.name]
            args = []
            if ck.symbolic:  # its sizes first, each a pointer to a long
                sizes = np.array(ck._sizes, np.int64)
                for i in range(len(sizes)):
                    index[(s.name, "size", i)] = len(index)
                    fixed.append((len(index) - 1, sizes[i:i + 1]))
                    args.append(len(index) - 1)
            args += [slot(v) for v in s.inputs + s.outputs]
            for t in plan.scratch.get(s.name, []) + \
                    plan.prepacked.get(s.name, []):  # and its packed weights
                index[(s.name, len(args))] = len(index)
                fixed.append((len(index) - 1, t))
                args.append(len(index) - 1)
            self.aligned.update(self.root.get(s.inputs[i], s.inputs[i])
                                for i in ck.align_inputs)
            k = len(self.kernels)
            self.kernels.append(ck)
            self.steps.append(s)
            lines.append(f"{s.name}: {' + '.join(s.ops)}")
            after = []
            for v, f in zip(s.outputs, ck.out_fill):
                border = plan.bound.bordered.get(v)
                if border is not None:  # (its kernel writes the inside)
                    if v in plan.restore:  # (else the buffer's last value left it)
                        width, word = fill_word(refs[v].dtype, border.value)
                        for run in border.runs(refs[v].shape):
                            after += [RUNS, k, index[v], *run, width, word]
                        lines.append(f"  border p[{index[v]}]: {border}")
                elif f is not None and v in plan.placed:
                    width, word = fill_word(refs[v].dtype, f)
                    code += [FILL, k, index[v], refs[v].size, width, word]
                    lines.append(f"  fill p[{index[v]}]: {refs[v].size} x {f!r}")
            code += [CALL, k, len(args)] + args + after
            code[0] = max(code[0], len(args))
            lines.append(f"  fn[{k}]({', '.join(f'p[{a}]' for a in args)})")
        #: the steps as text: per group, its fills and its call
        self.code = "\n".join(lines) + "\n"
        self._code = np.array(code, np.int64)
        self.copies: dict = {}  # graph input -> its aligned buffer, when it needs one
        #: what each position of ``p`` holds (the AOT export reads them: polytc.aot)
        self.index, self.fixed = index, fixed
        self._load(fixed, len(index))
        #: a fresh output -> the value its kernel wants it filled with first, or None
        self.out_fill = {v: fills.get(v) for _k, v, *_ in self.fresh}
        # an explicit team size (the session's ``Options.num_threads``, which its kernels
        # were compiled with) is every run's; else all cores, or one while that is
        # faster on a busy machine (the governor)
        explicit = next((ck.options.num_threads for ck in self.kernels
                         if ck.options.num_threads), None)
        self.full = threads(explicit)
        self.governor = Governor(self.full) if explicit is None and \
            config.adaptive_threads() and self.full > 1 else None

    def _load(self, fixed, n):
        self._exec = executor()
        self._fns = ffi.new("void *[]", [ffi.cast("void *", ffi.cast("uintptr_t", ck._argv))
                                         for ck in self.kernels] or 1)
        self._prog = ffi.from_buffer("int64_t[]", self._code)
        self._p = ffi.new("void *[]", max(n, 1))
        self._keep = []  # the buffers p points to stay alive with the driver
        for k, a in fixed:  # constants and the arena are aligned (Plan); scratch need not be
            self._keep.append(a)
            self._p[k] = ffi.from_buffer(a)
        self._step = ffi.new("int *")

    def run(self, feeds: dict, names, times: np.ndarray | None = None,
            out: dict | None = None) -> list:
        """The outputs ``names`` for ``feeds``; the caller holds the plan's lock.
        ``times`` (float64, one per group of ``steps``): each group's seconds are added
        to it; ``out``: output name -> a C-contiguous array of its shape and dtype to
        write it into (see ``_given``)."""
        keep, store = self._bind(feeds, out)
        gov = self.governor
        n = gov.threads() if gov is not None else self.full
        set_threads(n)
        t = ffi.NULL if times is None else ffi.from_buffer("double[]", times)
        placement.before(n, pin=False)  # (polytc_exec places the workers itself)
        t0 = time.perf_counter()
        rc = self._exec(self._prog, len(self._code), self._fns, self._p, self._step, t)
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
            rc = self._exec(self._prog, len(self._code), self._fns, self._p, self._step, t)
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

    def _bind(self, feeds: dict, out: dict | None = None):
        """Point ``p`` at this run's feeds (aligned copies where a kernel wants them)
        and fresh outputs (or the caller's arrays, ``out``): ``(buffers to keep alive,
        value -> fresh output)``."""
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
        given = self._given(out) if out else None
        for k, v, alloc, shape, dtype in self.fresh:
            a = store[v] = alloc(shape, dtype) if given is None or v not in given \
                else given[v]
            b = buf(a)
            keep.append(b)
            p[k] = b
        return keep, store

    def _given(self, out: dict) -> dict:
        """The caller's arrays for outputs (name -> array of its shape and dtype) by the
        fresh value each is (or is a view of), reshaped as that value and filled as its
        kernel wants; an output that is a feed, a constant or a value already given is
        left to the caller to copy."""
        given: dict = {}
        for n, a in out.items():
            v = self.root.get(n, n)
            if v in self.out_fill and v not in given:
                a = given[v] = a.reshape(self.plan.bound.refs[v].shape)
                if self.out_fill[v] is not None:
                    a.fill(self.out_fill[v])
        return given
