"""A session's profile as onnxruntime writes it: a Chrome trace (``chrome://tracing``,
Perfetto) of the session's initialisation and its runs.

``InferenceSession`` (``ortapi.py``) with ``SessionOptions.enable_profiling`` keeps a
``Profiler``; ``end_profiling`` writes its events to ``<prefix>_<date>_<time>_<ms>.json``
as a JSON list of complete events (``"ph": "X"``), each with ``cat``, ``name``, ``pid``,
``tid``, ``ts`` and ``dur`` in microseconds from the profile's start, and ``args``:

* ``cat: "Session"``: ``session_initialization`` (import, graph passes and the compile
  of every plan known then) and one ``model_run`` per run;
* ``cat: "Node"``: one ``<group>_kernel_time`` per compiled group of a run, its
  ``args`` holding ``op_name`` (the group's ops, ``MatMul+Add+Relu``: one fused kernel
  stands for them; blocked forms by their ONNX op, ``layout.onnx_op``), ``node_names``
  and ``provider``.

A group's time is the native entry point's own clock around its fills and its kernel
(``native.Driver``: ``polytc_exec`` adds each step's seconds to ``t[step]``); it records
durations, not start times, so a run's node events are laid one after the other from
the run's start, in the order they ran, and nest inside its ``model_run``.  A target
without the native entry point (an accelerator's) records the runs alone.
"""
from __future__ import annotations

import json
import os
import threading
import time
from datetime import datetime

from ..options import OptionsError
from .layout import onnx_op


class Profiler:
    def __init__(self, prefix: str, provider: str):
        self.prefix, self.provider = prefix, provider
        #: the wall clock at the start (``get_profiling_start_time_ns``)
        self.start_ns = time.time_ns()
        self._t0 = time.perf_counter_ns()  # and the clock the events are timed with
        self._events: list = []
        self._lock = threading.Lock()  # (runs may come from several threads)

    @staticmethod
    def now() -> int:
        """The events' clock, in nanoseconds."""
        return time.perf_counter_ns()

    def _event(self, cat: str, name: str, start: int, dur: int, args: dict) -> None:
        """An event ``dur`` us long from ``start`` us after the profile's start."""
        e = {"cat": cat, "pid": os.getpid(), "tid": threading.get_native_id(),
             "dur": dur, "ts": start, "ph": "X", "name": name, "args": args}
        with self._lock:
            self._events.append(e)

    def _us(self, t_ns: int) -> int:
        return (t_ns - self._t0) // 1000

    def session(self, name: str, start_ns: int, end_ns: int) -> None:
        """A ``Session`` event from ``start_ns`` to ``end_ns`` (``now``'s clock)."""
        start = self._us(start_ns)
        self._event("Session", name, start, self._us(end_ns) - start, {})

    def run(self, start_ns: int, end_ns: int, groups: list) -> None:
        """A ``model_run`` and its groups' events; ``groups``: ``[(Group, seconds)]``
        in the order they ran."""
        start, end = self._us(start_ns), self._us(end_ns)
        at = start
        for g, seconds in groups:
            dur = min(round(seconds * 1e6), end - at)  # (inside the run, to the us)
            self._event("Node", f"{g.name}_kernel_time", at, dur,
                        {"op_name": "+".join(onnx_op(o) for o in g.ops),
                         "node_names": [n.name for n in g.nodes],
                         "provider": self.provider})
            at += dur
        self._event("Session", "model_run", start, end - start, {})

    def write(self) -> str:
        """Write the trace (events in time order, a run before its groups, the groups
        of a run in their order even where one took under a microsecond); returns the
        file's name."""
        now = datetime.now()
        path = f"{self.prefix}_{now:%Y-%m-%d_%H-%M-%S}_{now.microsecond // 1000:03d}.json"
        with self._lock:  # (a stable sort)
            events = sorted(self._events, key=lambda e: (e["ts"], e["cat"] != "Session"))
        try:
            with open(path, "w") as f:
                json.dump(events, f, indent=0)
        except OSError as e:
            raise OptionsError(f"cannot write the profile to {path}: {e.strerror or e}",
                               hint="SessionOptions.profile_file_prefix must start with "
                               "a path in a directory you can write") from None
        return path
