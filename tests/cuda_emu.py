"""The cuda target's tests where there is no GPU: ``cuda_emulator.c`` is a CUDA driver
that runs the kernels' source on the host (see its header).  ``install()`` (from
conftest.py) builds it once per version of its source and points ``POLYTC_CUDA_DRIVER``
at it, unless that names a driver already or the NVIDIA driver and a GPU are here; a
``POLYTC_CUDA_DRIVER`` that names no library runs the tests as on a machine without a
GPU."""
from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

from polytc import config

SOURCE = Path(__file__).with_name("cuda_emulator.c")


def build() -> str | None:
    """The emulator's shared library (None where the C compiler cannot build it)."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    out = Path(tempfile.gettempdir()) / f"polytc-cuda-emulator-{digest}.so"
    if not out.exists():
        tmp = out.with_name(f"{out.name}.{os.getpid()}")
        r = subprocess.run([config.c_compiler(), "-O1", "-shared", "-fPIC", "-o", str(tmp),
                            str(SOURCE), "-ldl", "-pthread"], capture_output=True, timeout=120)
        if r.returncode:
            return None
        os.replace(tmp, out)  # workers building it at once: the last one wins, whole
    return str(out)


def install() -> None:
    if os.environ.get("POLYTC_CUDA_DRIVER"):
        return
    from polytc import PolytcError
    from polytc.runtime.cuda_driver import Driver

    try:
        Driver(ctypes.CDLL(config.cuda_driver()))
        return  # the NVIDIA driver and a GPU: the tests run there
    except (OSError, PolytcError):
        pass
    path = build()
    if path:
        os.environ["POLYTC_CUDA_DRIVER"] = path
