"""The graph executor: runs a model's compiled groups in order.

A ``Plan`` is a model compiled for one set of input shapes: its steps (groups, each a
loaded ``CompiledKernel``, and views), the constants its groups read, and a memory plan.
Memory planning gives every intermediate value a slot in a small arena of 64-byte
aligned buffers, reused as soon as the last reader of a value has run (best fit by size);
views share their source's slot and keep it alive.  Values the user gets back (graph
outputs and views of them) are freshly allocated at each run.

On an accelerator target (``opencl``, ``cuda``) the values stay on the device: a run
uploads the feeds once (the constants were uploaded when the plan was made), each group's
compiled kernel takes and returns device arrays, views reshape device arrays (always
contiguous: every device value is a whole buffer), and only the requested outputs are
downloaded.  There is no device arena: an accelerator kernel allocates its outputs at each
call, so every intermediate value gets its own device buffer, dropped (and freed by its
Python owner) right after its last reader has run; the host arena is not allocated.
"""
from __future__ import annotations

import contextvars
import math
import os
import time

import numpy as np
from concurrent.futures import ThreadPoolExecutor

from .. import backends, config
from ..diagnostics import (CompilationError, InternalError, KernelRuntimeError, ModelError,
                           PolytcError)
from ..kernel import Kernel
from ..runtime.memory import aligned_copy, aligned_empty, is_aligned
from .arena import Arena
from .bind import bind
from .group import Group, Join, View, canonical, form_groups
from .padplace import PADS_IN_PLACE, pads_in_place
from .programs import Programs, checked


