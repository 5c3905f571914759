"""The compiled model: ``Session`` (what ``polytc.onnx.compile`` returns) and ``compile``.
The public module is ``polytc.onnx``; see its docstring and docs/onnx.md."""
from __future__ import annotations

import contextlib
import gc
import time
from dataclasses import dataclass

import numpy as np

from .. import backends
from ..diagnostics import ModelError, NeedsValue, PolytcError, UnsupportedError, user_boundary
from ..options import Options, OptionsError

#: the C target, or an accelerator's (see ``polytc.backends``): on ``opencl`` and
#: ``cuda`` every group compiles for the device and a run keeps the values there
#: (``polytc.graph.plan``), uploading the inputs and downloading the outputs
TARGETS = backends.NAMES

#: the compiled forms (per set of input shapes) a session keeps at most: a model whose
#: shapes vary with the data (a count of nonzeros) would make one for each count
MOST_PLANS = 256
#: a plan whose kernels took this long to build is followed by a full garbage
#: collection (``plan``)
COLLECT_AFTER_S = 0.25


@contextlib.contextmanager
def _young_collections():
    """Python's collector without its full collections while a plan compiles (they
    come back after; a compile in another thread meanwhile restores them last): each
    traversed every object of the process, the compile's tens of thousands and all of
    numpy's, onnx's and islpy's, on the thread that holds the interpreter while the
    others wait for it to run isl (the collector's time in a cold compile: BERT-2L 43-47
    -> 26 ms, ResNet-18 46 -> 33 ms, the rest the full collection that ends a long
    compile, ``Session.plan``, and the young generations', which still collect)."""
    young, middle, old = gc.get_threshold()
    gc.set_threshold(young, middle, 1 << 30)
    try:
        yield
    finally:
        if gc.get_threshold() == (young, middle, 1 << 30):
            gc.set_threshold(young, middle, old)


@dataclass(frozen=True)
class NodeArg:
    """A graph input or output as onnxruntime describes it."""

    name: str
    shape: list  # ints, symbol names, or None for an unknown dimension
    type: str  # "tensor(float)", ...

    def __repr__(self):
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape})"


def _type_name(dtype) -> str:
    dt = np.dtype(dtype)
    return "tensor(" + {"float32": "float", "float64": "double"}.get(dt.name, dt.name) + ")"


def _check_device(target: str):
    """Raise a polytc error (not an ImportError, nor a bug report from the first group's
    compile) when ``target``'s runtime or device is missing in this process."""
    try:
        backends.get(target).cache_facts()  # finds the device, or says why there is none
    except PolytcError as e:
        here = [t for t in TARGETS if t != target and backends.available(t)]
        hint = f"targets: {', '.join(here)}" + (f"; {e.hint}" if e.hint else "")
        raise UnsupportedError(f"target '{target}' is not available here: {e.message}",
                               hint=hint) from None


def pass_names() -> tuple:
    """What ``disable`` may name: the graph passes (``passes.PASSES``) and the plans'
    padding in place (``padplace.PADS_IN_PLACE``)."""
    from .padplace import PADS_IN_PLACE
    from .passes import PASSES

    return tuple(n for n, _ in PASSES) + (PADS_IN_PLACE,)


def _check_disable(disable) -> tuple:
    """``disable`` as a tuple of pass names (one name alone is taken as one)."""
    names = pass_names()
    if isinstance(disable, str):
        disable = (disable,)
    if not isinstance(disable, (list, tuple, set, frozenset)):
        raise OptionsError(f"disable must be a list of pass names, not "
                           f"{type(disable).__name__}", hint="passes: " + ", ".join(names))
    for n in disable:
        if n not in names:
            raise OptionsError(f"disable: {n!r} is not a pass of the model's compile",
                               hint="passes: " + ", ".join(names))
    return tuple(disable)


def _check_input_types(g) -> None:
    """Inputs of element types no kernel computes with (strings): refused here, not
    at every run."""
    for v in g.inputs:
        t = g.types.get(v)
        if t is not None and np.dtype(t.dtype) == object:
            raise UnsupportedError(f"input '{v}' is a tensor of strings (tensor(string)): "
                                   "polytc compiles models of numeric tensors only",
                                   hint="turn the strings into numbers (token ids, "
                                   "categories) before the model")


