"""The end of ``polytc.autotune``: the winner, its record and the summary line.

``tuner`` is the driver's state of the run (``driver._Tuner``: the kernel, program,
sizes, target, machine, space, probe, the history of candidate records, ...).
"""
from __future__ import annotations

import math
import sys
import time

from ..options import Options
from . import bridge
from .search import ranked
from .units import fmt_seconds

__all__ = ["tuned_kernel"]

#: how much faster than the default options a candidate must have timed to replace them:
#: each is timed twice at most, and a machine's noise is a few percent (bench_cpu's
#: sgemm 1024^3 tuned 60 s ran 5.33 ms where its default ran 4.82)
MARGIN = 0.03


def tuned_kernel(tuner, store: bool):
    """The tuned kernel (the kernel's own options when nothing finished) with its
    ``tuning`` record; the best options stored in the tuning cache when ``store``."""
    ok = _default_first_unless_beaten(ranked(tuner.history))  # best first
    record = _summary(tuner, ok)
    if not ok:
        if tuner.verbose:
            print(f"autotune {tuner.program.name}: no candidate finished "
                  f"({len(tuner.history)} tried); keeping the kernel's options",
                  file=sys.stderr)
        tuned = bridge.with_options(tuner.kernel, tuner.kernel.options)
    else:
        tuned = _adopt(tuner, ok, record, store)
    record["history"] = [
        {k: (v.key() if isinstance(v, Options) else v) for k, v in r.items() if k != "json"}
        for r in tuner.history]
    tuned.tuning = record
    return tuned


def _default_first_unless_beaten(ok: list) -> list:
    """``ok`` (finished candidates, fastest first) with the default options first unless
    the fastest beat them by ``MARGIN``."""
    default = next((r for r in ok if r["n"] == 0), None)
    if default is None or ok[0] is default or ok[0]["time"] < default["time"] * (1 - MARGIN):
        return ok
    return [default] + [r for r in ok if r is not default]


def _summary(tuner, ok: list) -> dict:
    history = tuner.history
    default = next((r for r in history if r["n"] == 0), None)
    base_t = default["time"] if default is not None else math.inf
    return {
        "time": ok[0]["time"] if ok else None,
        "default_time": base_t if math.isfinite(base_t) else None,
        "speedup": (base_t / ok[0]["time"]) if ok and math.isfinite(base_t) else None,
        "options": ok[0]["options"].key() if ok else None,
        "candidates": len(history),
        "failed": sum(1 for r in history if not math.isfinite(r["time"])),
        "generations": tuner.gen,
        "stopped": tuner.stopped,
        "seed": tuner.seed, "population": tuner.population, "budget": tuner.budget,
        "target": tuner.target,
        "samples": 1 + len(tuner.samples),  # (the time: their sum)
        "elapsed": time.monotonic() - tuner.t_start,
        "machine": tuner.machine.key(),
        "space": _space_facts(tuner.space, tuner.probe),
        "top": [{"options": r["options"].key(), "time": r["time"]} for r in ok[:5]],
    }


def _space_facts(space, probe: dict):
    """What the record keeps of the search space (``None``: it was never made)."""
    if space is None:
        return None
    return {"fields": list(space.fields), "target": space.target,
            **({"device_kind": space.device_kind, "dims": space.dims,
                "extents": list(space.extents)} if space.accelerator else {}),
            **({"probe_error": probe["probe_error"]} if "probe_error" in probe else {})}


def _adopt(tuner, ok: list, record: dict, store: bool):
    """The kernel with the best options; they go to the tuning cache when ``store``."""
    best_options = ok[0]["options"]
    if tuner.symbolic:  # the generic kernel's options, for the sizes' bucket too
        best_options = best_options.replace(symbolic=tuner.symbolic)
        record["symbolic"] = list(tuner.symbolic)
    if store:
        from ..runtime import tuning

        keep = {k: v for k, v in record.items() if k != "path"}
        record["path"] = tuning.store(tuner.program, tuner.env, best_options, keep,
                                      target=tuner.target)
        if tuner.symbolic:
            record["bucket"] = tuning.bucket(tuner.env, tuner.symbolic)
            tuning.store(tuner.program, record["bucket"], best_options, keep,
                         target=tuner.target)
    tuned = bridge.with_options(tuner.kernel, best_options)
    if tuner.verbose:
        vs = (f", default {fmt_seconds(record['default_time'])}: {record['speedup']:.2f}x"
              if record["speedup"] else "")
        print(f"autotune {tuner.program.name}: best {fmt_seconds(ok[0]['time'])}{vs} after "
              f"{len(tuner.history)} candidates ({record['failed']} failed) with "
              f"{_describe(best_options)}", file=sys.stderr)
    return tuned


def _describe(o: Options) -> str:
    d = Options().key()
    changed = {k: v for k, v in o.key().items() if d.get(k) != v}
    return ", ".join(f"{k}={v}" for k, v in changed.items()) or "defaults"
