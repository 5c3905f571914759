"""Symbolic sizes: one compiled kernel serves every value of a dynamic dimension
(``polytc.tc(..., dynamic=...)``, ``Options.symbolic``; docs/dynamic.md).

Every generic kernel is compared with numpy (or the reference interpreter) at many sizes,
smaller and larger than the size it was compiled at, non-multiples of every tile, and the
tests check that those calls compile nothing."""
from __future__ import annotations

import re

import numpy as np
import pytest

import polytc
from polytc.compiler import pipeline
from polytc.lang import reference
from polytc.machine import host

from .kernels_small import MATMUL, SOFTMAX, np_softmax

RNG = np.random.default_rng(7)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.fixture
def no_compile(monkeypatch):
    """Calling ``no_compile()`` makes every later run of the pipeline fail the test."""
    def forbid():
        def run(*a, **k):
            raise AssertionError("a call at a new size compiled")
        monkeypatch.setattr(pipeline, "run", run)
    return forbid


@pytest.mark.parametrize("dynamic,sizes", [
    (("M",), [(64, 96, 80), (1, 96, 80), (7, 96, 80), (200, 96, 80), (97, 96, 80)]),
    (("N",), [(20, 40, 64), (20, 40, 1), (20, 40, 17), (20, 40, 300)]),
    (("K",), [(20, 64, 30), (20, 1, 30), (20, 129, 30), (20, 700, 30)]),
    (("K", "M", "N"), [(16, 16, 16), (1, 1, 1), (3, 300, 5), (130, 7, 66), (9, 64, 257)]),
])
def test_matmul_serves_every_size_of_its_symbolic_dims(dynamic, sizes, no_compile):
    mm = polytc.tc(MATMUL, dynamic=dynamic)
    for k, (m, kk, n) in enumerate(sizes):
        A, B = f32(m, kk), f32(kk, n)
        C = mm(A, B)
        np.testing.assert_allclose(C, A @ B, rtol=1e-4, atol=1e-4 * kk)
        if k == 0:
            ck = mm.specialize(A, B)
            assert ck.options.symbolic == tuple(sorted(dynamic))
            assert ck.symbolic == tuple(n for n in ("M", "K", "N") if n in dynamic)
            no_compile()  # every later size: the same kernel