class Session:
    """A compiled model.  Build it with ``polytc.onnx.compile``."""

    def __init__(self, model, target="c", options: Options | None = None, fuse: bool = True,
                 disable=(), where: str | None = None, native: bool = True):
        from .artefact import imported
        from .bind import check_supported

        if target not in TARGETS:
            raise UnsupportedError(f"target '{target}' is not available for models",
                                   hint=f"targets: {', '.join(TARGETS)}")
        if options is not None and not isinstance(options, Options):
            raise OptionsError(f"options must be a polytc.Options, not "
                               f"{type(options).__name__}",
                               hint="polytc.Options(...) has the fields; None: the defaults")
        disable = _check_disable(disable)
        _check_device(target)
        backends.get(target).warm()
        t0 = time.perf_counter()
        if target != "c":  # (its block is the CPU's vector: an accelerator's threads differ)
            disable = (*disable, "blocked_layout")
        self.graph, self.stages = imported(model, where, disable)
        check_supported(self.graph)  # every unsupported op at once, before compiling
        _check_input_types(self.graph)
        self._setup(options or Options(), fuse, target, native, tuple(disable))
        self.timings = {"import+passes": time.perf_counter() - t0}
        self._first_plan()

    @classmethod
    def of_graph(cls, graph, parent: "Session") -> "Session":
        """A session of ``graph`` (after the graph passes) compiled as ``parent`` is:
        a stage of ``parent``'s model (``staged.py``)."""
        from .passes import GraphStages

        s = cls.__new__(cls)
        s.graph, s.stages = graph, GraphStages()
        s._setup(parent.options, parent.fuse, parent.target, parent.native, parent.disable)
        s.timings = {}
        s._first_plan()
        return s

    def _setup(self, options, fuse, target, native, disable) -> None:
        from .dynamic import Generaliser
        from .padplace import PADS_IN_PLACE

        self.options = options
        self.fuse, self.target, self.native = fuse, target, native
        self._plans: dict = {}
        self._staged = None  # the model in stages (``staged.py``), once binding needs it
        #: the symbolic input dimensions kept symbolic in the groups (``dynamic.py``)
        #: and the generic kernels of the groups, shared by every plan
        self._generaliser = Generaliser(self.graph)
        #: the passes skipped (a plan's too: ``plan.bound_groups``); a model with
        #: symbolic dimensions pads no input in place, which depends on the sizes (its
        #: groups would differ from one batch to the next, and compile again)
        self.disable = disable + ((PADS_IN_PLACE,) if self._generaliser.dims else ())
        self._generic: dict = {}
        #: one arena for the plans of a model with symbolic dimensions (arena.Arena)
        self._memory = None
        self._seen: dict = {}  # the key of a run (``_array_key``) -> (plan, output names)

    def _first_plan(self) -> None:
        if all(self.graph.types[v].static for v in self.graph.inputs if v in self.graph.types):
            self.plan({v: self.graph.types[v].shape for v in self.graph.inputs})

    # --- onnxruntime's interface ------------------------------------------------------
    def get_inputs(self) -> list:
        return [self._arg(v) for v in self.graph.inputs]

    def get_outputs(self) -> list:
        return [self._arg(v) for v in self.graph.outputs]

    def _arg(self, v) -> NodeArg:
        t = self.graph.types.get(v)
        if t is None:
            return NodeArg(v, None, "tensor(unknown)")
        return NodeArg(v, None if t.shape is None else list(t.shape),
                       _type_name(self.graph.boundary.get(v, t.dtype)))

    @user_boundary
    def run(self, output_names, input_feed: dict, run_options=None) -> list:
        """Outputs (a list of numpy arrays) for the inputs ``input_feed`` (name ->
        array); ``output_names`` None means all outputs."""
        key = None
        if type(input_feed) is dict and not self.graph.boundary:
            try:  # a call like an earlier one (the same names, and dtypes and shapes of
                # contiguous arrays) skips the checks: microseconds of a small model's run
                key = (tuple(output_names) if output_names is not None else None,
                       tuple(_array_key(input_feed[v]) for v in self.graph.inputs),
                       len(input_feed))
                plan, names = self._seen[key]
                return plan.run(input_feed, names)
            except (KeyError, TypeError):
                pass
        feeds = self._check_feeds(input_feed)
        names = self._check_outputs(output_names)
        plan = self.plan({v: a.shape for v, a in feeds.items()})
        if key is not None and all(feeds[v] is input_feed[v] for v in self.graph.inputs):
            # the next call that matches ``key`` would pass every check
            self._seen[key] = (plan, names)
        return self._rounded(plan.run(feeds, names), names)

    @user_boundary
    def run_with(self, output_names, input_feed: dict, out: dict | None = None,
                 timed: bool = False) -> tuple:
        """``run`` with what the onnxruntime surface (``ortapi.py``) adds:
        ``(outputs, times)``.  ``out``: output name -> a C-contiguous array of this
        run's shape and the model's dtype for that output, which is returned in its
        place, the output written into it (by the kernel itself where the native entry
        point computes it: no copy); ``timed``: ``times`` is ``[(group, seconds)]``,
        each compiled group's time in this run as the native entry point clocks it
        (``[]`` without one: an accelerator target)."""
        if out is not None and not isinstance(out, dict):
            raise ModelError(f"out must be a dict of output name -> array, not "
                             f"{type(out).__name__}")
        feeds = self._check_feeds(input_feed)
        names = self._check_outputs(output_names)
        plan = self.plan({v: a.shape for v, a in feeds.items()})
        out = out or {}
        staged = plan is self._staged  # (its outputs' shapes known once it ran)
        if not staged:
            self._check_out({n: plan.bound.refs[n] for n in out if n in plan.bound.refs}, out)
        driver = plan.driver
        times = np.zeros(len(driver.steps)) if timed and driver is not None else None
        direct = {n: a for n, a in out.items() if n not in self.graph.boundary}
        outs = self._rounded(plan.run(feeds, names, None if staged else times,
                                      None if staged else direct or None), names)
        if staged:
            self._check_out({n: o for n, o in zip(names, outs)}, out)
        for k, n in enumerate(names):
            if n in out:
                if not np.may_share_memory(outs[k], out[n]):  # (not written in place)
                    np.copyto(out[n], outs[k])
                outs[k] = out[n]
        return outs, [] if times is None else list(zip(driver.steps, times.tolist()))

    def _rounded(self, outs: list, names) -> list:
        """Half-precision outputs rounded from the float32 computed (halves.py)."""
        half = self.graph.boundary
        if not half:
            return outs
        return [o.astype(half[n]) if n in half else o for o, n in zip(outs, names)]

    # --- compiled forms --------------------------------------------------------------
    def plan(self, shapes: dict):
        """The model compiled for these input shapes (compiling it the first time)."""
        from .plan import Plan

        key = tuple(tuple(shapes[v]) for v in self.graph.inputs)
        p = self._plans.get(key)
        if p is None and self._staged is not None:
            p = self._plans[key] = self._staged
        if p is None:
            from .arena import Arena
            from .plan import group_texts

            if self._memory is None and self._generaliser.dims:
                self._memory = Arena(grow=True)
                # the first plan of a model with symbolic dimensions: its groups bound
                # one larger too, so that they compile symbolic at once (dynamic.py)
                probe = self._generaliser.probe(shapes)
                if probe is not None:
                    try:
                        self._generaliser.remember(
                            group_texts(self.graph, probe, self.fuse, self.target,
                                        self.disable), probe)
                    except PolytcError:  # (a shape the model does not take)
                        pass
            try:
                with _young_collections():
                    p = Plan(self.graph, {v: tuple(shapes[v]) for v in self.graph.inputs},
                             self.options, self.fuse, self.target, self.native,
                             self._generaliser, self._generic, self._memory, self.disable)
            except NeedsValue as e:  # a shape decided by data: the model in stages
                from .staged import Staged

                p = self._staged = Staged(self, e)
            if getattr(p, "timings", {}).get("compile", 0.0) > COLLECT_AFTER_S:
                # a compile leaves tens of thousands of objects that Python's collector
                # tracks, and its first full collection after it (10-20 ms) fell on
                # whatever ran next: a dynamic model's fourth new batch took 21 ms
                # instead of 3.6, and after a model of fixed shapes compiled in the same
                # process, another's new batch (bench_onnx --dynamic: 11-15 ms at
                # batches 1 and 3 where they cost 3.5).  Collected here, at the end of a
                # compile of seconds (6-17 ms), the next comes only once as many objects
                # more have piled up (none in a transformer layer's next 16 batch sizes)
                gc.collect()
            self._plans[key] = p
            if len(self._plans) > MOST_PLANS:  # the oldest goes (its kernels stay cached)
                old = self._plans.pop(next(iter(self._plans)))
                self._seen = {k: v for k, v in self._seen.items() if v[0] is not old}
        return p

    @user_boundary
    def export(self, directory, shapes: dict | None = None, build: bool = True):
        """Write the model compiled ahead of time to ``directory``: C sources, weights
        and a Makefile that builds a library and ``run_model``, which run without
        Python (``polytc.aot``, docs/export.md).  Symbolic input dimensions stay
        symbolic, except where ``shapes`` (input name -> shape) fixes them; returns the
        ``polytc.aot.Exported``."""
        from ..aot import export_session

        return export_session(self, directory, shapes, build)

    def __repr__(self):
        return (f"<polytc.onnx.Session {len(self.graph.nodes)} nodes, inputs "
                f"{list(self.graph.inputs)}, outputs {list(self.graph.outputs)}, "
                f"target={self.target}>")

    def _repr_html_(self) -> str:
        """The graph coloured by fusion group, for Jupyter (``polytc.display.graph``)."""
        try:
            from ..display.graph import session_html
            return session_html(self)  # never raises itself
        except Exception:  # noqa: BLE001 - a display must never fail
            return None  # Jupyter shows the plain repr instead

    def report(self) -> str:
        """What was fused, per compiled shape."""
        out = [f"model {self.graph.name}: {len(self.graph.nodes)} nodes after the graph "
               "passes"]
        for key, p in self._plans.items():
            groups = sum(1 for s in p.steps if hasattr(s, 'stmts'))
            out.append(f"input shapes {list(map(list, key))}: {groups} "
                       f"compiled groups, {p.timings['compile']:.2f} s to compile, " +
                       (f"arena {p.arena_bytes / 1e6:.1f} MB" if p.device is None else
                        f"values on the {self.target} device"))
            out.extend("  " + line for line in p.report())
        return "\n".join(out)

    # --- checking the caller's arguments ----------------------------------------------
    def _check_outputs(self, names):
        if names is None:
            return list(self.graph.outputs)
        if isinstance(names, str):
            names = [names]
        if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
            raise ModelError(f"output_names must be None or a list of output names, not "
                             f"{names!r}", hint="outputs: " + ", ".join(self.graph.outputs))
        for n in names:
            if n not in self.graph.outputs:
                raise ModelError(f"'{n}' is not an output of the model",
                                 hint="outputs: " + ", ".join(self.graph.outputs))
        return list(names)

    def _check_out(self, refs: dict, out: dict) -> dict:
        """``out`` (output name -> the caller's array) checked against this run's
        outputs' shapes (``refs``: output name -> what has its ``shape`` and ``dtype``)
        and the model's dtypes."""
        for n, a in out.items():
            self._check_outputs([n])
            r = refs.get(n)
            if r is None:  # (not an output of this run)
                continue
            want = np.dtype(self.graph.boundary.get(n, r.dtype))
            if not isinstance(a, np.ndarray) or a.dtype != want or \
                    a.shape != tuple(r.shape):
                got = f"{type(a).__name__}" if not isinstance(a, np.ndarray) else \
                    f"{a.dtype.name} {list(a.shape)}"
                raise ModelError(f"output '{n}' is bound to a {got} buffer; this run's "
                                 f"output is {want.name} {list(r.shape)}")
            if not (a.flags.c_contiguous and a.flags.writeable):
                raise ModelError(f"output '{n}' is bound to a buffer that is not "
                                 "contiguous and writable")
        return out

    def _check_feeds(self, feed) -> dict:
        g = self.graph
        if not isinstance(feed, dict):
            raise ModelError(f"run takes a dict of input name -> array, not "
                             f"{type(feed).__name__}")
        if len(feed) != len(g.inputs) or any(v not in feed for v in g.inputs):
            expected = ", ".join(f"{a.name}: {a.type} {a.shape}" for a in self.get_inputs())
            for n in feed:
                if n not in g.inputs:
                    raise ModelError(f"'{n}' is not an input of the model",
                                     hint=f"inputs: {expected}")
            missing = [v for v in g.inputs if v not in feed]
            raise ModelError(f"missing input(s) {', '.join(repr(m) for m in missing)}",
                             hint=f"inputs: {expected}")
        feeds, symbols = {}, {}
        for v in g.inputs:
            a = feed[v]
            if not isinstance(a, np.ndarray):
                a = _host_array(v, a)
            t = g.types[v]
            want = g.boundary.get(v, t.dtype)  # a half-precision input: widened below
            if a.dtype != want and a.dtype.newbyteorder("=") == want:
                a = a.astype(want)  # the other byte order: convert
            if a.dtype == object:
                raise ModelError(f"input '{v}' is not a numeric array (got "
                                 f"{type(feed[v]).__name__}, which numpy holds as dtype "
                                 f"object); the model wants {np.dtype(want).name}")
            if a.dtype != want:
                raise ModelError(f"input '{v}' has dtype {a.dtype.name}; the model wants "
                                 f"{np.dtype(want).name}",
                                 hint=f"convert it with .astype(np.{np.dtype(want).name})")
            if want != t.dtype:
                a = a.astype(t.dtype)
            if t.shape is not None:
                if a.ndim != len(t.shape):
                    raise ModelError(f"input '{v}' has shape {list(a.shape)}; the model wants "
                                     f"rank {len(t.shape)} {list(t.shape)}")
                for k, (d, want) in enumerate(zip(a.shape, t.shape)):
                    if isinstance(want, int) and d != want:
                        raise ModelError(f"input '{v}' has shape {list(a.shape)}; dimension "
                                         f"{k} must be {want} ({list(t.shape)})")
                    if isinstance(want, str):
                        if symbols.setdefault(want, (d, v))[0] != d:
                            raise ModelError(
                                f"input '{v}': dimension {k} ('{want}') is {d}, but it is "
                                f"{symbols[want][0]} in input '{symbols[want][1]}'")
            # np.ascontiguousarray would make a 0-d array 1-d
            feeds[v] = a if a.flags.c_contiguous else np.ascontiguousarray(a).reshape(a.shape)
        return feeds


