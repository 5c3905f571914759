"""Row programs (softmax, layer and group norms): their outer loops fused by
construction, temporaries contracted into per-iteration buffers, and every variant
equal to the oracle (odd sizes, offsets into the buffer, temporaries that must stay)."""
from __future__ import annotations

import time

import numpy as np
import pytest

import polytc
from polytc.compiler import pipeline
from tests.kernels import CATALOGUE
from tests.kernels_small import SOFTMAX, check

LAYERNORM = next(e.tc for e in CATALOGUE if e.name == "layernorm")

# the catalogue's group norm recomputes X - mean; this one keeps it in a temporary
GROUPNORM = """
def groupnorm(float(N,G,CG,H,W) X, float(G,CG) gamma, float(G,CG) beta) -> (Y) {
    mean(n, g) +=! X(n, g, c, h, w) / (CG * H * W)
    xc(n, g, c, h, w) = X(n, g, c, h, w) - mean(n, g)
    var(n, g) +=! xc(n, g, c, h, w) * xc(n, g, c, h, w) / (CG * H * W)
    Y(n, g, c, h, w) = xc(n, g, c, h, w) * rsqrt(var(n, g) + 1e-5) * gamma(g, c) + beta(g, c)
}"""

# the temporary is read one column further on: a buffer of the row, rebased
SHIFTED = """
def shifted(float(N,D) X) -> (Y) {
    T(n, d) = X(n, d) * 2.0 where d in 0:D
    Y(n, d) = T(n, d) + T(n, d + 1) where d in 0:D-1
}"""

# the temporary is read by the next row and the next column: it must stay an array
ACROSS = """
def across(float(N,D) X) -> (Y) {
    T(n, d) = X(n, d) * 2.0
    Y(n, d) = T(n, d) + T(n + 1, d) + T(n, d + 1) where n in 0:N-1, d in 0:D-1
}"""

# read by the next row only: the loop over columns is parallel, and a column's buffer
COLUMN = """
def column(float(N,D) X) -> (Y) {
    T(n, d) = X(n, d) * 2.0
    Y(n, d) = T(n, d) + T(n + 1, d) where n in 0:N-1
}"""

ONE = polytc.Options(parallel_min_points=1)


def run(src, shapes, options=ONE):
    return check(src, shapes, options, rtol=2e-4, atol=2e-5)


def contracted(ck) -> dict:
    """Temporary -> facts of its ``contract`` decision, from the ``contraction`` stage."""
    out = {}
    for line in str(ck.stages.get("contraction", "")).splitlines():
        if line.startswith("contract "):
            name, *facts = line[len("contract "):].split("; ")
            out[name] = dict(f.split(" ", 1) for f in facts)
    return out


