"""``polytc.autotune``: an evolutionary search over ``Options``, measured in isolation.

The search space is :class:`polytc.tuner.space.Space`, the candidate generator
:class:`polytc.tuner.search.Search`.  Candidates are compiled and run in worker processes
(:mod:`polytc.tuner.workers`).  Up to two workers compile a generation in parallel; then
one worker times the candidates one at a time, so no two timings overlap.  A candidate
that raises, computes a wrong result, crashes its worker (the worker is replaced) or runs
past the per-candidate timeout (the worker is killed and replaced) scores ``inf`` and the
search goes on.  Candidates whose C code equals an earlier candidate's reuse its time (on
an accelerator: whose kernel source and launch sizes do).  The reference result is
computed once, with the default options on the C target, in a worker (if that fails, by
the numpy oracle in this process); candidates are built and run on the kernel's own
target.  The user's process only parses, plans and waits: no candidate runs in it.

The best options go to the tuning cache (:mod:`polytc.runtime.tuning`), from which
kernels created without explicit options take them when they compile for the same
program, sizes, machine and target (and device).

:func:`autotune` is a sequence of steps: check the arguments, settle the settings
(:class:`_Tuner`), then in a session directory start the workers, get the reference and
the search space, run the generations (compile all, time each), time the best again,
and last pick, store and report the winner (:mod:`polytc.tuner.result`).
"""
from __future__ import annotations

import math
import numbers
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field

from ..diagnostics import PolytcError, user_boundary
from . import bridge
from .evaluate import INPUTS, REFERENCE, dump, offset
from .result import tuned_kernel
from .search import CONFIRM_SHARE, Search, to_confirm
from .space import Space
from .units import fmt_seconds
from .workers import Pool

__all__ = ["autotune"]


@user_boundary
def autotune(kernel, *inputs, budget: float = 60.0, seed=0, population: int = 8,
             generations: int | None = None, verbose: bool = True,
             timeout: float | None = None, jobs: int | None = None, store: bool = True,
             progress: str | None = "bar", on_result=None, samples=(),
             _faults: dict | None = None):
    """Search ``Options`` for ``kernel`` on these ``inputs`` (their sizes and dtypes) and
    return a new kernel with the fastest options found (explicit options).

    ``budget``: seconds of search (the last candidate may finish up to ``timeout``
    later); ``seed``: the random sequence of candidates; ``population``: candidates per
    generation; ``generations``: stop after this many (default: when the budget is
    spent); ``timeout``: seconds before a candidate's compile or run is killed (default
    ``min(60, max(2, budget / 4))``); ``jobs``: worker processes compiling in parallel
    (default ``min(2, cores)``; timings never overlap); ``store``: write the result to
    the tuning cache, where kernels created without options find it.

    ``progress`` (shown when ``verbose``): ``"bar"``, a tqdm bar; ``"plot"``, a live
    plot of each candidate's time and the best so far, redrawn in place in Jupyter (a
    bar elsewhere; :mod:`polytc.tuner.plot`); ``None``, nothing but the summary
    line.  ``on_result``: called with a copy of each candidate's record as it finishes
    (a dict: ``n``, ``generation``, ``options``, ``time`` in seconds, ``inf`` when it
    failed, with its ``error``); an exception it raises ends the search.

    ``samples``: more inputs (tuples like ``inputs``), of other sizes of the sizes the
    kernel keeps symbolic (a distribution of batch sizes, say): each candidate is timed
    on every sample too and scored by the sum of its times.

    The returned kernel's ``tuning`` attribute records the search: best and default
    times, every candidate with its status."""
    t_start = time.monotonic()
    _check_arguments(kernel, budget, progress)
    _check_settings(seed=seed, population=population, generations=generations,
                    timeout=timeout, jobs=jobs, on_result=on_result, samples=samples)
    tuner = _new_tuner(kernel, inputs, t_start, budget=budget, seed=seed,
                       population=population, generations=generations, verbose=verbose,
                       timeout=timeout, jobs=jobs, progress=progress, on_result=on_result,
                       faults=_faults, samples=samples)
    _tune(tuner)
    return tuned_kernel(tuner, store)


