"""Loop nests too small to pay for a parallel region run on one thread
(``poly/schedule._mark``, ``BAND_SHIFT``): a small row program's row statements, while
its product keeps its parallel loop, and at more rows every nest forks.  Every size
matches numpy."""
from __future__ import annotations

import numpy as np

import polytc
from polytc.poly.schedule import BAND_SHIFT

CENTRED_PRODUCT = """
def centred(float(N,D) X, float(D,E) W) -> (Y) {
    mean(n) +=! X(n, d) / D
    xc(n, d) = X(n, d) - mean(n)
    Y(n, e) +=! xc(n, d) * W(d, e)
}"""


def test_loop_nests_too_small_to_fork_run_on_one_thread():
    least = polytc.Options().parallel_min_points >> BAND_SHIFT
    k = polytc.tc(CENTRED_PRODUCT, options=polytc.Options(num_threads=2))
    rng = np.random.default_rng(0)
    w = rng.standard_normal((128, 256)).astype(np.float32)
    regions = {}
    for n in (16, 512):
        x = rng.standard_normal((n, 128)).astype(np.float32)
        want = (x - x.mean(1, keepdims=True)) @ w
        np.testing.assert_allclose(k(x, w), want, rtol=1e-4, atol=1e-3)
        regions[n] = k.specialize(x, w).code.count("#pragma omp parallel")
    assert 16 * 128 < least <= 512 * 128
    assert 0 < regions[16] < regions[512], regions


def test_a_generic_kernel_forks_each_loop_nest_from_its_own_size():
    """Rows symbolic: each parallel loop forks under a run-time test of its own
    statements' instances (the row statements from ``least / D`` rows), besides the
    kernel's; every row count, below and past those, matches numpy."""
    import re

    least = polytc.Options().parallel_min_points >> BAND_SHIFT
    k = polytc.tc(CENTRED_PRODUCT, dynamic=("N",), options=polytc.Options(num_threads=2))
    rng = np.random.default_rng(1)
    w = rng.standard_normal((128, 256)).astype(np.float32)
    for i, n in enumerate((40, 1, 8, 31, 32, 33, 300)):
        x = rng.standard_normal((n, 128)).astype(np.float32)
        want = (x - x.mean(1, keepdims=True)) @ w
        np.testing.assert_allclose(k(x, w), want, rtol=1e-4, atol=1e-3)
        if i == 0:
            code = k.specialize(x, w).code
            assert re.search(rf"\(\(N\) >= {-(-least // 128)}L\)\)", code), code


def test_a_loop_nest_of_fixed_sizes_in_a_generic_kernel_keeps_the_kernels_test():
    """A generic kernel's loop nest whose extents do not depend on the symbolic size,
    with instances enough to fork at any size: no test of its own (its count does not
    grow with the rows, whatever the size the kernel was first built at: 256 rows);
    the results match numpy."""
    import re

    src = """def two(float(N,D) X, float(E,E) W) -> (Y, Z) {
        Y(n, d) = X(n, d) * 2.0
        Z(i, j) = W(i, j) + 1.0
    }"""
    k = polytc.tc(src, dynamic=("N",), options=polytc.Options(num_threads=2))
    rng = np.random.default_rng(2)
    x, w = (rng.standard_normal(s).astype(np.float32) for s in ((256, 64), (128, 128)))
    y, z = k(x, w)
    np.testing.assert_allclose(y, x * 2)
    np.testing.assert_allclose(z, w + 1)
    code = k.specialize(x, w).code
    tests = re.findall(r"if \((.*)\)\n\s*\{\n\s*#pragma omp parallel for", code)
    assert tests and any("&&" not in t for t in tests), tests


def test_a_loop_nest_of_fixed_sizes_with_work_enough_forks_at_any_size():
    """A generic kernel whose nest of fixed extents alone has ``parallel_min_points``
    instances: that nest forks at every size (the kernel's run-time test counts its
    instances as they are, not scaled by the rows), the rows' nest under its own test;
    one row and many match numpy."""
    import re

    src = """def two(float(N,D) X, float(E,E) W) -> (Y, Z) {
        Y(n, d) = X(n, d) * 2.0
        Z(i, j) = W(i, j) + 1.0
    }"""
    assert 256 * 256 >= polytc.Options().parallel_min_points
    k = polytc.tc(src, dynamic=("N",), options=polytc.Options(num_threads=2))
    rng = np.random.default_rng(3)
    w = rng.standard_normal((256, 256)).astype(np.float32)
    for n in (512, 1):
        x = rng.standard_normal((n, 64)).astype(np.float32)
        y, z = k(x, w)
        np.testing.assert_allclose(y, x * 2)
        np.testing.assert_allclose(z, w + 1)
    code = k.specialize(x, w).code
    regions = code.count("#pragma omp parallel for")
    tested = re.findall(r"if \((.*)\)\n\s*\{\n\s*#pragma omp parallel for", code)
    assert tested and all("N" in t for t in tested), tested
    assert regions > len(tested), code


def test_a_generic_kernels_serial_branch_runs_small_bodies_inline():
    """Where a generic kernel's loop has too little work to fork, its serial branch runs
    a small body inline, not one call of the outlined body per row (``INLINE_SERIAL``);
    a few rows and many, on either branch, match numpy."""
    import re

    k = polytc.tc(CENTRED_PRODUCT, dynamic=("N",), options=polytc.Options(num_threads=2))
    rng = np.random.default_rng(4)
    w = rng.standard_normal((128, 256)).astype(np.float32)
    for n in (3, 700):
        x = rng.standard_normal((n, 128)).astype(np.float32)
        want = (x - x.mean(1, keepdims=True)) @ w
        np.testing.assert_allclose(k(x, w), want, rtol=1e-4, atol=1e-3)
    code = k.specialize(x, w).code
    serial = re.findall(r"else\n\s*\{\n\s*for \(long c0 = 0L; c0 < N; c0 \+= 1L\)\n\s*\{\n"
                        r"\s*(\S+)", code)
    assert serial and not any(s.startswith("pt_body") for s in serial), serial
