"""The C compiler driver: generated C source in, a loadable shared object out.

Builds go through the on-disk :class:`~polytc.cache.DiskCache`; the key covers
the source, the flags, the compiler's identity and (with ``-march=native``) the host's
target features, so a cache shared between machines never serves a foreign binary.
The compiler is ``POLYTC_CC`` (default ``gcc``), extra flags come from ``POLYTC_CFLAGS``.
Flags keep IEEE semantics: no ``-ffast-math``.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor


from .. import config
from ..diagnostics import CompilationError, InternalError
from ..cache import DiskCache, cache_key
from ..machine import cpu_description, host, isa_cflags
from .cexpr import PRELUDE

__all__ = ["compiler_identity", "default_flags", "build_shared_object", "FAST_LINK"]

BUILD_TIMEOUT_S = 120
PROBE_TIMEOUT_S = 60
MAX_DIAGNOSTIC_LINES = 40

_BASE_FLAGS = ["-O2", "-march=native", "-fPIC", "-shared", "-fopenmp", "-fwrapv",
               "-fno-math-errno", "-std=gnu11"]
# -O3's loop passes that the generated code needs, without -O3's cost: gcc took 0.5-0.8 s
# per convolution group at -O3 and half that with these (ResNet-18's 22 builds: 7.6 ->
# 5.0 s of CPU), the models and kernels as fast (the micro-kernels are explicit vector
# code; the rest is `omp simd` loops and small constant loops, peeled whole).  Dropped
# when the compiler does not take them.
_LOOP_FLAGS = ["-fvect-cost-model=dynamic", "-fpeel-loops", "-funswitch-loops",
               "-fsplit-loops", "-fpredictive-commoning"]
# on x86-64, whose cores run out of order, no second instruction scheduling (after
# register allocation): gcc's CPU for ResNet-18's 24 builds -7%, its cold compile 3.02 ->
# 2.92 s (A/B in fresh processes); the ten bench models 0.97-1.00x the run time, sgemm
# 1.00x (Zen 4).  Dropped with the loop flags.
if platform.machine().lower() in ("x86_64", "amd64"):
    _LOOP_FLAGS.append("-fno-schedule-insns2")
_LIBS = ["-lm"]
# the link without the C library's linker script (libc.so: libc.so.6, libc_nonshared.a
# and the loader, read at every link): a kernel is loaded into a process that has libc,
# whose symbols its calls bind to then; libgcc for the helpers gcc calls.  12-15 ms less
# per build (22 -> 9 ms a link; cold compiles, A/B: BERT-2L 1.15 -> 1.09 s, ResNet-18
# 3.16 -> 3.04 s).  Dropped where a test build so linked does not load.
FAST_LINK = ["-nodefaultlibs", "-lgcc"]

_BUG_HINT = ("this is a polytc bug: generated C did not compile; "
             "report it with POLYTC_DEBUG=2 output")


_memo: dict = {}
_memo_lock = threading.RLock()

_OPENMP_PROBE = """\
#include <omp.h>
int polytc_probe(int n) {
    int s = 0;
    #pragma omp parallel for reduction(+:s)
    for (int i = 0; i < n; ++i) s += i;
    return s + omp_get_max_threads();
}
"""
_PLAIN_PROBE = "int polytc_probe(int n) { return n + 1; }\n"


def _cc() -> list[str]:
    cc = shlex.split(config.c_compiler())
    if not cc:
        raise CompilationError("POLYTC_CC is set but empty",
                               hint="install gcc or set POLYTC_CC to a C compiler")
    return cc


def _run_quiet(cmd: list[str], cwd: str | None = None,
               timeout: float = PROBE_TIMEOUT_S) -> subprocess.CompletedProcess:
    """Run a compiler query (not a build); a missing compiler is a clear error."""
    try:
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True,
                              errors="replace", timeout=timeout)
    except FileNotFoundError:
        raise CompilationError(
            f"C compiler {cmd[0]!r} not found",
            hint="install gcc or set POLYTC_CC to a C compiler") from None
    except PermissionError:
        raise CompilationError(
            f"C compiler {cmd[0]!r} cannot be executed",
            hint="install gcc or set POLYTC_CC to a C compiler") from None
    except subprocess.TimeoutExpired:
        raise CompilationError(
            f"C compiler query {' '.join(cmd)!r} timed out after {timeout:.0f} s",
            hint="check that POLYTC_CC names a working C compiler") from None


def _run_compiler(cmd: list[str], cwd: str,
                  timeout: float = BUILD_TIMEOUT_S) -> subprocess.CompletedProcess:
    """Run one build.  Tests patch this to count builds."""
    try:
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True,
                              errors="replace", timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CompilationError(
            f"C compiler timed out after {timeout:.0f} s on generated code",
            hint=_BUG_HINT) from None
    except (FileNotFoundError, PermissionError):
        raise CompilationError(
            f"C compiler {cmd[0]!r} not found or not executable",
            hint="install gcc or set POLYTC_CC to a C compiler") from None


def _remembered(memo_key: tuple, compute):
    """A probe of the compiler (its identity, the flags it takes, what ``-march=native``
    means): from this process's memo, else from the disk cache, else ``compute()``,
    which runs the compiler (five runs, 70 ms, in every fresh process that loads even a
    cached kernel).  The disk entry is keyed by the compiler's path, size and mtime and
    the CPU's description, so a new compiler or another machine probes again."""
    with _memo_lock:
        if memo_key in _memo:
            return _memo[memo_key]
        if not config.disk_cache_enabled():
            value = compute()
        else:
            key = cache_key(kind="cc-probe", probe=list(memo_key), host=_host_stamp())

            def build():
                return {"value.json": json.dumps(compute()).encode()}, {"kind": "cc-probe"}

            entry, _ = DiskCache().get_or_build(key, build)
            with open(os.path.join(entry["dir"], "value.json"), encoding="utf-8") as f:
                value = json.load(f)
        value = tuple(value) if isinstance(value, list) else value
        _memo[memo_key] = value
        return value


