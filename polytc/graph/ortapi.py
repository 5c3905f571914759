"""onnxruntime's session surface on polytc: ``InferenceSession``, ``SessionOptions``,
``RunOptions``, ``GraphOptimizationLevel``, ``ExecutionMode`` and ``IOBinding``, with
onnxruntime's names, so that a script written for ``onnxruntime`` runs on polytc with
its import changed (``import polytc.onnx as ort``).  docs/onnx.md ("The onnxruntime
session surface") has the table of what each option does here.

``InferenceSession`` wraps a ``Session`` (``session.py``; the wrapped one is
``InferenceSession.session``, with polytc's own ``report()`` and ``stages``), built
with what the options say: the passes and fusion of the optimisation level (``LEVELS``),
``Options(num_threads=intra_op_num_threads)`` (which keys the kernels; the native
driver then runs every plan on that many threads), and the target of the providers.
``run`` without run options or profiling is ``Session.run`` itself (its fast path);
profiling and bound output buffers go through ``Session.run_with``, which times each
group inside the native entry point and has the kernels write into the caller's memory.

Options are validated when set: an unknown attribute, a value of the wrong type or out
of range is an ``OptionsError`` naming the attribute and what it takes.  Options that
mean nothing to polytc (``inter_op_num_threads``, ``execution_mode``, the memory arena's
switches) are accepted, validated, and documented as having no effect.
"""
from __future__ import annotations

import copy
import ctypes
import math
import mmap
import os
import warnings
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from .. import backends, config
from ..diagnostics import ModelError, UnsupportedError, user_boundary
from ..options import Options, OptionsError
from ..runtime.memory import MOST_BYTES
from .profiling import Profiler
from .session import Session


class GraphOptimizationLevel(IntEnum):
    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(IntEnum):
    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


# --- what each optimisation level runs ------------------------------------------------
#: graph passes (``passes.PASSES``) every level keeps: ``widen_halves`` (no kernel
#: computes in half precision), ``quantised_ops`` (no op lowering takes the integer
#: products), ``control_flow`` (nor If, Loop or Scan) and ``fold_constants``, which
#: ``control_flow`` needs (a condition computed from initialisers) and binding does for
#: every shape anyway
REQUIRED = ("widen_halves", "quantised_ops", "fold_constants", "control_flow")
#: the simplifications (onnxruntime's basic level: redundant nodes, Conv+BatchNorm)
SIMPLIFY = ("remove_identities", "fold_batchnorm", "simplify", "cse", "dce")
#: rewrites into faster loop nests (onnxruntime's layout transformations, roughly)
REWRITE = ("pointwise_convs", "global_pools")
#: blocked channels (onnxruntime's NCHWc transformer, of its layout level)
LAYOUT = ("blocked_layout",)
L = GraphOptimizationLevel
#: level -> (the passes it skips, whether ops fuse into groups: else one kernel per op)
LEVELS = {L.ORT_DISABLE_ALL: (SIMPLIFY + REWRITE + LAYOUT, False),
          L.ORT_ENABLE_BASIC: (REWRITE + LAYOUT, False),
          L.ORT_ENABLE_EXTENDED: (LAYOUT, True),
          L.ORT_ENABLE_LAYOUT: ((), True),
          L.ORT_ENABLE_ALL: ((), True)}

#: onnxruntime's providers polytc has -> its target
PROVIDERS = {"CPUExecutionProvider": "c", "CUDAExecutionProvider": "cuda"}


def _log_level(severity: int):
    """polytc's log level (``config.log``) for onnxruntime's severity: 0 (verbose)
    logs everything, 1 (info) passes and timings, warnings and worse nothing; -1 leaves
    ``POLYTC_DEBUG`` in charge."""
    return None if severity < 0 else {0: 2, 1: 1}.get(severity, 0)


# --- options ---------------------------------------------------------------------------
def _int(lo: int, hi: int | None = None):
    def check(v):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo or \
                (hi is not None and v > hi):
            raise ValueError
        return int(v)
    return check


def _enum(kind):
    def check(v):
        if isinstance(v, bool):
            raise ValueError
        return kind(v)
    return check


def _bool(v):
    if not isinstance(v, bool):
        raise ValueError
    return v


def _str(v):
    if not isinstance(v, (str, os.PathLike)):
        raise ValueError
    return os.fspath(v)


def _no_terminate(v):
    if _bool(v):
        raise OptionsError("RunOptions.terminate is not supported: a polytc run is one "
                           "native call that cannot be stopped part way",
                           hint="leave it False; a run of polytc ends when it is done")
    return v