# --- settings ------------------------------------------------------------------------------
@dataclass
class _Tuner:
    """One ``autotune`` call: its settings, and what it has found so far."""

    kernel: object
    program: object
    arrays: list
    env: dict
    machine: object
    target: str
    t_start: float
    budget: float
    seed: object
    population: int
    generations: int | None
    timeout: float
    jobs: int
    faults: dict  # candidate number -> fault (a test hook: evaluate.inject)
    verbose: bool
    progress: str | None
    on_result: object
    #: sizes the kernel keeps symbolic: every candidate is generic in them, timed at
    #: these inputs, and the best is stored for their bucket (``tuning.bucket``) too
    symbolic: tuple = ()
    samples: list = field(default_factory=list)  # more inputs (lists of arrays)
    initial: list = field(default_factory=list)  # starting points besides the defaults
    space: Space | None = None
    probe: dict = field(default_factory=dict)  # what the accelerator probe found
    search: Search | None = None
    bar: object = None  # the tqdm bar or the TunePlot
    history: list = field(default_factory=list)  # one dict per evaluated candidate
    codes: dict = field(default_factory=dict)  # code hash -> the record that timed it
    best: float = math.inf
    number: int = 0  # the next candidate's number
    gen: int = 0  # generations done
    stopped: str | None = None  # why the search ended early

    @property
    def end(self) -> float:
        return self.t_start + self.budget

    @property
    def search_end(self) -> float:
        return self.t_start + self.budget * (1 - CONFIRM_SHARE)  # the rest confirms the best

    def may_start(self) -> bool:
        return time.monotonic() < self.search_end


def _check_arguments(kernel, budget, progress) -> None:
    if not bridge.is_kernel(kernel):
        raise PolytcError(f"autotune takes a polytc kernel, got {type(kernel).__name__}",
                          hint="pass what polytc.tc(...) or @polytc.kernel returned")
    if not _seconds(budget):
        raise PolytcError(f"autotune: budget must be a positive number of seconds, "
                          f"got {budget!r}")
    if not isinstance(progress, (str, type(None))) or progress not in ("bar", "plot", None):
        raise PolytcError(f"autotune: progress must be 'bar', 'plot' or None, "
                          f"got {progress!r}")


def _seconds(v) -> bool:
    """``v`` is a positive, finite number of seconds."""
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and 0 < v < math.inf


def _count(v) -> bool:
    """``v`` is an int of at least 1."""
    return isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 1


def _check_settings(*, seed, population, generations, timeout, jobs, on_result,
                    samples) -> None:
    """The search's settings, each its type and range, before anything compiles."""
    checks = (  # (name, value, whether it is good, what it must be)
        ("seed", seed, isinstance(seed, (type(None), int, float, str, bytes)),
         "an int (or None, a float, a str)"),
        ("population", population, _count(population), "an int of at least 1"),
        ("generations", generations, generations is None or _count(generations),
         "None or an int of at least 1"),
        ("timeout", timeout, timeout is None or _seconds(timeout),
         "None or a positive number of seconds"),
        ("jobs", jobs, jobs is None or _count(jobs), "None or an int of at least 1"),
        ("on_result", on_result, on_result is None or callable(on_result),
         "None or a function of a candidate's record"))
    for name, value, good, want in checks:
        if not good:
            raise PolytcError(f"autotune: {name} must be {want}, got {value!r}")
    if not isinstance(samples, (list, tuple)):
        raise PolytcError(f"autotune: samples must be a list of tuples of inputs, "
                          f"got {type(samples).__name__}",
                          hint="samples=[(A2, B2), (A3, B3)]")


def _new_tuner(kernel, inputs, t_start, *, budget, timeout, jobs, faults, samples=(),
               **settings) -> _Tuner:
    """The inputs as arrays, their sizes, the machine, and the defaults of ``timeout``
    and ``jobs``."""
    from ..runtime import args as A
    from ..machine import host

    program = kernel.program
    arrays = A.as_arrays(program, inputs)
    env = A.bind_sizes(program, arrays)
    more = []
    for k, sample in enumerate(samples):
        if not isinstance(sample, (tuple, list)):
            raise PolytcError(f"autotune: samples[{k}] is a {type(sample).__name__}, not "
                              "a tuple of inputs", hint="samples=[(A2, B2), (A3, B3)]")
        more.append(A.as_arrays(program, sample))
        A.bind_sizes(program, more[-1])  # (checked: consistent sizes)
    machine = host()
    tuner = _Tuner(kernel=kernel, program=program, arrays=arrays, env=env, machine=machine,
                   target=kernel.target, t_start=t_start, budget=budget,
                   timeout=float(timeout) if timeout else min(60.0, max(2.0, budget / 4)),
                   jobs=max(1, int(jobs) if jobs else min(2, machine.cores)),
                   faults=dict(faults or {}), **settings)
    tuner.symbolic = bridge.symbolic_sizes(kernel, env)
    tuner.samples = more
    tuner.initial = _starting_points(kernel, program, env, tuner.target, tuner.symbolic)
    return tuner


