"""Register tiles of few accumulators interleave their reduction over several sets of
them (``codegen_c/chains.py``): a narrow product over a deep reduction, whose one vector
per row waited on each FMA's latency; tiles of few rows hold their operand vectors in
registers.  The sums are reassociated: every case is checked
against the reference interpreter, a reduction that is not a multiple of the sets (the
loop's rest) and a folded epilogue included."""
from __future__ import annotations

import re

import pytest

import polytc
from tests.kernels_small import MATMUL as NARROW
from tests.kernels_small import check

NARROW_BIAS_RELU = """
def narrow_bias_relu(float(M,K) A, float(K,N) B, float(N) b) -> (C) {
    C(m, n) +=! A(m, k) * B(k, n)
    C(m, n) = max(C(m, n) + b(n), 0.0)
}"""

ONE = polytc.Options(parallel_min_points=1)


def _interleaved(code: str) -> bool:
    return re.search(r"for \(long c\d+_c = ", code) is not None


@pytest.mark.parametrize("m,k,n", [(1, 4096, 16), (3, 1027, 16), (6, 999, 8), (2, 522, 20)])
def test_a_narrow_product_interleaves_its_reduction(m, k, n):
    ck = check(NARROW, [(m, k), (k, n)], ONE, rtol=1e-4, atol=1e-3)
    if "pt_v" not in ck.code:
        pytest.skip("no vector register tiles on this machine")
    assert _interleaved(ck.code), ck.code
    # every set is added into the first before the tile is stored
    for acc in re.findall(r"\b(pt_a\d+_\d+)_c1 = ", ck.code):
        assert re.search(rf"\b{acc} \+= {acc}_c1\b", ck.code), acc


def test_explain_says_the_reduction_is_interleaved():
    ck = check(NARROW, [(3, 1027), (1027, 16)], ONE, rtol=1e-4, atol=1e-3)
    if "pt_v" not in ck.code:
        pytest.skip("no vector register tiles on this machine")
    text = str(ck.explain())
    assert "sets of accumulators" in text and "chains.py" in text, text


def test_a_folded_epilogue_takes_the_sets_sum():
    ck = check(NARROW_BIAS_RELU, [(5, 2049), (2049, 16), (16,)], ONE, rtol=1e-4, atol=1e-3)
    if "pt_v" not in ck.code:
        pytest.skip("no vector register tiles on this machine")
    assert _interleaved(ck.code), ck.code


class _Emitter:
    def for_header(self, loop):
        return "c5", ("long c5 = 0L", "c5 <= 99L", "c5 += 1L")


def test_sets_enough_for_the_chains_and_no_more(monkeypatch):
    """Sets: enough for ``CHAINS`` sums, within half of the registers, at least two
    steps each; none for a tile of ``CHAINS`` accumulators or a reduction of one step."""
    import cgen as c

    from polytc.codegen_c import chains
    from polytc.codegen_c.chains import CHAINS, interleave

    monkeypatch.setattr(chains, "const_bounds", lambda loop: loop)  # (the loop: bounds)
    body = [c.Statement("pt_a0_0 += x * y")]
    one = interleave(_Emitter(), (0, 99), body, {"pt_a0_0": "pt_v16f"}, 32)
    assert len(one.combine) == 1 and len(one.decls) == CHAINS - 1
    assert str(one.combine[0]).count("_c") == CHAINS - 1
    three = interleave(_Emitter(), (0, 99), body,
                       {f"pt_a{r}_0": "pt_v16f" for r in range(3)}, 32)
    assert len(three.decls) == 3 * 2  # 3 sets of 3: 9 chains
    assert "c5_c < 99L" in str(three.loop[0]) and "c5 <= 99L" in str(three.loop[1])
    full = {f"pt_a{r}_{v}": "pt_v16f" for r in range(4) for v in range(2)}
    assert interleave(_Emitter(), (0, 99), body, full, 32) is None
    assert interleave(_Emitter(), (0, 0), body, {"pt_a0_0": "pt_v16f"}, 32) is None
    few_registers = interleave(_Emitter(), (0, 99), body,
                               {f"pt_a{r}_0": "pt_v8f" for r in range(3)}, 16)
    assert len(few_registers.decls) == 3  # 2 sets: 6 of 16 registers


@pytest.mark.parametrize("m", [2, 3, 4, 9, 6])
def test_a_tile_of_few_rows_holds_its_operand_vectors_in_registers(m):
    """Register tiles of 2 to ``PIN_ROWS`` rows load each operand vector once a step
    into a register (an empty ``asm`` holds it there, where gcc would fold the load
    into every row's FMA); tiles of more rows are left to gcc; every product matches
    the reference interpreter, the rows past the last whole register tile included."""
    from polytc.codegen_c.chains import PIN_ROWS
    from polytc.machine import host

    ck = check(NARROW, [(m, 512), (512, 256)], ONE, rtol=1e-4, atol=1e-3)
    if "pt_v" not in ck.code:
        pytest.skip("no vector register tiles on this machine")
    pins = re.findall(r"PT_PIN\((pt_r\d+)\);", ck.code)
    tiles = {int(r) for r in re.findall(r"register tiles (\d+)x", str(ck.explain()))}
    rows = {m % t for t in tiles if m % t} | {t for t in tiles if m >= t}
    few = any(1 < r <= PIN_ROWS for r in rows)
    assert few or not pins, (rows, ck.code)
    if few and host().vector_registers >= 32:  # (room for them all: AVX-512)
        assert pins, (rows, ck.code)
    for name in pins:  # (declared as a plain vector before its pin)
        assert re.search(rf"pt_v\w+ {name} = ", ck.code), name