def _names(kind) -> str:
    return ", ".join(f"{m.name} ({m.value})" for m in kind)


class _Settings:
    """Attributes validated when set (``FIELDS``: name -> (default, check, what it
    takes)) and string config entries, as onnxruntime's options objects have."""

    FIELDS: dict = {}

    def __init__(self):
        for name, (default, _check, _what) in self.FIELDS.items():
            object.__setattr__(self, name, default)
        object.__setattr__(self, "_entries", {})

    def __setattr__(self, name, value):
        kind = type(self).__name__
        if name not in self.FIELDS:
            raise OptionsError(f"{kind} has no attribute '{name}'",
                               hint=f"attributes: {', '.join(self.FIELDS)}")
        _default, check, what = self.FIELDS[name]
        try:
            value = check(value)
        except (TypeError, ValueError):
            raise OptionsError(f"{kind}.{name} cannot be {value!r}: it takes {what}") \
                from None
        object.__setattr__(self, name, value)

    def _add_entry(self, key, value) -> None:
        if not isinstance(key, str) or not isinstance(value, str):
            raise OptionsError(f"a config entry is a str key and a str value, not "
                               f"{key!r}: {value!r}")
        self._entries[key] = value

    def _entry(self, key) -> str:
        if key not in self._entries:
            raise OptionsError(f"{type(self).__name__} has no config entry '{key}'",
                               hint=f"entries: {', '.join(self._entries) or 'none'}")
        return self._entries[key]

    def _copy(self):
        c = copy.copy(self)
        object.__setattr__(c, "_entries", dict(self._entries))
        return c

    def __repr__(self):
        return f"{type(self).__name__}(" + ", ".join(
            f"{n}={getattr(self, n)!r}" for n in self.FIELDS) + ")"


class SessionOptions(_Settings):
    """onnxruntime's ``SessionOptions`` (docs/onnx.md has what each does here)."""

    FIELDS = {
        "intra_op_num_threads": (0, _int(0), "an int >= 0 (0: every core)"),
        "inter_op_num_threads": (0, _int(0), "an int >= 0 (no effect)"),
        "execution_mode": (ExecutionMode.ORT_SEQUENTIAL, _enum(ExecutionMode),
                           f"an ExecutionMode: {_names(ExecutionMode)} (no effect)"),
        "graph_optimization_level": (
            L.ORT_ENABLE_ALL, _enum(GraphOptimizationLevel),
            f"a GraphOptimizationLevel: {_names(GraphOptimizationLevel)}"),
        "optimized_model_filepath": ("", _str, "a file path ('': none)"),
        "enable_profiling": (False, _bool, "True or False"),
        "profile_file_prefix": ("polytc_profile", _str, "a str"),
        "log_severity_level": (-1, _int(-1, 4), "-1 (POLYTC_DEBUG decides) or 0 "
                               "(verbose), 1 (info), 2 (warning), 3 (error), 4 (fatal)"),
        "log_verbosity_level": (0, _int(0), "an int >= 0 (no effect)"),
        "logid": ("", _str, "a str (no effect)"),
        "enable_cpu_mem_arena": (True, _bool, "True or False (no effect)"),
        "enable_mem_pattern": (True, _bool, "True or False (no effect)"),
        "enable_mem_reuse": (True, _bool, "True or False (no effect)"),
    }

    def add_session_config_entry(self, key: str, value: str) -> None:
        """Store an entry (polytc reads none of them)."""
        self._add_entry(key, value)

    def get_session_config_entry(self, key: str) -> str:
        return self._entry(key)


class RunOptions(_Settings):
    """onnxruntime's ``RunOptions``: a run's log severity replaces the session's."""

    FIELDS = {
        "log_severity_level": SessionOptions.FIELDS["log_severity_level"],
        "log_verbosity_level": SessionOptions.FIELDS["log_verbosity_level"],
        "logid": SessionOptions.FIELDS["logid"],
        "terminate": (False, _no_terminate, "False (a run cannot be stopped)"),
        "only_execute_path_to_fetches": (False, _bool, "True or False (no effect: the "
                                         "whole plan runs)"),
    }

    def add_run_config_entry(self, key: str, value: str) -> None:
        self._add_entry(key, value)

    def get_run_config_entry(self, key: str) -> str:
        return self._entry(key)


# --- the model's metadata ---------------------------------------------------------------
@dataclass(frozen=True)
class ModelMetadata:
    """What ``get_modelmeta`` returns, as onnxruntime's ``ModelMetadata``."""

    producer_name: str = ""
    graph_name: str = ""
    domain: str = ""
    description: str = ""
    graph_description: str = ""
    version: int = 0
    custom_metadata_map: dict = field(default_factory=dict)


