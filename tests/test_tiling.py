"""Tiled, register-tiled, vectorised and promoted kernels equal the oracle, for sizes that
do and do not divide the tiles, and the transformations really happen."""
from __future__ import annotations

import re

import numpy as np
import pytest

import polytc
from polytc.compiler import pipeline
from polytc.lang import reference
from polytc.tiling.decisions import Decision
from tests.kernels_small import SOFTMAX, check

MATMUL = "def mm(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"
MATMUL_T = "def mmt(float(K,M) A, float(N,K) B) -> (C) { C(m, n) +=! A(k, m) * B(n, k) }"
BMM = "def bmm(float(B,M,K) X, float(B,K,N) Y) -> (Z) { Z(b, m, n) +=! X(b, m, k) * Y(b, k, n) }"
CONV = """def conv(float(N,C,H,W) I, float(F,C,KH,KW) Wt) -> (O) {
    O(n, f, h, w) +=! I(n, c, h + kh, w + kw) * Wt(f, c, kh, kw)
}"""
MLP = """def layer(float(B,I) X, float(I,O) W, float(O) b) -> (Y) {
    T(m, o) +=! X(m, i) * W(i, o)
    Y(m, o) = fmax(T(m, o) + b(o), 0.0)
}"""
SMALL = polytc.Options(tile=(12, 32, 8), register_tile=(3, 16), parallel_min_points=1)


@pytest.mark.parametrize("m,k,n", [(24, 16, 64), (25, 17, 65), (7, 3, 5), (36, 8, 33)])
@pytest.mark.parametrize("options", [SMALL, polytc.Options()], ids=["small-tiles", "model"])
def test_matmul_tiled(m, k, n, options):
    ck = check(MATMUL, [(m, k), (k, n)], options)
    assert promoted(ck.code)  # the accumulators were promoted to registers
    assert "omp simd" in ck.code or "pt_v" in ck.code  # lanes as loops or as vectors


def promoted(code: str) -> bool:
    """Register-tile accumulators: arrays over a simd loop, or the vector micro-kernel's."""
    return "pt_acc" in code or "pt_a0_0" in code


@pytest.mark.parametrize("src,shapes", [
    (MATMUL_T, [(17, 26), (40, 17)]),
    (BMM, [(3, 13, 9), (3, 9, 35)]),
    (CONV, [(2, 5, 10, 37), (7, 5, 3, 3)]),
    (MLP, [(19, 23), (23, 47), (47,)]),
])
@pytest.mark.parametrize("options", [SMALL, polytc.Options(), polytc.Options(fusion="max")],
                         ids=["small-tiles", "model", "fuse-max"])
def test_contractions_tiled(src, shapes, options):
    ck = check(src, shapes, options)
    assert promoted(ck.code)


def test_tiling_report_and_isolation():
    k = polytc.tc(MATMUL, options=SMALL)
    b = pipeline.run(k.program, {"M": 40, "K": 20, "N": 70}, k.options)
    kinds = [e.kind for e in b.tiling]
    assert "contraction" in kinds
    entry = next(e for e in b.tiling if e.kind == "contraction")
    assert entry.facts["cache"] == [12, 32, 8] and entry.facts["register"] == [3, 16, 1]
    assert "contraction S0; order" in str(entry) and "cache 12x32x8" in str(entry)
    assert "isolate" in b.stages["schedule"]
    assert 'mark: "promote:' in b.stages["schedule"]


def test_no_tiling_option():
    ck = check(MATMUL, [(30, 20), (20, 40)], polytc.Options(tile=()))
    assert "pt_acc0[" not in ck.code and "pt_a0_0" not in ck.code  # no register tile
    assert "isolate" not in ck.schedule


def test_softmax_vectorised_and_promoted():
    ck = check(SOFTMAX, [(37, 129)], polytc.Options(parallel_min_points=1))
    assert "omp simd reduction(+:pt_acc0)" in ck.code  # the sum
    assert "omp simd" in ck.code


@pytest.mark.parametrize("dtype", [np.float64, np.int32])
def test_other_dtypes(dtype):
    src = MATMUL.replace("float(", "double(" if dtype == np.float64 else "int32(")
    k = polytc.tc(src, options=SMALL)
    rng = np.random.default_rng(1)
    A = rng.integers(-5, 5, (23, 11)).astype(dtype)
    B = rng.integers(-5, 5, (11, 37)).astype(dtype)
    np.testing.assert_array_equal(k(A, B), A @ B)


def test_aligned_outputs_and_inputs():
    from polytc.runtime.memory import is_aligned

    k = polytc.tc(MATMUL)
    A = np.ones((64, 64), np.float32)
    C = k(A, A)
    assert is_aligned(C)
    ck = k.specialize(A, A)
    assert ck.align_inputs == ()  # B is packed into micro-panels, A only broadcast
    np.testing.assert_array_equal(C, A @ A)


def test_a_streamed_operand_is_read_where_it_lies():
    """17 rows stream a 512 x 512 operand unpacked: no aligned copy of it at each call
    (3-6x the kernel's time for 7-15% of unaligned loads), nor of the operand the tile
    only broadcasts; without vector code, the operand read along the lanes 64 times per
    element is still copied aligned, the broadcast one not."""
    from polytc.runtime.memory import offset_copy

    rng = np.random.default_rng(5)
    A, B = (offset_copy(rng.standard_normal(s).astype(np.float32), 16)
            for s in ((17, 512), (512, 512)))
    k = polytc.tc(MATMUL)
    assert k.specialize(A, B).align_inputs == ()
    np.testing.assert_allclose(k(A, B), A @ B, rtol=1e-4, atol=1e-3)
    A, B = (offset_copy(rng.standard_normal(s).astype(np.float32), 16)
            for s in ((64, 96), (96, 80)))
    assert polytc.tc(MATMUL, options=polytc.Options(vectorize=False)).specialize(
        A, B).align_inputs == (1,)


BICG = """def bicg(float(N,M) A, float(N) r, float(M) p) -> (s, q) {
    s(j) +=! A(i, j) * r(i)
    q(i) +=! A(i, j) * p(j)
}"""
LAYERNORM = """def layernorm(float(N,D) X, float(D) g, float(D) b) -> (Y) {
    mean(n) +=! X(n, d) / D
    var(n) +=! (X(n, d) - mean(n)) * (X(n, d) - mean(n)) / D
    Y(n, d) = (X(n, d) - mean(n)) * rsqrt(var(n) + 1e-5) * g(d) + b(d)
}"""


@pytest.mark.parametrize("src,shapes", [(SOFTMAX, [(37, 129)]),
                                        (LAYERNORM, [(19, 70), (70,), (70,)])])
def test_max_fusion_makes_one_row_loop(src, shapes):
    ck = check(src, shapes, polytc.Options(fusion="max", parallel_min_points=1))
    body = ck.code[ck.code.index("int polytc_kernel"):]
    assert body.count("omp parallel for") == 1  # every statement inside one row loop
    assert "omp simd" in ck.code


def test_fusion_result_is_checked_against_dependences(monkeypatch):
    """If the rebuilt schedule broke a dependence, isl's schedule is kept."""
    from polytc.poly import fusion

    monkeypatch.setattr(fusion, "respects", lambda *a: False)
    ck = check(SOFTMAX, [(11, 33)], polytc.Options(fusion="max", parallel_min_points=1))
    assert ck.code.count("omp parallel for") >= 1


CONV_RELU = """def conv(float(N,C,H,W) I, float(F,C,3,3) Wt, float(F) b) -> (O) {
    P(n, c, h, w) = 0.0 where n in 0:N, c in 0:C, h in 0:H+2, w in 0:W+2
    P(n, c, h, w) = I(n, c, h - 1, w - 1) where n in 0:N, c in 0:C, h in 1:H+1, w in 1:W+1
    T(n, f, h, w) +=! P(n, c, h + kh, w + kw) * Wt(f, c, kh, kw)
    O(n, f, h, w) = fmax(T(n, f, h, w) + b(f), 0.0)
}"""
MM_CHAIN = """def chain(float(M,K) X, float(K,N) W, float(N) b, float(N,E) V) -> (Y) {
    T(m, n) +=! X(m, k) * W(k, n)
    A(m, n) = fmax(T(m, n) + b(n), 0.0)
    Y(m, e) +=! A(m, n) * V(n, e)
}"""


@pytest.mark.parametrize("src,shapes", [
    (CONV_RELU, [(1, 5, 9, 11), (6, 5, 3, 3), (6,)]),
    (MM_CHAIN, [(33, 20), (20, 40), (40,), (40, 17)]),
])
def test_contraction_programs_scheduled_in_pieces(monkeypatch, src, shapes):
    """isl schedules a program with a contraction one piece at a time (``in_pieces``):
    right by the oracle, and the same kernel as isl's schedule of the whole program."""
    from polytc.poly import fusion

    options = polytc.Options(parallel_min_points=1)
    calls = []
    real = fusion.in_pieces
    monkeypatch.setattr(fusion, "in_pieces", lambda *a: calls.append(1) or real(*a))
    check(src, shapes, options, rtol=1e-4, atol=1e-3)
    assert calls
    k = polytc.tc(src, options=options)
    env = k.program.bind_sizes(shapes)
    pieces = pipeline.run(k.program, env, options)
    monkeypatch.setattr(fusion, "in_pieces", lambda *a: None)
    whole = pipeline.run(k.program, env, options)
    assert "sequence" in pieces.stages["schedule"]
    assert pieces.stages["c"] == whole.stages["c"]


def test_transposed_matvec_gets_a_register_row():
    # in isl's nests (by default bicg runs as one pass: test_privatize.py)
    k = polytc.tc(BICG, options=polytc.Options(parallel_min_points=1, fusion="preserve"))
    b = pipeline.run(k.program, {"N": 70, "M": 90}, k.options)
    entry = next(e for e in b.tiling if e.kind == "contraction")
    assert entry.subject == "S0"  # s(j) += A(i, j) * r(i): accumulators along j
    assert entry.facts["register"][0] > 1 and entry.facts["register"][1] == 1
    assert Decision("promote", ["S1"]) in b.tiling  # q(i) += A(i, j) * p(j): a dot product per row
    check(BICG, [(70, 90), (70,), (90,)], k.options)


def test_transposed_matvec_streams_a_few_rows_per_core_tile():
    """``s(j) += r(i) A(i, j)``: one j tile per core, 8 rows of it at a time."""
    from polytc.machine import Machine
    from polytc.tiling.sizes import choose_sizes

    two = Machine(48 << 10, 2 << 20, 32 << 20, 64, 32, 2)
    assert choose_sizes(1, 2048, 2048, 4, two).cache == (1, 1024, 8)
    assert choose_sizes(1, 100, 5, 4, two).cache == (1, 64, 5)


