"""The worker's side of ``polytc.autotune``: what a worker process does with each request
(:class:`WorkerState`), and the files of a tuning session it shares with the tuner.

A session is a temporary directory: ``inputs.pkl`` holds the samples, lists of inputs,
the first the call's and then ``samples``', with how far past a 64-byte boundary each
input lay (written by the tuner before the workers start), ``reference.pkl`` each
sample's reference outputs (written by the worker that computes them with the default
options on the C target, or by the tuner from the numpy oracle when that fails); a
candidate's time is the sum of its times on the samples.
Requests are tuples: ``("reference",)``, ``("probe",)``, ``("compile", options_json,
fault)`` and ``("time", options_json, best_seconds or None, fault)``; a reply is a dict
(see :meth:`WorkerState.handle`).  A time is the minimum of a number of runs that fills
about ``MEASURE_S`` seconds; a first run ``CUTOFF`` times slower than the best so far is
not measured further.  ``fault`` is a test hook (:func:`inject`).
"""
from __future__ import annotations

import hashlib
import os
import pickle
import time

from ..options import Options
from ..runtime.memory import ALIGN, offset_copy
from . import bridge

__all__ = ["WorkerState", "dump", "offset", "probe_mapping", "INPUTS", "REFERENCE"]

RTOL = ATOL = 1e-3
#: seconds of measurement per candidate (repeats = this / one run, clamped)
MEASURE_S = 0.15
MIN_REPEAT, MAX_REPEAT = 5, 200
#: a first run this many times slower than the best so far is not measured further
CUTOFF = 3.0
#: the session's files
INPUTS, REFERENCE = "inputs.pkl", "reference.pkl"


def dump(path, obj) -> None:
    """Pickle ``obj`` to ``path`` atomically (a reader never sees half a file)."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)


def offset(a):
    """How far past a 64-byte boundary the data of the array ``a`` starts (None for a
    scalar): the workers' copies start there too (``WorkerState``)."""
    return a.ctypes.data % ALIGN if getattr(a, "ndim", 0) else None


def _load(path):
    with open(path, "rb") as f:
        return pickle.load(f)


def _as_list(outs) -> list:
    return list(outs) if isinstance(outs, tuple) else [outs]


# --- fault injection (a test hook) -------------------------------------------------------
def inject(fault) -> None:
    """Test hook (``autotune(_faults={candidate number: fault})``): misbehave as asked,
    ``crash`` (SIGSEGV), ``abort``, ``hang`` or ``raise``; ``wrong`` (checked in
    ``measure``) corrupts the result.  ``compile:<fault>`` strikes while compiling."""
    if fault == "crash":
        import ctypes

        ctypes.string_at(0)  # SIGSEGV
    elif fault == "abort":
        os.abort()
    elif fault == "hang":
        while True:
            time.sleep(3600)
    elif fault == "raise":
        raise RuntimeError("injected failure")


def split_fault(fault):
    """``"compile:hang"`` -> ("compile", "hang"); ``"hang"`` -> ("time", "hang")."""
    if not fault:
        return None, None
    stage, _, kind = fault.rpartition(":")
    return stage or "time", kind