def _starting_points(kernel, program, env, target, symbolic=()) -> list:
    """The options stored by an earlier tuning of this problem (of its sizes' bucket for
    a kernel with symbolic sizes), and the kernel's own options when it has explicit
    ones."""
    from ..runtime import tuning

    initial = []
    previous = tuning.get(program, tuning.bucket(env, symbolic) if symbolic else env,
                          target=target)
    if previous is not None:
        initial.append(previous[0])
    explicit = bridge.explicit_options(kernel)
    if explicit is not None:
        initial.append(explicit)
    return initial


# --- the session ------------------------------------------------------------------------
def _tune(tuner: _Tuner) -> None:
    """The search in a session directory: the workers and the directory are gone
    afterwards, whatever happened; a replacement worker that does not start ends the
    search early, with the results so far."""
    session = tempfile.mkdtemp(prefix="polytc-tune-")
    pool = None
    try:
        pool = _start_workers(tuner, session)
        _prepare(tuner, pool, session)
        tuner.bar = _progress_display(tuner)
        try:
            _search(tuner, pool)
            _confirm(tuner, pool)
        except PolytcError as e:  # a replacement worker did not start: keep the results
            tuner.stopped = e.message
            if tuner.verbose:
                print(f"autotune {tuner.program.name}: stopped early: {e.message}",
                      file=sys.stderr)
        _resolve_reused_times(tuner.history)
    finally:
        if tuner.bar is not None:
            tuner.bar.close()
        if pool is not None:
            pool.close()
        shutil.rmtree(session, ignore_errors=True)


def _start_workers(tuner: _Tuner, session: str) -> Pool:
    samples = [tuner.arrays] + tuner.samples
    dump(os.path.join(session, INPUTS), (samples, [[offset(a) for a in s] for s in samples]))
    init = ("init", session, str(tuner.program), tuner.program.name, tuner.target)
    return Pool(session, init, tuner.jobs, start_timeout=max(60.0, tuner.timeout))


def _ask(pool: Pool, msg, timeout: float):
    """``(ok, payload)``: the reply of the first worker to one request (which always
    starts)."""
    out = None
    for _tag, ok, payload in pool.run([(None, msg, timeout)], lambda: True, use=[0]):
        out = (ok, payload)
    return out


def _prepare(tuner: _Tuner, pool: Pool, session: str) -> None:
    """The reference result (a worker's, else the numpy oracle's), the accelerator
    probe, and from them the search space and the search."""
    ok, payload = _ask(pool, ("reference",), tuner.timeout)
    contraction = payload["contraction"] if ok else None
    if tuner.target != "c":  # the device and the loops the mapping maps
        probed, probe = _ask(pool, ("probe",), tuner.timeout)
        if probed:
            tuner.probe = probe
    if not ok:  # the default options failed: the numpy oracle decides
        from ..lang.reference import run as oracle

        outs = []
        for arrays in [tuner.arrays] + tuner.samples:
            got = oracle(tuner.program, arrays)
            outs.append([got[t.name] for t in tuner.program.outputs])
        dump(os.path.join(session, REFERENCE), outs)
    probe = tuner.probe
    tuner.space = Space.for_problem(tuner.program, tuner.env, tuner.machine,
                                    contraction=contraction is not False,
                                    target=tuner.target, device=probe.get("device"),
                                    dims=probe.get("dims"), extents=probe.get("extents"),
                                    pinned_mapping=tuner.kernel.options.mapping)
    tuner.search = Search(tuner.space, seed=tuner.seed, population=tuner.population,
                          initial=tuner.initial)


def _progress_display(tuner: _Tuner):
    """The tqdm bar or live plot of ``progress`` (``None`` when not ``verbose``)."""
    if not tuner.verbose or tuner.progress is None:
        return None
    total = tuner.population * tuner.generations if tuner.generations else None
    desc = f"autotune {tuner.program.name}"
    if tuner.progress == "plot":
        from .plot import TunePlot

        return TunePlot(desc, total=total)
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="cand", leave=True, file=sys.stderr,
                dynamic_ncols=True)


