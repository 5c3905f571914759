"""What the cost models know about the CPU: cache sizes, vector width, registers (read from
sysfs and /proc/cpuinfo once; the base layer, so front-ends, the tiler and the code
generators all ask the same machine)."""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Machine:
    l1: int  # bytes, data cache per core
    l2: int
    l3: int
    vector_bytes: int  # widest SIMD register (64 with AVX-512)
    vector_registers: int
    cores: int
    #: an int8 dot-product instruction at the vector width (AVX512-VNNI, AVX-VNNI):
    #: quantised products then run as ``dot4`` (``graph/quantised.py``)
    int8_dot: bool = False

    def lanes(self, itemsize: int) -> int:
        return max(1, self.vector_bytes // itemsize)

    def key(self) -> dict:
        return dict(self.__dict__)


def _sysfs_cache(level: int, kind=("Data", "Unified")) -> int | None:
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for d in sorted(os.listdir(base)):
            path = os.path.join(base, d)
            with open(os.path.join(path, "level")) as f:
                if int(f.read()) != level:
                    continue
            with open(os.path.join(path, "type")) as f:
                if f.read().strip() not in kind:
                    continue
            with open(os.path.join(path, "size")) as f:
                s = f.read().strip()
            mult = {"K": 1024, "M": 1 << 20, "G": 1 << 30}.get(s[-1], 1)
            return int(s.rstrip("KMG")) * mult
    except (OSError, ValueError):
        return None
    return None


@functools.lru_cache(maxsize=None)
def cpu_description() -> str:
    """The CPU's model and feature lines of ``/proc/cpuinfo``, each once (the machine's
    name where there is none): what identifies the host's instruction set."""
    try:
        with open("/proc/cpuinfo", "rb") as f:
            text = f.read().decode(errors="replace")
    except OSError:
        return os.uname().machine
    return "\n".join(dict.fromkeys(
        line for line in text.splitlines()
        if line.startswith(("model name", "flags", "Features", "CPU part",
                            "CPU implementer"))))


def _cpu_flags() -> set:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


#: the vector ISAs ``POLYTC_ISA`` narrows the host to: the CPU flags each leaves out (by
#: prefix) and the C compiler's flags that leave them out of ``-march=native``
NARROWER = {"avx512": ((), ()), "avx2": (("avx512",), ("-mno-avx512f",)),
            "sse": (("avx", "fma"), ("-mno-avx",))}


def _narrowed(flags: set) -> set:
    """The CPU's ``flags`` less those ``POLYTC_ISA`` leaves out."""
    from . import config
    from .diagnostics import UnsupportedError

    isa = config.isa()
    if not isa:
        return flags
    if isa not in NARROWER:
        raise UnsupportedError(f"POLYTC_ISA={isa!r} is no vector ISA polytc builds for",
                               hint=f"one of native, {', '.join(NARROWER)}")
    if isa == "avx512" and "avx512f" not in flags and flags:
        raise UnsupportedError("POLYTC_ISA=avx512: this CPU has no AVX-512",
                               hint="unset POLYTC_ISA, or name a narrower one")
    return {f for f in flags if not f.startswith(NARROWER[isa][0])}


def isa_cflags() -> list:
    """The C compiler's flags for ``POLYTC_ISA`` (after ``-march=native``)."""
    from . import config

    return list(NARROWER.get(config.isa(), ((), ()))[1])


@functools.lru_cache(maxsize=None)
def host() -> Machine:
    """The machine the kernels are built for: this one, its vector ISA narrowed by
    ``POLYTC_ISA`` (read once)."""
    flags = _narrowed(_cpu_flags())
    if "avx512f" in flags:
        vbytes, regs = 64, 32
        dot = "avx512_vnni" in flags
    elif "avx2" in flags or "avx" in flags:
        vbytes, regs = 32, 16
        dot = "avx_vnni" in flags
    else:
        vbytes, regs, dot = 16, 16, False
    return Machine(
        l1=_sysfs_cache(1) or 32 * 1024,
        l2=_sysfs_cache(2) or 1 << 20,
        l3=_sysfs_cache(3) or 8 << 20,
        vector_bytes=vbytes,
        vector_registers=regs,
        cores=os.cpu_count() or 1,
        int8_dot=dot,
    )


def threads(explicit: int | None = None) -> int:
    """The team size of the kernels' parallel loops: ``explicit`` (``Options.num_threads``),
    else ``POLYTC_NUM_THREADS`` / ``OMP_NUM_THREADS``, else every core."""
    from . import config

    return explicit or config.num_threads() or host().cores