class Plan:
    def __init__(self, graph, shapes: dict, options, fuse: bool = True, target: str = "c",
                 native: bool = True, generaliser=None, generic: dict | None = None,
                 memory: "Arena | None" = None, disable=()):
        """``generaliser`` (``dynamic.Generaliser``) keeps the model's symbolic input
        dimensions symbolic in the groups it can; ``generic``: generic text -> its
        ``Kernel``, shared by the plans of one model (each compiles once); ``memory``:
        the arena the plans of one model share (one run at a time), else its own;
        ``disable``: names of the session's passes to skip (``bound_groups``)."""
        self._memory = memory or Arena()
        self._values = values = generaliser.values(shapes) if generaliser else None
        if memory is not None and values:  # (pages faulted in while this plan is made)
            memory.expect(math.prod(values.values()))
        try:
            self._make(graph, shapes, options, fuse, target, native, generaliser, generic,
                       disable)
        finally:
            self._memory.finish()

    def _make(self, graph, shapes, options, fuse, target, native, generaliser, generic,
              disable):
        t0 = time.perf_counter()
        self.target = target
        backend = backends.get(target)
        self.bound, self.steps = bound_groups(graph, shapes, fuse, target, disable)
        self.outputs = graph.outputs
        self.timings = {"bind+group": time.perf_counter() - t0}
        self.kernels = {}
        self.texts = {}
        t0 = time.perf_counter()
        groups = [s for s in self.steps if isinstance(s, Group)]
        consts = self.bound.graph.constants
        aligned = _aligned_values(self.steps, self.outputs, self.bound.refs) | set(consts)
        canon, unique = {}, {}  # group -> its key -> the first group with it
        self._generaliser, self._generic = generaliser, generic if generic is not None else {}
        common: dict = {}  # (text, weights) -> the inputs aligned in every such group
        for s in groups:
            self.texts[s.name] = s.text(self.bound.refs)
            # the canonical text, and which of its inputs are weights (packed once)
            canon[s.name] = (canonical(self.texts[s.name]),
                             tuple(k for k, v in enumerate(s.inputs) if v in consts))
            ours = {k for k, v in enumerate(s.inputs) if v in aligned}
            common[canon[s.name]] = common.get(canon[s.name], ours) & ours
        for s in groups:  # and which are 64-byte aligned at every run (``Options.aligned``)
            text, weights = canon[s.name]  # in each group of that text: identical groups
            canon[s.name] = (text, (weights, tuple(sorted(common[text, weights]))))  # share
            unique.setdefault(canon[s.name], s)  # one kernel
        # identical groups compile once; the isl part of each compile runs under a
        # lock, gcc runs in parallel; the longest builds first (the groups with the most
        # contractions, then the longest texts), so that short ones fill the last gaps
        # instead of a long gcc run ending the compile alone (BERT-2L 1.17-1.21 -> 1.08-1.11 s)
        order = sorted(unique.items(), key=lambda kv: (-kv[0][0].count("+=!"),
                                                       -len(kv[0][0])))
        # groups whose generic kernel an earlier plan made are views of it: no pool
        ready = [kv for kv in order if self._ready(kv[0][0], kv[0][1])]
        # the groups' checked programs, from the disk cache where a load stored them
        self._programs = Programs(list(dict.fromkeys(k[0] for k, _ in order)))
        built = {k: self._compile(g, k[0], options, k[1]) for k, g in ready}
        order = [kv for kv in order if kv[0] not in built]
        if order:
            # each compile in a copy of this thread's context (a session's log level)
            ctxs = [contextvars.copy_context() for _ in order]
            with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
                built.update(zip((k for k, _ in order), pool.map(
                    lambda c, kv: c.run(self._compile, kv[1], kv[0][0], options, kv[0][1]),
                    ctxs, order)))
        self._programs.save()
        for s in groups:
            self.kernels[s.name] = built[canon[s.name]]
        self.timings["compile"] = time.perf_counter() - t0
        # aligned once here (0-d stays 0-d), so kernels never copy weights at run time;
        # not those that every reader packs (``prepack`` reads them once): a copy of
        # ResNet-18's 45 MB of conv weights took 10-60 ms of a load from the disk cache
        packed_only = _packed_only(groups, self.kernels)
        self.constants = {v: np.ascontiguousarray(c) if v in packed_only else
                          _aligned(np.asarray(c)) for v, c in consts.items()}
        #: group -> its kernel's packed copies of the weights (``CompiledKernel.prepack``;
        #: a generic kernel's, made by the first plan, serve every plan)
        self.prepacked = {}
        for s in groups:
            ck = self.kernels[s.name]
            if getattr(ck, "prepacked", None):
                key = (ck._lib, tuple(s.inputs))  # (the library itself: never a stale id)
                if key not in self._memory.prepacked:
                    self._memory.prepacked[key] = ck.prepack(
                        [self.constants.get(v) for v in s.inputs])
                self.prepacked[s.name] = self._memory.prepacked[key]
        #: on an accelerator target, a compiled kernel whose upload/download move values
        #: (any one will do: they share the device); None on the C target, or when no
        #: group was compiled (then only views run, on host arrays)
        self.device = None
        if backend.device_arrays and self.kernels:
            self.device = next(iter(self.kernels.values()))
        self._lock = self._memory.lock  # the arena is shared by the runs of the plans
        self._plan_memory()
        if self.device is not None:  # the constants the steps read, uploaded once
            read = {v for s in self.steps for v in _reads(s)}
            self.dconstants = {v: self.device.upload(c) for v, c in self.constants.items()
                               if v in read}
        #: the steps as one C function (``native.Driver``) on the C target, unless
        #: ``native`` is False: then ``run`` calls each kernel from Python
        self.driver = None
        if native and self.device is None and self.kernels:
            from .native import Driver

            t0 = time.perf_counter()
            self.driver = Driver(self)
            self.timings["driver"] = time.perf_counter() - t0

    def _compile(self, group: Group, text: str, options, weights=((), ())):
        """The kernel of ``group``, whose program is ``text`` (``canonical``) and whose
        inputs at the positions ``weights[0]`` are constants (``weights[1]``: aligned)."""
        try:
            refs = self.bound.refs
            if any(refs[v].size * refs[v].dtype.itemsize >= 1 << 62 for v in group.inputs):
                raise ModelError(f"the inputs of {group.nodes[0].label} are too large")
            args = [_Shaped(refs[v].shape) for v in group.inputs]  # (sizes are read off)
            kernel = self._generic_kernel(text, options, weights)
            if kernel is not None:
                ck = kernel._specialize(args)  # shapes only: no copies
                if [tuple(s) for s in ck.out_shapes] == \
                        [tuple(refs[v].shape) for v in group.outputs]:
                    return ck
            # (also where a generic kernel's outputs are not the binding's: the numbers
            # fit by chance)
            program = self._programs.get(group.name, text)
            kernel = Kernel(program, _weights(options, program, weights), target=self.target)
            return kernel._specialize(args)
        except CompilationError as e:
            # a missing device compiler (nvcc) is the machine's, not a polytc bug
            if not backends.get(self.target).host and "bug" not in (e.hint or ""):
                raise
            return self._failed(group, text, e)
        except PolytcError as e:
            return self._failed(group, text, e)

    def _ready(self, text: str, weights) -> bool:
        """Whether the generic kernel of ``text`` exists already (no compile)."""
        if self._generaliser is None or not self._generic:
            return False
        found = self._generaliser.generic(text, self._values)
        return found is not None and (found[0], weights) in self._generic

    def _generic_kernel(self, text: str, options, weights):
        """The model's kernel of ``text`` with its symbolic dimensions symbolic, shared
        with its other plans; None when the group has none (``dynamic.py``)."""
        if self._generaliser is None or not backends.get(self.target).symbolic:
            return None
        found = self._generaliser.generic(text, self._values)
        if found is None:
            return None
        gtext, names = found
        kernel = self._generic.get((gtext, weights))
        if kernel is None:
            try:
                program = checked("group", gtext)
            except PolytcError:  # a size where TC wants a number: specialised
                return None
            kernel = self._generic[(gtext, weights)] = Kernel(
                program, _weights(options, program, weights), target=self.target,
                dynamic=names)
        return kernel

    @staticmethod
    def _failed(group: Group, text: str, e: PolytcError):
        nodes = ", ".join(n.label for n in group.nodes)
        raise InternalError(f"compiling the group of {nodes} failed: {e.message}\n{text}",
                            hint="this is a polytc bug; please report it with the model") \
            from None

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
            for v in _reads(s):
                last[v] = k
        for s in reversed(self.steps):  # a view keeps its source alive
            if isinstance(s, View):
                last[s.source] = max(last.get(s.source, 0), last.get(s.value, 0))
        # an in-place concatenation's buffer holds its sources from the first one's
        # step until neither it nor any of them is read any more
        joined = {v: s for s in self.steps if isinstance(s, Join) for v in s.sources}
        ends = {s.value: max(last.get(v, s.position) for v in s.sources + (s.value,))
                for s in self.steps if isinstance(s, Join)}
        self.fresh = fresh
        # step index -> the values no later step reads (dropped there on a device)
        self.dying: dict = {}
        for v, k in last.items():
            self.dying.setdefault(k, []).append(v)
        owned = set()  # values this plan allocates for the user at each run
        for s in self.steps:
            if isinstance(s, Group):
                owned.update(v for v in s.outputs if v in fresh)
            elif isinstance(s, View) and s.source in owned:
                owned.add(s.value)
        self.owned = owned
        self.slot: dict = {}  # value -> (buffer index, byte offset)
        sizes: list = []
        free: list = []  # buffer indices
        dying: dict = {}

        # a value whose producer writes only the inside of its buffer (``padplace.py``)
        # finds the border written when the buffer's last value had the same one: it is
        # placed there where it can, else its border is written at each run (``restore``)
        border = {v: (b, refs[v].shape) for v, b in self.bound.bordered.items()}
        held: list = []  # buffer -> the border its last value left, or None
        self.restore: set = set()

        def take(v, k, end):
            need = refs[v].size * refs[v].dtype.itemsize
            fit = [b for b in free if sizes[b] >= need]
            if fit:
                b = min(fit, key=lambda b: (held[b] is None or held[b] != border.get(v),
                                            sizes[b]))
                free.remove(b)
            elif free:  # the largest free buffer grows: less memory than a new one
                # (a transformer layer's FFN product took a buffer of its own beside
                # the free ones of the attention's: 67 -> 59 MB at batch 64)
                b = max(free, key=lambda b: sizes[b])
                free.remove(b)
                sizes[b] = need
            else:
                b = len(sizes)
                sizes.append(need)
                held.append(None)
            if v in border and held[b] != border[v]:
                self.restore.add(v)
            held[b] = border.get(v)
            dying.setdefault(end, []).append(b)
            return b

        for k, s in enumerate(self.steps):
            if isinstance(s, Group):
                for v in s.outputs:
                    if v in fresh:
                        continue
                    j = joined.get(v)
                    if j is None:
                        self.slot[v] = (take(v, k, last.get(v, k)), 0)
                        continue
                    if j.value not in self.slot:  # the first of its sources
                        self.slot[j.value] = (take(j.value, k, ends[j.value]), 0)
                    at = j.offsets[j.sources.index(v)] * refs[v].dtype.itemsize
                    self.slot[v] = (self.slot[j.value][0], at)
            free.extend(dying.pop(k, []))
        self.placed = {}  # value -> its array in the arena, made once
        self.scratch: dict = {}
        if self.device is not None:  # values live on the device, one buffer each
            self.slot, self.arena_bytes = {}, 0
            return
        arena = [self._memory.take(b, n) for b, n in enumerate(sizes)]
        self.arena_bytes = sum(sizes)
        #: group -> its kernel's temporaries (``Arena.scratch``; the native entry point's)
        self.scratch = self._memory.scratch({s.name: self.kernels[s.name] for s in self.steps
                                             if isinstance(s, Group)})
        # the pages no earlier plan touched, faulted in now on every thread (a transformer
        # layer exported with a symbolic batch, its new batch of 64 after 32: 16 -> 10 ms
        # in one process)
        self._memory.populate()
        for v, (b, at) in self.slot.items():
            r = refs[v]
            self.placed[v] = arena[b][at:at + r.size * r.dtype.itemsize].view(
                r.dtype).reshape(r.shape)

    def _buffer(self, v, fill):
        a = self.placed.get(v)
        if a is None:
            r = self.bound.refs[v]
            return aligned_empty(r.shape, r.dtype, fill)
        border = self.bound.bordered.get(v)
        if border is not None:  # (its producer writes only the inside)
            border.fill(a)
        elif fill is not None:
            a.fill(fill)
        return a

    # --- running ---------------------------------------------------------------------
    def run(self, feeds: dict, names, times=None, out: dict | None = None) -> list:
        """The outputs ``names`` for ``feeds``; on the native entry point, ``times``
        and ``out`` as ``Driver.run`` takes them (each group's seconds, the caller's
        output arrays), else ignored."""
        with self._lock:  # the arena is shared by runs of this plan
            if self.device is not None:
                env = self._execute_device(feeds, keep=set(names))
                return [self._download(n, env[n]) for n in names]
            if self.driver is not None:
                return self.driver.run(feeds, names, times, out)
            env = self._execute(feeds)
            return [env[n] if n in self.owned else np.array(env[n]) for n in names]

    def _execute(self, feeds: dict, times: dict | None = None) -> dict:
        """Run every step; ``times`` (group name -> list) collects each kernel's time."""
        if self.device is not None:
            return self._execute_device(feeds, times, keep=set(self.outputs))
        env = dict(self.constants)
        env.update(feeds)
        for s in self.steps:
            if isinstance(s, View):
                env[s.value] = s.of(env[s.source])
                continue
            if isinstance(s, Join):  # its sources were written into it
                env[s.value] = self.placed[s.value]
                continue
            ck = self.kernels[s.name]
            outs = [self._buffer(v, f) for v, f in zip(s.outputs, ck.out_fill)]
            t0 = time.perf_counter()
            try:
                ck.run([env[v] for v in s.inputs], outs, self.prepacked.get(s.name))
            except KernelRuntimeError as e:
                raise self.fault(s, e) from None
            if times is not None:
                times.setdefault(s.name, []).append(time.perf_counter() - t0)
            env.update(zip(s.outputs, outs))
        return env

    @staticmethod
    def fault(step: Group, e: KernelRuntimeError) -> KernelRuntimeError:
        """``e`` (a kernel's failed run-time check) saying which nodes it came from:
        identical groups share one kernel, whose message names the first of them."""
        nodes = ", ".join(n.label for n in step.nodes)
        return KernelRuntimeError(f"{e.message}\nin the group {step.name} of {nodes}",
                                  hint=e.hint)

    # --- running on an accelerator ----------------------------------------------------
    def _execute_device(self, feeds: dict, times: dict | None = None, keep=()) -> dict:
        """``_execute`` with the values on the device; a value no later step reads is
        dropped after its last reader, unless it is in ``keep``."""
        dev, refs = self.device, self.bound.refs
        env = dict(self.constants)  # those no step reads (outputs, say) stay on the host
        env.update(self.dconstants)
        for v, a in feeds.items():
            env[v] = dev.upload(a)
        for k, s in enumerate(self.steps):
            if isinstance(s, View):
                src = env[s.source]
                # a device buffer of no elements is one element long (accel's empty and
                # upload): its shape cannot change, and no kernel reads it
                empty = refs[s.value].size == 0 and not isinstance(src, np.ndarray)
                env[s.value] = src if empty else s.of(src)
            else:
                ck = self.kernels[s.name]
                t0 = time.perf_counter()
                # device inputs in, device outputs back (a group without inputs gets host
                # arrays back; the next kernel uploads them); the call may return once its
                # kernels are queued (accel.py), so a timed one waits for them
                res = ck.run([env[v] for v in s.inputs])
                if times is not None:
                    ck.synchronize()
                    times.setdefault(s.name, []).append(time.perf_counter() - t0)
                env.update(zip(s.outputs, res if len(s.outputs) > 1 else (res,)))
            for v in self.dying.get(k, ()):
                if v not in keep:
                    env.pop(v, None)
        return env

    def _download(self, v, a) -> np.ndarray:
        """A fresh host array of value ``v``'s shape from its device (or host) array."""
        r = self.bound.refs.get(v)
        if r is None:  # not bound (a graph input, say): the array has its shape
            shape, dtype = None, None
        else:
            shape, dtype = tuple(r.shape), r.dtype
        if isinstance(a, np.ndarray):
            out = np.array(a)
        elif shape is not None and r.size == 0:  # a device buffer of none is 1 long
            return np.empty(shape, dtype)
        else:
            out = self.device.download(a)
        if shape is not None and out.shape != shape:
            out = out.reshape(shape)  # 0-d values come back 1-d
        return out

    def profile(self, feeds: dict, repeat: int = 10) -> list:
        """(step name, ops, median seconds) per group: where a run's time goes, timed
        inside the native entry point where there is one (``Driver.profile``), else
        around each kernel's call from Python."""
        times: dict = {}
        with self._lock:
            if self.driver is not None:
                return self.driver.profile(feeds, repeat)
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
            elif isinstance(s, Join):
                lines.append(f"join  {s.value} = concat({', '.join(s.sources)}), "
                             "written in place")
            else:
                ck = self.kernels[s.name]
                ms = sum(ck.timings.values()) * 1e3 if ck.timings else 0.0
                lines.append(f"{s.name:5} {' + '.join(s.ops)}  [{len(s.stmts)} statements, "
                             f"{'/'.join(sorted(s.kinds))}{f', {ms:.0f} ms' if ms else ''}]")
                lines += [f"      {v}: written into the inside of a padded buffer "
                          f"{list(self.bound.refs[v].shape)}, which its readers read in place"
                          for v in s.outputs if v in self.bound.bordered]
        config.log(2, "\n".join(lines))
        return lines