def _host_stamp() -> list:
    """The compiler binary (resolved path, size, mtime) and a digest of the CPU."""
    cc = _cc()
    exe = shutil.which(cc[0]) or cc[0]
    try:
        st = os.stat(exe)
        stamp: list = [os.path.realpath(exe), st.st_size, st.st_mtime_ns]
    except OSError:
        stamp = [exe]
    return stamp + [hashlib.sha256(cpu_description().encode()).hexdigest()]


def build_facts() -> dict:
    """What a kernel's binary depends on besides its source, without running the
    compiler: the compiler binary and the CPU (``_host_stamp``), the machine the tiles
    were sized for, and the flags ``POLYTC_ISA`` and ``POLYTC_CFLAGS`` add (a kernel
    cached on another CPU, or for another ISA, is built again, not served)."""
    return _facts(tuple(_cc()), tuple(isa_cflags() + config.extra_cflags()))


@functools.lru_cache(maxsize=16)
def _facts(cc: tuple, extra: tuple) -> dict:
    return {"host": _host_stamp(), "machine": host().key(), "cflags": list(extra)}


def compiler_identity() -> str:
    """First line of ``<cc> --version`` and ``<cc> -dumpmachine``; remembered per
    compiler (``_remembered``)."""
    cc = _cc()

    def probe():
        version = _run_quiet(cc + ["--version"])
        if version.returncode != 0:
            raise CompilationError(
                f"C compiler {' '.join(cc)!r} failed on --version: "
                f"{(version.stderr or version.stdout).strip()[:500]}",
                hint="install gcc or set POLYTC_CC to a C compiler")
        lines = (version.stdout or version.stderr).strip().splitlines()
        first = lines[0].strip() if lines else "unknown"
        machine = _run_quiet(cc + ["-dumpmachine"])
        target = machine.stdout.strip() if machine.returncode == 0 else "unknown"
        ident = f"{first} [{target}]"
        config.log(1, f"C compiler: {' '.join(cc)}: {ident}")
        return ident

    return _remembered(("identity", tuple(cc)), probe)


