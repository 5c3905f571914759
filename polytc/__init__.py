"""polytc: a polyhedral auto-scheduling tensor compiler.

>>> import numpy as np, polytc
>>> mm = polytc.tc('''
... def matmul(float(M,K) A, float(K,N) B) -> (C) {
...     C(m, n) +=! A(m, k) * B(k, n)
... }''')
>>> C = mm(np.ones((2, 3), np.float32), np.ones((3, 4), np.float32))
>>> C.shape
(2, 4)
"""
from __future__ import annotations

__version__ = "0.1.0"

from .diagnostics import (ArgumentError, CompilationError, InternalError,  # noqa: F401
                          KernelRuntimeError, ModelError, PolytcError, RangeInferenceError,
                          ScheduleError,
                          TCSemanticError, TCSyntaxError, TCTypeError, UndefinedNameError,
                          UnsupportedError, user_boundary)
from .options import Options, OptionsError  # noqa: F401
from .poly.recipe import Schedule  # noqa: F401
from .kernel import Kernel, clear_cache  # noqa: F401
from .runtime.native import CompiledKernel  # noqa: F401
from .tuner.driver import autotune  # noqa: F401
from .exploration import diff, explore  # noqa: F401


def _programs(defs, source):
    from .lang.sema import check

    return [check(d, source) for d in defs]


@user_boundary
def tc(src: str, name: str | None = None, *, options: Options | None = None,
       filename: str = "<tc>", target: str = "c", dynamic="auto"):
    """Compile TC text.  One ``def``: its kernel.  Several: a dict name -> kernel, or
    the one called ``name``.  ``target``: ``c`` (default), ``opencl`` or ``cuda``.
    ``dynamic``: the size policy (``polytc.Kernel``): ``"auto"``, size names, or ``()``."""
    from .diagnostics import Source
    from .lang.parser import parse

    if not isinstance(src, str):
        raise PolytcError(f"polytc.tc takes TC text (a str), got {type(src).__name__}")
    defs = parse(src, filename)
    source = Source(src, filename)
    if name is not None:
        chosen = [d for d in defs if d.name == name]
        if not chosen:
            raise PolytcError(f"no def named '{name}' in this text",
                              hint="it defines " + ", ".join(d.name for d in defs))
        return Kernel(_programs(chosen, source)[0], options, target, dynamic)
    names = [d.name for d in defs]
    for i, n in enumerate(names):
        if n in names[:i]:
            raise TCSemanticError(f"two defs are named '{n}'", defs[i].span)
    kernels = {p.name: Kernel(p, options, target, dynamic) for p in _programs(defs, source)}
    if len(kernels) == 1:
        return next(iter(kernels.values()))
    return kernels


def kernel(fn=None, *, options: Options | None = None, target: str = "c", dynamic="auto"):
    """Decorator: the function's body, in Python syntax, is a TC program (never run).
    ``dynamic``: the size policy, as for ``polytc.tc``."""

    @user_boundary
    def wrap(f):
        from .lang.pyfront import function_to_def

        d = function_to_def(f)
        prog = _programs([d], d.span.source)[0]
        k = Kernel(prog, options, target, dynamic)
        k.__doc__ = f.__doc__
        k.__name__ = f.__name__
        return k

    return wrap(fn) if fn is not None else wrap


from . import onnx  # noqa: E402,F401 - polytc.onnx.compile (imports the onnx package lazily)
