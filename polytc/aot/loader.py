"""An exported model's library called from Python: ``polytc.aot.load(directory)``.

Deployment needs no Python; this loader is for checking an export against the session
it came from and for timing the library as a C caller would run it (``bench_onnx.py
--export``).  It reads the model's inputs, outputs and symbolic dimensions from the
library's own info functions (``model.h``), so it works on any exported directory.
"""
from __future__ import annotations

import ctypes
import os

import numpy as np

from ..diagnostics import KernelRuntimeError, ModelError, PolytcError

_I64P = ctypes.POINTER(ctypes.c_int64)
#: the shared object an exported directory's Makefile builds
LIBRARY = "libpolytc_model.so"


def _dtype(text: str) -> np.dtype:
    """A dtype of the library's description: ``<V2`` is bfloat16 (as numpy saves
    ml_dtypes' bfloat16 in .npy files)."""
    if text == "<V2":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(text)


class ExportedModel:
    """The model of an exported directory's ``libpolytc_model.so``: ``run`` takes and
    returns numpy arrays, as ``polytc.onnx.Session.run`` does."""

    def __init__(self, directory, threads: int = 0):
        path = os.path.join(os.fspath(directory), LIBRARY)
        try:
            lib = self._lib = ctypes.CDLL(os.path.abspath(path))
        except OSError as e:
            raise PolytcError(f"cannot load the exported model {path}: {e}",
                              hint="build the directory with make first") from None
        for name, res, args in (
                ("create", ctypes.c_void_p, [ctypes.c_int]),
                ("destroy", None, [ctypes.c_void_p]),
                ("run", ctypes.c_int, [ctypes.c_void_p, _I64P, ctypes.c_void_p,
                                       ctypes.c_void_p]),
                ("error", ctypes.c_char_p, [ctypes.c_void_p]),
                ("dim_name", ctypes.c_char_p, [ctypes.c_int]),
                ("input_name", ctypes.c_char_p, [ctypes.c_int]),
                ("input_dtype", ctypes.c_char_p, [ctypes.c_int]),
                ("input_dim", ctypes.c_int64, [ctypes.c_int, ctypes.c_int]),
                ("input_rank", ctypes.c_int, [ctypes.c_int]),
                ("output_name", ctypes.c_char_p, [ctypes.c_int]),
                ("output_dtype", ctypes.c_char_p, [ctypes.c_int]),
                ("output_rank", ctypes.c_int, [ctypes.c_int]),
                ("output_shape", ctypes.c_int, [ctypes.c_int, _I64P, _I64P])):
            f = getattr(lib, f"polytc_model_{name}")
            f.restype, f.argtypes = res, args
        text = lambda f, k: f(k).decode()  # noqa: E731
        self.dims = [text(lib.polytc_model_dim_name, j)
                     for j in range(lib.polytc_model_num_dims())]
        self.inputs = [(text(lib.polytc_model_input_name, i),
                        _dtype(text(lib.polytc_model_input_dtype, i)),
                        [lib.polytc_model_input_dim(i, a)
                         for a in range(lib.polytc_model_input_rank(i))])
                       for i in range(lib.polytc_model_num_inputs())]
        self.outputs = [(text(lib.polytc_model_output_name, j),
                         _dtype(text(lib.polytc_model_output_dtype, j)),
                         lib.polytc_model_output_rank(j))
                        for j in range(lib.polytc_model_num_outputs())]
        self._model = lib.polytc_model_create(threads)
        if not self._model:
            raise MemoryError("polytc_model_create")

    def __del__(self):
        if getattr(self, "_model", None):
            self._lib.polytc_model_destroy(self._model)
            self._model = None

    def dims_of(self, arrays) -> list:
        """The symbolic dimensions' values in ``arrays`` (checked as run_model does)."""
        dims = [0] * len(self.dims)
        for (name, dtype, shape), a in zip(self.inputs, arrays):
            if a.dtype != dtype or a.ndim != len(shape):
                raise ModelError(f"input '{name}' is {a.dtype.name} {list(a.shape)}; the "
                                 f"exported model wants {dtype.name} of rank {len(shape)}")
            for axis, (want, got) in enumerate(zip(shape, a.shape)):
                if want >= 0 and got != want:
                    raise ModelError(f"input '{name}': axis {axis} is {got}, not {want}")
                if want < 0:
                    if dims[-want - 1] and dims[-want - 1] != got:
                        raise ModelError(f"input '{name}': axis {axis} ('{self.dims[-want - 1]}"
                                         f"') is {got}, but {dims[-want - 1]} elsewhere")
                    dims[-want - 1] = got
        return dims

    def run(self, output_names, feeds: dict) -> list:
        """The outputs (``output_names``: None for all) for ``feeds`` (name -> array)."""
        arrays = [np.asarray(feeds[name]) for name, _, _ in self.inputs]
        # (np.ascontiguousarray makes a 0-d array 1-d)
        arrays = [a if a.flags.c_contiguous else np.ascontiguousarray(a).reshape(a.shape)
                  for a in arrays]
        dims = self.dims_of(arrays)
        c_dims = (ctypes.c_int64 * max(1, len(dims)))(*dims)
        outs = []
        for j, (_, dtype, rank) in enumerate(self.outputs):
            shape = (ctypes.c_int64 * max(1, rank))()
            self._lib.polytc_model_output_shape(j, c_dims, shape)
            outs.append(np.empty(tuple(shape[:rank]), dtype))
        ins = (ctypes.c_void_p * max(1, len(arrays)))(*[a.ctypes.data for a in arrays])
        ptrs = (ctypes.c_void_p * max(1, len(outs)))(*[o.ctypes.data for o in outs])
        rc = self._lib.polytc_model_run(self._model, c_dims, ins, ptrs)
        if rc:
            what = self._lib.polytc_model_error(self._model).decode()
            raise (KernelRuntimeError(what) if rc > 0 else PolytcError(what))
        names = [n for n, _, _ in self.outputs]
        return outs if output_names is None else [outs[names.index(n)] for n in output_names]