def _probe_compiles(cc: list[str], flags: list[str], source: str,
                    run: bool = False) -> tuple[bool, str]:
    """Whether ``source`` builds with ``flags`` (and, ``run``, loads into this process,
    every symbol bound at once: a link that left one unresolved fails here, not in a
    kernel)."""
    with tempfile.TemporaryDirectory(prefix="polytc-probe-") as d:
        with open(os.path.join(d, "probe.c"), "w") as f:
            f.write(source)
        r = _run_quiet(cc + ["probe.c", "-o", "probe.so"] + flags, cwd=d)
        if r.returncode != 0 or not run:
            return r.returncode == 0, (r.stderr or r.stdout).strip()
        config.openmp_environment()  # (before libgomp, which the probe may load, reads it)
        try:
            ctypes.CDLL(os.path.join(d, "probe.so"), mode=os.RTLD_NOW).polytc_probe  # noqa: B018
        except (OSError, AttributeError) as e:
            return False, str(e)
        return True, ""


def default_flags() -> list[str]:
    """The build flags: ``-O2`` with ``_LOOP_FLAGS``, ``-march=native -fPIC -shared
    -fopenmp -fwrapv -std=gnu11``, then ``POLYTC_CFLAGS``, then ``-lm``.  The loop flags,
    ``-fopenmp`` (and ``-march=native``) are dropped, with a log line, if a test compile
    shows the compiler does not support them."""
    cc = _cc()
    extra = isa_cflags() + config.extra_cflags()

    def probe():
        compiler_identity()  # a missing compiler is reported as such
        base = _BASE_FLAGS[:1] + _LOOP_FLAGS + _BASE_FLAGS[1:]
        # the usual case, in one test build (each ~30-50 ms of a cold start, before the
        # first kernel's gcc); ``-pipe``: the assembly goes to the assembler through a
        # pipe, not a file (BERT-2L's 11 builds: 3% less time)
        every = _widened(base) + ["-pipe"] + extra + ["-lmvec"] + _LIBS
        for flags in (every + FAST_LINK, every):
            if _probe_compiles(cc, flags, _OPENMP_PROBE, run=flags is not every)[0]:
                config.log(1, f"C flags: {' '.join(flags)}")
                return flags
        ok, err = _probe_compiles(cc, base + extra + _LIBS, _OPENMP_PROBE)
        if not ok:
            config.log(1, f"test compile failed, building without {_LOOP_FLAGS}: {err}")
            base = list(_BASE_FLAGS)
            ok, err = _probe_compiles(cc, base + extra + _LIBS, _OPENMP_PROBE)
        if not ok:
            config.log(1, f"OpenMP test compile failed, building without -fopenmp: {err}")
            base.remove("-fopenmp")
            ok, err = _probe_compiles(cc, base + extra + _LIBS, _PLAIN_PROBE)
            if not ok:
                config.log(1, f"test compile failed, building without -march=native: {err}")
                base.remove("-march=native")
        base = _widened(base)
        libs = list(_LIBS)
        ok, _ = _probe_compiles(cc, base + extra + ["-lmvec"] + libs, _PLAIN_PROBE)
        if ok:  # glibc's vector math: expf, logf, tanhf, ... on whole vectors
            libs.insert(0, "-lmvec")
        flags = base + extra + libs
        config.log(1, f"C flags: {' '.join(flags)}")
        return flags

    return list(_remembered(("flags", tuple(cc), tuple(extra)), probe))


def _widened(flags: list[str]) -> list[str]:
    """``flags`` asking for 512-bit vectors after ``-march=native`` where the CPU has
    them (``_wide_vectors``)."""
    if "-march=native" not in flags or not _wide_vectors():
        return list(flags)
    at = flags.index("-march=native") + 1
    return flags[:at] + ["-mprefer-vector-width=512"] + flags[at:]


_warming: list = []  # the thread of ``warm_probes``, once started


def warm_probes(then=None) -> None:
    """Run the compiler probes (``default_flags``, ``_native_target``), build the
    precompiled prelude, then call ``then()``, in a background thread, once per process:
    with an empty cache they take ~130 ms of gcc runs, which the first build would
    otherwise wait for after the isl work; started before it, they overlap it (a build
    that needs them sooner waits on ``_memo_lock``).  A failing probe is reported by the
    build that runs it again."""
    with _memo_lock:
        if _warming:
            return

        def probe():
            try:
                flags = default_flags()
                _native_target(flags)
                precompiled_prelude(_cc(), flags)
                if then is not None:
                    then()
            except Exception:  # noqa: BLE001 - a build that needs them runs them again
                pass  # and reports what fails (a script that ends meanwhile: its modules
                # torn down under this daemon thread printed a traceback at exit)

        _warming.append(threading.Thread(target=probe, name="polytc-cc-probes", daemon=True))
    _warming[0].start()


