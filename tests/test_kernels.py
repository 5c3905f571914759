"""Compile and run every kernel of ``kernels.CATALOGUE``; compare with the reference
interpreter (the oracle) and with an independent numpy expression."""
import zlib

import numpy as np
import pytest

import polytc
from polytc.lang import reference

from .kernels import BY_NAME, CATALOGUE

_KERNELS: dict = {}


def kernel(entry):
    k = _KERNELS.get(entry.name)
    if k is None:
        k = _KERNELS[entry.name] = polytc.tc(entry.tc, entry.def_name)
    return k


def rng_for(entry, salt=0):
    return np.random.default_rng(zlib.crc32(entry.name.encode()) + salt)


def as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def params(entries):
    return [pytest.param(e, id=e.name, marks=[pytest.mark.xfail(strict=True, reason=e.xfail)]
                         if e.xfail else []) for e in entries]


def compare(entry, got, want, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{entry.name}: {what}: shape {got.shape} != {want.shape}"
    if got.dtype.kind in "biu":
        assert want.dtype == got.dtype, f"{entry.name}: {what}: dtype {want.dtype} != {got.dtype}"
        np.testing.assert_array_equal(got, want, err_msg=f"{entry.name}: {what}")
    else:
        np.testing.assert_allclose(got, want, rtol=entry.rtol, atol=entry.atol,
                                   err_msg=f"{entry.name}: {what}")


def check(entry, k, inputs, outs):
    """``outs`` (what the kernel returned) against the oracle and the numpy expression."""
    prog = k.program
    outs = as_tuple(outs)
    assert len(outs) == len(prog.outputs)
    for o, t in zip(outs, prog.outputs):
        assert isinstance(o, np.ndarray)
        assert o.dtype == t.dtype.np_dtype, f"{t.name}: dtype {o.dtype}, declared {t.dtype}"
    oracle = reference.run(prog, inputs)
    expected = as_tuple(entry.expect(*inputs))
    assert len(expected) == len(outs)
    for o, t, e in zip(outs, prog.outputs, expected):
        compare(entry, o, oracle[t.name], f"output {t.name} vs oracle")
        compare(entry, o, e, f"output {t.name} vs numpy")


def test_catalogue_size():
    assert len(CATALOGUE) >= 55


@pytest.mark.parametrize("entry", params(CATALOGUE))
def test_kernel(entry):
    k = kernel(entry)
    inputs = entry.make(rng_for(entry), **entry.sizes[0])
    copies = [np.copy(a) for a in inputs]
    outs = k(*inputs)
    for a, c in zip(inputs, copies):  # inputs are read-only
        np.testing.assert_array_equal(a, c)
    check(entry, k, inputs, outs)


# --- one Kernel object specialised to several sizes in the same process ---------------------
MULTI_SIZE = ["matmul", "batch_matmul", "matvec", "dot", "softmax", "conv2d", "conv2d_strided",
              "conv1d", "mlp_fmax", "mlp2", "prefix_sum", "trisolv_unit", "scan_recurrence"]


@pytest.mark.parametrize("entry", params([BY_NAME[n] for n in MULTI_SIZE]))
def test_several_sizes(entry):
    assert len(entry.sizes) >= 2
    k = kernel(entry)
    runs = []
    for n, sizes in enumerate(entry.sizes):
        inputs = entry.make(rng_for(entry, 1 + n), **sizes)
        outs = k(*inputs)
        check(entry, k, inputs, outs)
        runs.append((inputs, outs))
    # back to the first sizes (the kernel's table now holds several specialisations)
    for inputs, outs in runs:
        again = as_tuple(k(*inputs))
        for a, b in zip(again, as_tuple(outs)):
            np.testing.assert_array_equal(a, b)
    shapes = {tuple(a.shape for a in inputs) for inputs, _ in runs}
    assert len(shapes) == len(runs), "size sets should give distinct shapes"


# --- out= preallocated arrays -------------------------------------------------------------------
OUT_KERNELS = ["matmul", "dot", "softmax", "row_stats", "int32_matmul", "bool_compare",
               "uint8_ops", "conv2d", "bicg"]


@pytest.mark.parametrize("entry", params([BY_NAME[n] for n in OUT_KERNELS]))
def test_out_preallocated(entry):
    k = kernel(entry)
    inputs = entry.make(rng_for(entry, 7), **entry.sizes[0])
    fresh = as_tuple(k(*inputs))
    # garbage in the preallocated arrays: every element is written by these kernels
    outs = []
    for f in fresh:
        o = np.empty_like(f)
        o[...] = 1 if f.dtype == bool else 77
        outs.append(o)
    res = k(*inputs, out=tuple(outs) if len(outs) > 1 else outs[0])
    res = as_tuple(res)
    assert len(res) == len(outs)
    for r, o, f in zip(res, outs, fresh):
        assert r is o, "out= arrays are returned"
        np.testing.assert_array_equal(o, f)
    check(entry, k, inputs, res)
    # and again into the same arrays
    res2 = as_tuple(k(*inputs, out=tuple(outs) if len(outs) > 1 else outs[0]))
    for r, f in zip(res2, fresh):
        np.testing.assert_array_equal(r, f)


# --- other scheduling options: maximal / minimal fusion, OpenMP forced on small loops ------------
OPTION_VARIANTS = {
    "fuse_max_parallel": dict(fusion="max", parallel_min_points=1, num_threads=2),
    "fuse_min_serial": dict(fusion="min", parallel=False),
}


@pytest.mark.parametrize("variant", list(OPTION_VARIANTS))
@pytest.mark.parametrize("entry", params(CATALOGUE))
def test_kernel_options(entry, variant):
    k = kernel(entry).with_options(**OPTION_VARIANTS[variant])
    inputs = entry.make(rng_for(entry, 3), **entry.sizes[0])
    check(entry, k, inputs, k(*inputs))


def test_non_contiguous_inputs():
    entry = BY_NAME["matmul_nt"]
    k = kernel(entry)
    r = rng_for(entry, 11)
    A = np.asfortranarray(r.uniform(-1, 1, (5, 19)).astype(np.float32))
    Bt = r.uniform(-1, 1, (19, 9)).astype(np.float32)
    B = Bt.T  # a transposed view
    assert not A.flags.c_contiguous and not B.flags.c_contiguous
    check(entry, k, (A, B), k(A, B))
    sliced = r.uniform(-1, 1, (10, 38)).astype(np.float32)[::2, ::2]
    check(entry, k, (sliced, B[:, :19]), k(sliced, B[:, :19]))
