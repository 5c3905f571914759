"""The graph executor: runs a model's compiled groups in order.

A ``Plan`` is a model compiled for one set of input shapes: its steps (groups, each a
loaded ``CompiledKernel``, and views), the constants its groups read, and a memory plan.
Memory planning gives every intermediate value a slot in a small arena of 64-byte
aligned buffers, reused as soon as the last reader of a value has run (best fit by size);
views share their source's slot and keep it alive.  Values the user gets back (graph
outputs and views of them) are freshly allocated at each run.
"""
from __future__ import annotations

import os
import threading
import time

import numpy as np
from concurrent.futures import ThreadPoolExecutor

from .. import config
from ..diagnostics import InternalError, ModelError, PolytcError
from ..graph.bind import bind
from ..graph.group import Group, View, form_groups
from .memory import aligned_copy, aligned_empty


class Plan:
    def __init__(self, graph, shapes: dict, options, fuse: bool = True):
        t0 = time.perf_counter()
        self.bound = bind(graph, shapes)
        self.steps = form_groups(self.bound, fuse)
        self.outputs = graph.outputs
        self.timings = {"bind+group": time.perf_counter() - t0}
        self.kernels = {}
        self.texts = {}
        t0 = time.perf_counter()
        groups = [s for s in self.steps if isinstance(s, Group)]
        # the isl part of each compile runs under a lock, gcc runs in parallel
        with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
            for s, ck in zip(groups, pool.map(lambda s: self._compile(s, options), groups)):
                self.kernels[s.name] = ck
        self.timings["compile"] = time.perf_counter() - t0
        consts = self.bound.graph.constants
        # aligned once here (0-d stays 0-d), so kernels never copy weights at run time
        self.constants = {v: aligned_copy(np.asarray(c)) for v, c in consts.items()}
        self._plan_memory()
        self._lock = threading.Lock()

    def _compile(self, group: Group, options):
        from ..diagnostics import Source
        from ..lang.inline import inline_temporaries
        from ..lang.parser import parse
        from ..lang.sema import check
        from .kernel import Kernel

        text = group.text(self.bound.refs)
        self.texts[group.name] = text
        try:
            program = check(parse(text, f"<{group.name}>")[0], Source(text, f"<{group.name}>"))
            program = inline_temporaries(program)
            kernel = Kernel(program, options)
            refs = self.bound.refs
            try:  # arrays only for their shapes: zero strides, no memory
                args = [np.lib.stride_tricks.as_strided(np.zeros((), refs[v].dtype),
                                                        refs[v].shape, (0,) * refs[v].rank)
                        for v in group.inputs]
            except (MemoryError, ValueError) as e:
                raise ModelError(f"the inputs of {group.nodes[0].label} are too large "
                                 f"({e})") from None
            return kernel._specialize(args)  # shapes only: no copies
        except PolytcError as e:
            nodes = ", ".join(n.label for n in group.nodes)
            raise InternalError(f"compiling the group of {nodes} failed: {e.message}\n"
                                f"{text}", hint="this is a polytc bug; please report it "
                                "with the model") from None

    # --- memory ----------------------------------------------------------------------
    def _plan_memory(self):
        """Slots for intermediate values; ``fresh`` values are the user's."""
        refs = self.bound.refs
        fresh = set(self.outputs)
        for s in reversed(self.steps):  # a view of a returned value is returned too
            if isinstance(s, View) and s.value in fresh:
                fresh.add(s.source)
        last: dict = {}
        for k, s in enumerate(self.steps):
            for v in ([s.source] if isinstance(s, View) else s.inputs):
                last[v] = k
        for s in reversed(self.steps):  # a view keeps its source alive
            if isinstance(s, View):
                last[s.source] = max(last.get(s.source, 0), last.get(s.value, 0))
        self.fresh = fresh
        owned = set()  # values this plan allocates for the user at each run
        for s in self.steps:
            if isinstance(s, Group):
                owned.update(v for v in s.outputs if v in fresh)
            elif s.source in owned:
                owned.add(s.value)
        self.owned = owned
        self.slot: dict = {}  # value -> buffer index
        sizes: list = []
        free: list = []  # buffer indices
        dying: dict = {}
        for k, s in enumerate(self.steps):
            if isinstance(s, Group):
                for v in s.outputs:
                    if v in fresh:
                        continue
                    need = refs[v].size * refs[v].dtype.itemsize
                    fit = [b for b in free if sizes[b] >= need]
                    if fit:
                        b = min(fit, key=lambda b: sizes[b])
                        free.remove(b)
                    else:
                        b = len(sizes)
                        sizes.append(need)
                    self.slot[v] = b
                    dying.setdefault(last.get(v, k), []).append(b)
            free.extend(dying.pop(k, []))
        arena = [aligned_empty((max(n, 1),), np.uint8) for n in sizes]
        self.arena_bytes = sum(sizes)
        self.placed = {}  # value -> its array in the arena, made once
        for v, b in self.slot.items():
            r = refs[v]
            self.placed[v] = arena[b][:r.size * r.dtype.itemsize].view(r.dtype).reshape(r.shape)

    def _buffer(self, v, zero):
        a = self.placed.get(v)
        if a is None:
            r = self.bound.refs[v]
            return aligned_empty(r.shape, r.dtype, zero=zero)
        if zero:
            a.fill(0)
        return a

    # --- running ---------------------------------------------------------------------
    def run(self, feeds: dict, names) -> list:
        with self._lock:  # the arena is shared by runs of this plan
            env = self._execute(feeds)
            return [env[n] if n in self.owned else np.array(env[n]) for n in names]

    def _execute(self, feeds: dict, times: dict | None = None) -> dict:
        """Run every step; ``times`` (group name -> list) collects each kernel's time."""
        env = dict(self.constants)
        env.update(feeds)
        for s in self.steps:
            if isinstance(s, View):
                env[s.value] = env[s.source].reshape(s.shape)
                continue
            ck = self.kernels[s.name]
            outs = [self._buffer(v, z) for v, z in zip(s.outputs, ck.out_zero)]
            t0 = time.perf_counter()
            ck.run([env[v] for v in s.inputs], outs)
            if times is not None:
                times.setdefault(s.name, []).append(time.perf_counter() - t0)
            env.update(zip(s.outputs, outs))
        return env

    def profile(self, feeds: dict, repeat: int = 10) -> list:
        """(step name, ops, median seconds) per group: where a run's time goes."""
        times: dict = {}
        with self._lock:
            for _ in range(repeat):
                self._execute(feeds, times)
        return [(s.name, s.ops, sorted(times[s.name])[repeat // 2])
                for s in self.steps if isinstance(s, Group)]

    def report(self) -> list:
        """One line per step: what was fused and how big the program is."""
        lines = []
        for s in self.steps:
            if isinstance(s, View):
                lines.append(f"view  {s.value} = reshape({s.source}) {list(s.shape)}")
            else:
                ck = self.kernels[s.name]
                ms = sum(ck.timings.values()) * 1e3 if ck.timings else 0.0
                lines.append(f"{s.name:5} {' + '.join(s.ops)}  [{len(s.stmts)} statements, "
                             f"{'/'.join(sorted(s.kinds))}{f', {ms:.0f} ms' if ms else ''}]")
        config.log(2, "\n".join(lines))
        return lines