@pytest.mark.parametrize("n,d", [(4096 // 64, 1024 // 8), (37, 53), (1, 7), (3, 1)])
def test_softmax_keeps_its_temporaries_per_row(n, d):
    ck = run(SOFTMAX, [(n, d)])
    found = contracted(ck)
    assert set(found) == {"mx", "e", "s"}
    assert found["e"]["buffer"] == f"1x{d}" and found["mx"]["buffer"] == "1"
    assert f"pt_l_e_s[{d}]" in ck.code  # the buffer, accessed through a restrict pointer
    assert "float *restrict pt_l_e = __builtin_assume_aligned(pt_l_e_s, 64)" in ck.code
    # the runtime passes no buffer for them: the kernel takes X and Y only
    assert "int polytc_kernel( const float *restrict X,  float *restrict Y)" in ck.code


@pytest.mark.parametrize("n,d", [(64, 128), (13, 33)])
def test_layernorm_contracted_and_equal(n, d):
    ck = run(LAYERNORM, [(n, d), (d,), (d,)])
    assert set(contracted(ck)) == {"mean", "xc", "var"}


def test_groupnorm_rows_fused_without_isl_and_contracted():
    shapes = [(3, 4, 5, 6, 7), (4, 5), (4, 5)]
    t0 = time.perf_counter()
    ck = run(GROUPNORM, shapes, polytc.Options(parallel_min_points=1))
    assert time.perf_counter() - t0 < 5  # isl's scheduler took 8 s on the bench's sizes
    found = contracted(ck)
    assert found["xc"]["buffer"] == "1x1x5x6x7"  # per (n, g): the band's inner loop too
    assert ck.code.count("omp parallel for") == 1  # one fused nest


def test_offsets_inside_the_buffer():
    ck = run(SHIFTED, [(9, 17)])
    assert contracted(ck)["T"]["buffer"] == "1x17"


def test_buffer_of_a_column():
    ck = run(COLUMN, [(9, 17)])
    assert contracted(ck)["T"]["buffer"] == "9x1"


def test_temporary_shared_across_iterations_stays():
    ck = run(ACROSS, [(9, 17)])
    assert "T" not in contracted(ck)
    assert "float *restrict T" in ck.code


# max pooling 3x3/2 of a padded plane: the padded temporary contracted per plane
POOL = """
def pool(float(C,H,W) X) -> (Y) {
    P(c, h, w) = h >= 1 && w >= 1 ? X(c, h - 1, w - 1) : -1.0 / 0.0 where h in 0:H+1, w in 0:W+1
    Y(c, h, w) max=! P(c, h * 2 + kh, w * 2 + kw) where h in 0:H/2, w in 0:W/2, kh in 0:3, kw in 0:3
}"""


@pytest.mark.parametrize("w,row", [(40, 48), (14, 15), (63, 64)])
def test_rows_of_a_buffer_start_on_cache_lines(w, row):
    """A contracted buffer's rows of two cache lines or more are padded to whole lines
    (41 -> 48 floats); shorter rows and whole lines are left alone."""
    ck = run(POOL, [(3, w, w)])
    assert contracted(ck)["P"]["buffer"] == f"1x{w + 1}x{w + 1}"
    assert f"pt_l_P_s[{(w + 1) * row}]" in ck.code


def test_contract_pass_can_be_switched_off():
    ck = run(SOFTMAX, [(37, 53)], polytc.Options(parallel_min_points=1, disable=("contract",)))
    assert not contracted(ck) and "pt_l_" not in ck.code
    assert "contract" not in ck.timings


def test_split_bands_regain_parallel_loops():
    """The exp loop of a softmax is split from the sum that follows it; its own band is
    parallel again, so it is vectorised (glibc's vector expf)."""
    b = pipeline.run(polytc.tc(SOFTMAX).program, {"N": 64, "D": 128}, ONE)
    simd = [d for d in b.tiling if d.kind == "simd"]
    assert any("S1" in d.subjects for d in simd), b.stages["tiling"]


def test_explain_tells_what_was_contracted():
    k = polytc.tc(SOFTMAX, options=ONE)
    text = str(k.explain(np.zeros((37, 53), np.float32)))
    assert "The temporary e never goes to memory" in text
    assert "buffer of 1x53 elements" in text


def test_division_by_a_row_invariant_is_a_reciprocal_multiplication():
    ck = run(SOFTMAX, [(37, 53)])
    assert "* (1.0f / pt_l_s[0])" in ck.code  # one division per row, not per element
    exact = run(SOFTMAX, [(37, 53)], polytc.Options(parallel_min_points=1, reciprocal=False))
    assert "1.0f /" not in exact.code and "/ pt_l_s[0])" in exact.code


@pytest.mark.parametrize("w", [4, 16])
def test_reduction_over_a_whole_nest_is_one_vector_reduction(w):
    """Rows narrower than a vector by a power of two: one reduction over the collapsed
    nest; else an accumulator per lane of the rows (``_lane_sum``)."""
    from polytc.machine import host

    ck = run(GROUPNORM, [(2, 3, 4, 5, w), (3, 4), (3, 4)])
    collapsed = w < host().lanes(4)
    assert ("reduction(+:pt_acc0) collapse(3)" in ck.code) == collapsed
    assert ("pt_lane_pt_acc0" in ck.code) != collapsed


@pytest.mark.parametrize("d", [200, 256, 127])
def test_long_sums_keep_an_accumulator_per_lane(d):
    """A sum over at least two blocks of 4 vectors runs 4 vector accumulators (and the
    iterations past the last block one by one); shorter ones keep one."""
    from polytc.machine import host

    src = """def rowsum(float(N,D) X) -> (S, P) {
        S(n) +=! X(n, d) * 2.0
        P(n) *=! X(n, d)
    }"""
    k = polytc.tc(src, options=ONE)
    rng = np.random.default_rng(1)
    X = (1 + rng.standard_normal((5, d)) / 100).astype(np.float32)
    S, Pr = k(X)
    np.testing.assert_allclose(S, (X * 2).sum(1), rtol=1e-4)
    np.testing.assert_allclose(Pr, X.prod(1, dtype=np.float64), rtol=1e-3)
    split = d >= 2 * 4 * host().lanes(4)
    assert ("pt_part_pt_acc0" in k.specialize(X).code) == split


def test_a_temporary_read_beside_its_parallel_loop_stays_an_array():
    """isl may generate an instance that touches the temporary next to the parallel loop
    rather than in it (``T3 = T1(2)`` here, found by the differential fuzzer): the code
    is made again with that temporary as an array."""
    src = """def f(float(4) A) -> (float T0, float T3) {
        T0 +=! A(i) where i in 1:4
        T1(i) = A(i) where i in 0:4 - 1
        T0 +=! A(i) where i in 1:4
        T3 = T1(2)
    }"""
    ck = run(src, [(4,)], polytc.Options(parallel_min_points=0, fusion="preserve"))
    assert "pt_l_T1" not in ck.code


# a 3x3 convolution of a padded image over a batch, a residual add and a ReLU folded
# into its register tiles (the form of a ResNet block's second convolution)
PADCONV = """
def padconv(float(N,C,H,W) X, float(M,C,3,3) K, float(N,M,H,W) R) -> (Y) {
    P(n, c, h, w) = (h >= 1 && h <= H && w >= 1 && w <= W) ? X(n, c, h - 1, w - 1) : 0.0
        where n in 0:N, c in 0:C, h in 0:H+2, w in 0:W+2
    Y(n, m, h, w) +=! P(n, c, h + kh, w + kw) * K(m, c, kh, kw)
        where h in 0:H, w in 0:W, kh in 0:3, kw in 0:3
    Y(n, m, h, w) = max(Y(n, m, h, w) + R(n, m, h, w), 0.0)
}"""


@pytest.mark.parametrize("n", [2, 3])
def test_a_buffer_too_large_for_the_stack_is_the_threads_part_of_its_array(n):
    """An image's padded copy (32 x 42 x 58 floats, 312 KB: over the stack's limit) is
    kept per thread in the first parts of its own array, each thread reusing its part
    for every image it runs, so it stays in L2; the kernel still takes the array."""
    from polytc.machine import host

    c, h, w = 32, 40, 56
    opts = polytc.Options(parallel_min_points=1, constants=("K",))
    ck = run(PADCONV, [(n, c, h, w), (64, c, 3, 3), (n, 64, h, w)], opts)
    if host().l2 < c * (h + 2) * (w + 2) * 4:
        pytest.skip("an L2 smaller than the image's padded copy")
    found = contracted(ck)
    if "P" not in found and "tensor P" in ck.stages["tiling"]:
        pytest.skip("the image is the packed operand (whole vectors on this machine)")
    assert found["P"] == {"loop": "c0", "buffer": f"1x{c}x{h + 2}x{w + 2}", "slot": "thread"}
    part = c * (h + 2) * (w + 2)
    assert f"pt_l_P = __builtin_assume_aligned(P + (long)PT_THREAD() * {part}L, 64)" in ck.code
    assert "float *restrict P, " in ck.code  # the runtime passes the array
    assert "its thread's own part of the temporary's array" in str(ck.explain())
    # without OpenMP every iteration runs on the one thread: part 0
    assert "#define PT_THREAD() 0" in ck.code


# attention's scores: K transposed into a temporary, then a product per batch and head
SCORES = """
def scores(float(B,H,S,D) Q, float(B,S,H,D) K, float(B,S) M) -> (Y) {
    KT(b, h, d, s) = K(b, s, h, d) where b in 0:B, h in 0:H, d in 0:D, s in 0:S
    Y(b, h, i, j) +=! Q(b, h, i, d) * KT(b, h, d, j)
    Y(b, h, i, j) = Y(b, h, i, j) / 8.0 + M(b, j)
}"""

# a depthwise 3x3 convolution of a padded image over a batch (ShuffleNet's)
DEPTHWISE = """
def depthwise(float(N,C,H,W) X, float(C,3,3) K) -> (Y) {
    P(n, c, h, w) = (h >= 1 && h <= H && w >= 1 && w <= W) ? X(n, c, h - 1, w - 1) : 0.0
        where n in 0:N, c in 0:C, h in 0:H+2, w in 0:W+2
    Y(n, c, h, w) +=! P(n, c, h + kh, w + kw) * K(c, kh, kw)
        where h in 0:H, w in 0:W, kh in 0:3, kw in 0:3
}"""


def test_a_batched_product_is_fused_with_its_transposing_copy():
    """Every operand runs along the batch and the heads (and along the result's rows or
    columns): the transposing copy is fused with the product over both, so that one
    head's copy is read while it is in the caches (a transformer layer at batch 64: its
    scores 2.73 -> 2.39 ms); one loop nest, not a pass of copies and one of products."""
    ck = run(SCORES, [(3, 2, 40, 16), (3, 40, 2, 16), (3, 40)])
    assert ck.code.count("omp parallel for") == 1
    assert "S0 (line 3: KT(b, h, d, s) = K(b, s, h, d)) and S1" in str(ck.explain())
    # the copy, packed at each call, is read by the packing where it is: one head's, on
    # the stack (a transformer layer at batch 64: its attention 4.03 -> 3.75 ms)
    assert "tensor KT" in ck.stages["tiling"] and ck.temps == []
    assert contracted(ck)["KT"] == {"loop": "c1", "buffer": "1x1x16x40"}


@pytest.mark.parametrize("hw,per_channel", [(30, True), (12, False)])
def test_a_depthwise_convolution_is_fused_over_channels_of_large_planes(hw, per_channel):
    """A depthwise convolution's padded copy follows it channel by channel where a
    channel's padded plane holds at least ``fusion.PLANE`` points (the copy of one
    plane stays in L1); on small planes, image by image."""
    ck = run(DEPTHWISE, [(2, 8, hw, hw), (8, 3, 3)])
    buffer = contracted(ck)["P"]["buffer"]
    assert buffer == (f"1x1x{hw + 2}x{hw + 2}" if per_channel else f"1x8x{hw + 2}x{hw + 2}")


# a row maximum between two products per head (attention without its exponentials)
ROWMAX = """
def rowmax(float(B,S,H,D) Q, float(B,S,H,D) K, float(B,S,H,D) V) -> (O) {
    Sc(b, h, i, j) +=! Q(b, i, h, d) * K(b, j, h, d)
    mx(b, h, i) max=! Sc(b, h, i, j)
    E(b, h, i, j) = Sc(b, h, i, j) - mx(b, h, i)
    O(b, h, i, d) +=! E(b, h, i, j) * V(b, j, h, d)
}"""


def test_temporaries_of_a_kernel_call_are_aligned_however_small():
    """Temporaries are stored to with aligned vector moves: the arrays a call makes for
    them are 64-byte aligned even under 16 KB (a 4 KB row maximum 16 bytes past a line
    faulted: SIGSEGV)."""
    from polytc.runtime.memory import is_aligned

    ck = check(ROWMAX, [(1, 64, 1, 32)] * 3, polytc.Options(parallel_min_points=1),
               atol=2e-3)
    assert any(np.prod(shape) * dt.itemsize < 1 << 14 for shape, dt in ck.temps)
    for _ in range(8):  # (fresh allocations land at other offsets)
        assert all(is_aligned(t) for t in ck._new_scratch())


def test_a_chain_of_products_is_fused_over_batch_and_heads():
    """The products of a chain and the row reductions between them run per batch
    element and head (attention's scores, their row maximum and the product with the
    values: one loop nest, its temporaries per head in the caches); over a batch and
    heads of one, the products would run on one core (a batched attention at batch 1:
    98 -> 62 us on 2 cores): isl's schedule instead, with parallel loops."""
    for shape in ((1, 64, 4, 32), (2, 64, 4, 32)):
        ck = check(ROWMAX, [shape] * 3, polytc.Options(parallel_min_points=1), atol=2e-3)
        assert ck.code.count("omp parallel for") == 1 and ck.temps == []
        assert "one loop nest runs them over" in str(ck.explain())
        assert {"Sc", "mx", "E"} <= set(contracted(ck))
    ck = check(ROWMAX, [(1, 64, 1, 32)] * 3, polytc.Options(parallel_min_points=1),
               atol=2e-3)
    assert "omp parallel for" in ck.code
    assert "one loop nest runs them over" not in str(ck.explain())


# a convolution's bias and ReLU into a temporary that a later statement reads
EPILOGUE_TEMP = """
def f(float(N,C,H,W) I, float(F,C,KH,KW) Wt, float(F) b) -> (O) {
    T(n, f, h, w) +=! I(n, c, h + kh, w + kw) * Wt(f, c, kh, kw)
    R(n, f, h, w) = fmax(T(n, f, h, w) + b(f), 0.0)
    O(n, f, h, w) = R(n, f, h, w) * R(n, f, h, w)
}"""


@pytest.mark.parametrize("c", [8, 70])
def test_a_folded_epilogues_result_is_contracted(c):
    """The temporary a folded epilogue writes counts as written by the contraction's
    instances whose register tiles run it: it is kept per image like any temporary the
    image's statements touch (a fire module's expand convolutions at batch 64: 49 MB
    each in memory, now an image's worth in L2), and the contraction's partial sums
    live in it (``alias``), a deep reduction's too (``c`` 70: 630 per element)."""
    ck = check(EPILOGUE_TEMP, [(3, c, 12, 14), (16, c, 3, 3), (16,)],
               polytc.Options(parallel_min_points=1), atol=1e-3)
    assert contracted(ck)["R"]["loop"] == "c0" and ck.temps == []
    assert "alias T; into R" in ck.stages["contraction"]


# the same epilogue writing the inside of a padded temporary (graph/padplace.py)
SHIFTED_TEMP = """
def f(float(N,C,H,W) I, float(F,C,KH,KW) Wt, float(F) b) -> (Y) {
    T(n, f, h, w) +=! I(n, c, h + kh, w + kw) * Wt(f, c, kh, kw)
    O(n, f, h, w) = fmax(T(n, f, h - 1, w - 2) + b(f), 0.0) where h in 1:H-KH+2, w in 2:W-KW+3
    Y(n, f, h, w) = O(n, f, h + 1, w + 2) * 2.0 where h in 0:H-KH+1, w in 0:W-KW+1
}"""


@pytest.mark.parametrize("c", [5, 70])
def test_a_shifted_epilogues_result_is_contracted(c):
    """The epilogue's instances map to the contraction's through the elements they share,
    shifts included: its padded result is kept per image too."""
    ck = check(SHIFTED_TEMP, [(3, c, 10, 37), (7, c, 3, 3), (7,)],
               polytc.Options(parallel_min_points=1), atol=1e-3)
    # (T, read shifted, keeps an array: it holds partial sums where the reduction is split)
    assert contracted(ck)["O"]["loop"] == "c0" and len(ck.temps) == 1
