"""Checking the arrays of a call against a program's parameters (the slow path: it runs
once per distinct shape signature; later calls only compare the signature)."""
from __future__ import annotations

import numpy as np

from ..diagnostics import ArgumentError
from ..lang import program as P
from ..lang import sizes as S


def _device_array(a) -> bool:
    """A device array of an accelerator target (pyopencl, pycuda, or anything with
    ``__cuda_array_interface__`` or DLPack on a GPU)."""
    mod = type(a).__module__ or ""
    return mod.startswith(("pyopencl", "pycuda")) or \
        hasattr(a, "__cuda_array_interface__") or \
        (hasattr(a, "__dlpack_device__") and not isinstance(a, np.ndarray))


def as_arrays(program: P.Program, args, device_arrays: bool = False) -> list:
    """The call's inputs as C-contiguous numpy arrays of the declared dtypes (device
    arrays, when the target takes them, are checked for dtype and rank and kept)."""
    ins = program.inputs
    if len(args) != len(ins):
        names = ", ".join(t.name for t in ins)
        raise ArgumentError(
            f"{program.name} takes {len(ins)} input{'s' * (len(ins) != 1)} ({names}) but "
            f"{len(args)} {'were' if len(args) != 1 else 'was'} given")
    out = []
    for t, a in zip(ins, args):
        want = t.dtype.np_dtype
        if device_arrays and _device_array(a):
            check_device_array(program, t, a)
            out.append(a)
            continue
        if isinstance(a, np.ndarray):
            if a.dtype != want:
                raise ArgumentError(
                    f"input '{t.name}' of {program.name} has dtype {a.dtype} but is declared "
                    f"{t.dtype} ({want})", t.span, hint=f"pass {t.name}.astype(np.{want})")
            arr = a
        elif t.rank == 0 and isinstance(a, (complex, np.complexfloating)):
            raise ArgumentError(f"input '{t.name}' is {t.dtype} but got the complex {a!r}",
                                t.span)
        elif t.rank == 0 and isinstance(a, (bool, int, float, np.bool_, np.integer,
                                            np.floating)):
            arr = _scalar(t, a, want)
        else:
            raise ArgumentError(
                f"input '{t.name}' of {program.name} must be a numpy array, got "
                f"{type(a).__name__}", t.span, hint="convert it with np.asarray(...)")
        if arr.ndim != t.rank:
            raise ArgumentError(
                f"input '{t.name}' of {program.name} must have {t.rank} dimension"
                f"{'s' * (t.rank != 1)} but has {arr.ndim} (shape {arr.shape})", t.span)
        out.append(arr if arr.flags.c_contiguous else np.ascontiguousarray(arr))
    return out


def _scalar(t, a, want: np.dtype) -> np.ndarray:
    """A Python or numpy number for the 0-d input ``t`` of dtype ``want``, as a 0-d
    array: refused where the value would change other than by a float's rounding (a
    float for an integer, an integer out of the type's range, a finite value that
    becomes infinite): numpy's conversion wraps ``np.int64(2**40)`` to 0 in int32."""
    if isinstance(a, (float, np.floating)) and not t.dtype.is_float:
        raise ArgumentError(f"input '{t.name}' is {t.dtype} but got the float {a!r}", t.span)
    if want.kind in "iu" and not isinstance(a, (bool, np.bool_)):
        info = np.iinfo(want)
        if not info.min <= int(a) <= info.max:
            raise ArgumentError(f"{int(a)} does not fit in {t.dtype} for '{t.name}' "
                                f"({info.min}..{info.max})", t.span)
    try:
        with np.errstate(over="ignore"):
            arr = np.asarray(a, dtype=want)
        if want.kind == "f" and np.isfinite(a) and not np.isfinite(arr):
            raise OverflowError
    except OverflowError:
        raise ArgumentError(f"{a!r} does not fit in {t.dtype} for '{t.name}'", t.span) \
            from None
    return arr


def check_device_array(program, t, a) -> None:
    dtype = getattr(a, "dtype", None)
    shape = tuple(getattr(a, "shape", ()))
    if dtype is None or str(dtype).replace("torch.", "") != str(t.dtype.np_dtype):
        raise ArgumentError(f"input '{t.name}' of {program.name} has dtype {dtype} but is "
                            f"declared {t.dtype} ({t.dtype.np_dtype})", t.span)
    if len(shape) != t.rank:
        raise ArgumentError(
            f"input '{t.name}' of {program.name} must have {t.rank} dimension"
            f"{'s' * (t.rank != 1)} but has {len(shape)} (shape {shape})", t.span)
    flags = getattr(a, "flags", None)
    contiguous = getattr(flags, "c_contiguous", None)
    if contiguous is None and hasattr(a, "is_contiguous"):
        contiguous = a.is_contiguous()
    if contiguous is False:
        raise ArgumentError(f"device input '{t.name}' of {program.name} is not contiguous",
                            t.span, hint="pass a contiguous copy")


def bind_sizes(program: P.Program, arrays) -> dict:
    """Size name -> value, checking that every use of a size agrees."""
    env, where = {}, {}
    for t, a in zip(program.inputs, arrays):
        for d, (dim, n) in enumerate(zip(t.shape, a.shape)):
            if S.is_const(dim):
                if n != dim.const:
                    raise ArgumentError(
                        f"dimension {d} of input '{t.name}' must be {dim.const} but is {n}",
                        t.span)
                continue
            name = dim.terms[0][0]
            if name in env and env[name] != n:
                pt, pd = where[name]
                raise ArgumentError(
                    f"size {name} is {env[name]} from dimension {pd} of '{pt}' but {n} from "
                    f"dimension {d} of '{t.name}'", t.span,
                    hint="inputs that share a size name must agree on it")
            env[name] = int(n)
            where[name] = (t.name, d)
    return env


def check_out(program: P.Program, out, shapes: list, inputs: list) -> list:
    """The ``out=`` arrays, checked: right count, shape, dtype, contiguous, no overlap."""
    outs = out if isinstance(out, (tuple, list)) else (out,)
    if len(outs) != len(program.outputs):
        raise ArgumentError(f"out= needs {len(program.outputs)} arrays but got {len(outs)}")
    for t, o, shape in zip(program.outputs, outs, shapes):
        if not isinstance(o, np.ndarray):
            raise ArgumentError(f"out= for '{t.name}' must be a numpy array", t.span)
        if o.dtype != t.dtype.np_dtype or tuple(o.shape) != tuple(shape):
            raise ArgumentError(
                f"out= for '{t.name}' must be {t.dtype.np_dtype}{list(shape)} but is "
                f"{o.dtype}{list(o.shape)}", t.span)
        if not o.flags.c_contiguous or not o.flags.writeable:
            raise ArgumentError(f"out= for '{t.name}' must be a writeable C-contiguous array",
                                t.span, hint="pass np.empty(shape, dtype) or omit out=")
        for t2, a in zip(program.inputs, inputs):
            if np.shares_memory(o, a):
                raise ArgumentError(f"out= for '{t.name}' overlaps the input '{t2.name}'",
                                    t.span, hint="outputs must not alias inputs")
    for k, (t, o) in enumerate(zip(program.outputs, outs)):
        for t2, o2 in zip(program.outputs[:k], outs[:k]):
            if np.shares_memory(o, o2):
                raise ArgumentError(f"out= for '{t.name}' overlaps out= for '{t2.name}'",
                                    t.span, hint="each output needs memory of its own")
    return list(outs)
