"""Shared helpers for the benchmarks: interleaved timing, medians, tables, machine peak.

Timing model.  Every contender does one whole call (allocating its result, as a user's
call would).  It is either a callable with no arguments, timed in this process, or an
object with ``once()`` (seconds of one call) and ``sample(inner)`` (seconds per call over
``inner`` calls in a row) that may time the call elsewhere, e.g. in a worker process of
its own (``bench_cpu.py`` does that, so the thread pools of different libraries never
share a process).  ``time_interleaved`` warms each one up once, times one more call to
choose how many calls make a sample (a loop of several for sub-millisecond kernels, so
timer resolution and call jitter do not dominate) and how many samples to take (fewer
for slow contenders), then takes the samples round-robin: in each round every contender
runs once, in an order that rotates from round to round, so a noisy period of the
machine (other processes, frequency changes) hits all contenders alike rather than one
of them.  For callables timed in this process it first waits until the thread pools of
the previous contender have stopped spinning (``settle``): OpenBLAS and onnxruntime keep
a core busy for ~0.1 s after a call, which on a 2-core machine would slow down whichever
contender comes next.  The result per contender is the median sample.
"""
from __future__ import annotations

import math
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))


def median(xs):
    return statistics.median(xs) if xs else math.nan


@dataclass
class Timing:
    """Seconds per call: ``median`` over ``samples`` (each the mean of ``inner`` calls)."""
    samples: list = field(default_factory=list)
    inner: int = 1
    first: float = math.nan  # the warm-up call, seconds (includes any JIT compile)
    error: str | None = None  # why timing stopped (the contender raised)

    @property
    def median(self) -> float:
        return median(self.samples)


def calls_per_sample(one_call: float, min_sample: float, max_inner: int = 1000) -> int:
    """How many calls make a sample of at least ``min_sample`` seconds."""
    if not one_call > 0:
        return 1
    return max(1, min(max_inner, math.ceil(min_sample / one_call)))


def samples_for(one_call: float, repeats: int, slow: float = 1.0, slow_repeats: int = 3,
                budget: float | None = None) -> int:
    """Samples to take of a contender whose one call takes ``one_call`` seconds: all
    ``repeats`` normally; ``slow_repeats`` when a call exceeds ``slow`` seconds (naive
    code on big sizes); never more than fit in ``budget`` seconds (but at least one)."""
    n = repeats if one_call <= slow else min(repeats, slow_repeats)
    if budget is not None and one_call > 0:
        n = min(n, max(1, int(budget / one_call)))
    return max(1, n)


def cpu_seconds() -> float:
    """CPU time of this process, all threads."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def settle(max_wait: float = 0.3, window: float = 0.005, idle: float = 0.1) -> float:
    """Sleep until this process's other threads are quiet: thread pools keep spinning
    after a call (OpenBLAS ~0.15 s on one core, onnxruntime ~0.1 s, libgomp a few ms),
    and on a small machine a pool left spinning slows whichever contender runs next.
    Returns once a ``window`` passes with under ``idle`` cores busy, or after
    ``max_wait`` seconds; the seconds waited."""
    t_start = time.perf_counter()
    while True:
        c0, t0 = cpu_seconds(), time.perf_counter()
        time.sleep(window)
        t1 = time.perf_counter()
        if (cpu_seconds() - c0) / (t1 - t0) < idle or t1 - t_start >= max_wait:
            return t1 - t_start


def quiet_machine(max_wait: float = 0.5, checks: int = 5) -> float:
    """Sleep until no thread but the caller is running or waiting to run, ``checks``
    looks in a row 1 ms apart (``/proc/loadavg``'s runnable count, the caller's own
    included), or ``max_wait`` seconds: another worker's pool left spinning (onnxruntime's
    after its first run at a new batch) slowed the first run timed after it by 10 ms.
    The seconds waited (0 where the count cannot be read)."""
    t_start, calm = time.perf_counter(), 0
    while calm < checks and time.perf_counter() - t_start < max_wait:
        try:
            with open("/proc/loadavg", encoding="ascii") as f:
                running = int(f.read().split()[3].split("/")[0])
        except (OSError, ValueError, IndexError):
            return 0.0
        calm = calm + 1 if running <= 1 else 0
        time.sleep(0.001)
    return time.perf_counter() - t_start


def time_once(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def time_sample(fn, inner: int) -> float:
    """Seconds per call of ``inner`` calls of ``fn`` in a row."""
    t0 = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - t0) / inner


class Local:
    """A callable timed in this process; ``quiet``: ``settle`` before each timing."""

    def __init__(self, fn, quiet: bool = True):
        self.fn, self.quiet = fn, quiet

    def once(self) -> float:
        if self.quiet:
            settle()
        return time_once(self.fn)

    def sample(self, inner: int) -> float:
        if self.quiet:
            settle()
        return time_sample(self.fn, inner)


def short(e: BaseException) -> str:
    """The first line of an exception's message, with its type."""
    s = f"{type(e).__name__}: {e}".strip().splitlines()
    return s[0][:160] if s else type(e).__name__


