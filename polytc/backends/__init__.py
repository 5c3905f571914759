"""The targets, as plug-ins: each is one ``Backend`` object (``base.py``) in its own
module, found here by name and imported on first use.  Adding a target means one module
and one line in ``_MODULES``.

This registry sits at the bottom of the layers (it imports no backend until asked), so
the pipeline can look a target up; the backend modules themselves sit on top of the
compiler and the runtimes they plug together (see docs/architecture.md).
"""
from __future__ import annotations

import importlib

from ..diagnostics import PolytcError

#: target name -> the module whose ``BACKEND`` it is
_MODULES = {"c": "polytc.backends.c", "opencl": "polytc.backends.opencl",
            "cuda": "polytc.backends.cuda"}
NAMES = tuple(_MODULES)
#: the host target: what kernels compile for unless told otherwise
DEFAULT = "c"


def check(name: str) -> str:
    if not isinstance(name, str) or name not in _MODULES:
        raise PolytcError(f"unknown target {name!r}", hint=f"choose one of {', '.join(NAMES)}")
    return name


def get(name: str):
    """The ``Backend`` of target ``name``."""
    return importlib.import_module(_MODULES[check(name)]).BACKEND


def available(name: str) -> bool:
    """Whether kernels of target ``name`` can run in this process."""
    return get(name).available()