def _host_array(v: str, a) -> np.ndarray:
    """Feed ``v``, not a numpy array, as one: a DLPack tensor in host memory (a torch
    CPU tensor) shared without a copy (``np.from_dlpack``), anything else as
    ``np.asarray`` makes it."""
    if hasattr(a, "__dlpack__") and hasattr(a, "__dlpack_device__"):
        device = a.__dlpack_device__()
        if device[0] != 1:  # DLPack's kDLCPU
            raise ModelError(f"input '{v}' is a {type(a).__name__} on device "
                             f"{getattr(a, 'device', device)}; polytc reads its inputs "
                             "from host memory", hint="copy it there first (tensor.cpu())")
        try:
            return np.from_dlpack(a)
        except (BufferError, RuntimeError, TypeError, ValueError) as e:
            raise ModelError(f"input '{v}': numpy cannot share the {type(a).__name__} "
                             f"({str(e).strip().splitlines()[0]})",
                             hint="detach it, or pass a numpy array") from None
    try:
        return np.asarray(a)
    except Exception:  # noqa: BLE001
        raise ModelError(f"input '{v}': {type(a).__name__} is not an array") from None


def _array_key(a):
    """What the checks of a run look at in one feed: its dtype and shape if it is a
    C-contiguous numpy array (anything else raises TypeError: no fast path)."""
    if type(a) is not np.ndarray or not a.flags.c_contiguous:
        raise TypeError
    return a.dtype, a.shape


@user_boundary
def compile(model, target: str = "c", options: Options | None = None, *, fuse: bool = True,
            disable=(), native: bool = True) -> Session:  # noqa: A001 - the name users expect
    """Compile an ONNX model (a path, bytes or ``onnx.ModelProto``) into a ``Session``.

    ``target``: ``c``, ``opencl`` or ``cuda`` (see ``TARGETS``); ``options`` apply to
    every compiled group; ``fuse=False`` compiles each op alone;
    ``disable`` names graph passes to skip (see ``polytc.graph.passes.PASSES``; and
    ``pads_in_place``: ``pass_names()``), a list or one name;
    ``native=False`` runs the compiled groups one by one from Python (the reference
    executor) instead of through the plan's one C entry point (``polytc.graph.native``)."""
    return Session(model, target, options, fuse, disable, native=native)