def time_interleaved(contenders: dict, repeats: int, *, min_sample: float = 0.01,
                     slow: float = 1.0, slow_repeats: int = 3,
                     budget: float | None = None, warm: bool = False,
                     quiet: bool = True) -> dict:
    """Time each ``name -> contender`` round-robin; returns name -> Timing.

    A contender is a callable (timed here, see ``Local``) or an object with ``once()``
    and ``sample(inner)`` (see the module's doc).  ``warm=True`` says every contender has
    already run once (skips the warm-up call).  One more call per contender calibrates:
    it sets the calls per sample (``calls_per_sample``) and the sample count
    (``samples_for``); when that call took over ``slow`` seconds it is kept as the first
    sample.  Rounds run until every contender has its count; a contender that has its
    count sits the later rounds out.  ``quiet``: before each timing of a callable wait
    for the previous contender's threads to stop spinning (``settle``).  A contender that
    raises is dropped from the later rounds, with the message in its Timing's ``error``.
    """
    objs = {name: c if hasattr(c, "sample") else Local(c, quiet)
            for name, c in contenders.items()}
    timings = {name: Timing() for name in contenders}
    plan = {}
    for name, c in objs.items():
        try:
            if not warm:
                timings[name].first = c.once()
            one = c.once()
        except Exception as e:  # noqa: BLE001 -- reported in the Timing
            timings[name].error = short(e)
            plan[name] = 0
            continue
        timings[name].inner = calls_per_sample(one, min_sample)
        plan[name] = samples_for(one, repeats, slow, slow_repeats, budget)
        if one > slow:  # a slow call is a sample in itself: do not spend it on calibrating
            timings[name].samples.append(one)
    names = list(contenders)
    rounds = max(plan.values(), default=0)
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            t = timings[name]
            if t.error is not None or len(t.samples) >= plan[name]:
                continue
            try:
                t.samples.append(objs[name].sample(t.inner))
            except Exception as e:  # noqa: BLE001 -- reported in the Timing
                t.error = short(e)
    return timings


# --- formatting ---------------------------------------------------------------------------

def fmt_ms(seconds) -> str:
    """Milliseconds with 3 significant digits (or a marker string passed through)."""
    if isinstance(seconds, str):
        return seconds
    if seconds is None or not math.isfinite(seconds):
        return "-"
    ms = seconds * 1e3
    if ms >= 100:
        return f"{ms:.0f}"
    if ms >= 10:
        return f"{ms:.1f}"
    if ms >= 1:
        return f"{ms:.2f}"
    return f"{ms:.3f}"


def fmt_num(x, digits: int = 1) -> str:
    if x is None or isinstance(x, str) or not math.isfinite(x):
        return "-" if not isinstance(x, str) else x
    return f"{x:.{digits}f}"


def fmt_ratio(x) -> str:
    if x is None or isinstance(x, str) or not math.isfinite(x):
        return "-"
    return f"{x:.2f}x" if x < 100 else f"{x:.0f}x"


def table(headers, rows, left: int = 1) -> str:
    """A plain-text table: the first ``left`` columns left-aligned, the rest right."""
    cols = list(zip(*([headers] + [[str(c) for c in r] for r in rows])))
    widths = [max(len(c) for c in col) for col in cols]

    def line(cells):
        return " | ".join(c.ljust(w) if i < left else c.rjust(w)
                          for i, (c, w) in enumerate(zip(cells, widths)))

    out = [line(headers), "-+-".join("-" * w for w in widths)]
    out += [line([str(c) for c in r]) for r in rows]
    return "\n".join(out)


# --- the machine --------------------------------------------------------------------------

