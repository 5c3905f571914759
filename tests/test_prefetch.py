"""Software prefetches of a register tile's streamed data (``codegen_c/prefetch.py``):
an operand read a row per reduction step (a pointwise convolution over the pixels of
many channels) and the folded epilogue's reads across the planes of a channel-lane tile
(a residual add).  Each has more streams than the hardware prefetchers follow; the code
asks for the next tile's lines while it computes its own.  A prefetch never changes a
result (and never faults, even past an array's end): every case is checked against the
reference interpreter, partial tiles included."""
from __future__ import annotations

import re

import pytest

import polytc
from tests.kernels_small import check
from tests.test_contract import PADCONV

# a 1x1 convolution as the graph lowers it: filters x channels times channels x pixels
POINTWISE = """
def pointwise(float(M,C) Wt, float(N,C,P) X) -> (Y) {
    Y(n, m, p) +=! Wt(m, c) * X(n, c, p)
    Y(n, m, p) = max(Y(n, m, p), 0.0)
}"""

ONE = polytc.Options(parallel_min_points=1)


@pytest.fixture(autouse=True)
def _small_last_level_cache(monkeypatch):
    """Prefetches are for tensors larger than the last-level cache (from memory): a
    cache of 64 KiB makes these tests' tensors so (their sizes are theirs alone, so
    that no kernel compiled without it is served from the session's cache)."""
    from polytc.codegen_c import prefetch

    monkeypatch.setattr(prefetch, "_last_level", lambda: 64 << 10)


@pytest.mark.parametrize("m,c,p", [(16, 128, 3023), (16, 24, 200), (8, 7, 61)])
def test_a_streamed_operand_is_prefetched_a_tile_ahead(m, c, p):
    ck = check(POINTWISE, [(m, c), (2, c, p)], ONE.replace(constants=("Wt",)),
               rtol=1e-4, atol=1e-4)
    ahead = re.findall(r"__builtin_prefetch\(&X\[([^;]*)\]\);", ck.code)
    if "pt_v" not in ck.code:
        pytest.skip("no vector register tiles on this machine")
    if "pack S0; tensor X" in str(ck.explain()):
        assert not ahead  # its packed panels are read in order: nothing to ask for
    else:  # a line per vector of the next tile along the pixels, each reduction step
        assert ahead and all("((long)((c" in a for a in ahead), ck.code


def test_a_tile_of_few_rows_is_left_to_the_hardware():
    """A vector-matrix product takes 8 rows of the matrix a tile: 8 streams, which the
    hardware prefetchers follow (a prefetch per line was 10% slower from memory)."""
    ck = check("""
def gevm(float(K,N) A, float(K) x) -> (y) {
    y(n) +=! x(k) * A(k, n)
}""", [(64, 4096), (64,)], ONE)
    if "pt_v" not in ck.code:
        pytest.skip("no vector register tiles on this machine")
    # (its 8 steps, interleaved over two sets of accumulators: ``chains.py``)
    assert re.search(r"for \(long c3(_c)? = 0L; c3(_c)? (<= 7L|< 8L)", ck.code), ck.code
    assert "__builtin_prefetch" not in ck.code


def test_the_packed_operand_is_not_prefetched():
    ck = check(POINTWISE, [(16, 128), (2, 128, 3023)], ONE.replace(constants=("Wt",)))
    assert "__builtin_prefetch(&Wt" not in ck.code and "__builtin_prefetch(&pt_pack" not in ck.code


@pytest.mark.parametrize("h,w", [(24, 56), (13, 24)])
def test_a_channel_lane_tiles_residual_is_prefetched_while_it_computes(h, w):
    """Lanes over 32 filters with the result's stride: the epilogue reads the residual
    at 32 planes.  The tile asks for its own first and last pixels of them, a few
    lanes per step of its outermost reduction loop (3 steps over the kernel's rows: 11
    lanes each), on the last reduction tile, before the loops inside it."""
    ck = check(PADCONV, [(2, 32, h, w), (64, 32, 3, 3), (2, 64, h, w)],
               ONE.replace(constants=("K",)), rtol=1e-3, atol=1e-3)
    if "pt_t[pt_l" not in ck.code:
        pytest.skip("no channel-lane register tiles on this machine")
    ahead = re.findall(r"__builtin_prefetch\(&R\[[^;]*\(c8 \+ \((\d+)L\)\)+\]\);", ck.code)
    rows = int(re.search(r"for \(long c8 = 0L; c8 <= \d+L; c8 \+= (\d+)L\)", ck.code)[1])
    assert ahead == ["0", str(rows - 1)], ck.code
    spread = re.search(r"for \(long pt_l = \((c\d+) - 0L\) \* (\d+)L; pt_l < PT_MIN\(\(\(\1 - 0L\) "
                       r"\+ 1\) \* \2L, 32L\); pt_l \+= 1\)", ck.code)
    assert spread, ck.code
    loop = re.search(rf"for \(long {spread[1]} = 0L; {spread[1]} <= (\d+)L;", ck.code)
    assert int(spread[2]) * (int(loop[1]) + 1) >= 32  # every lane
    assert loop.start() < spread.start() and \
        "for (" not in ck.code[ck.code.find("\n", loop.start()) + 1:spread.start()]