@pytest.mark.parametrize("m", [512, 1024, 128, 100, 37])
def test_tile_height_balances_cores(m):
    """Full tiles are shared by the cores, the partial one runs after them."""
    from polytc.machine import Machine
    from polytc.tiling.sizes import choose_sizes

    two = Machine(48 << 10, 2 << 20, 32 << 20, 64, 32, 2)
    sizes = choose_sizes(m, m, m, 4, two)
    ti, mr = sizes.cache[0], sizes.register[0]

    def busiest(t):
        full, rest = divmod(m, t)
        return -(-full // 2) * t + rest

    if ti == m and m % mr:  # one tile of rows: the cores share the j tiles instead
        assert m <= 64 and busiest(sizes.cache[1]) * 2 / m < 1.06
        return
    assert ti % mr == 0
    options = [mr * k for k in range(1, 17)]
    assert busiest(ti) <= m / 2 * 1.06 or busiest(ti) == min(busiest(t) for t in options)


def test_a_short_row_tile_takes_register_rows_that_divide_it():
    """16 packed rows (a recurrent layer's batch), 8 a core: register tiles of 4 rows,
    not 6 and a partial 2, over a deep reduction tile."""
    from polytc.machine import Machine
    from polytc.tiling.sizes import choose_sizes

    two = Machine(48 << 10, 2 << 20, 32 << 20, 64, 32, 2)
    sizes = choose_sizes(16, 512, 256, 4, two, packed=True)
    assert sizes.cache[0] == 8 and sizes.register == (4, 64)
    # two register tiles pass over each panel: the whole 256-deep reduction in one tile
    # (a quarter of L2 holds the panel), not the L1 rule's 64
    assert sizes.cache[2] == 256
    assert choose_sizes(1024, 1024, 1024, 4, two, packed=True).register == (6, 64)


def test_batched_rows_over_a_short_reduction_take_whole_register_tiles():
    """128 rows per batch element (cores busy around them), which 6 leave partial: 4 rows
    of 4 vectors over a reduction of 128 where they divide the columns (attention's P V,
    a batched 128^3 product), else 8 rows of 2, 6 x 4 over one of 1024 (a feed-forward
    layer's second product) and where the cores share the rows."""
    from polytc.machine import Machine
    from polytc.tiling.sizes import choose_sizes

    two = Machine(48 << 10, 1 << 20, 32 << 20, 64, 32, 2)
    assert choose_sizes(128, 64, 128, 4, two, packed=True, cores=1).register == (4, 64)
    assert choose_sizes(128, 128, 128, 4, two, packed=True, cores=1).register == (4, 64)
    assert choose_sizes(128, 352, 128, 4, two, packed=True, cores=1).register == (8, 32)
    assert choose_sizes(128, 256, 1024, 4, two, packed=True, cores=1).register == (6, 64)
    assert choose_sizes(128, 64, 128, 4, two, packed=True).register != (8, 32)
    # the cost model's count for symbolic rows (``extents.GENERIC``) divides by 8 and not
    # by 6: a call's rows need not, the 6 x 4 tile stays (a transformer layer with a
    # symbolic sequence length, 17 rows a sequence: 1.27 -> 1.09x its specialised twin)
    assert choose_sizes(256, 256, 256, 4, two, packed=True, cores=1).register == (4, 64)
    assert choose_sizes(256, 256, 256, 4, two, packed=True, cores=1,
                        symbolic_rows=True).register == (6, 64)


def test_a_tile_of_rows_per_core_ends_in_whole_register_tiles():
    """1000 packed rows on 2 cores: 504 + 496, whole register tiles of 8 (500 each ended
    in a partial one: 2.6x slower); 8192 rows by 6 keep their 8 tiles of 1024 (tiles of
    1026 would leave a partial eighth to run after the full ones), and 1024 rows by 6
    their 2 of 512 (no split of them is whole)."""
    from polytc.machine import Machine
    from polytc.tiling.sizes import choose_sizes

    two = Machine(48 << 10, 1 << 20, 32 << 20, 64, 32, 2)
    sizes = choose_sizes(1000, 169, 512, 4, two, packed=True, per_call=True)
    assert sizes.cache[0] == 504 and sizes.cache[0] % sizes.register[0] == 0
    assert choose_sizes(8192, 64, 256, 4, two, packed=True, per_call=True).cache[0] == 1024
    assert choose_sizes(1024, 1024, 1024, 4, two, packed=True).cache[0] == 512
    # with a 32 KiB L1 no tile of 8192 rows by 6 splits into an even count: 2046 (four
    # full tiles, 8 rows after them), not 1366 (five full, and 1362 rows alone after)
    zen4 = Machine(32 << 10, 1 << 20, 32 << 20, 64, 32, 2)
    ti = choose_sizes(8192, 64, 256, 4, zen4, packed=True, per_call=True).cache[0]
    full, rest = divmod(8192, ti)
    assert ti % 6 == 0 and -(-full // 2) * ti + rest <= 4096 * 1.06


@pytest.mark.parametrize("m,n,k", [(40, 512, 512), (64, 512, 512), (256, 512, 512),
                                   (64, 256, 512)])
def test_an_operand_packed_per_call_is_split_by_columns_among_the_cores(m, n, k):
    """A product whose packed operand is an input (packed at every call) and no wider
    than two of its j tiles: the cores share the columns, each packing half of the
    operand, all the rows in one tile; with the rows shared, each core had packed all of
    it (64 x 512 x 512: 89 -> 77 us; 64 x 256 x 512: 56 -> 38 us)."""
    from polytc.machine import Machine
    from polytc.tiling.sizes import choose_sizes

    two = Machine(48 << 10, 1 << 20, 32 << 20, 64, 32, 2)
    ti, tj, _ = choose_sizes(m, n, k, 4, two, packed=True, per_call=True).cache
    assert ti == m and tj == n // 2
    # a constant operand (packed once) keeps the rows shared
    assert choose_sizes(m, n, k, 4, two, packed=True).cache[0] < m


def test_rows_split_unevenly_take_taller_tiles():
    """1000 rows (SqueezeNet's classifier, unpacked) on 2 cores: 8 tiles of 120 and a
    partial one after them put 520 rows on one core; taller tiles within half of L2
    split them 504 / 496."""
    from polytc.machine import Machine
    from polytc.tiling.sizes import _busiest, choose_sizes

    two = Machine(48 << 10, 1 << 20, 32 << 20, 64, 32, 2)
    sizes = choose_sizes(1000, 169, 512, 4, two)
    ti, tk, mr = sizes.cache[0], sizes.cache[2], sizes.register[0]
    assert ti % mr == 0 and _busiest(1000, ti, 2) <= 500 * 1.02
    assert ti * tk * 4 <= (1 << 20) // 2


@pytest.mark.parametrize("rows", [2, 3, 5, 17])
def test_a_few_rows_through_packed_weights_leave_the_cores_the_columns(rows):
    """A small batch through constant weights (an MLP's 784 -> 512 layer): all the rows
    in one tile of register tiles of equal height, the columns shared by the cores, so
    that each reads half of the weights, and an odd batch is not split into a full
    tile and a partial one run one after the other (at batch 3: 31 -> 12 us); 8 rows
    (4 a core) stay shared as they were.  Checked against the reference interpreter."""
    from polytc.machine import Machine, host
    from polytc.tiling.sizes import choose_sizes

    two = Machine(48 << 10, 2 << 20, 32 << 20, 64, 32, 2)
    sizes = choose_sizes(rows, 512, 784, 4, two, packed=True)
    assert sizes.cache[:2] == (rows, 256)
    mr = sizes.register[0]  # tiles of equal height, but for one row
    assert mr <= 6 and -(-rows // mr) * mr - rows < -(-rows // mr)
    assert choose_sizes(8, 512, 784, 4, two, packed=True).cache[:2] == (4, 512)
    ck = check("""
def layer(float(B,K) X, float(K,N) W, float(N) b) -> (Y) {
    Y(i, j) +=! X(i, k) * W(k, j)
    Y(i, j) = max(Y(i, j) + b(j), 0.0)
}""", [(rows, 784), (784, 512), (512,)], polytc.Options(constants=("W",)), rtol=1e-4,
               atol=1e-4)
    if host().cores > 1:
        assert f"cache {rows}x" in str(ck.explain()) and "omp parallel" in ck.code


@pytest.mark.parametrize("rows", [7, 9, 10, 11, 12])
def test_a_few_more_rows_than_a_register_tile_read_the_operand_once(rows):
    """7 to 12 rows over an operand read where it lies (not packed: every pass streams
    it from L2): one register tile of all the rows, two vectors wide, where 6 x 4
    vectors took two passes (6 + 1, 6 + 6); 8 rows keep 8 x 3 vectors, 6 and 13 rows
    6 x 4.  Checked against the reference interpreter."""
    from polytc.machine import Machine, host
    from polytc.tiling.sizes import choose_sizes

    two = Machine(48 << 10, 2 << 20, 32 << 20, 64, 32, 2)
    assert choose_sizes(rows, 512, 512, 4, two).register == (rows, 32)
    assert choose_sizes(8, 512, 512, 4, two).register == (8, 48)
    assert choose_sizes(13, 512, 512, 4, two).register == (6, 64)
    avx2 = Machine(48 << 10, 2 << 20, 32 << 20, 32, 16, 2)  # (16 registers: unchanged)
    assert choose_sizes(rows, 512, 512, 4, avx2).register[0] <= 6
    ck = check("def mm(float(M,K) A, float(K,N) B) -> (C) { C(i, j) +=! A(i, k) * B(k, j) }",
               [(rows, 512), (512, 512)], polytc.Options(), rtol=1e-4, atol=1e-4)
    if host().vector_registers >= 32 and host().vector_bytes == 64:
        assert f"register tiles {rows}x32" in str(ck.explain())


def test_generic_rows_give_a_narrow_tile_the_columns_of_a_wide_one():
    """A generic product's column tiles hold up to 8 panels of the widest register tile,
    whatever its own width: the few-rows variant's 2-vector tiles (codegen_c/fewrows.py)
    split 784 columns 416 + 368 between 2 cores, as the 4-vector tiles split them
    448 + 336, not 256 + 256 + 256 + 16 (512 columns on one core, 272 on the other)."""
    from polytc.machine import Machine
    from polytc.tiling.sizes import generic_rows

    two = Machine(48 << 10, 1 << 20, 32 << 20, 64, 32, 2)
    assert generic_rows(12, 32, 256, 784, 256, 4, two, per_call=True)[1] == 416
    assert generic_rows(6, 64, 256, 784, 256, 4, two, per_call=True)[1] == 448
    assert generic_rows(6, 64, 256, 4096, 256, 4, two)[1] == 512  # (8 panels at most)


def test_rows_that_do_not_balance_leave_the_cores_the_columns():
    """40 rows (a pointwise convolution's output channels) in register tiles of 8 split
    16 + 16 + 8 among 2 cores: one tile of rows, and the 729 columns (pixels) in tiles
    of 48 shared by the cores; 32 rows (16 a core) and 96 rows split evenly stay as
    they are."""
    from polytc.machine import Machine
    from polytc.tiling.sizes import choose_sizes

    two = Machine(48 << 10, 2 << 20, 32 << 20, 64, 32, 2)
    assert choose_sizes(40, 729, 256, 4, two).cache[:2] == (40, 48)
    assert choose_sizes(32, 729, 256, 4, two).cache[:2] == (16, 192)
    assert choose_sizes(96, 729, 256, 4, two).cache[:2] == (48, 256)
    # too few rows to share (16): the j tiles of the size that balances them best too
    # (one register tile's 48 columns, not 12 tiles of 256)
    assert choose_sizes(16, 3025, 128, 4, two).cache[:2] == (16, 48)


def test_misaligned_inputs_reuse_aligned_copies():
    """Misaligned inputs of a contraction (packed, or broadcast in place): new contents
    come through on every call."""
    from polytc.runtime.memory import is_aligned

    k = polytc.tc(MATMUL)
    rng = np.random.default_rng(3)
    raw = np.empty(64 * 64 + 8, np.float32)
    view = raw[1:1 + 64 * 64].reshape(64, 64)  # 4 bytes past an aligned start
    assert not is_aligned(view)
    for _ in range(3):
        view[...] = rng.standard_normal((64, 64))
        B = rng.standard_normal((64, 64)).astype(np.float32)
        np.testing.assert_allclose(k(view, B), view @ B, rtol=1e-4, atol=1e-4)


def test_auto_fusion_follows_the_cost_model():
    """auto: one fused row loop for softmax (as max), no fused rows across the two
    matmuls of an MLP (as preserve: each stays register-tiled), and for atax, where max
    would make the outer loop a reduction, one pass over the matrix (test_privatize.py)
    rather than isl's two nests (preserve)."""
    soft = polytc.tc(SOFTMAX, options=polytc.Options(parallel_min_points=1))
    ck = soft.specialize(np.zeros((9, 40), np.float32))
    assert ck.code[ck.code.index("int polytc_kernel"):].count("omp parallel for") == 1
    mlp = polytc.tc("""def mlp(float(B,I) X, float(I,H) W1, float(H,O) W2) -> (Y) {
        T(b, h) +=! X(b, i) * W1(i, h)
        Y(b, o) +=! T(b, h) * W2(h, o)
    }""")
    b = pipeline.run(mlp.program, {"B": 30, "I": 40, "H": 50, "O": 60}, mlp.options)
    assert [e.subject for e in b.tiling if e.kind == "contraction"] == ["S0", "S1"]
    assert "contraction" in b.stages["tiling"]
    atax = """def atax(float(M,N) A, float(N) x) -> (y) {
        t(i) +=! A(i, j) * x(j)
        y(j) +=! A(i, j) * t(i)
    }"""
    shapes = [(33, 47), (47,)]
    auto = check(atax, shapes, polytc.Options(parallel_min_points=1))
    keep = check(atax, shapes, polytc.Options(fusion="preserve", parallel_min_points=1))
    fused = check(atax, shapes, polytc.Options(fusion="max", parallel_min_points=1))
    assert "private:y" in auto.stages["schedule"]
    assert len({auto.code, keep.code, fused.code}) == 3


MATMUL_NT = """
def mm_nt(float(M,K) A, float(N,K) B) -> (C) {
    C(m, n) +=! A(m, k) * B(n, k)
}"""
SYRK = "def syrk(float(M,K) A) -> (C) { C(i, j) +=! A(i, k) * A(j, k) }"

QKT = """
def qkt(float(B,S,D) Q, float(B,T,D) K) -> (P) {
    P(b, s, t) +=! Q(b, s, d) * K(b, t, d)
}"""


@pytest.mark.parametrize("src,shapes,env,tensor,copy", [
    (MATMUL, [(70, 33), (33, 150)], dict(M=70, K=33, N=150), "B", "contiguous"),
    # A B^T: was not tiled at all (no operand unit-stride along the result's rows)
    (MATMUL_NT, [(70, 33), (150, 33)], dict(M=70, K=33, N=150), "B", "transposing"),
    (QKT, [(3, 21, 19), (3, 130, 19)], dict(B=3, S=21, D=19, T=130), "K", "transposing"),
    (BMM, [(3, 13, 9), (3, 9, 70)], dict(B=3, M=13, K=9, N=70), "Y", "contiguous"),
    # A A^T reads one tensor twice: its second read is packed (was not tiled: 4.5x)
    (SYRK, [(70, 33)], dict(M=70, K=33), "A", "transposing"),
])
@pytest.mark.parametrize("options", [SMALL, polytc.Options()], ids=["small-tiles", "model"])
def test_contraction_operand_packed(src, shapes, env, tensor, copy, options):
    """The vector operand is copied into micro-panels (an isl extension); odd sizes leave
    partial tiles and partial panels; results match the reference interpreter."""
    ck = check(src, shapes, options)
    k = polytc.tc(src, options=options)
    b = pipeline.run(k.program, env, k.options)
    packs = [d for d in b.tiling if d.kind == "pack"]
    assert [d.facts["tensor"] for d in packs] == [tensor]
    assert packs[0].facts["copy"] == copy
    assert "extension" in b.stages["schedule"] and "pt_pack0" in b.stages["c"]
    assert "pt_a0_0 +=" in ck.code  # the explicit-vector micro-kernel


@pytest.mark.parametrize("src,shapes", [
    (MATMUL_NT, [(70, 96), (128, 96)]),
    (QKT, [(2, 21, 64), (2, 128, 64)]),
    (SYRK, [(64, 80)]),
])
def test_transposing_copy_in_transposed_blocks(src, shapes):
    """A transposing copy's whole blocks (a panel's lanes by a cache line along the
    reduction) are loaded as vectors along it, transposed in registers and stored along
    the lanes (``codegen_c/tcopy.py``); results match the reference interpreter.  (A
    reduction that ends in a partial block, or a partial panel, bounds every block's
    loops by ``PT_MIN``: the copy stays element by element, as with K = 33 above.)"""
    from polytc.machine import host

    ck = check(src, shapes, polytc.Options())
    lanes = host().lanes(4)
    assert ("pt_lb += " in ck.code) == (lanes >= 4 and 16 % lanes == 0)
    if "pt_lb += " in ck.code:
        assert f"pt_lb += {lanes}L" in ck.code and "__builtin_shufflevector" in ck.code


def test_one_read_of_a_tensor_read_twice_is_packed_once_before_the_call():
    k = polytc.tc(SYRK, options=polytc.Options(constants=("A",)))
    A = np.random.default_rng(3).standard_normal((70, 45)).astype(np.float32)
    np.testing.assert_allclose(k(A), A @ A.T, rtol=1e-4, atol=1e-4)
    assert k.specialize(A).prepacked  # the copy of A(j, k) made once; A(i, k) read as is


def test_packed_operand_strided_and_unaligned_inputs():
    """Views with strides and odd offsets go through the same packed kernel."""
    rng = np.random.default_rng(5)
    k = polytc.tc(MATMUL_NT)
    big_a = rng.standard_normal((2 * 67 + 1, 45)).astype(np.float32)
    big_b = rng.standard_normal((129, 2 * 45)).astype(np.float32)
    a, b = big_a[1::2], big_b[:, 1::2]  # strided rows / columns, unaligned starts
    np.testing.assert_allclose(k(a, b), a @ b.T, rtol=1e-4, atol=1e-4)


def test_pack_explained():
    k = polytc.tc(MATMUL_NT)
    text = str(k.explain(np.ones((40, 30), np.float32), np.ones((70, 30), np.float32)))
    assert "packed copy" in text and "micro-panels" in text


def test_only_used_division_helpers_emitted():
    ck = check(MATMUL, [(8, 8), (8, 8)], polytc.Options())
    assert "pt_div_" not in ck.code and "pt_rem_" not in ck.code
    k = polytc.tc("def d(int32(N) a, int32(N) b) -> (c) { c(i) = a(i) / b(i) }")
    x = np.arange(1, 9, dtype=np.int32)
    code = k.specialize(x, x).code
    assert "pt_div_int32" in code and "pt_div_int8" not in code and "pt_div_uint16" not in code


KRON = """def kron(float(I0,J0) W0, float(I1,J1) W1, float(M,J0,J1) X) -> (Y) {
    T(m, i0, b1) +=! W0(i0, b0) * X(m, b0, b1)
    Y(m, i0, i1) +=! T(m, i0, b1) * W1(i1, b1)
}"""


@pytest.mark.parametrize("m,i0,j0,i1,j1", [(64, 32, 32, 32, 32), (9, 13, 17, 19, 23)])
def test_contractions_chained_over_a_batch_fuse_over_it(m, i0, j0, i1, j1):
    """A Kronecker product's two contractions share the batch m: one loop over m, each
    contraction a tiled matrix product per batch element, packed through the batch
    index the outer loop runs, and T one batch element's worth (contracted)."""
    ck = check(KRON, [(i0, j0), (i1, j1), (m, j0, j1)], polytc.Options(parallel_min_points=1))
    tiling = ck.stages["tiling"]
    assert tiling.count("contraction S") == 2
    if j1 >= 16 and i1 >= 16:
        assert "pack S0; tensor X" in tiling and "pack S1; tensor W1" in tiling
    assert "contract T" in ck.stages["contraction"]
    body = ck.code[ck.code.index("int polytc_kernel"):]
    assert body.count("omp parallel for") == 1


PADDED_CONV = """def conv(float(N,C,H,W) I, float(F,C,3,3) Wt, float(F) b) -> (O) {
    P(n, c, h, w) = h >= 1 && h < H + 1 && w >= 1 && w < W + 1 ? I(n, c, h - 1, w - 1) : 0.0
        where h in 0:H + 2, w in 0:W + 2
    T(n, f, h, w) +=! P(n, c, h + kh, w + kw) * Wt(f, c, kh, kw) where h in 0:H, w in 0:W
    O(n, f, h, w) = fmax(T(n, f, h, w) + b(f), 0.0)
}"""


@pytest.mark.parametrize("n", [1, 3])
def test_convolution_steps_fuse_over_the_images(n):
    """A batch of images: the padded copy, the convolution and its epilogue run image
    by image in one parallel loop (each image's temporaries one image's worth, in the
    caches); a batch of one keeps isl's schedule (no loop of one iteration)."""
    ck = check(PADDED_CONV, [(n, 8, 20, 20), (24, 8, 3, 3), (24,)],
               polytc.Options(parallel_min_points=1))
    body = ck.code[ck.code.index("int polytc_kernel"):]
    assert "contraction S" in ck.stages["tiling"]
    if n > 1:
        assert body.count("omp parallel for") == 1 and "contract P" in ck.stages["contraction"]
    else:
        assert body.count("omp parallel for") > 1


def test_batched_contraction_keeps_its_rows_whole():
    """With a batch to share among the cores, the i tiles are not split per core."""
    from polytc.machine import Machine
    from polytc.tiling.sizes import choose_sizes

    two = Machine(48 << 10, 2 << 20, 32 << 20, 64, 32, 2)
    assert choose_sizes(256, 256, 64, 4, two, packed=True).cache[0] == 128
    assert choose_sizes(256, 256, 64, 4, two, packed=True, cores=1).cache[0] == 256


def test_an_operand_packed_at_every_call_is_packed_once_by_the_cores():
    """Where i's register tiles run outside the panels (a deep Tk), an operand packed at
    every call gets one tile of all rows and the cores share the j tiles: each packs its
    part of it once, not all of it once per tile of rows.  Not for a constant (packed
    once anyway), nor where the j tiles would leave a core idle."""
    from polytc.machine import Machine
    from polytc.tiling.sizes import choose_sizes

    zen5 = Machine(48 << 10, 1 << 20, 32 << 20, 64, 32, 2)
    mlp = choose_sizes(128, 1024, 1024, 4, zen5, packed=True, per_call=True)
    assert mlp.cache[:2] == (128, 512), mlp
    assert choose_sizes(128, 1024, 1024, 4, zen5, packed=True).cache[0] == 64
    # the result's block within twice L2: narrower j tiles, the packed tile deeper
    assert choose_sizes(2048, 2048, 2048, 4, zen5, packed=True, per_call=True).cache == \
        (2048, 256, 512)
    assert choose_sizes(512, 1536, 1024, 4, zen5, packed=True, per_call=True).cache[0] < 512


def test_heads_split_evenly_keep_the_rows_whole():
    """4 attention heads on 2 cores: the heads' loop is the parallel one, and the 128
    rows of each head's product are one tile (rows split for the cores as well cut
    partial tiles, twice isl's AST time), with no register tile of rows left over
    beyond the one partial remainder."""
    from polytc.machine import Machine
    from polytc.tiling.sizes import choose_sizes

    two = Machine(48 << 10, 1 << 20, 32 << 20, 64, 32, 2)
    assert choose_sizes(128, 128, 64, 4, two, cores=1).cache[0] == 128
    assert choose_sizes(128, 128, 64, 4, two).cache[0] < 128
    qk = polytc.tc("""
def qk(float(4,128,64) Q, float(4,64,128) K) -> (S) {
    S(h, i, j) +=! Q(h, i, d) * K(h, d, j)
}""")
    r = np.random.default_rng(0)
    Q, K = r.random((4, 128, 64), np.float32), r.random((4, 64, 128), np.float32)
    assert "cache tiles 1x128x" in str(qk.explain(Q, K, vectorizer=False))
    np.testing.assert_allclose(qk(Q, K), Q @ K, rtol=1e-4)


def test_few_rows_share_the_j_tiles_among_the_cores():
    """16 rows (a squeeze layer's output channels) over 3025 pixels: one row tile, and
    the parallel loop runs over the j tiles (each core reads its part of the vector
    operand once, where three 6-row tiles read it three times on two cores)."""
    from polytc.machine import Machine
    from polytc.tiling.sizes import choose_sizes

    two = Machine(48 << 10, 2 << 20, 32 << 20, 64, 32, 2)
    assert choose_sizes(16, 3025, 128, 4, two).cache[0] == 16
    assert choose_sizes(512, 3025, 128, 4, two).cache[0] < 512
    src = """def f(float(M,K) W, float(B,K,N) X) -> (Y) {
        Y(b, m, n) +=! W(m, k) * X(b, k, n)
    }"""  # a pointwise convolution of one image: X is not packed
    ck = check(src, [(16, 64), (1, 64, 3025)], polytc.Options())
    par = [ln for ln in str(ck.explain()).splitlines() if "runs in parallel" in ln]
    assert par and "floor(n/" in par[0] and "cache 16x" in ck.stages["tiling"]


def test_tile_depth_grows_when_the_result_block_leaves_l2():
    """Tk from L1 while the Ti x Tj result block stays in a quarter of L2 (96 for a
    panel of 64 lanes in half of 48 KiB, or the divisor of the reduction nearest to it:
    no partial reduction tile); beyond, as deep as half of L2 holds the Ti x Tk block
    (the result tile is then loaded and stored once per Tk step from memory)."""
    from polytc.machine import Machine
    from polytc.tiling.sizes import choose_sizes

    two = Machine(48 << 10, 2 << 20, 32 << 20, 64, 32, 2)
    small = choose_sizes(128, 1024, 1024, 4, two, packed=True)  # 64 x 512: 128 KiB
    assert small.cache == (64, 512, 128)  # 1024 % 96 != 0: 64 and 128 as near, 128
    assert choose_sizes(128, 1024, 960, 4, two, packed=True).cache[2] == 96
    assert choose_sizes(128, 1024, 784, 4, two, packed=True).cache[2] == 98
    big = choose_sizes(1024, 1024, 1024, 4, two, packed=True)  # 512 x 512: 1 MiB
    assert big.cache == (512, 512, (1 << 20) // (4 * 512))


def test_tile_depth_grows_to_the_packed_block_under_tall_row_tiles():
    """Where the result block leaves L2 under a tall Ti (1000 rows of a classifier over
    169 pixels), Tk deepens until the packed Tk x Tj block the row tiles pass over fills
    half of L2, deeper than the Ti x Tk rule allows (131)."""
    from polytc.machine import Machine
    from polytc.tiling.sizes import choose_sizes

    zen5 = Machine(48 << 10, 1 << 20, 32 << 20, 64, 32, 2)
    sizes = choose_sizes(1000, 169, 512, 4, zen5, packed=True, cores=1, per_call=True)
    assert sizes.cache == (1000, 192, 512), sizes
    assert choose_sizes(1000, 169, 4096, 4, zen5, packed=True, cores=1,
                        per_call=True).cache[2] == (1 << 19) // (4 * 169)


def test_few_rows_that_six_leave_partial_take_eight_rows_of_three_vectors():
    """Unpacked, 16 or 32 rows (a pointwise convolution's output channels) run in
    register tiles of 8 rows and 3 vectors rather than 6 rows and 4 (a partial tile of
    4 rows): the same 24 accumulators; 48 rows keep 6 x 4, AVX2's 6 x 2 is kept."""
    from polytc.machine import Machine
    from polytc.tiling.sizes import choose_sizes

    zen5 = Machine(48 << 10, 1 << 20, 32 << 20, 64, 32, 2)
    assert choose_sizes(16, 3025, 128, 4, zen5, cores=1).register == (8, 48)
    assert choose_sizes(32, 729, 256, 4, zen5, cores=1).register == (8, 48)
    assert choose_sizes(48, 729, 256, 4, zen5, cores=1).register == (6, 64)
    avx2 = Machine(32 << 10, 512 << 10, 32 << 20, 32, 16, 2)
    assert choose_sizes(16, 3025, 128, 4, avx2, cores=1).register == (6, 16)


def test_eight_row_tiles_of_a_pointwise_product_equal_the_oracle():
    """A pointwise convolution's 16 output channels over an odd count of pixels, in
    8 x 48 register tiles where the CPU has 32 vector registers of 16 floats (a partial
    last column tile), equals the reference interpreter."""
    from polytc.machine import host

    src = """def pw(float(C,K) W, float(N,K,P) X, float(C) b) -> (Z) {
        Y(n, c, p) +=! W(c, k) * X(n, k, p)
        Z(n, c, p) = max(Y(n, c, p) + b(c), 0.0)
    }"""
    ck = check(src, [(16, 40), (2, 40, 1201), (16,)], polytc.Options(constants=("W", "b")))
    if host().lanes(4) == 16 and host().vector_registers >= 32:
        assert "register 1x8x48" in ck.stages["tiling"] or "register 8x48" in \
            ck.stages["tiling"], ck.stages["tiling"]


SHARED_WEIGHTS = """def proj(float(B,S,K) X, float(K,N) W) -> (Y) {
    Y(b, s, n) +=! X(b, s, k) * W(k, n)
}"""


@pytest.mark.parametrize("constant", [True, False])
def test_a_batch_stays_outside_the_cache_tile(constant):
    """A batch (every read takes its index as a whole subscript) over a product whose
    packed operand does not depend on it stays outside the cache tile: its loop is the
    parallel one and each core reads its own images, rather than the cores sharing the
    tiles of the rows and each reading the whole batch once per tile."""
    options = polytc.Options(constants=("W",) if constant else ())
    ck = check(SHARED_WEIGHTS, [(6, 40, 24), (24, 64)], options)
    assert re.search(r"contraction S\d; order \[0, [^]]*\]; cache 1x", ck.stages["tiling"]), \
        ck.stages["tiling"]
    body = ck.code[ck.code.index("int polytc_kernel"):]
    assert re.search(r"omp parallel for\s*for \(long c\d+ = 0L; c\d+ <= 5L; c\d+ \+= 1L\)",
                     body), body


def test_narrow_j_takes_whole_vectors_and_more_rows():
    """j = 56 with 16 lanes: three vectors (a partial fourth measured slower) and 8
    rows, 24 accumulators; j = 28: two vectors, the second partial (masked in the
    micro-kernel), unless a packed operand's panels must be whole vectors."""
    from polytc.machine import Machine
    from polytc.tiling.sizes import choose_sizes

    two = Machine(48 << 10, 2 << 20, 32 << 20, 64, 32, 2)
    assert choose_sizes(64, 56, 576, 4, two).register == (8, 48)
    assert choose_sizes(64, 28, 576, 4, two).register == (8, 32)
    assert choose_sizes(64, 28, 576, 4, two, packed=True).register == (8, 16)
    assert choose_sizes(64, 8, 576, 4, two).register == (6, 8)  # under one vector


def test_j_tiles_waste_few_lanes():
    """j = 112 in panels of 4 vectors pads 16 of 128 lanes: one-vector panels pad none
    (8 rows); a few padded lanes (1000 in 1024) keep the default register tile; one
    vector counts a quarter more (its broadcast per FMA): 196 and 169 take 2 and 3.
    A core's 32 rows, which 6-row tiles leave partial, take 4-row tiles (a 64 x 512 x
    1000 product with constant weights 305-330 -> 142-144 us)."""
    from polytc.machine import Machine
    from polytc.tiling.sizes import choose_sizes

    two = Machine(48 << 10, 2 << 20, 32 << 20, 64, 32, 2)
    assert choose_sizes(64, 112, 147, 4, two, packed=True).register == (8, 16)
    assert choose_sizes(64, 96, 147, 4, two, packed=True).register == (8, 48)
    assert choose_sizes(96, 1000, 512, 4, two, packed=True).register == (6, 64)
    assert choose_sizes(96, 512, 512, 4, two, packed=True).register == (6, 64)
    assert choose_sizes(64, 1000, 512, 4, two, packed=True).register == (4, 64)
    assert choose_sizes(232, 196, 232, 4, two, packed=True).register == (8, 32)
    assert choose_sizes(1000, 169, 512, 4, two, packed=True).register == (8, 48)


@pytest.mark.parametrize("shapes,tile,loop", [
    ([(100, 64), (64, 64)], (56, 64, 64), "c0 = 0L; c0 <= 99L; c0 \\+= 56L"),
    ([(32, 64), (64, 80)], (32, 48, 64), "c1 = 0L; c1 <= 79L; c1 \\+= 48L")])
@pytest.mark.parametrize("constant", [False, True])
def test_a_partial_last_tile_of_the_parallel_loop_stays_in_it(shapes, tile, loop, constant):
    """Rows in a full tile of 56 and a partial one of 44, or one tile of rows and columns
    in tiles of 48 and 32, a tile per core: isolating the full tiles left two loops of
    one iteration each and nothing in parallel (the whole kernel ran on one core); the
    parallel loop keeps both tiles."""
    from polytc.machine import host

    opts = polytc.Options(tile=tile, parallel_min_points=1,
                          constants=("B",) if constant else ())
    ck = check(MATMUL, shapes, opts, rtol=1e-4, atol=1e-4)
    if host().cores < 2:
        pytest.skip("one core: nothing runs in parallel")
    assert re.search(rf"#pragma omp parallel for\s+for \(long {loop}\)", ck.code), ck.code


def test_a_batch_of_three_products_runs_in_parallel():
    """3 products of 257 rows on 2 cores: the rows' tiles (129 and 128) are the parallel
    loop, inside the batch's; isolated, they ran on one core."""
    from polytc.machine import host

    ck = check("def bmm(float(B,M,K) X, float(B,K,N) Y) -> (Z) {\n"
               "    Z(b, i, j) +=! X(b, i, k) * Y(b, k, j)\n}",
               [(3, 257, 40), (3, 40, 160)], polytc.Options(), rtol=1e-4, atol=1e-4)
    if host().cores < 2:
        pytest.skip("one core: nothing runs in parallel")
    assert "#pragma omp parallel" in ck.code, ck.code


@pytest.mark.parametrize("m,n,k,constant", [
    (33, 160, 512, False), (257, 1000, 64, True), (600, 224, 64, False),
    (7, 333, 512, False), (1000, 160, 64, True)])
def test_a_product_with_work_for_every_core_runs_in_parallel(m, n, k, constant):
    """Products that isolation had left on one core (their parallel loop: a full tile
    and a partial one), with the cost model's own tiles."""
    from polytc.machine import host

    ck = check(MATMUL, [(m, k), (k, n)], polytc.Options(constants=("B",) if constant else ()),
               rtol=1e-4, atol=1e-3)
    if host().cores < 2:
        pytest.skip("one core: nothing runs in parallel")
    assert "#pragma omp parallel" in ck.code, ck.code


def test_only_a_few_partial_tiles_of_a_loop_that_may_be_parallel_are_loose():
    from polytc.machine import Machine
    from polytc.tiling.sizes import loose_tiles

    two = Machine(48 << 10, 1 << 20, 32 << 20, 64, 32, 2)
    assert loose_tiles([1000, 160, 512], [504, 160, 512], [False] * 3, 0, 2, two) == (0,)
    assert loose_tiles([1008, 160, 512], [504, 160, 512], [False] * 3, 0, 2, two) == ()
    assert loose_tiles([1000, 160, 512], [96, 160, 512], [False] * 3, 0, 2, two) == ()  # 11
    assert loose_tiles([1000, 160, 512], [504, 160, 512], [True, False, False], 0, 2,
                       two) == ()
    assert loose_tiles([32, 80, 64], [32, 48, 64], [False] * 3, 0, 2, two) == (1,)
    # only the parallel loop: not one inside it, nor the reduction's
    assert loose_tiles([1000, 80, 64], [96, 48, 64], [False] * 3, 0, 2, two) == ()
    assert loose_tiles([32, 64, 100], [32, 64, 64], [False] * 3, 0, 2, two) == ()
    # a batch of 3 around rows in tiles of 129 and 128, the rows' loop the parallel one
    assert loose_tiles([3, 257, 160, 128], [1, 129, 160, 96], [False] * 4, 0, 3, two) == ()
    assert loose_tiles([3, 257, 160, 128], [1, 129, 160, 96], [False] * 4, 1, 3, two) == (1,)


@pytest.mark.parametrize("m,n,constant", [(33, 100, False), (21, 70, True)])
def test_a_partial_tiles_rows_across_partial_lanes_run_micro_kernels(m, n, constant):
    """Rows in tiles of 17 (or 11) and register tiles of 8, a reduction too deep for the
    panels to stay in L1 (the rows' tiles outside the lanes'): the partial register
    tile's rows run across every tile of the lanes, the last one partial too, in one
    loop whose lanes end at ``min(15, ...)``; its full tiles of lanes run the
    micro-kernel under a test, where all of them had run in plain loops (33 x 100 x
    512: 98 -> 20 us)."""
    opts = polytc.Options(tile=((m + 1) // 2, 128, 512), register_tile=(8, 16),
                          constants=("B",) if constant else ())
    ck = check(MATMUL, [(m, 512), (512, n)], opts, rtol=1e-3, atol=1e-3)
    if "pt_v" not in ck.code:
        pytest.skip("no vector register tiles on this machine")
    test = re.search(r"if \(\(\(-c\d+\) \+ %dL\) >= 15L\)\s*\{\s*\{\s*pt_v\w+ pt_a0_0" % (n - 1),
                     ck.code)
    assert test, ck.code


@pytest.mark.parametrize("n", [100, 784])
def test_symbolic_rows_remainder_across_partial_lanes_runs_micro_kernels(n):
    """Rows symbolic (a dynamic batch): the remainder of rows (``M % 6``, a micro-kernel
    per count) across every tile of the lanes, the last one partial: the full tiles of
    lanes run those micro-kernels under a test, where all of them had run in plain loops
    that load and store the result at every reduction step (M x 784 x 256 at 100 rows:
    915 -> 99 us, specialised 106; at 3 rows of 1000 columns 53 -> 19 us); so does the
    partial tile of lanes, under a test of its width.  Every row count from 1 to 13 is
    checked against numpy."""
    mm = polytc.tc(MATMUL, dynamic=("M",))
    rng = np.random.default_rng(0)
    B = rng.standard_normal((256, n), dtype=np.float32)
    for m in range(1, 14):
        A = rng.standard_normal((m, 256), dtype=np.float32)
        np.testing.assert_allclose(mm(A, B), A.astype(np.float64) @ B, rtol=1e-4, atol=1e-3)
    ck = mm.specialize(A, B)
    code = ck.code
    if "pt_v" not in code:
        pytest.skip("no vector register tiles on this machine")
    lanes = re.search(r"register tiles \d+x(\d+)x", str(ck.explain()))
    if lanes and n % int(lanes.group(1)) == 0:
        return  # (narrower register tiles divide the columns: no partial tile of lanes)
    # a micro-kernel for each row count of the remainder, under the lanes' test, and
    # one for the partial tile of lanes under a test of its width
    full = re.search(r"\+ %dL\) >= (\d+)L\)" % (n - 1), code)
    assert full, code
    width = int(full.group(1)) + 1
    if n % width:
        assert f"+ {n - 1}L) == {n % width - 1}L)" in code, code


def test_a_row_tile_of_few_register_tiles_takes_rows_that_divide_it():
    """100 rows on 2 cores, tiles of 50: neither 8 nor 4 rows divide them, 10 do (8
    rows left a partial register tile of 2 in every tile: 100 x 100 x 512 193 -> 31 us)."""
    from polytc.machine import Machine
    from polytc.tiling.sizes import Sizes, choose_sizes

    two = Machine(48 << 10, 1 << 20, 32 << 20, 64, 32, 2)
    assert choose_sizes(100, 100, 512, 4, two, packed=True) == Sizes((50, 112, 512), (10, 16))
    assert choose_sizes(100, 40, 512, 4, two, packed=True).register == (10, 32)
    assert choose_sizes(64, 512, 1000, 4, two, packed=True).register == (4, 64)  # as before


def test_partial_row_tiles_run_micro_kernels():
    """Rows that end in a partial register tile (20 in tiles of 8), in cache tiles
    whose columns end in one too (100 in 32s): every tile is a micro-kernel, none runs
    the lane loops.  Where the rows' count depends on the outer loops, all 8 rows run,
    those past the bound on the last valid row, and only the valid ones are stored."""
    ck = check(POINTWISE, [(20, 24), (8, 24, 100)], polytc.Options(register_tile=(8, 32)))
    body = ck.code[ck.code.index("pt_pack0["):]
    assert "omp simd" not in body and "pt_acc" not in body
    assert body.count("pt_a0_0 =") == 3
    assert "pt_a7_0 =" in body and "if (7L <= PT_MIN(7L, ((-c6) + 19L)))" in body


def test_register_rows_are_unrolled_by_the_code_generator():
    """The rows of a register tile stay a loop for isl (a ``rows`` mark: isl's unrolling
    took half of its AST time) and become the micro-kernel's rows in C; a tile one
    column wide (49 = 48 + 1: isl drops its lane loop) keeps its rows' sums in scalar
    locals instead of memory."""
    ck = check(POINTWISE, [(16, 24), (2, 24, 49)], polytc.Options(register_tile=(8, 48)))
    ast = ck.stages["ast"]
    assert "// rows:" in ast and "S0(" in ast and ast.count("S0(") <= 4
    assert ck.code.count("pt_a7_0 +=") >= 1
    assert "float pt_acc7 =" in ck.code


def test_register_rows_outside_a_micro_kernel_are_unrolled():
    """Rows whose lane loop has a bound that depends on the outer loops (a partial
    column tile: no micro-kernel) are still unrolled, each a block where the row's
    iterator is a constant (as isl's unrolling wrote them)."""
    ck = check(POINTWISE, [(20, 24), (8, 24, 100)],
               polytc.Options(register_tile=(8, 32), tile=(16, 48, 24)))
    assert "const long c9 = 0L;" in ck.code and "const long c9 = 3L;" in ck.code
    assert "for (long c9 =" not in ck.code


CONV_B = """def conv(float(N,C,H,W) I, float(F,C,KH,KW) Wt, float(F) b) -> (O) {
    O(n, f, h, w) +=! I(n, c, h + kh, w + kw) * Wt(f, c, kh, kw)
    O(n, f, h, w) = O(n, f, h, w) + b(f)
}"""
CONV_S2 = """def conv(float(N,C,H,W) I, float(F,C,KH,KW) Wt) -> (O) {
    O(n, f, h, w) +=! I(n, c, 2 * h + kh, 2 * w + kw) * Wt(f, c, kh, kw)
        where h in 0:(H - KH) / 2 + 1, w in 0:(W - KW) / 2 + 1
}"""


@pytest.mark.parametrize("n,c,f,hw", [(1, 5, 40, 9), (1, 3, 37, 16), (2, 4, 64, 5)])
def test_narrow_image_convolution_vectorises_over_channels(n, c, f, hw):
    """An image narrower than one vector: the lanes run over the output channels (the
    weights packed by a transposing copy), the accumulators with the result's stride;
    a batch of one is no loop and needs none; the contraction runs in parallel."""
    from polytc.machine import host

    ck = check(CONV_B, [(n, c, hw, hw), (f, c, 3, 3), (f,)],
               polytc.Options(parallel_min_points=1))
    if hw - 2 >= host().lanes(4):
        pytest.skip("the image is a vector or wider with this machine's vectors")
    tiling = ck.stages["tiling"]
    assert "pack S0; tensor Wt" in tiling and "copy transposing" in tiling
    assert "lanes f" in tiling
    assert promoted(ck.code)
    assert ck.code.count("omp parallel for") >= 1
    if n > 1:  # the image loops the weights do not depend on: inside the tile; the
        ho = hw - 2  # batch outside it, with the bias (fused over the images)
        assert f"cache {ho}x{ho}x" in tiling
    assert "lanes f" in tiling


CONV_RELU = """def conv(float(N,C,H,W) I, float(F,C,3,3) Wt, float(F) b) -> (O) {
    T(n, f, h, w) +=! I(n, c, h + kh, w + kw) * Wt(f, c, kh, kw)
        where h in 0:H - 2, w in 0:W - 2
    O(n, f, h, w) = fmax(T(n, f, h, w) + b(f), 0.0)
}"""


def test_channel_lanes_apply_the_epilogue_as_they_store():
    """Lanes over the channels (a narrow image) with a bias and ReLU on a temporary:
    each lane's value goes through the epilogue as it is stored, with the result's
    stride, on the last reduction tile, instead of a pass that reads it back; the
    tile goes through one buffer (``pt_t``) in one loop over its lanes for all its
    rows (``microkernel.strided_tile``), not a loop per accumulator vector.  Where a
    vector holds the tile's rows (7, to a power of 2: 8), the tile is transposed in
    registers first, and each lane's rows, adjacent in the result, are stored by one
    loop that gcc vectorises."""
    from polytc.machine import host

    ck = check(CONV_RELU, [(2, 8, 9, 9), (40, 8, 3, 3), (40,)],
               polytc.Options(parallel_min_points=1))
    assert "lanes f" in ck.stages["tiling"] and "fold" in ck.stages["fold"]
    assert "pt_s[" not in ck.code and '__asm__("")' in ck.code  # (not vectorised by gcc)
    lines = ck.code.splitlines()
    if host().lanes(4) < 8:  # no transposition: an element per row and lane
        stores = [ln for ln in lines if "pt_t[" in ln and "+ pt_l]" in ln]
        assert any(ln.lstrip().startswith("O[") for ln in stores)
        return
    assert "__builtin_shufflevector" in ck.code
    assert any(ln.lstrip().startswith("O[") and "pt_t[pt_l * 8L + pt_r]" in ln for ln in lines)
    assert sum("for (long pt_r = 0; pt_r < 7L; pt_r += 1)" in ln for ln in lines) == 2


@pytest.mark.parametrize("lanes,span,rows", [(16, 8, 8), (16, 8, 5), (8, 8, 7), (16, 16, 13),
                                             (4, 4, 3), (16, 1, 1)])
def test_tile_transposed_in_registers(lanes, span, rows):
    """``microkernel.transposed``: the shuffles, replayed on the elements' labels, put
    element (row t, lane l of vector v) at ``pt_t[(v * lanes + l) * span + t]``."""
    import re

    from polytc.codegen_c.microkernel import transposed

    value = {t: (lambda v, t=t: f"A{t}_{v}") for t in range(rows)}
    env = {f"A{t}_{v}": [(t, v * lanes + k) for k in range(lanes)]
           for t in range(rows) for v in range(2)}
    env["((V){})"] = [None] * lanes
    buf = {}
    for st in map(str, transposed("V", lanes, span, 2, value)):
        m = re.fullmatch(r"V (\w+) = __builtin_shufflevector\((.+?), (.+?), ([\d, ]+)\);", st)
        if m:
            both = env[m.group(2)] + env[m.group(3)]
            env[m.group(1)] = [both[int(i)] for i in m.group(4).split(",")]
            continue
        m = re.fullmatch(r"\*\(V \*\)&pt_t\[(\d+)L\] = (\w+);", st)
        assert m, st
        buf.update((int(m.group(1)) + i, lab) for i, lab in enumerate(env[m.group(2)]))
    assert all(buf[ch * span + t] == (t, ch) for ch in range(2 * lanes) for t in range(rows))


@pytest.mark.parametrize("vectors,depth,deep", [(2.5, 32, True), (2.5, 1, False),
                                                 (3.5, 9, True), (1.5, 9, True),
                                                 (1.5, 1, False)])
def test_deep_convolution_ending_in_a_partial_vector_runs_lanes_over_channels(
        vectors, depth, deep):
    """Over a vector wide with a partial last one (56 columns) and a deep reduction
    (576 points): the lanes run over the output channels (the row's partial vector
    would cost a broadcast per half-vector FMA); a shallow one keeps unit stride.  8
    vectors' worth of reduction (144 points) is deep enough, over 55 columns or 27."""
    from polytc.machine import host

    lanes = host().lanes(4)
    w = int(vectors * lanes) - (vectors == 3.5)
    c = -(-depth * lanes // 9)
    ck = check(CONV_B, [(1, c, w + 2, w + 2), (4 * lanes, c, 3, 3), (4 * lanes,)],
               polytc.Options())
    assert ("lanes f" in ck.stages["tiling"]) == deep


def test_image_over_a_vector_wide_ends_in_a_partial_vector():
    """Between one and two vectors wide, the lanes stay on the image row, whose last
    vector is partial (masked) in the micro-kernel, not over the channels."""
    from polytc.machine import host

    hw = host().lanes(4) + 6  # output rows of lanes + 4
    ck = check(CONV_B, [(1, 4, hw, hw), (40, 4, 3, 3), (40,)], polytc.Options())
    assert "contraction S" in ck.stages["tiling"] and "lanes f" not in ck.stages["tiling"]


POINTWISE = """def pw(float(M,K) W, float(B,K,N) X) -> (Y) {
    Y(b, m, n) +=! W(m, k) * X(b, k, n)
}"""


@pytest.mark.parametrize("wide", [True, False])
def test_pointwise_product_of_one_image_vectorises_over_its_pixels(wide):
    """A matrix product through a batch of one (a pointwise convolution) over more
    pixels than a vector: the lanes stay on the pixels, however many more weights'
    rows there are (the rows broadcast them; over the channels, the pixels' broadcasts
    ran with a stride: SqueezeNet's classifier 0.69 -> 0.47 ms)."""
    from polytc.machine import host

    px = 3 * host().lanes(4) + 1
    m = 8 * px if wide else px
    ck = check(POINTWISE, [(m, 24), (1, 24, px)], polytc.Options(constants=("W",)))
    tiling = ck.stages["tiling"]
    assert "contraction S" in tiling and "lanes m" not in tiling
    assert promoted(ck.code)


@pytest.mark.parametrize("hw", [30, 58])
def test_batched_convolution_keeps_its_partial_vector_in_the_micro_kernel(hw):
    """A batch of images whose rows end in a partial vector (28 or 56 wide, a shallow
    reduction: deep ones run lanes over the channels): the image, unit-stride along the
    row, is not packed (packed panels are whole vectors, and the row's rest left the
    micro-kernel), as through a batch of one."""
    rng = np.random.default_rng(hw)
    image = rng.standard_normal((4, 3, hw, hw)).astype(np.float32)
    weights = rng.standard_normal((64, 3, 3, 3)).astype(np.float32)
    k = polytc.tc(CONV)
    windows = np.lib.stride_tricks.sliding_window_view(image, (3, 3), axis=(2, 3))
    want = np.einsum("nchwij,fcij->nfhw", windows, weights, optimize=True)
    np.testing.assert_allclose(k(image, weights), want, rtol=1e-4, atol=1e-3)
    ck = k.specialize(image, weights)
    from polytc.machine import host

    if (hw - 2) % host().lanes(4) == 0:
        pytest.skip("whole vectors with this machine's vectors: no partial one")
    assert "pack" not in ck.stages["tiling"]
    assert "pt_a0_0" in ck.code and ("pt_mload" in ck.code or "pt_v8f" in ck.code)


def _rows_and_lanes(tiling: str):
    """The band members (statement indices) of a contraction's register rows and
    lanes, from its decision line ``order [..]; cache ..; register ..``."""
    line = next(x for x in tiling.splitlines() if x.startswith("contraction"))
    order = [int(x) for x in line.split("order [")[1].split("]")[0].split(",")]
    reg = [int(x) for x in line.split("register ")[1].split(";")[0].split("x")]
    tiled = [m for m, r in zip(order, reg) if r > 1]
    return tiled[0], tiled[-1]


@pytest.mark.parametrize("n,f,hw,rows", [(8, 8, 30, 1), (4, 64, 9, 3)])
def test_batched_convolution_rows_broadcast_an_operand(n, f, hw, rows):
    """A batch of images: the register rows are an outer product's, along which a
    read not along the lanes varies: the output channels (f, member 1) when the lanes
    run along the image columns; the image columns (w, member 3) when the lanes run
    over the channels (narrow images), never the images, which every read along them
    also runs along the lanes (the same image rows, 5x slower)."""
    ck = check(CONV, [(n, 16, hw, hw), (f, 16, 3, 3)], polytc.Options())
    assert _rows_and_lanes(ck.stages["tiling"])[0] == rows


def test_partial_cache_tiles_isolate_their_full_register_tiles():
    """Full register tiles found in a full and in a partial cache tile are isolated as
    one convex set: isl takes the simple hull of the isolated set, and the hull of
    the two pieces took in partial tiles (the partial cache tile ran guarded plain
    loops: ShuffleNet's 116 x 196 products at batch 64 20x slower)."""
    import islpy as isl

    from polytc.poly import transform as T

    dom = isl.UnionSet("{ S[i, j] : 0 <= i < 20 and 0 <= j < 196 }")
    node = isl.Schedule.from_domain(dom).get_root().child(0)
    node = node.insert_partial_schedule(isl.MultiUnionPwAff("[{ S[i, j] -> [(i)] }, "
                                                            "{ S[i, j] -> [(j)] }]"))
    node = T.isolate_full_tiles(T.tile(node, [20, 128]), [20, 128])
    node = T.isolate_full_tiles(T.tile(node.child(0), [8, 16]), [8, 16])
    opts = node.band_get_ast_build_options()
    sets = opts.get_set_list()
    isolated = next(s for s in (sets.get_at(k) for k in range(sets.n_set()))
                    if s.get_tuple_name() == "isolate")
    assert isolated.n_basic_set() == 1
    for j0, j1, full in [(0, 112, True), (128, 48, True), (128, 64, False)]:
        point = isl.Set(f"{{ [[0, {j0}] -> [0, {j1}]] }}").set_tuple_name("isolate")
        assert point.is_subset(isolated) == full


def test_strided_convolution_packs_its_input():
    """No read is unit-stride along the image columns (stride 2): the input is packed
    (rows chosen so that it can be: the output channels), through a batch of one."""
    ck = check(CONV_S2, [(1, 3, 41, 41), (24, 3, 3, 3)], polytc.Options())
    assert "pack S0; tensor I" in ck.stages["tiling"]
    assert "pt_a0_0" in ck.code  # the vector micro-kernel


def test_full_panels_of_a_copy_are_isolated():
    """The copy's full panels get a lane loop of constant bounds of their own (which gcc
    vectorises), the partial last panel (20 columns: 4 lanes past a panel of 16, or 4
    past 2 of 8) one after it, not a loop to a ``PT_MIN`` bound for all of them."""
    from polytc.machine import host

    lanes = host().lanes(4)
    ck = check(CONV_S2, [(1, 3, 41, 41), (24, 3, 3, 3)], polytc.Options())
    lines = ck.code.splitlines()
    copies = [head.strip() for n, ln in enumerate(lines) if ln.lstrip().startswith("pt_pack0[")
              for head in lines[n - 2:n] if "for (" in head]  # the lane loops
    assert f"for (long c10 = 0L; c10 <= {lanes - 1}L; c10 += 1L)" in copies
    assert any(f"<= {20 % lanes - 1}L;" in ln for ln in copies) and \
        not any("PT_MIN" in ln for ln in copies)


@pytest.mark.parametrize("c,k,hw,deep", [("many", 3, 57, True), (3, 3, 57, False),
                                         (3, 7, 141, True)])
def test_deep_strided_convolution_runs_lanes_over_channels(c, k, hw, deep):
    """A stride-2 convolution with a deep reduction (at least 8 vectors' worth): the
    lanes run over the output channels, the weights packed once, instead of packing the
    image again for every row of channels or of pixels, even where the channels are
    fewer than a row's pixels (a 3-channel 7x7 stem: 147 points, 64 channels, 68 wide);
    a shallow one (3x3 of 3 channels) packs the image."""
    from polytc.machine import host

    lanes = host().lanes(4)
    c = -(-32 * lanes // 9) if c == "many" else c
    ck = check(CONV_S2, [(1, c, hw, hw), (4 * lanes, c, k, k)], polytc.Options())
    tiling = ck.stages["tiling"]
    assert ("lanes f" in tiling) == deep
    assert ("tensor Wt" if deep else "tensor I") in tiling


def test_row_tiles_divide_the_rows():
    """A packed contraction's row tiles divide the rows evenly when a multiple of MR
    within a factor 2 of the cache model's height does (and the cores get equal
    shares): a last, partial tile of rows left the micro-kernel."""
    from polytc.tiling.sizes import _dividing

    assert _dividing(1000, 334, 8, 1) == 200
    assert _dividing(1000, 500, 8, 2) == 500  # divides already
    assert _dividing(1024, 342, 8, 2) == 256  # 4 tiles for 2 cores
    assert _dividing(1000, 334, 8, 2) == 334  # 5 tiles would not share evenly
    assert _dividing(999, 334, 8, 1) == 334  # no multiple of 8 divides 999: unchanged


def test_strided_sizes():
    """7 rows of a 512-channel result on 2 cores: 7 rows x 2 vectors (no padded row,
    equal j tiles of 256 for the cores); 14 rows: 7 x 2 as well; 28: 7 x 2 too, not
    4 x 4 vectors (each weight vector would serve only 4 FMAs)."""
    from polytc.tiling.sizes import Sizes, _strided_sizes

    default = Sizes((96, 512, 96), (6, 64))
    assert _strided_sizes(default, 7, 512, 512, 16, 2) == Sizes((7, 256, 128), (7, 32))
    assert _strided_sizes(default, 14, 256, 256, 16, 2) == Sizes((14, 128, 128), (7, 32))
    assert _strided_sizes(default, 28, 128, 96, 16, 2) == Sizes((28, 64, 96), (7, 32))
    assert _strided_sizes(default, 28, 128, 97, 16, 2).cache[2] == 97  # Tk divides K
    # 13 rows (SqueezeNet's last convolutions): one row tile of 13 x 1 vector, not a
    # partial row tile (7 x 3) nor a latency-bound 1 x 3
    assert _strided_sizes(default, 13, 1000, 512, 16, 2).register == (13, 16)
    assert _strided_sizes(default, 27, 64, 512, 16, 2).register == (9, 32)  # 9 x 2 vectors
    # more than 8 rows of two vectors only where no count from 5 to 8 divides the rows
    # (55 = 5 x 11: not 11 x 2 vectors, 14% slower at batch 64)
    assert _strided_sizes(default, 55, 64, 144, 16, 2).register != (11, 32)
    # enough accumulators before whole row tiles where a partial one is one of many:
    # 55 rows as 8 x 2 vectors (7 tiles and a partial), not 11 x 1 or 5 x 2
    assert _strided_sizes(default, 55, 64, 144, 16, 2).register == (8, 32)
    # the budget is the machine's accumulators, not the default register tile's: fitted
    # to 55 rows (5 x 4 vectors, 20 accumulators), 8 x 2 still (had been 11 x 1)
    assert _strided_sizes(Sizes((55, 64, 16), (5, 64)), 55, 64, 16, 16, 2, 9).register == \
        (8, 32)
    # a partial tile among few stays out (a 512 -> 10 product over 10 rows: 10 x 1)
    assert _strided_sizes(default, 10, 64, 512, 16, 2).register[0] == 10
    # with L2's size: a matrix product's reduction tile as deep as a quarter of L2
    # holds the panel (the accumulators are stored with the result's stride after each)
    l2 = 2 << 20
    assert _strided_sizes(default, 13, 1000, 512, 16, 2, 1, 4, l2).cache[2] == 512
    assert _strided_sizes(default, 13, 1000, 16384, 16, 2, 1, 4, l2).cache[2] == 8192
    # a 3x3 convolution's panel counts its window's 9: 512 channels in one tile with
    # 2 MiB of L2, in two with 1 MiB (had been the L1 rule's, 4 or 8 tiles)
    assert _strided_sizes(default, 7, 512, 512, 16, 2, 9, 4, l2).cache[2] == 512
    assert _strided_sizes(default, 7, 512, 512, 16, 2, 9, 4, l2 // 2).cache[2] == 256


@pytest.mark.parametrize("rhs", ["alpha * A(i, k) * B(k, j)", "A(i, k) * B(k, j) * alpha * 2.0",
                                 "A(i, k) * s(i) * B(k, j)"])
@pytest.mark.parametrize("m,k,n", [(37, 70, 65), (64, 600, 128)])
def test_invariant_factors_scale_the_tile_sum(rhs, m, k, n):
    """A factor no reduction index and not the lanes move multiplies a register tile's
    sum once, at its end (several reduction tiles: 600 > Tk), not every term."""
    src = f"""def f(float alpha, float(M,K) A, float(K,N) B, float(M) s) -> (C) {{
        C(i, j) +=! {rhs}
    }}"""
    ck = check(src, [(), (m, k), (k, n), (m,)], polytc.Options(), rtol=1e-3, atol=1e-3)
    if "pt_a0_0" in ck.code:  # the vector micro-kernel: its reduction step's loads, update
        step = [line for line in ck.code.splitlines()
                if "pt_a0_0 +=" in line or re.search(r"\bpt_r\d+ = ", line)]
        assert len(step) > 1 and not any("alpha" in x or "s[" in x for x in step)


@pytest.mark.parametrize("tile,outer", [((48, 128, 512), 6), ((48, 128, 16), 64)])
def test_register_tile_order_follows_the_micro_panel(tile, outer):
    """A micro-panel (Tk x NR) in half of L1: j's register tiles outside i's, so it stays
    there; a deeper one streams from L2: i's outside, so the broadcast rows stay in L1."""
    ck = check(MATMUL, [(96, 600), (600, 256)],
               polytc.Options(tile=tile, register_tile=(6, 64)), rtol=1e-3, atol=1e-3)
    steps = [line.rsplit("+= ", 1)[1] for line in ck.code.splitlines()
             if line.strip().startswith("for") and line.rstrip().endswith(("+= 6L)", "+= 64L)"))]
    assert steps[0] == f"{outer}L)"


@pytest.mark.parametrize("batch,loop", [(3, "i"), (5, "i"), (4, "n"), (17, "n")])
def test_a_batch_that_threads_share_unevenly_leaves_them_the_next_loop(batch, loop):
    """A batch of 3 on 2 threads: one thread would run two images while the other
    waits (a transformer layer's every group 1.35x the generic kernel's time): the
    rows run in parallel instead; 4 images share evenly, and 17 are many."""
    k = polytc.tc("""def f(float(B,N,M) X, float(M) b) -> (Y) {
        Y(n, i, j) = max(X(n, i, j) + b(j), 0.0)
    }""", options=polytc.Options(num_threads=2, parallel_min_points=1))
    x = np.random.default_rng(5).standard_normal((batch, 64, 48)).astype(np.float32)
    b = np.arange(48, dtype=np.float32)
    ck = k.specialize(x, b)
    assert f"The loop over {loop} (S0) runs in parallel" in str(ck.explain())
    np.testing.assert_array_equal(k(x, b), np.maximum(x + b, 0))


def test_parallel_innermost_loop_runs_in_vector_chunks():
    """A 1-d elementwise loop big enough for threads: one vector loop per thread, not
    one call of the outlined body per element."""
    k = polytc.tc("""def f(float(N) X, float(N) b) -> (Y) {
        Y(i) = max(X(i) + b(i), 0.0)
    }""", options=polytc.Options(num_threads=2))
    x = np.random.default_rng(4).standard_normal(100_003).astype(np.float32)
    ck = k.specialize(x, x[::-1].copy())
    body = ck.code.split("pt_body0(", 1)[1]
    assert "#pragma omp simd" in body.split("int polytc_kernel")[0]
    assert "+= 50048L" in ck.code  # two chunks of whole cache lines
    np.testing.assert_array_equal(k(x, x[::-1].copy()), np.maximum(x + x[::-1], 0))


@pytest.mark.parametrize("src,shifts", [
    ("""def f(float(N,K) A, float(K,M) B) -> (C) {
        P(i, k) = A(i, k) * 2.0
        C(i, j) +=! P(i, k) * B(k, j)
    }""", 0),  # a contraction's band is tiled as it is: isl may not shift
    ("""def f(float(N) A) -> (C) {
        P(i) = A(i) * 2.0
        C(i) = P(i) + P(i + 1) where i in 0:N-1
    }""", 4)])  # a stencil may be fused by a small shift
def test_isl_shifts_only_programs_without_a_contraction(src, shifts):
    k = polytc.tc(src, options=polytc.Options(fusion="preserve"))
    env = {"N": 30, "K": 20, "M": 40} if "K" in src else {"N": 30}
    b = pipeline.run(k.program, env, k.options)
    assert b.scop.ctx.get_schedule_max_constant_term() == shifts


MAXPOOL = """def pool(float(N,C,H,W) I) -> (O) {
    O(n, c, h, w) max=! I(n, c, 2 * h + kh, 2 * w + kw)
        where h in 0:(H - 3) / 2 + 1, w in 0:(W - 3) / 2 + 1, kh in 0:3, kw in 0:3
}"""
AVGPOOL = """def pool(float(N,C,H,W) I) -> (O) {
    O(n, c, h, w) +=! I(n, c, h + kh, w + kw) / 9.0
        where h in 0:H - 2, w in 0:W - 2, kh in 0:3, kw in 0:3
}"""


@pytest.mark.parametrize("src,shapes,kind", [
    (MAXPOOL, [(2, 3, 41, 39)], "window"), (AVGPOOL, [(1, 4, 20, 35)], "sink")])
def test_window_reductions_vectorise_over_rows(src, shapes, kind):
    """A small sum window's loops run outside the result's last index (isl's band
    sink): rows of results are vectors, updated once per window offset.  A max or min
    window stays inside it, spelt out: each lane of the vector loop over the result's
    last index accumulates its window in a register with a NaN flag."""
    ck = check(src, shapes, polytc.Options(parallel_min_points=1))
    assert f"{kind} " in ck.stages["tiling"] and "window 9" in ck.stages["tiling"]
    text = str(polytc.tc(src).explain(*[np.ones(s, np.float32) for s in shapes]))
    if kind == "sink":
        assert "updates a whole row of results as one vector operation" in text
        return
    assert "each lane accumulates its result's window in a register" in text
    assert "pt_nan0 |=" in ck.code and "reduction(" not in ck.code


BLOCKED_POOL = """def pool(float(N,B,H,W,L) I) -> (O) {
    O(n, b, h, w, l) max=! I(n, b, 2 * h + kh, 2 * w + kw, l)
        where h in 0:(H - 3) / 2 + 1, w in 0:(W - 3) / 2 + 1, kh in 0:3, kw in 0:3
}"""


def test_blocked_channel_window_accumulates_in_registers():
    """A window over blocked channels (``graph/layout.py``) does not slide along the
    rows: it is not sunk below them, each lane accumulates its window in a register,
    and the max's init folds into the accumulators (no pass that writes -inf to the
    result and reads it back: one parallel loop)."""
    ck = check(BLOCKED_POOL, [(2, 3, 17, 15, 16)], polytc.Options(parallel_min_points=1))
    assert "sink " not in ck.stages["tiling"]
    assert "fold S0; init I0" in ck.stages["fold"]
    assert "pt_acc0[" in ck.code and ck.code.count("omp parallel for") == 1


GUARDED_POOL = """def pool(float(N,C,H,W) I) -> (O) {
    O(n, c, h, w) max=! (2 * h + kh - 1 >= 0 && 2 * w + kw - 1 >= 0) ?
        I(n, c, 2 * h + kh - 1, 2 * w + kw - 1) : -1.0 / 0.0
        where h in 0:H / 2, w in 0:W / 2, kh in 0:3, kw in 0:3
}"""


def test_guarded_window_is_not_sunk():
    """A window read under a guard (a select per element) would not vectorise well as
    rows: no sink (the ONNX pools read a padded copy instead)."""
    ck = check(GUARDED_POOL, [(2, 3, 34, 36)], polytc.Options(parallel_min_points=1))
    assert "sink " not in ck.stages["tiling"]


def test_window_max_propagates_nan_along_rows():
    """A NaN anywhere in a window makes its maximum NaN, whichever offset reads it."""
    k = polytc.tc(MAXPOOL)
    x = np.random.default_rng(0).standard_normal((1, 2, 21, 21)).astype(np.float32)
    x[0, 0, 4, 6] = np.nan  # in the windows of (1, 2), (1, 3), (2, 2), (2, 3)
    got = k(x)
    want = reference.run(k.program, [x])["O"]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got[0, 0, 1:3, 2:4]).all()
    np.testing.assert_allclose(np.nan_to_num(got), np.nan_to_num(want))


@pytest.mark.parametrize("src,shapes,tiled", [
    ("def t(float(M,N) A) -> (B) { B(j, i) = A(i, j) }", [(100, 70)], True),
    ("def t(float(M,N) A, float(N,M) C) -> (B) { B(i, j) = A(i, j) + C(j, i) }",
     [(67, 129), (129, 67)], True),
    ("def t(float(A,B,C) X) -> (Y) { Y(c, a, b) = X(a, b, c) }", [(3, 40, 33)], True),
    ("def t(float(M,N) A) -> (B) { B(j, i) = A(i, j) }", [(20, 70)], False),  # too narrow
    ("def t(float(M,N) A) -> (B) { B(i, j) = 2 * A(i, j) }", [(100, 70)], False),
])
def test_transposes_run_in_square_tiles(src, shapes, tiled):
    """A band that writes along one index and reads along another is tiled in squares
    of a cache line (2048x2048 transpose 12 -> 2.3 ms); the innermost loop still writes
    along its rows."""
    k = polytc.tc(src, options=polytc.Options(parallel_min_points=1))
    env = k.program.bind_sizes(shapes)
    b = pipeline.run(k.program, env, k.options)
    found = [e for e in b.tiling if e.kind == "transpose"]
    assert bool(found) == tiled
    if tiled:
        assert found[0].facts["tile"] == (16, 16)
        assert Decision("simd", ["S0"]) in b.tiling
    check(src, shapes, k.options)


@pytest.mark.parametrize("hw,op", [(14, "+"), (7, "*"), (4, "+")])
def test_nested_sum_accumulates_per_lane_of_its_inner_loop(hw, op):
    """A sum over a nest of short constant loops (a global average pool over 14x14):
    one accumulator per iteration of the inner loop, vectorised along it, instead of
    gcc's collapse, which splits every element's indices with divisions (10x slower);
    a power of two below a vector (8x8 on AVX-512) stays collapsed."""
    lanes = not (hw < polytc.machine.host().lanes(4) and hw & (hw - 1) == 0)
    src = (f"def gap(float(N,C,H,W) X) -> (Y) {{ Y(n, c) {op}=! X(n, c, h, w) / 2 }}")
    ck = check(src, [(3, 5, hw, hw)], polytc.Options(), rtol=1e-3)
    assert ("pt_lane_pt_acc0" in ck.code) == lanes
    assert ("collapse(2)" in ck.code) != lanes


@pytest.mark.parametrize("src,shape", [
    ("def dot(float(N) a, float(N) b) -> (s) { s +=! a(i) * b(i) }", (1 << 17) + 37),
    ("def total(float(M,N) A) -> (s) { s +=! A(i, j) }", (300, 301)),
])
def test_a_big_sum_outside_every_loop_is_shared_by_the_threads(src, shape):
    """A dot product or the sum of a whole tensor has no parallel loop: its terms are
    split among the threads (an OpenMP reduction), each summing its share in vectors."""
    rng = np.random.default_rng(0)
    k = polytc.tc(src)
    args = [rng.standard_normal(shape).astype(np.float32) for _ in k.program.inputs]
    want = np.sum(np.prod(np.stack([a.astype(np.float64) for a in args]), axis=0))
    for options, shared in [(polytc.Options(num_threads=2), True),
                            (polytc.Options(num_threads=2, parallel=False), False),
                            (polytc.Options(num_threads=1), False)]:
        k = polytc.tc(src, options=options)
        np.testing.assert_allclose(k(*args), want, rtol=1e-4)
        code = k.specialize(*args).code
        assert ("omp parallel" in code) == shared
    small = [a[:100] for a in args]
    assert "omp parallel" not in polytc.tc(src).specialize(*small).code


@pytest.mark.parametrize("op", ["min", "max", "+"])
def test_a_reduction_of_wide_rows_to_one_value_is_vectorised_per_row(op):
    """The min of a whole 64 x 784 activation (a quantised model's dynamic range): one
    vector reduction per row, the threads sharing the rows, not one collapsed loop whose
    every element's indices gcc recomputes with divisions (28 -> 4 us); narrow rows stay
    collapsed."""
    src = f"def r(float(M,N) A) -> (s) {{ s {op}=! A(i, j) }}"
    k = polytc.tc(src, options=polytc.Options(num_threads=2), dynamic=())
    rng = np.random.default_rng(0)
    for shape, shared in [((64, 784), False), ((512, 1024), True)]:
        x = rng.standard_normal(shape).astype(np.float32)
        x[3, 5] = np.nan if op != "+" else x[3, 5]
        want = {"min": np.min, "max": np.max, "+": np.sum}[op](x.astype(np.float64))
        np.testing.assert_allclose(k(x), want, rtol=1e-4)
        code = k.specialize(x).code
        assert "collapse(" not in code and "omp simd reduction" in code
        assert bool(re.search(r"omp parallel for[^\n]* reduction", code)) == shared
    assert "collapse(2)" in k.specialize(x[:, :4]).code  # (narrower than any vector)


def test_panels_that_leave_l2_run_outside_the_image_rows():
    """A convolution of a narrow image (lanes over the output channels) whose packed
    weight panels together leave L2: the panels' loop runs outside the image rows, so
    each panel is read from memory once and serves every row from L2 (ResNet-18's
    512-channel 3x3 convolutions on 7 x 7: 0.71 -> 0.61 ms in the model's run);
    panels that stay in L2 keep the rows outside.  Both agree with numpy."""
    import math

    from polytc.machine import host

    rng = np.random.default_rng(7)
    for ch in (32, 512):
        image = rng.standard_normal((1, ch, 9, 9)).astype(np.float32)
        weights = rng.standard_normal((ch, ch, 3, 3)).astype(np.float32)
        k = polytc.tc(CONV, options=polytc.Options(constants=("Wt",)))
        windows = np.lib.stride_tricks.sliding_window_view(image, (3, 3), axis=(2, 3))
        want = np.einsum("nchwij,fcij->nfhw", windows, weights, optimize=True)
        np.testing.assert_allclose(k(image, weights), want, rtol=1e-4, atol=2e-3)
        b = pipeline.run(k.program, dict(N=1, C=ch, H=9, W=9, F=ch, KH=3, KW=3), k.options)
        entry = next(d for d in b.tiling if d.kind == "contraction")
        cache, reg = entry.facts["cache"], entry.facts["register"]
        lane = max(m for m, r in enumerate(reg) if r > 1)
        panels = cache[lane] * math.prod(cache[lane + 1:]) * 4
        kept = math.prod(cache[:lane - 1])
        assert ("panels" in entry.facts) == (kept > 1 and panels > host().l2 // 2), \
            (ch, entry)
        assert ("panels" in entry.facts) == (ch == 512 and host().l2 < (8 << 20))


@pytest.mark.parametrize("b,m,k,vectors,packed", [
    (2, 16, 128, 64, False),  # few rows over long rows of pixels: read as they are
    (2, 64, 16, 64, False),  # a shallow reduction likewise
    (2, 64, 64, 64, True),  # enough reuse: packed
    (2, 16, 128, 16, True),  # rows of 16 vectors: packed
])
def test_pointwise_batch_operand_streamed_or_packed(b, m, k, vectors, packed):
    """A batch of pointwise convolutions' images (``tiling/pack.streamed``)."""
    from polytc.machine import host

    n = vectors * host().lanes(4)
    src = "def pw(float(M,K) W, float(B,K,N) X) -> (O) { O(b, m, n) +=! W(m, k) * X(b, k, n) }"
    ck = check(src, [(m, k), (b, k, n)], polytc.Options(), atol=1e-3)
    assert ("pack S0" in ck.stages["tiling"]) == packed


def test_a_reordered_reduction_is_never_a_parallel_loop():
    """isl's dependences of a reduction link each instance to the next in program order
    only; the tiler's band that runs ``r`` outside ``i`` (a reordered reduction) carried
    none of them along ``i``, so ``i`` ran in parallel, both threads updating ``T1``
    (found by the differential fuzzer, now and then wrong)."""
    src = """def f(float(1, 1, K) A, float(4, N, 4) B) -> (float T1) {
        T1 max=! B(i + 1, 0, r) - A(p, p, k) where i in 0:3, r in 0:3
    }"""
    options = polytc.Options(parallel_min_points=0, register_tile=(2, 2), fusion="preserve")
    k = polytc.tc(src, options=options, dynamic=("K", "N"))
    rng = np.random.default_rng(6)
    A = rng.uniform(-1, 1, (1, 1, 2)).astype(np.float32)
    B = rng.uniform(-1, 1, (4, 2, 4)).astype(np.float32)
    code = k.specialize(A, B).code
    body = code[code.index("int polytc_kernel("):]
    assert "omp parallel" not in body[body.index("T1[0] = (-INFINITY)"):]
    for _ in range(20):
        np.testing.assert_allclose(k(A, B), (B[1:4, 0, 0:3] - A[0, 0, :, None, None]).max(),
                                   rtol=1e-6)


def test_register_tiles_keep_to_sixteen_registers():
    """256-bit vectors in 16 registers (AVX2): 12 accumulators at most, so 6 rows of 2
    vectors where 32 registers take 8 (a 128-row product's 8 x 2 tile spilled: mlp2
    3.60 -> 2.36 ms), and no 4 x 2 tile of 8 accumulators, as few as FMAs in flight."""
    from polytc.machine import Machine
    from polytc.tiling.sizes import accumulators, choose_sizes

    avx2 = Machine(48 << 10, 1 << 20, 32 << 20, 32, 16, 2)
    avx512 = Machine(48 << 10, 1 << 20, 32 << 20, 64, 32, 2)
    assert (accumulators(avx2), accumulators(avx512)) == (12, 24)
    assert choose_sizes(128, 1024, 1024, 4, avx2, packed=True, per_call=True).register == \
        (6, 16)
    assert choose_sizes(128, 1024, 1024, 4, avx512, packed=True, per_call=True).register \
        == (4, 64)
    for ext_j in (20, 40, 56, 100):  # a row of pixels: whole vectors, or padding avoided
        mr, nr = choose_sizes(64, ext_j, 576, 4, avx2).register
        assert mr * -(-nr // 8) <= 12


def test_channel_lane_tiles_keep_to_sixteen_registers():
    """Lanes over 64 output channels of images 13, 27 and 56 wide in 256-bit vectors
    (AVX2, 16 registers): the accumulators, the operand's vectors and a broadcast fit
    (8 rows of 2 vectors spilled), at least 6 of them (13 rows had taken 1 x 2
    vectors, 8x slower), two vectors where their rows divide the image's (55 wide: 5 x
    2, 393 -> 243 us); with 32 registers the default tile's 16 stay."""
    from polytc.tiling.sizes import Sizes, _strided_sizes

    assert _strided_sizes(Sizes((55, 64, 64), (8, 16)), 55, 64, 576, 8, 2, 9, 4, 1 << 20,
                          16).register == (5, 16)
    for rows in (13, 27, 56):  # the accumulators, the operand's vectors, a broadcast
        avx2 = _strided_sizes(Sizes((rows, 64, 64), (8, 16)), rows, 64, 576, 8, 2, 9, 4,
                              1 << 20, 16)
        mr, nr = avx2.register
        assert mr * (nr // 8) + nr // 8 + 1 <= 16 and mr * (nr // 8) >= 6
    wide = _strided_sizes(Sizes((56, 64, 64), (8, 16)), 56, 64, 576, 8, 2, 9, 4, 1 << 20, 32)
    assert wide.register == (8, 16)


def test_generic_rows_pack_an_operand_of_each_call_deep():
    """Symbolic rows (a dynamic batch), a 512 x 512 operand packed at every call: each
    core's 256 columns packed 512 deep (half of a 1 MiB L2), not 128 (a generic M x 512
    x 512 product 1.13 -> 0.86 of the kernel made for 64 rows); 16 register tiles of
    rows whose block stays in half of L2.  A constant operand keeps its depth."""
    from polytc.machine import Machine
    from polytc.tiling.sizes import generic_rows

    two = Machine(48 << 10, 1 << 20, 32 << 20, 64, 32, 2)
    assert generic_rows(6, 64, 128, 512, 512, 4, two, per_call=True) == (96, 256, 512)
    assert generic_rows(6, 64, 128, 512, 512, 4, two) == (96, 256, 128)
    assert generic_rows(6, 64, 128, 512, 768, 4, two, per_call=True)[2] == 384  # (even)


def test_generic_rows_read_a_constant_operand_in_deep_panels():
    """Symbolic rows over a constant operand packed before the first call: its panels as
    deep as the reduction where a quarter of L2 holds one (an MLP's 784 -> 512 layer with
    a symbolic batch: 56 deep, at 8 and 16 rows 1.24 and 1.22x the kernel made for those
    rows, 1.09 and 1.02x now), so that a few rows do not load and store their
    accumulators at every shallow step; up to a quarter of L2."""
    from polytc.machine import Machine
    from polytc.tiling.sizes import generic_rows

    two = Machine(48 << 10, 1 << 20, 32 << 20, 64, 32, 2)
    assert generic_rows(6, 64, 56, 512, 784, 4, two, packed_once=True) == (96, 256, 784)
    assert generic_rows(6, 64, 56, 512, 784, 4, two) == (96, 256, 56)
    assert generic_rows(6, 64, 64, 512, 4096, 4, two, packed_once=True)[2] == 1024


def test_a_sum_of_one_row_reads_its_operand_where_it_lies():
    """A reduction into one row (a global pooling of a temporary, ``o`` of one value)
    over an operand that is no constant: nothing is packed (the copy per call of a
    small CNN's blocked planes had run as long as their sum: 62 -> 59 us at batch 64)."""
    src = """def f(float(N,2,8,8,16) X) -> (Y) {
        P(n, b, h, w, l) = X(n, b, h, w, l) * 2.0
        Y(n, b, o, l) +=! P(n, b, h, w, l) / float((h + 1) * (w + 1)) where o in 0:1
    }"""
    ck = check(src, [(3, 2, 8, 8, 16)], polytc.Options(parallel_min_points=1))
    assert "pt_pack" not in ck.code


@pytest.mark.parametrize("h,w,c", [(7, 6, 32), (5, 9, 16), (4, 4, 48)])
def test_a_window_point_outside_the_image_reads_a_row_of_its_fill(h, w, c):
    """A window's read guarded by a condition on the pixel alone (a blocked average
    pooling's padding, the same for every lane): the vector loop reads a row picked
    before it, the input's or one of its fill, with no test in it; sums and maxima
    with fills of 0, 1.5 and -3 equal the reference's, with a NaN and an infinity at
    the border.  A condition on the lane keeps its test in the loop."""
    pick = """def pool(float(N,H,W,C) X) -> (Y) {
        Y(n, h, w, c) +=! (h + kh - 1 >= 0 && h + kh - 1 < H && w + kw - 1 >= 0 &&
                           w + kw - 1 < W) ? X(n, h + kh - 1, w + kw - 1, c) : 0.0
            where h in 0:H, w in 0:W, kh in 0:3, kw in 0:3
    }"""
    lane = pick.replace("w + kw - 1 < W)", "w + kw - 1 < W && c > 2)")
    # other fills, another reduction: each picks its own row of fills
    ones = pick.replace(": 0.0", ": 1.5")
    peak = pick.replace("+=!", "max=!").replace(": 0.0", ": -3.0")
    x = np.random.default_rng(0).standard_normal((2, h, w, c)).astype(np.float32)
    x[0, 0, 0, 3], x[1, h - 1, w - 1, 4] = np.nan, np.inf
    padded = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    want = sum(padded[:, a:a + h, b:b + w] for a in range(3) for b in range(3))
    for src, picked in ((pick, True), (lane, False), (ones, True), (peak, True)):
        k = polytc.tc(src, options=polytc.Options(parallel_min_points=1))
        assert ("pt_row0" in k.specialize(x).code) == picked
        got = k(x)
        np.testing.assert_allclose(got, reference.run(k.program, [x])["Y"], rtol=1e-5,
                                   atol=1e-5)
        if src is pick:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_short_row_tiles_share_the_columns_of_an_operand_packed_per_call():
    """128 rows through a 1024 x 1024 operand packed at every call (mlp2), its panels in
    half of a 32 KiB L1: one tile of all rows, the two cores each packing their half of
    the columns, not 64 rows a core each packing all of it; 192 rows (96 a core) and a
    constant operand keep their tiles of rows."""
    from polytc.machine import Machine
    from polytc.tiling.sizes import choose_sizes

    two = Machine(32 << 10, 1 << 20, 32 << 20, 64, 32, 2)
    sizes = choose_sizes(128, 1024, 1024, 4, two, packed=True, per_call=True)
    assert sizes.cache[:2] == (128, 512)
    assert choose_sizes(128, 1024, 1024, 4, two, packed=True).cache[0] == 64
    assert choose_sizes(192, 1024, 1024, 4, two, packed=True, per_call=True).cache[0] == 96