def bound_groups(graph, shapes: dict, fuse: bool, target: str, disable=()) -> tuple:
    """``(bound graph, steps)`` of ``graph`` at ``shapes``; ``disable``: the session's
    names of passes to skip (here ``pads_in_place``)."""
    bound = bind(graph, shapes)
    host = not backends.get(target).device_arrays
    steps = form_groups(bound, fuse, join=host)
    if host and PADS_IN_PLACE not in disable:
        bound, steps = pads_in_place(bound, steps)
    return bound, steps


def group_texts(graph, shapes: dict, fuse: bool, target: str, disable=()) -> list:
    """The canonical programs of the groups of ``graph`` at ``shapes`` (nothing compiled)."""
    bound, steps = bound_groups(graph, shapes, fuse, target, disable)
    return [canonical(s.text(bound.refs)) for s in steps if isinstance(s, Group)]


def _weights(options, program, weights):
    """``options`` with the program's inputs at the positions ``weights[0]`` constant
    and those at ``weights[1]`` aligned."""
    consts, aligned = weights
    if not consts and not aligned:
        return options
    return options.replace(constants=tuple(program.inputs[k].name for k in consts),
                           aligned=tuple(program.inputs[k].name for k in aligned))


def _aligned_values(steps, outputs, refs) -> set:
    """The values a group writes into the arena at a 64-byte boundary (its buffers are
    aligned), and views of them (reshapes: the same start): not the model's outputs and
    what they view (the caller may hand their arrays: ``out=``), nor the parts of an
    in-place concatenation that start off a boundary."""
    fresh = set(outputs)
    for s in reversed(steps):
        if isinstance(s, View) and s.value in fresh:
            fresh.add(s.source)
    out = {v for s in steps if isinstance(s, Group) for v in s.outputs}
    out.update(s.value for s in steps if isinstance(s, Join))
    out.difference_update(v for s in steps if isinstance(s, Join)
                          for v, at in zip(s.sources, s.offsets)
                          if at * refs[v].dtype.itemsize % 64)
    for s in steps:
        if isinstance(s, View) and s.source in out:
            out.add(s.value)
    return out - fresh


def _reads(step) -> list:
    """The values a step reads."""
    if isinstance(step, View):
        return [step.source]
    return list(step.sources) if isinstance(step, Join) else step.inputs


def _packed_only(groups, kernels) -> set:
    """The values that every group reading them takes as a prepacked operand."""
    packed: set = set()
    other: set = set()
    for s in groups:
        at = {i for i, _n, _f in getattr(kernels[s.name], "prepacked", ())}
        for i, v in enumerate(s.inputs):
            (packed if i in at else other).add(v)
    return packed - other


class _Shaped:
    """An input of a group as ``Kernel._specialize`` reads it: its shape only (numpy's
    zero-stride views had cost 2 us each, a tenth of a dynamic model's new plan)."""

    __slots__ = ("shape",)

    def __init__(self, shape):
        self.shape = shape


def _aligned(a: np.ndarray) -> np.ndarray:
    """``a`` if contiguous and aligned (a constant of a cached graph: ``artefact.py``),
    else an aligned copy."""
    return a if a.flags.c_contiguous and a.ndim and is_aligned(a) else \
        aligned_copy(a, always=True)