def test_operands_in_the_last_level_cache_are_not_prefetched(monkeypatch):
    from polytc.codegen_c import prefetch

    monkeypatch.setattr(prefetch, "_last_level", lambda: 1 << 30)
    ck = check(POINTWISE, [(16, 128), (2, 128, 3021)], ONE.replace(constants=("Wt",)))
    assert "__builtin_prefetch(&" not in ck.code  # (only ``next_tile``'s, of the result)


MATMUL = """
def mm(float(M,K) A, float(K,N) B) -> (C) {
    C(i, j) +=! A(i, k) * B(k, j)
}"""


def _next_tiles(code: str) -> list:
    """The tables of ``next_tile``: each a list of its addresses (C text)."""
    return [t.split(", (const char *)") for t in
            re.findall(r"const char \*const pt_nt\[\d+\] = \{(.*)\};", code)]


def test_a_tile_asks_for_the_next_tiles_result_while_it_computes():
    """A 130 x 1030 result (larger than L2, as the fixture has it) over 900 products
    each (more than one reduction tile: the tiles load their accumulators): the tiles
    run along its rows, each asking for the lines of the next one's accumulators, one
    every few steps of its reduction loop, so that they are in the core's caches when
    that tile loads them."""
    ck = check(MATMUL, [(130, 900), (900, 1030)], ONE, rtol=1e-4, atol=1e-4)
    if "pt_v" not in ck.code:
        pytest.skip("no vector register tiles on this machine")
    if re.search(r"cache \d+x\d+x900;", ck.stages["tiling"]):
        pytest.skip("one reduction tile with this machine's tiles: no accumulator loads")
    tables = _next_tiles(ck.code)
    assert tables and all(all("&C[" in a for a in t) for t in tables), ck.code
    after = ck.code[ck.code.find("pt_nt["):]
    step = re.search(r"for \(long (c\d+) = [^;]*;[^{]*\{\s*(if \(\(\(\1 - \d+L\) & \d+L\)"
                     r" == 0L|for \(long pt_l = \(\1 - )", after)
    assert step and "__builtin_prefetch(pt_nt[" in after[step.start():step.start() + 300], \
        after[:2000]


@pytest.mark.parametrize("shapes", [[(300, 640), (640, 64)], [(131, 900), (900, 1030)],
                                    [(130, 64), (64, 1030)]])
def test_a_row_of_one_tile_or_a_result_in_l2_is_not_asked_for(monkeypatch, shapes):
    """A 64-column result (each tile a whole row: the next along the lanes is none), the
    130-row product's result once L2 holds it, and over 64 products (one reduction tile
    with any L1's tiles: its accumulators start at zero, no load waits; 300 products
    were 5 tiles with a Zen 4's 32 KiB L1)."""
    from polytc.codegen_c import prefetch

    if shapes[0][0] == 131:
        monkeypatch.setattr(prefetch, "_beyond_l2", lambda: 1 << 30)
    ck = check(MATMUL, shapes, ONE, rtol=1e-4, atol=1e-4)
    assert not _next_tiles(ck.code) and "pt_nt" not in ck.code


# max pooling 3x3/2 of a padded plane (ResNet-18's after its stem): each iteration
# copies a plane into a contracted buffer, then computes from it
POOL = """
def pool(float(C,H,W) X) -> (Y) {
    P(c, h, w) = h >= 1 && w >= 1 ? X(c, h - 1, w - 1) : -1.0 / 0.0
        where h in 0:H+1, w in 0:W+1
    Y(c, h, w) max=! P(c, h * 2 + kh, w * 2 + kw)
        where h in 0:H/2, w in 0:W/2, kh in 0:3, kw in 0:3
}"""


@pytest.mark.parametrize("c,w", [(6, 112), (5, 98), (3, 40)])
def test_the_next_iterations_source_is_prefetched_while_it_computes(c, w):
    """A cursor over the next plane (the copy's source in the next iteration), 16 lines
    at each row of the window loop that reads the buffer; none in the copy's loops, and
    none for planes under 16 KiB, which the hardware prefetchers follow."""
    ck = check(POOL, [(c, w, w)], ONE)
    declared = re.findall(r"const char \*pt_pf_P = \(const char \*\)&X\[([^;]*)\], "
                          r"\*const pt_pf_P_end = pt_pf_P \+ (\d+)L;", ck.code)
    if w * w * 4 < 16 << 10:
        assert not declared and "pt_pf_" not in ck.code
        return
    assert len(declared) == 1 and int(declared[0][1]) == w * w * 4, ck.code
    assert f"{w * w}" in declared[0][0]  # the next plane's first element
    # after the copy's loops (the last store into the buffer), before the window's
    last_copy = max(m.start() for m in re.finditer(r"pt_l_P\[[^;\n]*\] = ", ck.code))
    first_step = ck.code.find("__builtin_prefetch(pt_pf_P)")
    assert last_copy < first_step < ck.code.find("pt_l_P[", first_step), ck.code