# --- the generations ------------------------------------------------------------------------
def _search(tuner: _Tuner, pool: Pool) -> None:
    """Generations until ``generations``, the search's share of the budget, or the space
    runs out."""
    while (tuner.generations is None or tuner.gen < tuner.generations) and tuner.may_start():
        cands = tuner.search.ask()
        if not cands:
            break  # the space is exhausted
        recs = _new_records(tuner, cands)
        _compile(tuner, pool, recs)
        _time(tuner, pool, recs)
        tuner.gen += 1


def _new_records(tuner: _Tuner, cands) -> list:
    recs = []
    for o in cands:
        run = o.replace(symbolic=tuner.symbolic) if tuner.symbolic else o
        recs.append({"n": tuner.number, "generation": tuner.gen, "options": o,
                     "json": run.to_json(), "fault": tuner.faults.get(tuner.number)})
        tuner.number += 1
    return recs


def _compile(tuner: _Tuner, pool: Pool, recs) -> None:
    """Compile the candidates, in parallel; each record gets its ``code`` hash or an
    ``error`` (none: not started, out of budget)."""
    reqs = [(i, ("compile", r["json"], r["fault"]), tuner.timeout)
            for i, r in enumerate(recs)]
    for i, ok, payload in pool.run(reqs, tuner.may_start):
        recs[i].update(payload if ok else {"error": f"compile: {payload}"})


def _time(tuner: _Tuner, pool: Pool, recs) -> None:
    """Time the compiled candidates one at a time (a candidate with the code of an
    earlier one takes its time) while the budget lasts."""
    for r in recs:
        if "code" not in r and "error" not in r:
            continue  # not started: out of budget
        if "error" in r:
            r["time"] = math.inf
        elif r["code"] in tuner.codes and not r["fault"]:
            same = tuner.codes[r["code"]]
            r["time"], r["same_as"] = same["time"], same["n"]
            if "error" in same:
                r["error"] = f"same code as #{same['n']}: {same['error']}"
        elif not tuner.may_start():
            break
        else:
            _measure(tuner, pool, r)
            tuner.codes[r["code"]] = r
        _finished(tuner, r)


def _measure(tuner: _Tuner, pool: Pool, r: dict) -> None:
    best = tuner.best if math.isfinite(tuner.best) else None
    ok, payload = _ask(pool, ("time", r["json"], best, r["fault"]), tuner.timeout)
    if ok and "time" in payload:
        r.update(payload)
    else:
        r["error"] = payload.get("wrong") if ok else payload
        r["time"] = math.inf


def _finished(tuner: _Tuner, rec: dict) -> None:
    """A candidate is done: the search, the progress display and ``on_result`` hear."""
    tuner.history.append(rec)
    tuner.search.tell(rec["options"], rec["time"])
    if math.isfinite(rec["time"]) and rec["time"] < tuner.best:
        tuner.best = rec["time"]
    if tuner.progress == "plot" and tuner.bar is not None:
        tuner.bar(rec)  # a TunePlot
    elif tuner.bar is not None:
        failed = sum(1 for r in tuner.history if not math.isfinite(r["time"]))
        tuner.bar.set_postfix_str(f"best {fmt_seconds(tuner.best)}, "
                                  f"gen {rec['generation']}, failed {failed}", refresh=False)
        tuner.bar.update(1)
    if tuner.on_result is not None:
        tuner.on_result(dict(rec))


def _confirm(tuner: _Tuner, pool: Pool) -> None:
    """Time the best few and the default again (noise), while the budget lasts; each
    keeps its better time."""
    for r in to_confirm(tuner.history):
        if time.monotonic() >= tuner.end:
            break
        good, payload = _ask(pool, ("time", r["json"], None, None), tuner.timeout)
        if good and "time" in payload:
            r["first_time"] = r["time"]
            r["time"] = min(r["time"], payload["time"])


def _resolve_reused_times(history) -> None:
    """Candidates that reused another's time take its final (confirmed) time."""
    by_n = {r["n"]: r for r in history}
    for r in history:
        if "same_as" in r:
            r["time"] = by_n[r["same_as"]]["time"]