def _native_target(flags: list[str]) -> str:
    """What ``-march=native`` means on this host (a digest of the enabled target options),
    so binaries built for one CPU are not served to another from a shared cache."""
    if not any(f.startswith("-march=native") or f.startswith("-mcpu=native")
               or f.startswith("-mtune=native") for f in flags):
        return ""
    cc = _cc()

    def probe():
        r = _run_quiet(cc + ["-march=native", "-Q", "--help=target"])
        text = r.stdout if r.returncode == 0 and r.stdout.strip() else ""
        if not text:  # e.g. clang: fall back to the CPU description
            text = cpu_description()
        return hashlib.sha256(text.encode()).hexdigest()

    return _remembered(("native", tuple(cc)), probe)


def _diagnostics(r: subprocess.CompletedProcess) -> str:
    text = "\n".join(s for s in (r.stderr.strip(), r.stdout.strip()) if s)
    lines = text.splitlines()
    head = "\n".join(lines[:MAX_DIAGNOSTIC_LINES])
    if len(lines) > MAX_DIAGNOSTIC_LINES:
        head += f"\n... ({len(lines) - MAX_DIAGNOSTIC_LINES} more lines)"
    return head or "(no diagnostics)"


def precompiled_prelude(cc: list[str], flags: list[str], wait: bool = True) -> str | None:
    """A directory holding ``pt_prelude.h``, the kernels' ``PRELUDE`` (their includes,
    macros and helpers), and its precompiled form (``.gch``) for these flags, made once
    per machine and compiler (in the disk cache); None when the compiler makes none.
    Parsing ``math.h`` and its vector-math declarations anew took 13-15 ms of each
    kernel's gcc run (BERT-2L: 12 runs).  gcc reads the text instead when the
    precompiled form does not fit, so the kernel is the same either way.  While another
    thread makes it (``warm_probes``), ``wait=False`` returns None at once: a build does
    not wait ~80 ms for a header whose absence costs it 15 ms.  It is made outside
    ``_memo_lock``, so that the other probes' values stay readable meanwhile."""
    def probe():
        cflags = [f for f in flags if f != "-shared" and not f.startswith("-l")]
        key = cache_key(kind="c-pch", header=PRELUDE, flags=cflags, cc=compiler_identity(),
                        target=_native_target(flags))

        def build():
            with tempfile.TemporaryDirectory(prefix="polytc-pch-") as d:
                with open(os.path.join(d, PCH_HEADER), "w", encoding="utf-8") as f:
                    f.write(PRELUDE)
                r = _run_compiler(cc + ["-x", "c-header", PCH_HEADER, "-o",
                                        PCH_HEADER + ".gch"] + cflags, cwd=d)
                if r.returncode != 0:
                    raise CompilationError(f"no precompiled header: {_diagnostics(r)}")
                with open(os.path.join(d, PCH_HEADER + ".gch"), "rb") as f:
                    return ({PCH_HEADER: PRELUDE.encode(), PCH_HEADER + ".gch": f.read()},
                            {"kind": "c-pch"})

        try:
            return DiskCache().get_or_build(key, build)[0]["dir"]
        except CompilationError as e:
            config.log(1, f"building without a precompiled prelude: {e.message}")
            return None

    memo = ("pch", tuple(cc), tuple(flags))
    with _memo_lock:
        if memo in _memo:
            return _memo[memo]
        making = _making.get(memo)
        if making is None:
            making = _making[memo] = threading.Event()
            mine = True
        else:
            mine = False
    if not mine:
        if wait:
            making.wait()
        return _memo.get(memo)
    value = None
    try:
        value = probe()
    finally:
        with _memo_lock:
            _memo[memo] = value
            del _making[memo]
        making.set()
    return value


_making: dict = {}  # precompiled preludes being made: memo key -> set once made


PCH_HEADER = "pt_prelude.h"