def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for ln in f:
                if ln.startswith("model name"):
                    return ln.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def default_threads() -> int:
    """The thread count polytc's kernels use: POLYTC_NUM_THREADS / OMP_NUM_THREADS, else
    every core this process may run on (what OpenMP takes by default)."""
    for var in ("POLYTC_NUM_THREADS", "OMP_NUM_THREADS"):
        v = os.environ.get(var)
        if v and v.isdigit() and int(v) > 0:
            return int(v)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def measure_peak(threads: int | None = None, cc: str | None = None,
                 narrow: list | None = None) -> dict | None:
    """The fp32 FMA peak from ``peak.c`` (compiled in a temporary directory and run on
    ``threads`` OpenMP threads; ``narrow``: gcc flags that leave wider vectors out): a
    dict with ``gflops``, ``threads``, ``vector_bits``, ``chains``; None (with the
    reason in ``error``) when it cannot be built or run."""
    cc = cc or os.environ.get("POLYTC_CC", "gcc")
    if shutil.which(cc) is None:
        return {"error": f"no C compiler {cc!r}"}
    tmp = tempfile.mkdtemp(prefix="polytc-peak-")
    try:
        exe = os.path.join(tmp, "peak")
        flags = ["-O3", "-march=native", "-fopenmp"] + \
            (list(narrow) if narrow else ["-mprefer-vector-width=512"])
        r = subprocess.run([cc, *flags, os.path.join(HERE, "peak.c"), "-o", exe],
                           capture_output=True, text=True)
        if r.returncode:
            return {"error": f"{cc} failed: {r.stderr.strip()[:200]}"}
        env = dict(os.environ)
        if threads:
            env["OMP_NUM_THREADS"] = str(threads)
        r = subprocess.run([exe], capture_output=True, text=True, env=env, timeout=120)
        m = re.search(r"fp32_peak_gflops=([\d.]+) threads=(\d+) vector_bits=(\d+) "
                      r"chains=(\d+)", r.stdout)
        if r.returncode or not m:
            return {"error": f"peak failed: {(r.stdout + r.stderr).strip()[:200]}"}
        return {"gflops": float(m.group(1)), "threads": int(m.group(2)),
                "vector_bits": int(m.group(3)), "chains": int(m.group(4))}
    except (OSError, subprocess.SubprocessError) as e:
        return {"error": str(e)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def worker_channel():
    """A benchmark worker's protocol: pickled messages on its stdin and stdout, while what
    the libraries print goes to stderr.  Returns ``(send, receive)``; ``receive()``
    yields the parent's messages until ``quit`` or the end of the pipe."""
    import pickle
    import sys

    proto_in = os.fdopen(os.dup(0), "rb")
    proto_out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)  # what the libraries print goes to stderr, not into the answers
    sys.stdout = sys.stderr

    def send(msg):
        pickle.dump(msg, proto_out, protocol=pickle.HIGHEST_PROTOCOL)
        proto_out.flush()

    def receive():
        while True:
            try:
                msg = pickle.load(proto_in)
            except EOFError:
                return
            if msg[0] == "quit":
                return
            yield msg

    return send, receive


def child_command(here: str, code: str) -> list:
    """``python -c code`` for a helper process that imports what this process imports:
    ``-c`` would put the current directory first on ``sys.path`` (a checkout run from
    would shadow the polytc chosen by ``PYTHONPATH`` or the venv); the child's first
    entry is the benchmarks directory instead, as the parent's is."""
    return [sys.executable, "-c", f"import sys; sys.path[0] = {here!r}; {code}"]


class BusyNeighbour:
    """A process that spins on one core for as long as the ``with`` block lasts: the
    shared machine of ``--load`` (a model served beside other work).  Pinned to the
    last core this process may run on, at the normal priority."""

    CODE = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True:\n    pass\n"

    def __enter__(self):
        cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
        self.core = cores[-1]
        self.proc = subprocess.Popen([sys.executable, "-c", self.CODE, str(self.core)])
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()
        return False


def load_average() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0


def print_footer(notes, load0: float, t_start: float) -> None:
    """The notes, a warning when the machine was busy, and the total time."""
    for n in notes:
        print("note: " + n)
    load1 = load_average()
    if max(load0, load1) > 0.5:
        print(f"warning: load average {load0:.1f} before, {load1:.1f} after (this run's own "
              f"load included) on {os.cpu_count()} CPUs: if other processes were running, "
              f"the times are noisy")
    print(f"total {time.perf_counter() - t_start:.0f}s")