def test_auto_policy_keeps_a_size_symbolic_once_it_varied(no_compile):
    mm = polytc.tc(MATMUL)  # dynamic="auto"
    A, B = f32(24, 32), f32(32, 48)
    assert mm.specialize(A, B).symbolic == ()  # one size seen: specialised
    A2 = f32(40, 32)
    np.testing.assert_allclose(mm(A2, B), A2 @ B, rtol=1e-4, atol=1e-3)
    assert mm.specialize(A2, B).symbolic == ("M",)
    no_compile()
    for m in (1, 5, 33, 100):
        A3 = f32(m, 32)
        np.testing.assert_allclose(mm(A3, B), A3 @ B, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(mm(A, B), A @ B, rtol=1e-4, atol=1e-3)  # the first size


def test_auto_policy_specialises_kernels_whose_every_size_varies():
    mm = polytc.tc(MATMUL)
    for m, k, n in ((4, 8, 16), (5, 9, 17), (6, 10, 18)):
        A, B = f32(m, k), f32(k, n)
        np.testing.assert_allclose(mm(A, B), A @ B, rtol=1e-5, atol=1e-5)
        assert mm.specialize(A, B).symbolic == ()


def test_no_policy_specialises_every_size():
    mm = polytc.tc(MATMUL, dynamic=())
    for m in (3, 4):
        A, B = f32(m, 8), f32(8, 16)
        np.testing.assert_allclose(mm(A, B), A @ B, rtol=1e-5, atol=1e-5)
        assert mm.specialize(A, B).symbolic == ()


def test_generic_code_reads_its_sizes():
    mm = polytc.tc(MATMUL, dynamic=("M",))
    ck = mm.specialize(f32(50, 64), f32(64, 64))
    assert "int polytc_kernel( long M," in ck.code
    assert "M" in ck.stages["scop"] and "[M] ->" in ck.stages["scop"]


@pytest.mark.parametrize("rows", [1, 3, 16, 77, 300])
def test_row_programs_with_symbolic_rows(rows, no_compile):
    sm = polytc.tc(SOFTMAX, dynamic=("N",))
    X = f32(rows, 129)
    np.testing.assert_allclose(sm(X), np_softmax(X), rtol=1e-5, atol=1e-6)


LAYERNORM = """
def layernorm(float(N,D) X, float(D) g, float(D) b) -> (Y) {
    mu(n) +=! X(n, d) / float(D)
    var(n) +=! (X(n, d) - mu(n)) * (X(n, d) - mu(n)) / float(D)
    Y(n, d) = (X(n, d) - mu(n)) * rsqrt(var(n) + 1e-5) * g(d) + b(d)
}"""

CONV1D = """
def conv1d(float(C,W) I, float(F,C,K) Wt) -> (O) {
    O(f, x) +=! I(c, x + k) * Wt(f, c, k) where x in 0:W-K+1
}"""

POOL = """
def pool(float(N,C,H,W) X) -> (Y) {
    Y(n, c, h, w) max=! X(n, c, 2 * h + kh, 2 * w + kw)
        where kh in 0:2, kw in 0:2, h in 0:H/2, w in 0:W/2
}"""


@pytest.mark.parametrize("src,dynamic,shape_sets", [
    (LAYERNORM, ("D",), [[(6, 64), (64,), (64,)], [(6, 3), (3,), (3,)],
                         [(6, 200), (200,), (200,)]]),
    (LAYERNORM, ("N", "D"), [[(5, 33), (33,), (33,)], [(1, 1), (1,), (1,)],
                             [(70, 20), (20,), (20,)]]),
    (CONV1D, ("W",), [[(4, 40), (8, 4, 3)], [(4, 3), (8, 4, 3)], [(4, 101), (8, 4, 3)]]),
    (CONV1D, ("C", "F", "W"), [[(4, 40), (8, 4, 3)], [(1, 5), (1, 1, 3)], [(9, 64), (33, 9, 3)]]),
    (POOL, ("N", "H", "W"), [[(2, 3, 8, 8), ], [(1, 3, 5, 7), ], [(5, 3, 30, 17), ]]),
])
def test_generic_kernels_against_the_reference(src, dynamic, shape_sets, no_compile):
    k = polytc.tc(src, dynamic=dynamic)
    for n, shapes in enumerate(shape_sets):
        args = [f32(*s) for s in shapes]
        got = k(*args)
        want = reference.run(k.program, args)[k.program.outputs[0].name]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        if n == 0:
            no_compile()


def test_sizes_the_generic_code_does_not_serve_are_specialised():
    """An extent that would be negative (W < K) or a size of 0: a specialised kernel."""
    k = polytc.tc(CONV1D, dynamic=("W",))
    I, Wt = f32(4, 20), f32(8, 4, 3)
    k(I, Wt)
    empty = f32(4, 2)  # W - K + 1 = 0 outputs: served
    assert k(empty, Wt).shape == (8, 0)
    assert k.specialize(empty, Wt).symbolic == ("W",)
    small = f32(4, 1)  # W - K + 1 < 0: not served
    assert k(small, Wt).shape == (8, 0)
    assert k.specialize(small, Wt).symbolic == ()
    mm = polytc.tc(MATMUL, dynamic=("M",))
    assert mm(f32(0, 8), f32(8, 4)).shape == (0, 4)


def test_python_front_end_takes_the_policy(no_compile):
    @polytc.kernel(dynamic=("B",))
    def scale(X: "float(B,16)", s: "float(16)"):  # noqa: F821
        Y[b, j] = X[b, j] * s[j]  # noqa: F821
        return Y  # noqa: F821

    s = f32(16)
    for n, rows in enumerate((4, 1, 50)):
        X = f32(rows, 16)
        np.testing.assert_allclose(scale(X, s), X * s, rtol=1e-6)
        if n == 0:
            no_compile()


def test_unknown_size_names_are_errors():
    with pytest.raises(polytc.PolytcError, match="'Q' is not a size of matmul"):
        polytc.tc(MATMUL, dynamic=("Q",))
    with pytest.raises(polytc.PolytcError, match="'Z' is not a size"):
        polytc.tc(MATMUL, options=polytc.Options(symbolic=("Z",)))
    with pytest.raises(polytc.PolytcError, match="symbolic must be a sequence of size names"):
        polytc.Options(symbolic="M")


def test_out_of_bounds_is_found_for_every_size():
    """An access that leaves its tensor for some value of a symbolic size is rejected
    when the generic kernel is built, with a point that shows it."""
    src = """
def shift(float(N) X) -> (Y) {
    Y(i) = X(i + 1) where i in 0:N
}"""
    k = polytc.tc(src, dynamic=("N",))
    with pytest.raises(polytc.PolytcError, match="outside 'X'"):
        k(f32(8))


def test_explain_says_which_sizes_are_symbolic():
    mm = polytc.tc(MATMUL, dynamic=("M",))
    A, B = f32(40, 32), f32(32, 48)
    facts = mm.explain(A, B, vectorizer=False).about("sizes")
    assert any("M is symbolic: one kernel serves every value" in f for f in facts), facts
    assert any(f.startswith("At these sizes the generic kernel takes") for f in facts), facts
    assert not polytc.tc(MATMUL, dynamic=()).explain(A, B, vectorizer=False).about("sizes")


def test_hand_schedules_stay_specialised():
    mm = polytc.tc(MATMUL)
    A, B = f32(16, 8), f32(8, 32)
    hk = mm.with_schedule(mm.schedule(A, B).tile(0, 4))
    for m in (16, 9):
        A = f32(m, 8)
        np.testing.assert_allclose(hk(A, B), A @ B, rtol=1e-5, atol=1e-5)
        assert hk.specialize(A, B).symbolic == ()


CONV2D = """def conv2d(float(N,C,H,W) I, float(M,C,KH,KW) Wt) -> (O) {
    O(n, m, h, w) +=! I(n, c, h + kh, w + kw) * Wt(m, c, kh, kw)
}"""
PROJ = """def proj(float(B,T,D) X, float(D,E) W) -> (Y) {
    Y(b, t, e) +=! X(b, t, d) * W(d, e)
}"""


def _pragmas(code):
    return [line.strip() for line in code.splitlines() if "omp parallel" in line]


def test_generic_code_keeps_every_thread_busy_at_any_size():
    """What makes generic code as fast as specialised (docs/dynamic.md), in the code:
    parallel loops that fork only when the sizes make enough work (else run outside
    any parallel region); a partial register
    tile of a symbolic remainder run once per row count; a symbolic batch loop collapsed
    with the parallel loop inside it, and under it, with prepacked weights, the tiles
    shared by the cores (a batch of one on every thread)."""
    mm = polytc.tc(MATMUL, dynamic=("M",))
    code = mm.specialize(f32(40, 96), f32(96, 80)).code
    # (a C test around the region: a failing OpenMP if clause still makes a team)
    assert re.search(r"if \(.*\(M\) >= \d+L.*\)\s*\{\s*#pragma omp parallel for", code), code
    assert not any(" if(" in p for p in _pragmas(code)), _pragmas(code)
    counts = re.findall(r"M % \d+L\) - 1L\)\) == (\d+)L\)|"
                        r"if \(!\(\(\(M % \d+L\) >= \((\d+)L \+ 1L\)", code)
    assert len(set(counts)) >= 3, counts
    conv = polytc.tc(CONV2D, dynamic=("N",)).specialize(f32(2, 8, 16, 16), f32(16, 8, 3, 3))
    assert any("collapse(2)" in p for p in _pragmas(conv.code)), _pragmas(conv.code)
    proj = polytc.tc(PROJ, dynamic=("B",), options=polytc.Options(constants=("W",)))
    X, W = f32(1, 128, 256), f32(256, 256)
    assert any("collapse(2)" in p for p in _pragmas(proj.specialize(X, W).code))
    np.testing.assert_allclose(proj(X, W), X @ W, rtol=1e-4, atol=1e-3)


def test_few_rows_read_the_operand_where_it_lies():
    """A generic GEMM packs its operand for many rows, and reads it where it lies when
    the rows are too few for the copy to pay (the tiler's rule for known sizes), behind
    one run-time test: both halves are right at every size.  A transposed operand keeps
    its copy (its reads along the lanes would be strided)."""
    mm = polytc.tc(MATMUL, dynamic=("M",))
    B = f32(96, 600)
    code = mm.specialize(f32(40, 96), B).code
    assert "if ((M) <= 32L)" in code, code
    for m in (1, 5, 32, 33, 100):
        A = f32(m, 96)
        np.testing.assert_allclose(mm(A, B), A @ B, rtol=1e-4, atol=1e-3)
    nt = polytc.tc("""
def nt(float(M,K) A, float(N,K) B) -> (C) {
    C(m, n) +=! A(m, k) * B(n, k)
}""", dynamic=("M",))
    assert "<= 32L" not in nt.specialize(f32(40, 96), f32(600, 96)).code


def test_a_few_rows_run_a_second_tiling(no_compile):
    """From one register tile of rows to twice as many, a generic GEMM that reads its
    operand where it lies runs a second tiling of the same loops, all its rows in one
    register tile (``codegen_c/fewrows.py``), chosen at run time: every row count on both
    sides of its bounds, over columns that end in a partial tile and vector, computes
    the product; explain() says so; the pass can be switched off."""
    mm = polytc.tc(MATMUL, dynamic=("M",))
    B = f32(75, 600)  # (600: 9 tiles of 64 columns and a partial one of 24)
    ck = mm.specialize(f32(40, 75), B)
    found = re.search(r"if \(\(M\) > (\d+)L && \(M\) <= (\d+)L\)", ck.code)
    if host().vector_registers < 32:  # (AVX2: the tile is 6 x 2 vectors already)
        assert found is None and "few_rows" not in ck.stages
        return
    assert found, ck.code
    least, most = int(found[1]), int(found[2])
    assert (least, most) == (6, 12) and "register 12x32x1" in ck.stages["few_rows"]
    assert "second tiling" in str(ck.explain(vectorizer=False))
    no_compile()
    for m in range(1, 2 * most + 2):
        A = f32(m, 75)
        np.testing.assert_allclose(mm(A, B), A @ B, rtol=1e-4, atol=1e-3, err_msg=str(m))


def test_the_few_rows_variant_needs_an_operand_packed_at_every_call():
    """No variant where the operand is a constant packed once (a model's weights: the
    generic kernel packs it for every row count), nor when switched off."""
    x = f32(40, 96)
    for options in (polytc.Options(constants=("B",)), polytc.Options(disable=("few_rows",))):
        ck = polytc.tc(MATMUL, dynamic=("M",), options=options).specialize(x, f32(96, 600))
        assert "few_rows" not in ck.stages and "&& (M) <= 12L" not in ck.code


def _projections(counts) -> str:
    """A 128 -> 64 product and ReLU over ``counts`` rows by one kernel with the rows
    symbolic, each checked against numpy; the code at the first count."""
    k = polytc.tc("""def proj(float(N,D) X, float(D,E) W) -> (Y) {
        h(n, e) +=! X(n, d) * W(d, e)
        Y(n, e) = fmax(h(n, e), 0.0)
    }""", dynamic=("N",), options=polytc.Options(num_threads=2))
    code = None
    for n in counts:
        X, W = f32(n, 128), f32(128, 64)
        np.testing.assert_allclose(k(X, W), np.maximum(X @ W, 0), rtol=1e-4, atol=1e-3)
        code = code or k.specialize(X, W).code
    return code


def test_a_partial_tile_of_symbolic_rows_is_shared_by_the_threads(no_compile):
    """Columns in one tile, rows symbolic: the rows the full row tiles leave (all of
    them below one tile) run in one parallel region outside the loop of tiles, each
    thread packing its own copy of the weights, the register tiles of rows shared, the
    remainder rows on one thread (``codegen_c/rowsplit.py``); every row count, below,
    at and past a tile and its register tiles, computes the product."""
    code = _projections((64, 1, 7, 13, 300, 97, 200))
    if host().vector_bytes < 64:  # (narrower register tiles: the 64 columns are two
        no_compile()  # tiles, which the threads share instead)
        return
    region = code[code.index("#pragma omp for schedule(static)") - 400:]
    assert "#pragma omp single" in region, code
    assert re.search(r"#pragma omp parallel num_threads\(2\)\n\s*\{\n\s*pt_body\d+\(N",
                     code), code
    no_compile()


def test_few_full_tiles_of_symbolic_rows_share_their_rows_too(no_compile):
    """Fewer full row tiles than twice the threads, not a multiple of them (one 96-row
    tile at 100 rows, three at 300 on two threads): every thread runs every tile, the
    threads sharing its register tiles of rows (``rowsplit.tiles_split``); an even
    count keeps the loop of tiles.  Every count of tiles computes the product."""
    code = _projections((100, 96, 191, 192, 288, 383, 500))
    if host().vector_bytes < 64:  # (narrower register tiles: the 64 columns are two
        no_compile()  # tiles, which the threads share instead)
        return
    test = re.search(r"if \(.* / (\d+)L\) \* 18L < .* / 2L \* 34L\)\)\n\s*\{\n\s*"
                     r"#pragma omp parallel num_threads\(2\)\n\s*\{\n\s*"
                     r"pt_body(\d+)\(N", code)
    assert test, code
    body = code[code.index(f"void pt_body{test.group(2)}("):]
    body = body[:body.index("\n}\n")]
    assert re.search(rf"for \(long c\d+ = 0L; c\d+ < \(N - {int(test.group(1)) - 1}L\)",
                     body), body
    assert "#pragma omp for schedule(static)" in body, body
    # a loop of a fixed count of tiles (the columns' of a 512-wide product, two for two
    # threads) stays as the tiler shared it, with no second copy of its code
    k = polytc.tc(MATMUL, dynamic=("M",), options=polytc.Options(num_threads=2))
    code = k.specialize(f32(8, 512), f32(512, 512)).code
    assert "* 18L <" not in code, code
    no_compile()


def test_the_rows_of_a_generic_row_program_stay_vector_loops(no_compile):
    """A fused row program too small to fork below a row per thread (a 64-wide softmax)
    marks no parallel loops inside its loop of rows: they stay vector loops, not a call
    of an outlined body per element (10x slower), and the kernel matches numpy."""
    k = polytc.tc(SOFTMAX, dynamic=("N",), options=polytc.Options(num_threads=2))
    for i, n in enumerate((64, 1, 3)):
        h = f32(n, 64)
        np.testing.assert_allclose(k(h), np_softmax(h), rtol=1e-5, atol=1e-6)
        if i == 0:
            code = k.specialize(h).code
            assert code.count("#pragma omp parallel") == 1, code
            assert code.count("#pragma omp simd") >= 3, code
            no_compile()


@pytest.mark.parametrize("constants", [(), ("B",)])
def test_column_tiles_that_split_unevenly_share_their_rows_from_enough_rows(
        constants, no_compile):
    """Rows symbolic, 784 packed columns: one cache tile of all rows, so the operand is
    packed once per call (or before the first, ``constants``), not again for every tile
    of rows (``sizes.all_rows``).  Where the column tiles split unevenly among the
    threads (448 and 336 with 64-wide register tiles), the threads share the column
    tiles below the rows the tiler names and, from there, each runs every column tile
    while they share its register tiles of rows (``rowsplit.tiles_split``); the rows
    past the last register tile share their register tiles of columns.  Every count of
    rows, on both sides of that test and of a register tile, computes the product."""
    k = polytc.tc(MATMUL, dynamic=("M",),
                  options=polytc.Options(num_threads=2, constants=constants))
    B = f32(256, 784)
    for i, m in enumerate((301, 1, 5, 6, 7, 33, 47, 48, 49, 143, 144, 150, 1000)):
        A = f32(m, 256)
        np.testing.assert_allclose(k(A, B), A @ B, rtol=1e-4, atol=1e-3)
        if i:
            continue
        ck = k.specialize(A, B)
        text = str(ck.explain())
        if host().vector_bytes < 64:  # (16-wide tiles: their 256 x 16 panels fit half
            no_compile()  # of L1, the rows in tiles pass over each: not one tile of them)
            continue
        assert "Its symbolic rows form one cache tile" in text, text
        least = re.search(r"share its column tiles below (\d+) rows", text)
        assert least or "which split evenly" in text, text
        if least:  # (the register tiles the machine has: 784 may split evenly)
            assert re.search(r"\) >= \d+L\)\)\n\s*\{\n\s*#pragma omp parallel "
                             r"num_threads\(2\)\n", ck.code), ck.code
            rest = re.search(r"% \d+L\) >= 1L\)\)\)\n\s*\{\n\s*#pragma omp for "
                             r"schedule\(static\)\n\s*for \(long c\d+ = 0L;", ck.code)
            assert rest, ck.code
        no_compile()


def test_all_rows_shares_uneven_column_tiles_from_where_it_pays():
    """``sizes.all_rows``: the rows from which the cores share each column tile's rows,
    from which on every count of register tiles pays (an odd count leaves a core one
    more), later where each core packs every column tile at each call; none where the
    column tiles split evenly or are one."""
    from polytc.tiling.sizes import all_rows
    ti, rows = all_rows(6, 784, 448, 2, per_call=False)
    assert ti % 6 == 0 and ti >= 1 << 24
    assert rows == 48  # (448 x 6k against 784 x 6 ceil(k / 2): from k = 8 on)
    assert all_rows(6, 784, 448, 2, per_call=True)[1] > rows
    assert all_rows(6, 512, 256, 2, per_call=True)[1] is None
    assert all_rows(6, 64, 64, 2, per_call=False)[1] is None


def test_symbolic_rows_before_a_constant_batch_of_two():
    """A product over a constant batch of 2 whose rows are a symbolic size (two sequences
    of a symbolic length) register-tiles its rows, not the batch: its tiles had been 2 rows
    of the batch x 64 columns, 1.6-1.9x slower than a kernel specialised to the length."""
    src = "def f(float(2, S, K) A, float(K, N) B) -> (C) { C(b, s, n) +=! A(b, s, k) * B(k, n) }"
    k = polytc.tc(src, dynamic=("S",))
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(s, dtype=np.float32) for s in ((2, 100, 64), (64, 128)))
    ck = k.specialize(a, b)
    found = re.findall(r"isl: contraction S0; order (\[[\d, ]+\]);[^\n]*register (\S+)",
                       str(ck.explain(vectorizer=False)))
    assert found and found[0][0] == "[0, 1, 2, 3]"  # (the batch outside, the rows lead)
    assert not found[0][1].startswith("1x2x")
    for s in (1, 7, 100):
        a = rng.standard_normal((2, s, 64), dtype=np.float32)
        np.testing.assert_allclose(k(a, b), np.einsum("bsk,kn->bsn", a, b), rtol=1e-4,
                                   atol=1e-4)


