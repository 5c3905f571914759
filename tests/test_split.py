"""Long outlined bodies cut into functions (``codegen_c/split.py``)."""
from __future__ import annotations

import re

import cgen as c
import numpy as np
import pytest

import polytc
from polytc.codegen_c import split

PARAMS = [c.Value("long", "c0"), c.Value("", "const float *restrict A"),
          c.Value("float *restrict", "B"), c.Value("int *restrict", "pt_err")]
NAMES = ["c0", "A", "B", "pt_err"]


def _nest(it: str, lines: int, uses: str = "A[c0]") -> c.For:
    body = [c.Statement(f"B[{it} + {k}] = {uses} * {k}.0f") for k in range(lines)]
    return c.For(f"long {it} = 0L", f"{it} < 8L", f"{it} += 1L", c.Block(body))


def test_a_short_body_is_unchanged():
    body = [_nest("c1", 10)]
    assert split.cut("pt_body0", PARAMS, NAMES, body, []) is body


def test_long_nests_become_functions_called_with_the_iterators_around():
    pieces: list = []
    outer = c.For("long c1 = 0L", "c1 < 4L", "c1 += 1L",
                  c.Block([c.Pragma("omp simd"), _nest("c2", 200), _nest("c3", 250)]))
    body = split.cut("pt_body0", PARAMS, NAMES, [outer], pieces)
    # the whole loop a piece, still long, cut again: its nests pieces defined before it
    assert str(c.Block(body)) == "{\n  pt_body0_0(c0, A, B, pt_err);\n}"
    assert len(pieces) == 3 and "pt_body0_0(long c0," in str(pieces[2])
    text = str(pieces[2])
    assert "pt_body0_1(c1, c0, A, B, pt_err);" in text
    assert "pt_body0_2(c1, c0, A, B, pt_err);" in text
    first = str(pieces[0])
    assert first.startswith("static __attribute__((noinline)) void pt_body0_1(long c1, long c0,")
    assert "#pragma omp simd\n  for (long c2" in first  # (the pragma moves with its loop)
    assert "__atomic_store_n(pt_err, err" in first


def test_a_nest_using_a_variable_declared_around_it_stays():
    pieces: list = []
    body = [c.Statement("pt_v16f pt_a0_0 = (pt_v16f){}"), _nest("c1", 300, "pt_a0_0[0]"),
            c.Statement("float pt_t[256] __attribute__((aligned(64)))"), _nest("c2", 300)]
    out = split.cut("pt_body0", PARAMS, NAMES, body, pieces)
    assert str(out[1]).startswith("for (long c1") and len(pieces) == 1
    assert str(out[3]) == "pt_body0_0(c0, A, B, pt_err);"


def test_a_nest_using_a_pointer_declared_around_it_takes_it_as_an_argument():
    """A contracted buffer's pointer goes to the piece (a recurrent layer's steps in one
    parallel loop), also to a piece cut from a piece; an array it points to does not."""
    pieces: list = []
    inner = c.For("long c1 = 0L", "c1 < 4L", "c1 += 1L",
                  c.Block([_nest("c2", 200, "pt_l_T[c2]"), _nest("c3", 250)]))
    body = [c.Statement("float pt_l_T_s[64] __attribute__((aligned(64)))"),
            c.Statement("float *restrict pt_l_T = __builtin_assume_aligned(pt_l_T_s, 64)"),
            inner]
    out = split.cut("pt_body0", PARAMS, NAMES, body, pieces)
    assert str(out[2]) == "pt_body0_0(pt_l_T, c0, A, B, pt_err);"
    whole = str(pieces[-1])
    assert whole.startswith("static __attribute__((noinline)) void pt_body0_0("
                            "float *restrict pt_l_T, long c0,")
    assert "pt_body0_1(c1, pt_l_T, c0, A, B, pt_err);" in whole
    assert "pt_body0_2(c1, c0, A, B, pt_err);" in whole  # (the pointer only where used)