def _build(c_source: str, cc: list[str], flags: list[str]) -> tuple[bytes, dict]:
    config.log(2, "C source:\n" + c_source)
    pch = precompiled_prelude(cc, flags, wait=False) if c_source.startswith(PRELUDE) \
        else None
    include = ["-I", pch] if pch else []
    parts = _parts(c_source, min(4, host().cores))
    with tempfile.TemporaryDirectory(prefix="polytc-build-") as d:
        names = ["kernel.c"] if parts is None else [f"kernel{k}.c" for k in range(len(parts))]
        for name, text in zip(names, [t for t, _ in parts] if parts else [c_source]):
            with open(os.path.join(d, name), "w", encoding="utf-8") as f:
                if pch is None:
                    f.write(text)
                else:  # the prelude precompiled; the kernel's lines keep their numbers
                    f.write(f'#include "{PCH_HEADER}"\n#line {PRELUDE.count(chr(10)) + 1}\n'
                            + text[len(PRELUDE):])
        t0 = time.perf_counter()
        if parts is None:
            stages = [[cc + ["kernel.c", "-o", "kernel.so"] + flags + include]]
        else:  # each part an object, each on a core of its own, then one link (each part
            # defines the head's hidden vector math functions alike, ``vmath.py``: the
            # linker keeps one of each)
            compile_flags = [f for f in flags if f != "-shared" and not f.startswith("-l")]
            stages = [[cc + ["-c", n, "-o", n[:-2] + ".o"] + compile_flags + more + include
                       for n, (_, more) in zip(names, parts)],
                      [cc + [n[:-2] + ".o" for n in names] + ["-o", "kernel.so"] + flags +
                       ["-Wl,--allow-multiple-definition"]]]
        failed = None
        for stage in stages:
            with ThreadPoolExecutor(max_workers=len(stage)) as pool:
                runs = list(pool.map(lambda cmd: (cmd, _run_compiler(cmd, cwd=d)), stage))
            failed = next(((cmd, r) for cmd, r in runs if r.returncode != 0), None)
            if failed:
                break
        seconds = time.perf_counter() - t0
        if failed:
            cmd, r = failed
            raise CompilationError(
                f"C compiler failed on generated code (exit {r.returncode}; "
                f"command: {' '.join(cmd)}):\n{_diagnostics(r)}",
                hint=_BUG_HINT)
        try:
            with open(os.path.join(d, "kernel.so"), "rb") as f:
                so = f.read()
        except OSError as e:
            raise CompilationError(f"C compiler produced no kernel.so ({e})",
                                   hint=_BUG_HINT) from None
        config.log(1, f"compiled C kernel in {seconds:.2f} s" +
                   (f" ({len(parts)} parts)" if parts else ""))
        return so, {"command": stages[-1][-1], "build_seconds": round(seconds, 3)}


#: a kernel's C this long compiles in parts, linked into one shared object: its parallel
#: regions' functions (``pt_bodyN``) shared out between as many parts as cores, and the
#: kernel's driver in a part of its own (an LSTM of 32 unrolled steps, 65 regions in 435
#: KB: gcc 2.5 s as one part, 1.3 s of it the driver's 65 regions of 74 arguments each)
SPLIT_BYTES = 120_000
_BODY = re.compile(r"^static __attribute__\(\(noinline\)\) void pt_body\d+(?:_\d+)*\(", re.M)
_ROOT = re.compile(r"void pt_body(\d+)[\d_]*\(")
#: a region of the driver that only calls its function
_DISPATCH = re.compile(r"#pragma omp parallel for[^\n]*\n\s*for \([^\n]*\)\n\s*\{\n"
                       r"\s*pt_body\d+\([^;]*\);\n\s*\}")


