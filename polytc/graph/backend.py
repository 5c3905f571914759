"""polytc as an ``onnx.backend.base.Backend``, so ONNX's own backend tests run on it.

>>> rep = PolytcBackend.prepare(model)          # compiles (or defers, see below)
>>> outputs = rep.run([x, y])                    # a list in graph-input order, or a dict

One thing differs from ``polytc.onnx.compile``: **inputs that polytc needs at compile
time are specialised on their values.**  polytc compiles for concrete shapes, so an
operand that decides a shape (Reshape's ``shape``, Slice's ``starts``, the ``axes`` of the
reductions, Pad's ``pads``, Trilu's ``k`` ...) must be a constant.  In real models they
are initialisers or computed from shapes; ONNX's node tests feed them as graph inputs.
When compiling fails for that reason (``UnsupportedError: ... must be known at compile
time``), the backend finds the graph inputs that operand is computed from, and at each
``run`` turns their fed values into initialisers and compiles the model for those values
(once per distinct set of values, kept).  Other inputs stay run-time inputs.
"""
from __future__ import annotations

import re

import numpy as np
from onnx.backend.base import Backend, BackendRep, Device, DeviceType

from ..diagnostics import ModelError, UnsupportedError

_NEEDS_CONSTANT = re.compile(r"\('([^']*)'\) must be known at compile time")


def _sources(model, value: str) -> set:
    """The graph inputs ``value`` is computed from (itself, if it is one), in the graph
    polytc imports (ops written out as their ONNX function bodies)."""
    from .onnx_import import prepare

    graph = prepare(model, "<model>").graph
    inputs = {i.name for i in graph.input} - {i.name for i in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output if o}
    out, todo, seen = set(), [value], set()
    while todo:
        v = todo.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in inputs:
            out.add(v)
        elif v in producer:
            todo.extend(i for i in producer[v].input if i)
    return out


def _compile_time_inputs(model, err: UnsupportedError) -> set:
    """The graph inputs whose values ``err`` says polytc needs at compile time."""
    out = set()
    for value in _NEEDS_CONSTANT.findall(err.message):
        out |= _sources(model, value)
    return out


def _bake(model, values: dict):
    """A copy of ``model`` with the graph inputs ``values`` turned into initialisers."""
    from onnx import numpy_helper

    m = type(model)()
    m.CopyFrom(model)
    keep = [i for i in m.graph.input if i.name not in values]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    for name, v in values.items():
        m.graph.initializer.append(numpy_helper.from_array(np.asarray(v), name))
    return m


class PolytcRep(BackendRep):
    """A prepared model: a ``polytc.onnx.Session``, or (for a model some of whose inputs
    polytc needs at compile time) one session per distinct set of those inputs' values."""

    def __init__(self, session=None, *, model=None, kwargs=None, params=()):
        self.session = session
        self.model = model  # the ModelProto, for value specialisation
        self.kwargs = dict(kwargs or {})
        self.params = set(params)  # graph inputs specialised on their values
        self.sessions: dict = {}
        if session is None:
            self.input_names = [i.name for i in model.graph.input
                                if i.name not in {t.name for t in model.graph.initializer}]
        else:
            self.input_names = [a.name for a in session.get_inputs()]

    def run(self, inputs, **kwargs):
        if isinstance(inputs, dict):
            feed = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            inputs = list(inputs)
            if len(inputs) > len(self.input_names):
                raise ModelError(f"{len(inputs)} inputs given; the model takes "
                                 f"{len(self.input_names)}: {', '.join(self.input_names)}")
            feed = dict(zip(self.input_names, inputs))
        while True:
            try:
                session, rest = self._session(feed)
                return tuple(session.run(None, rest))
            except UnsupportedError as e:
                more = _compile_time_inputs(self.model, e) - self.params \
                    if self.model is not None else set()
                if not more or not more <= set(feed):
                    raise
                self.params |= more  # specialise on these too, and compile again

    def _session(self, feed: dict):
        if not self.params:
            return self.session, feed
        from . import session as ponnx

        values = {n: np.asarray(feed[n]) for n in self.params if n in feed}
        key = tuple((n, v.dtype.str, v.shape, v.tobytes()) for n, v in sorted(values.items()))
        s = self.sessions.get(key)
        if s is None:
            s = self.sessions[key] = ponnx.compile(_bake(self.model, values), **self.kwargs)
        return s, {n: v for n, v in feed.items() if n not in self.params}


class PolytcBackend(Backend):
    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs):
        from . import session as ponnx
        from .onnx_import import load

        # (no super().prepare: polytc's importer runs onnx's checker and reports a
        # ModelError, where onnx's backend base would raise its ValidationError)
        try:
            return PolytcRep(ponnx.compile(model, **kwargs), model=load(model), kwargs=kwargs)
        except UnsupportedError as e:
            proto = load(model)
            params = _compile_time_inputs(proto, e)
            if not params:
                raise
            return PolytcRep(model=proto, kwargs=kwargs, params=params)

    @classmethod
    def run_model(cls, model, inputs, device: str = "CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return Device(device).type == DeviceType.CPU