def test_lists_with_preprocessor_lines_keep_their_parts():
    pieces: list = []
    body = [c.Line("#ifdef PT_EXPV16"), _nest("c1", 300), c.Line("#else"), _nest("c1", 300),
            c.Line("#endif")]
    assert split.cut("pt_body0", PARAMS, NAMES, body, pieces) == body and not pieces


@pytest.mark.parametrize("text,name", [
    ("pt_v16f pt_a0_0 = (pt_v16f){}", "pt_a0_0"), ("const float pt_r0 = A[c0]", "pt_r0"),
    ("float pt_t[256] __attribute__((aligned(64)))", "pt_t"),
    ("float *restrict pt_l_T1 = __builtin_assume_aligned(pt_l_T1_s, 64)", "pt_l_T1"),
    ("const long c3 = 2L", "c3"), ("B[c0] = 1.0f", None), ("pt_a0_0 += x", None),
    ("PT_PIN(pt_r1)", None), ("return err", None)])
def test_declarations(text, name):
    assert split.declared(c.Statement(text)) == name


@pytest.mark.parametrize("constants", [("W",), ()])
def test_a_generic_kernel_cut_into_pieces_computes_the_same(constants):
    """A product of a symbolic number of rows: its body of full and partial tiles is
    thousands of lines, and runs as pieces; the results match numpy at several sizes.
    Without constants the pieces read the panels that their region packed into its
    thread's buffer (a ``static __thread`` array of the source's head: a region and its
    pieces compile in one unit, ``compiler._parts``, or they would read another's)."""
    src = "def f(float(M,K) A, float(K,N) W) -> (C) { C(m, n) +=! A(m, k) * W(k, n) }"
    k = polytc.tc(src, dynamic=("M",), options=polytc.Options(constants=constants))
    rng = np.random.default_rng(2)
    W = rng.standard_normal((256, 100)).astype(np.float32)
    for m in (13, 1, 5, 37):
        A = rng.standard_normal((m, 256)).astype(np.float32)
        np.testing.assert_allclose(k(A, W), A.astype(np.float64) @ W, rtol=1e-4, atol=1e-3)
    code = k.specialize(A, W).code
    assert re.search(r"void pt_body\d+_\d+\(", code)
    longest = max(len(f.splitlines()) for f in re.split(r"\n(?=static |int polytc)", code))
    assert longest < 2 * split.SPLIT_LINES


@pytest.mark.parametrize("buffers", [False, True])
def test_pieces_share_out_between_units_unless_they_share_buffers(buffers, monkeypatch):
    """``compiler._parts``: a region's pieces go to units of their own (an LSTM's one
    region of 33 pieces compiles on both cores), unless the head declares thread-local
    buffers they share: then they stay in the region's unit."""
    from polytc.codegen_c import compiler

    head = "#include <stdint.h>\n" + (
        "static __thread float pt_pack0[64] __attribute__((aligned(64)));\n" if buffers else "")
    monkeypatch.setattr(compiler, "SPLIT_BYTES", 0)
    body = "  int x = 0;\n" * 20

    def fn(name):
        return f"static __attribute__((noinline)) void {name}(long c0)\n{{\n{body}}}\n\n"

    source = (head + "".join(fn(n) for n in ("pt_body0_0", "pt_body0_1", "pt_body0")) +
              "\nint polytc_kernel(void)\n{\n  pt_body0(0);\n  return 0;\n}\n")
    parts = compiler._parts(source, 2)
    if buffers:
        assert parts is None  # one region: nothing to share out
    else:
        units = [t for t, _ in parts[:-1]]
        assert len(units) == 2 and all(t.startswith(head) for t in units)
        assert "pt_body0_0(" in units[0] and "pt_body0(long" in units[1]
        hidden = '__attribute__((noinline, visibility("hidden"))) void pt_body0_1('
        assert sum(hidden in t for t in units) == 1