def _parts(source: str, n: int) -> list | None:
    """``source`` as translation units ``[(text, flags to add)]``, or None when it is not
    worth splitting: each has the source's head (prelude, types, buffers) and the region
    functions are shared out by size between ``n`` of them (made visible to the library,
    hidden outside it), the first with the prepacking functions too; the last has the
    entry points after the functions' prototypes.  A driver that does nothing but call
    its regions compiles at ``-O0`` (0.2 s where ``-O2`` took 1.3: its outlined regions
    load their arguments at each call of a function that runs for microseconds)."""
    starts = [m.start() for m in _BODY.finditer(source)]
    tail = source.find("\nint polytc_kernel(")
    if n < 1 or len(source) < SPLIT_BYTES or not starts or tail < starts[-1]:
        return None
    head = source[:starts[0]]
    bodies = [source[a:b].replace("static __attribute__((noinline))",
                                  '__attribute__((noinline, visibility("hidden")))', 1)
              for a, b in zip(starts, starts[1:] + [tail + 1])]
    # a region and the pieces that ``split.cut`` made of it (``pt_body3_0``, ... before
    # ``pt_body3``) in one unit where the head has thread-local buffers, which they
    # share (``static __thread``: each unit has a copy of its own); else each on its
    # own (an LSTM whose 32 steps run in one region, 33 pieces: gcc 2.1 s in one unit)
    shared = "static __thread" in head
    groups: list = []
    for b in bodies:
        root = _ROOT.search(b).group(1 if shared else 0)
        if groups and groups[-1][0] == root:
            groups[-1][1].append(b)
        else:
            groups.append((root, [b]))
    if len(groups) < n:
        return None
    share = sum(map(len, bodies)) / n
    texts, size = [head], 0
    for _, group in groups:
        if size >= share * len(texts) and len(texts) < n:
            texts.append(head)
        texts[-1] += "".join(group)
        size += sum(map(len, group))
    driver = source[tail + 1:]
    pack = driver.find("\nvoid polytc_prepack")
    if pack >= 0:  # (run once per weight, from the plan: optimised like the regions)
        texts[0] += driver[pack + 1:]
        driver = driver[:pack + 1]
    protos = "".join(b[:b.index("\n{")] + ";\n" for b in bodies)
    calls_only = not re.search(r"\b(for|while|do)\b", _DISPATCH.sub("", driver))
    return [(t, []) for t in texts] + [(head + protos + driver, ["-O0"] if calls_only else [])]


def build_shared_object(c_source: str, key_parts: dict | None = None) -> str:
    """Path of a loadable ``.so`` compiled from ``c_source``, from the cache if possible.

    ``key_parts`` are extra JSON values that distinguish the artifact (e.g. the kernel's
    entry-point name); concurrent processes building the same key build it once."""
    key_parts = dict(key_parts or {})
    reserved = {"kind", "source", "flags", "cc", "target"} & key_parts.keys()
    if reserved:
        raise InternalError(f"key_parts may not use reserved names {sorted(reserved)}",
                            hint="this is a polytc bug")
    cc = _cc()
    flags = default_flags()
    ident = compiler_identity()
    key = cache_key(kind="c-so", source=c_source, flags=flags, cc=ident,
                    target=_native_target(flags), **key_parts)
    def build():
        so, info = _build(c_source, cc, flags)
        return ({"kernel.c": c_source.encode("utf-8"), "kernel.so": so},
                {"kind": "c-so", "flags": flags, "cc": ident, **info})

    entry, built = DiskCache().get_or_build(key, build)
    if not built:
        config.log(1, f"C kernel {key[:16]} found in cache")
    return os.path.join(entry["dir"], "kernel.so")


def _wide_vectors() -> bool:
    """gcc defaults to 256-bit vectors even with AVX-512; polytc's register tiles are
    sized for 512 bits (twice the FMA throughput: 124 vs 62 GFLOP/s per core measured
    on a 6x64 sgemm micro-kernel)."""
    return host().vector_bytes >= 64


def vectorizer_report(c_source: str) -> list:
    """``(line, message)`` for every loop the C compiler vectorised in ``c_source``, from
    gcc's ``-fopt-info-vec-optimized`` (an empty list for compilers without it)."""
    import re

    flags = [f for f in default_flags() if f not in ("-shared", "-lm")] + \
        ["-c", "-fopt-info-vec-optimized"]
    with tempfile.TemporaryDirectory(prefix="polytc-vec-") as d:
        with open(os.path.join(d, "kernel.c"), "w", encoding="utf-8") as f:
            f.write(c_source)
        r = _run_compiler(_cc() + ["kernel.c", "-o", "kernel.o"] + flags, cwd=d)
    out = []
    for line in (r.stdout + r.stderr).splitlines():
        m = re.match(r"kernel\.c:(\d+):\d+: optimized: (.*)", line)
        if m and (int(m.group(1)), m.group(2)) not in out:
            out.append((int(m.group(1)), m.group(2)))
    return out
