"""A register tile that broadcasts a window's elements (a convolution's input at ``h +
kh``, ``2 w + kw``) is built without gcc's predictive commoning, which carried the
broadcasts of one reduction step into the next and spilled the tile's accumulators
(``codegen_c/microkernel._window``); the kernel stays equal to the reference."""
from __future__ import annotations

import pytest

import polytc
from tests.kernels_small import check

PRAGMA = '#pragma GCC optimize ("no-predictive-commoning")'

STEM = """
def stem(float(N,C,H,W) X, float(M,C,7,7) K) -> (Y) {
    Y(n, m, h, w) +=! X(n, c, 2 * h + kh, 2 * w + kw) * K(m, c, kh, kw)
        where h in 0:(H-7)/2+1, w in 0:(W-7)/2+1, kh in 0:7, kw in 0:7
}"""

MM = "def mm(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"


@pytest.mark.parametrize("h,w", [(37, 45), (29, 29)])
def test_a_window_tile_is_built_without_predictive_commoning(h, w):
    ck = check(STEM, [(1, 3, h, w), (32, 3, 7, 7)],
               polytc.Options(parallel_min_points=1, constants=("K",)), rtol=1e-4, atol=1e-4)
    if "pt_v" not in ck.code:
        pytest.skip("no vector register tiles on this machine")
    assert PRAGMA in ck.code
    # after the precompiled prelude, in the head every part of a split build has
    assert ck.code.index(PRAGMA) < ck.code.index("static __attribute__((noinline))")


def test_a_product_keeps_it():
    ck = check(MM, [(64, 48), (48, 80)], polytc.Options(parallel_min_points=1))
    assert PRAGMA not in ck.code