@pytest.mark.parametrize("batch", [2, 3])
def test_a_constant_batch_of_symbolic_rows_shares_a_register_tile(batch):
    """Two or three sequences of a symbolic length through constant weights, with an
    epilogue: the register tile spans the batch (its rows those of every sequence), so
    that a length of 1 runs as one tile of the batch's rows, one pass over the weights,
    not each sequence's one row against all of them (a transformer layer with a
    symbolic length, at 1: 1.48 -> 0.99x its specialised twin).  Every length, a whole
    tile of rows or a remainder, and a partial tile of columns compute the product."""
    src = f"""def f(float({batch}, S, K) A, float(K, N) B, float(N) c) -> (D) {{
    C(b, s, n) +=! A(b, s, k) * B(k, n)
    D(b, s, n) = max(C(b, s, n) + c(n), 0.0)
}}"""
    rng = np.random.default_rng(batch)
    for n in (256, 100):
        k = polytc.tc(src, dynamic=("S",), options=polytc.Options(constants=("B",)))
        b, c = f32(64, n), rng.standard_normal(n, dtype=np.float32)
        text = str(k.specialize(f32(batch, 5, 64), b, c).explain(vectorizer=False))
        found = re.findall(r"isl: contraction S0;[^\n]*register (\d+)x", text)
        assert found == [str(batch)], text
        for s in (9, 1, 2, 3, 4, 7, 17):
            a = rng.standard_normal((batch, s, 64), dtype=np.float32)
            np.testing.assert_allclose(k(a, b, c), np.maximum(np.einsum("bsk,kn->bsn", a, b)
                                                               + c, 0), rtol=1e-4, atol=1e-4)


def test_long_generic_kernels_are_built_without_peeling(monkeypatch, tmp_path):
    """A kernel of symbolic sizes longer than ``PEEL_MOST_LINES`` lines asks gcc not to
    peel its small loops (their bounds are symbolic: gcc had peeled each whole by its
    estimate, 14 s for a 7400-line attention); shorter ones, and every kernel of
    constant sizes, are built as before."""
    from polytc.backends import c as cback

    monkeypatch.setattr(cback, "PEEL_MOST_LINES", 0)
    monkeypatch.setenv("POLYTC_CACHE_DIR", str(tmp_path))  # (built here, not served)
    text = MATMUL.replace("matmul", "peel_probe")
    a, b = np.ones((5, 8), np.float32), np.ones((8, 4), np.float32)
    generic = polytc.tc(text, dynamic=("M",)).specialize(a, b)
    assert '#pragma GCC optimize ("no-peel-loops")' in generic.code
    assert np.allclose(generic.run([a, b]), a @ b)
    fixed = polytc.tc(text, dynamic=()).specialize(a, b)
    assert "no-peel-loops" not in fixed.code