# --- the requests ------------------------------------------------------------------------
class WorkerState:
    """One worker's program, inputs and reference; :meth:`handle` answers a request."""

    def __init__(self, session, text, name, target="c"):
        self.session = session
        self.target = target
        self.program = bridge.program_from_text(text, name)
        samples, offsets = _load(os.path.join(session, INPUTS))
        # each input as far past a 64-byte boundary as the user's (a kernel may copy an
        # unaligned input at every call: ``CompiledKernel.benchmark`` times that too)
        self.samples = [[a if o is None else offset_copy(a, o) for a, o in zip(s, offs)]
                        for s, offs in zip(samples, offsets)]
        self.inputs = self.samples[0]
        self.reference = None
        if target != "c":  # the device's start-up belongs to the worker's, not a candidate's
            try:
                bridge.start_device(target)
            except Exception:  # noqa: BLE001 - no device: each candidate fails on its own
                pass

    def kernel(self, options_json, inputs=None):
        return bridge.specialize(self.program, Options.from_json(options_json),
                                 self.target, self.inputs if inputs is None else inputs)

    def handle(self, msg):
        what = msg[0]
        if what == "compile":
            _, options_json, fault = msg
            return self.compile(options_json, fault)
        if what == "reference":
            return self.make_reference()
        if what == "probe":
            from ..runtime import args as A

            return probe_mapping(self.program, A.bind_sizes(self.program, self.inputs),
                                 self.target)
        if what == "time":
            _, options_json, best, fault = msg
            return self.measure(options_json, best, fault)
        raise ValueError(f"unknown request {what!r}")

    def compile(self, options_json, fault):
        """The hash of the candidate's code (equal code: equal time) and its compile
        time."""
        stage, kind = split_fault(fault)
        if stage == "compile":
            inject(kind)
        t0 = time.perf_counter()
        ck = self.kernel(options_json)
        code = bridge.code_text(ck)
        return {"code": hashlib.sha256(code.encode()).hexdigest(),
                "compile_s": time.perf_counter() - t0}

    def make_reference(self):
        # the default options on the C target (on an accelerator too: its candidates
        # are checked against the most tested code path)
        ck = bridge.specialize(self.program, Options(), "c", self.inputs)
        outs = [_as_list(bridge.run(ck, self.inputs))] + [
            _as_list(bridge.run(bridge.specialize(self.program, Options(), "c", s), s))
            for s in self.samples[1:]]
        dump(os.path.join(self.session, REFERENCE), outs)
        contraction = None
        try:  # whether the tiler found a contraction (decides the search space)
            contraction = bridge.has_contraction(ck, self.program)
        except Exception:  # noqa: BLE001 - unknown: search everything
            pass
        return {"contraction": contraction}

    def measure(self, options_json, best, fault):
        if self.reference is None:
            self.reference = _load(os.path.join(self.session, REFERENCE))
        ck = self.kernel(options_json)
        stage, kind = split_fault(fault)
        if stage == "time":
            inject(kind)
        t0 = time.perf_counter()
        outs = _as_list(bridge.run(ck, self.inputs))
        first = time.perf_counter() - t0
        if kind == "wrong":
            outs = [o + 1 for o in outs]
        wrong = _compare(outs, self.reference[0])
        if wrong is not None:
            return {"wrong": wrong}
        if len(self.samples) > 1:
            return self._over_samples(options_json, ck)
        if self.target != "c":
            # a call also copies to and from the device: time the launches alone
            first = bridge.benchmark(ck, self.inputs, repeat=1, warmup=1)["min"]
        if best is not None and first > CUTOFF * best:
            # far slower than the best so far: one more run (the first may have been
            # unlucky), and no full measurement if it is still slow
            r = bridge.benchmark(ck, self.inputs, repeat=1, warmup=0)
            if r["min"] > CUTOFF * best:
                return {"time": min(first, r["min"]), "note": "slow: two runs"}
        repeat = max(MIN_REPEAT, min(MAX_REPEAT, int(MEASURE_S / max(first, 1e-7))))
        r = bridge.benchmark(ck, self.inputs, repeat=repeat, warmup=1)
        # the minimum: noise from other processes only ever adds time
        return {"time": r["min"], "median": r["median"], "repeat": repeat}

    def _over_samples(self, options_json, ck):
        """The sum over the samples of the candidate's times (each checked against its
        reference first): it serves them all (a bucket of sizes)."""
        total = med = 0.0
        for k, inputs in enumerate(self.samples):
            cki = ck if k == 0 else self.kernel(options_json, inputs)
            if k:
                wrong = _compare(_as_list(bridge.run(cki, inputs)), self.reference[k])
                if wrong is not None:
                    return {"wrong": f"sample {k}: {wrong}"}
            first = bridge.benchmark(cki, inputs, repeat=1, warmup=0)["min"]
            repeat = max(MIN_REPEAT, min(MAX_REPEAT, int(MEASURE_S / len(self.samples) /
                                                         max(first, 1e-7))))
            r = bridge.benchmark(cki, inputs, repeat=repeat, warmup=1)
            total, med = total + r["min"], med + r["median"]
        return {"time": total, "median": med, "samples": len(self.samples)}


def _compare(outs, reference):
    """Why ``outs`` differ from ``reference``, or ``None`` when they agree."""
    import numpy as np

    for out, ref in zip(outs, reference):
        out = np.asarray(out)
        if out.shape != ref.shape or not np.allclose(out, ref, rtol=RTOL, atol=ATOL,
                                                     equal_nan=True):
            err = float(np.nanmax(np.abs(out.astype(np.float64) - ref))) \
                if out.shape == ref.shape else float("nan")
            return f"result differs from the reference (max error {err:.3g})"
    return None


def probe_mapping(program, env, target) -> dict:
    """What the search space of an accelerator target needs to know: the device
    (``Device.key()``), and the loops the ``threads`` mapping maps: how many (``dims``,
    the most over the kernels) and their extents, innermost last (``extents``, 0 where
    unknown).  The mapper runs with tiles larger than any loop, so the tile sizes it
    reports are the extents; nothing is compiled."""
    device = bridge.find_device(target)
    if device is None:
        return {"device": None}
    info = {"device": device.key()}
    try:
        opts = Options(mapping="threads", block_tile=(1 << 30,) * 3, reduction_tile=0,
                       shared_memory=False, private_memory=False)
        report = bridge.mapping_report(program, env, opts, target, device)
        dims, ext = 0, {}  # axis (0: innermost) -> extent, None: unknown
        for d in report:
            sizes = d.facts["tile"] if d.kind == "threads" else [None] * len(d.facts["block"])
            dims = max(dims, len(sizes))
            for axis, e in enumerate(reversed(sizes)):
                old = ext.get(axis, 0)
                ext[axis] = None if e is None or old is None else max(old, int(e))
        if dims:
            info["dims"] = dims
            info["extents"] = [ext.get(a) or 0 for a in reversed(range(dims))]
    except Exception as e:  # noqa: BLE001 - the space falls back to two loops of any size
        info["probe_error"] = f"{type(e).__name__}: {e}"
    return info