def _varint(buf, at: int) -> tuple:
    v = shift = 0
    while True:
        b = buf[at]
        at += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return v, at


def _fields(buf, start: int, end: int):
    """``(field number, value)`` of the protobuf message ``buf[start:end]``: an int
    for a varint, ``(start, end)`` for a length-delimited field, None for a fixed one."""
    at = start
    while at < end:
        key, at = _varint(buf, at)
        kind = key & 7
        if kind == 0:
            v, at = _varint(buf, at)
        elif kind == 2:
            n, at = _varint(buf, at)
            v, at = (at, at + n), at + n
        elif kind in (1, 5):
            v, at = None, at + (8 if kind == 1 else 4)
        else:
            raise ValueError(f"wire type {kind}")
        yield key >> 3, v


def _metadata(model) -> ModelMetadata:
    """``model``'s metadata.  A file or bytes are scanned, not parsed: only the
    model's own fields are read, the graph's nodes and weights skipped by their
    lengths (the field numbers are onnx.proto's)."""
    if not isinstance(model, (str, os.PathLike, bytes, bytearray, memoryview)):
        return ModelMetadata(model.producer_name, model.graph.name, model.domain,
                             model.doc_string, model.graph.doc_string, model.model_version,
                             {p.key: p.value for p in model.metadata_props})
    if isinstance(model, (str, os.PathLike)):
        with open(model, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return _scan(m)
    return _scan(memoryview(model).cast("B"))


def _scan(buf) -> ModelMetadata:
    def text(span) -> str:
        return bytes(buf[span[0]:span[1]]).decode("utf-8", "replace")

    got: dict = {"custom_metadata_map": {}}
    names = {2: "producer_name", 4: "domain", 6: "description"}
    for num, v in _fields(buf, 0, len(buf)):
        if num in names:
            got[names[num]] = text(v)
        elif num == 5:  # model_version, an int64
            got["version"] = v - (1 << 64) if v >= 1 << 63 else v
        elif num == 7:  # the graph: its name and doc_string
            for gnum, gv in _fields(buf, *v):
                if gnum in (2, 10):
                    got["graph_name" if gnum == 2 else "graph_description"] = text(gv)
        elif num == 14:  # metadata_props: key, value
            entry = dict(_fields(buf, *v))
            key, value = (text(entry.get(k, (0, 0))) for k in (1, 2))
            got["custom_metadata_map"][key] = value
    return ModelMetadata(**got)


# --- providers -------------------------------------------------------------------------
def _provider(providers, provider_options) -> tuple:
    """``(provider, target)``: the first of ``providers`` polytc has and can use here
    (as onnxruntime, one that is not available is skipped with a warning and the CPU
    is the fallback); an unknown name is an error."""
    if providers is None:
        return "CPUExecutionProvider", "c"
    if isinstance(providers, str) or not isinstance(providers, (list, tuple)):
        raise OptionsError(f"providers must be a list of provider names, not {providers!r}",
                           hint="e.g. ['CPUExecutionProvider']")
    if provider_options is None:
        provider_options = [{}] * len(providers)
    if not isinstance(provider_options, (list, tuple)) or \
            len(provider_options) != len(providers):
        raise OptionsError(f"provider_options must be a list of one dict per provider, "
                           f"not {provider_options!r}")
    chosen = None
    for p, more in zip(providers, provider_options):
        name, opts = p if isinstance(p, tuple) and len(p) == 2 else (p, {})
        if not isinstance(name, str):
            raise OptionsError(f"a provider is a name or a (name, options dict) tuple, "
                               f"not {p!r}", hint="e.g. ['CPUExecutionProvider']")
        if not isinstance(opts, dict) or not isinstance(more, dict):
            raise OptionsError(f"a provider's options are a dict, not {opts!r}, {more!r}")
        opts = {**opts, **more}
        if name not in PROVIDERS:
            usable = [p for p, t in PROVIDERS.items() if backends.available(t)]
            raise UnsupportedError(f"unknown provider {name!r}",
                                   hint=f"available: {', '.join(usable)}")
        if opts:
            raise UnsupportedError(f"polytc takes no options for {name} (got "
                                   f"{', '.join(map(str, opts))})")
        if chosen is None:
            if backends.available(PROVIDERS[name]):
                chosen = name
            else:
                warnings.warn(f"{name} is not available here; running on the "
                              "CPUExecutionProvider", stacklevel=4)
    chosen = chosen or "CPUExecutionProvider"
    return chosen, PROVIDERS[chosen]


# --- the session -----------------------------------------------------------------------
class InferenceSession:
    """onnxruntime's ``InferenceSession`` on polytc: ``path_or_bytes`` is a path,
    the serialised bytes or an ``onnx.ModelProto``."""

    @user_boundary
    def __init__(self, path_or_bytes, sess_options: SessionOptions | None = None,
                 providers=None, provider_options=None):
        so = SessionOptions() if sess_options is None else sess_options
        if not isinstance(so, SessionOptions):
            raise OptionsError(f"sess_options must be a polytc.onnx.SessionOptions, not "
                               f"{type(so).__module__}.{type(so).__name__}",
                               hint="polytc.onnx.SessionOptions() has onnxruntime's "
                               "attribute names")
        self._options = so._copy()  # (later changes to ``so`` are not this session's)
        self._provider, target = _provider(providers, provider_options)
        self._profiler = Profiler(so.profile_file_prefix, self._provider) \
            if so.enable_profiling else None
        self._start_ns = self._profiler.start_ns if self._profiler else 0
        self._log = _log_level(so.log_severity_level)
        start = Profiler.now()
        skip, fuse = LEVELS[so.graph_optimization_level]
        with config.log_level(self._log):
            #: the polytc ``Session`` (``report()``, ``stages``, ``plan(shapes)``)
            self.session = Session(path_or_bytes, target,
                                   Options(num_threads=so.intra_op_num_threads or None),
                                   fuse, skip)
            if so.optimized_model_filepath:
                from .save import save_optimized

                save_optimized(self.session, so.optimized_model_filepath)
        self._meta = _metadata(path_or_bytes)
        if self._profiler is not None:
            self._profiler.session("session_initialization", start, Profiler.now())

    # --- what the session is ------------------------------------------------------------
    def get_inputs(self) -> list:
        return self.session.get_inputs()

    def get_outputs(self) -> list:
        return self.session.get_outputs()

    def get_modelmeta(self) -> ModelMetadata:
        return self._meta

    def get_providers(self) -> list:
        return [self._provider]

    def get_session_options(self) -> SessionOptions:
        return self._options._copy()

    def io_binding(self) -> "IOBinding":
        return IOBinding(self)

    # --- running ------------------------------------------------------------------------
    @user_boundary
    def run(self, output_names, input_feed: dict, run_options: RunOptions | None = None):
        """The outputs ``output_names`` (None: all) for ``input_feed`` (name -> array
        or DLPack tensor), as a list of numpy arrays."""
        level = self._run_log(run_options)
        if level is None and self._profiler is None:
            return self.session.run(output_names, input_feed)  # (its fast path)
        return self._run(output_names, input_feed, level)

    @user_boundary
    def run_with_iobinding(self, binding: "IOBinding", run_options: RunOptions | None = None):
        """Run on ``binding``'s inputs; its outputs are then ``binding.get_outputs()``."""
        if not isinstance(binding, IOBinding) or binding._session is not self:
            raise ModelError("run_with_iobinding takes an IOBinding of this session",
                             hint="make it with sess.io_binding()")
        if not binding._outputs:
            raise ModelError("no output is bound",
                             hint="bind_output(name) for each output you want")
        level = self._run_log(run_options)
        out = {n: a for n, a in binding._outputs.items() if a is not None}
        binding._results = self._run(list(binding._outputs), binding._inputs, level, out)

    def _run(self, names, feed, level, out=None) -> list:
        with config.log_level(level):
            if self._profiler is None and not out:
                return self.session.run(names, feed)
            start = Profiler.now()
            outs, times = self.session.run_with(names, feed, out,
                                                timed=self._profiler is not None)
            if self._profiler is not None:
                self._profiler.run(start, Profiler.now(), times)
        return outs

    def _run_log(self, run_options):
        """The log level of a run: its options' severity, else the session's."""
        if run_options is None:
            return self._log
        if not isinstance(run_options, RunOptions):
            raise OptionsError(f"run_options must be a polytc.onnx.RunOptions, not "
                               f"{type(run_options).__name__}")
        if run_options.log_severity_level < 0:
            return self._log
        return _log_level(run_options.log_severity_level)

    # --- profiling ----------------------------------------------------------------------
    @user_boundary
    def end_profiling(self) -> str:
        """Write the profile (``profiling.py``) and stop profiling: the file's name,
        or "" when the session does not profile."""
        if self._profiler is None:
            return ""
        path = self._profiler.write()  # (a file it cannot write: it goes on profiling)
        self._profiler = None
        return path

    def get_profiling_start_time_ns(self) -> int:
        """When profiling started (``time.time_ns``); 0 without profiling."""
        return self._start_ns

    def __repr__(self):
        return f"<polytc.onnx.InferenceSession {self._provider} {self.session!r}>"


# --- binding inputs and outputs ----------------------------------------------------------
def _host(device_type, device_id) -> None:
    if not isinstance(device_type, str) or device_type.lower() != "cpu" or device_id != 0:
        raise UnsupportedError(f"polytc binds host memory only (device 'cpu', id 0), not "
                               f"{device_type!r}, id {device_id!r}")


def _memory(what: str, device_type, device_id, element_type, shape, buffer_ptr):
    """An array on the caller's memory at ``buffer_ptr`` (host memory only)."""
    _host(device_type, device_id)
    if element_type is None or shape is None:
        raise ModelError(f"{what}: a buffer needs its element_type and shape")
    try:
        dtype = np.dtype(element_type)
    except TypeError:
        raise ModelError(f"{what}: element_type {element_type!r} is not a numpy "
                         "dtype") from None
    if dtype.hasobject or dtype.itemsize == 0:
        raise ModelError(f"{what}: element_type {element_type!r} is not a type of "
                         "numbers a buffer holds", hint="e.g. np.float32")
    if not isinstance(shape, (list, tuple)) or not all(
            isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0
            for d in shape):
        raise ModelError(f"{what}: shape must be a list of sizes >= 0, not {shape!r}")
    if not isinstance(buffer_ptr, int) or buffer_ptr <= 0:
        raise ModelError(f"{what}: buffer_ptr must be the buffer's address (an int), not "
                         f"{buffer_ptr!r}")
    n = math.prod(int(d) for d in shape)
    if n * dtype.itemsize > MOST_BYTES:
        raise ModelError(f"{what}: a buffer of shape {list(shape)} of {dtype.name} would "
                         f"span {n * dtype.itemsize} bytes, more than a process can address")
    raw = (ctypes.c_char * (n * dtype.itemsize)).from_address(buffer_ptr)
    return np.frombuffer(raw, dtype, n).reshape(tuple(int(d) for d in shape))


class IOBinding:
    """onnxruntime's ``IOBinding`` (``sess.io_binding()``): inputs and outputs bound by
    name, then ``sess.run_with_iobinding(binding)``.  An output bound to a buffer
    (``buffer_ptr``) is written straight into it by the kernel that computes it; one
    bound without is allocated by polytc.  ``get_outputs`` gives numpy arrays."""

    def __init__(self, session: InferenceSession):
        self._session = session
        self._inputs: dict = {}
        self._outputs: dict = {}  # name -> the caller's array, or None: polytc's
        self._results: list = []  # the last run's outputs

    def _input(self, name) -> str:
        g = self._session.session.graph
        if name not in g.inputs:
            raise ModelError(f"{name!r} is not an input of the model",
                             hint=f"inputs: {', '.join(g.inputs)}")
        return name

    def bind_cpu_input(self, name: str, arr) -> None:
        """Bind ``arr`` (a numpy array or a DLPack host tensor, not copied) to ``name``."""
        self._inputs[self._input(name)] = arr

    @user_boundary
    def bind_input(self, name: str, device_type, device_id, element_type, shape,
                   buffer_ptr) -> None:
        """Bind the memory at ``buffer_ptr`` (``element_type``: a numpy dtype or type)."""
        self._inputs[self._input(name)] = _memory(f"input '{name}'", device_type,
                                                  device_id, element_type, shape,
                                                  buffer_ptr)

    @user_boundary
    def bind_output(self, name: str, device_type="cpu", device_id=0, element_type=None,
                    shape=None, buffer_ptr=None) -> None:
        """Bind output ``name`` to the buffer at ``buffer_ptr`` (of ``element_type``
        and ``shape``), or, without one, to an array polytc allocates at each run."""
        self._session.session._check_outputs([name])
        if buffer_ptr is None:
            _host(device_type, device_id)
            self._outputs[name] = None
        else:
            self._outputs[name] = _memory(f"output '{name}'", device_type, device_id,
                                          element_type, shape, buffer_ptr)

    def get_outputs(self) -> list:
        """The last run's outputs, in the order they were bound (bound buffers are
        views of the caller's memory)."""
        return list(self._results)

    def copy_outputs_to_cpu(self) -> list:
        """Copies of the last run's outputs."""
        return [np.array(a) for a in self._results]

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()

    def synchronize_inputs(self) -> None:
        """Nothing to wait for: the inputs are host memory."""

    def synchronize_outputs(self) -> None:
        """Nothing to wait for: a run has finished when it returns."""
