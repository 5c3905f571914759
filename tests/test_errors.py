"""Every error a user can meet, one test each: its class, a key phrase of its message, its
``file:line:col``, the quoted source line and a caret under the offending column.

Tests marked ``xfail(strict=True, reason="polytc bug: ...")`` pin down bugs: they flip
(and fail as XPASS) once the bug is fixed, so the mark can be removed.
"""
from __future__ import annotations

import os
import re
import traceback

import numpy as np
import pytest

import polytc
from polytc import (ArgumentError, KernelRuntimeError, PolytcError, RangeInferenceError,
                    TCSemanticError, TCSyntaxError, TCTypeError, UndefinedNameError)
from polytc.poly.scop import OutOfBoundsError

POLYTC_DIR = os.path.dirname(os.path.abspath(polytc.__file__))
F32 = np.float32


# --- helpers -----------------------------------------------------------------------------
def where(src: str, needle: str, nth: int = 0) -> tuple:
    """1-based (line, col) of the ``nth`` occurrence of ``needle`` in ``src`` (-1: the
    last)."""
    pos = -1
    if nth < 0:
        pos = src.rindex(needle)
    for _ in range(nth + 1):
        pos = src.index(needle, pos + 1)
    line = src.count("\n", 0, pos) + 1
    col = pos - (src.rfind("\n", 0, pos) + 1) + 1
    return line, col


def assert_located(err: PolytcError, src: str, needle: str, nth: int = 0,
                   filename: str = "<tc>") -> None:
    """``str(err)`` starts ``filename:line:col:`` at ``needle``, quotes its line and puts
    a caret under its first character."""
    line, col = where(src, needle, nth)
    text = str(err)
    lines = text.splitlines()
    assert lines[0].startswith(f"{filename}:{line}:{col}: "), text
    quoted = "    " + src.splitlines()[line - 1]
    assert quoted in lines, text
    caret = lines[lines.index(quoted) + 1]
    assert re.fullmatch(r" *\^~*", caret), text
    assert caret.index("^") == 4 + col - 1, text


def tc_error(src: str, cls=PolytcError, **kw) -> PolytcError:
    with pytest.raises(cls) as info:
        polytc.tc(src, **kw)
    assert not isinstance(info.value, polytc.InternalError), str(info.value)
    return info.value


def call_error(kernel, *args, cls=PolytcError, **kw) -> PolytcError:
    with pytest.raises(cls) as info:
        kernel(*args, **kw)
    assert not isinstance(info.value, polytc.InternalError), str(info.value)
    return info.value


MATMUL = """def matmul(float(M,K) A, float(K,N) B) -> (C) {
    C(m, n) +=! A(m, k) * B(k, n)
}"""


@pytest.fixture(scope="module")
def matmul():
    return polytc.tc(MATMUL)


# --- syntax errors -----------------------------------------------------------------------
def test_syntax_missing_paren_in_signature():
    src = "def f(float(N) A -> (O) {\n    O(i) = A(i)\n}"
    e = tc_error(src, TCSyntaxError)
    assert "expected ')'" in e.message and "'->'" in e.message
    assert_located(e, src, "->")


def test_syntax_missing_paren_in_expression():
    src = "def f(float(N) A) -> (O) {\n    O(i) = exp(A(i)\n}"
    e = tc_error(src, TCSyntaxError)
    assert "expected ')'" in e.message
    assert_located(e, src, "}")  # the first token that cannot continue the call


def test_syntax_bad_token_at_sign():
    src = "def f(float(N) A) -> (O) {\n    O(i) = A(i) @ A(i)\n}"
    e = tc_error(src, TCSyntaxError)
    assert "invalid character '@'" in e.message
    assert e.hint and "reduction" in e.hint
    assert_located(e, src, "@")


def test_syntax_bad_token_with_file_name():
    src = "def f(float(N) A) -> (O) {\n    O(i) = A(i) $ 2\n}"
    e = tc_error(src, TCSyntaxError, filename="model.tc")
    assert "invalid character '$'" in e.message
    assert_located(e, src, "$", filename="model.tc")


UNTERMINATED = "def f(float(N) A) -> (O) {\n    O(i) = A(i)\n"


def test_syntax_unterminated_def():
    e = tc_error(UNTERMINATED, TCSyntaxError)
    assert "end of input" in e.message
    assert_located(e, UNTERMINATED, ")", nth=-1)  # the last token written


def test_syntax_unterminated_def_mentions_brace():
    e = tc_error(UNTERMINATED, TCSyntaxError)
    assert "'}'" in str(e)


def test_syntax_lhs_expression_is_not_an_index():
    src = "def f(float(N) A) -> (O) {\n    O(i + 1) = A(i)\n}"
    e = tc_error(src, TCSyntaxError)
    assert "expected an index variable" in e.message and "'i + 1'" in e.message
    assert_located(e, src, "i + 1")


def test_syntax_missing_assignment_operator():
    src = "def f(float(N) A) -> (O) {\n    O(i) A(i)\n}"
    e = tc_error(src, TCSyntaxError)
    assert "expected an assignment operator" in e.message
    assert_located(e, src, "A(i)", nth=0)


def test_syntax_keyword_as_name():
    src = "def f(float(N) where) -> (O) {\n    O(i) = 1.0\n}"
    e = tc_error(src, TCSyntaxError)
    assert "keyword 'where'" in e.message
    assert_located(e, src, "where")


# --- range inference ---------------------------------------------------------------------
def test_range_two_unknown_indices_in_one_subscript():
    src = "def f(float(N) A) -> (O) {\n    O(i) +=! A(i + j)\n}"
    e = tc_error(src, RangeInferenceError)
    assert "cannot infer the range of index 'i'" in e.message
    assert e.hint and "where i in" in e.hint
    assert_located(e, src, "i) +=!")  # the i of O(i)


def test_range_index_used_only_as_a_value():
    src = "def f(float(N) A) -> (O) {\n    O(i) +=! A(i) * j\n}"
    e = tc_error(src, RangeInferenceError)
    assert "cannot infer the range of index 'j'" in e.message
    assert_located(e, src, "j")


# --- semantic errors ---------------------------------------------------------------------
def test_reduction_index_with_plain_assignment():
    src = "def f(float(N, K) A) -> (O) {\n    O(i) = A(i, k)\n}"
    e = tc_error(src, TCSemanticError)
    assert "reduction index 'k'" in e.message
    assert e.hint and "+=!" in e.hint
    assert_located(e, src, "O(i)")


def test_writing_an_input():
    src = "def f(float(N) A) -> (O) {\n    A(i) = 1.0\n    O(i) = A(i)\n}"
    e = tc_error(src, TCSemanticError)
    assert "'A' is an input" in e.message and "immutable" in e.message
    assert_located(e, src, "A(i) = 1.0")


def test_undefined_tensor():
    src = "def f(float(N) A) -> (O) {\n    O(i) = A(i) + B(i)\n}"
    e = tc_error(src, UndefinedNameError)
    assert "'B' is neither a tensor nor a builtin function" in e.message
    assert_located(e, src, "B(i)")


def test_wrong_subscript_count():
    src = "def f(float(N) A) -> (O) {\n    O(i) = A(i, i)\n}"
    e = tc_error(src, TCSemanticError)
    assert "'A' has 1 dimension but is indexed with 2" in e.message
    assert_located(e, src, "A(i, i)")


def test_narrowing_without_cast():
    src = "def f(float(N) A, double(N) B) -> (float(N) O) {\n    O(i) = A(i) + B(i)\n}"
    e = tc_error(src, TCTypeError)
    assert "assigning double to 'O'" in e.message and "explicit cast" in e.message
    assert e.hint and "float(...)" in e.hint
    assert_located(e, src, "O(i)")


def test_narrowing_with_cast_is_accepted():
    src = "def f(float(N) A, double(N) B) -> (float(N) O) {\n    O(i) = float(A(i) + B(i))\n}"
    out = polytc.tc(src)(np.ones(3, F32), np.ones(3, np.float64))
    assert out.dtype == F32 and list(out) == [2, 2, 2]


@pytest.mark.parametrize("src, needle", [
    ("def f(float(N) exp) -> (O) {\n    O(i) = 1.0 where i in 0:N\n}", "float(N) exp"),
    ("def f(float(N) A) -> (O) {\n    O(exp) = A(exp)\n}", "exp"),
    ("def f(float(N) A) -> (O) {\n    tanh(i) = A(i)\n    O(i) = A(i)\n}", "tanh"),
    ("def f(float(log) A) -> (O) {\n    O(i) = A(i)\n}", "log"),
], ids=["tensor", "index", "written-tensor", "size"])
def test_builtin_name_reused(src, needle):
    e = tc_error(src, TCSemanticError)
    assert "is a built-in function" in e.message
    assert_located(e, src, needle)


def test_tensor_read_in_where_bound():
    src = "def f(float(N) A, int32(N) B) -> (O) {\n    O(i) +=! A(i) where k in 0:B(0)\n}"
    e = tc_error(src, TCSemanticError)
    assert "range bound" in e.message
    assert_located(e, src, "B(0)")


def test_output_never_written():
    src = "def f(float(N) A) -> (O, P) {\n    O(i) = A(i)\n}"
    e = tc_error(src, TCSemanticError)
    assert "output 'P' is never written" in e.message
    assert_located(e, src, "P")


def test_duplicate_parameters():
    src = "def f(float(N) A, float(N) A) -> (O) {\n    O(i) = A(i)\n}"
    e = tc_error(src, TCSemanticError)
    assert "duplicate parameter 'A'" in e.message
    assert_located(e, src, "float(N) A", nth=1)


def test_duplicate_outputs():
    src = "def f(float(N) A) -> (O, O) {\n    O(i) = A(i)\n}"
    e = tc_error(src, TCSemanticError)
    assert "'O' is already defined" in e.message
    assert_located(e, src, "O)")


def test_output_named_like_an_input():
    src = "def f(float(N) A) -> (A) {\n    A(i) = 1.0\n}"
    e = tc_error(src, TCSemanticError)
    assert "'A' is already defined" in e.message
    assert_located(e, src, "A) {")


def test_reduction_into_float16_rejected():
    src = "def f(float(N, K) A) -> (float16(N) O) {\n    O(i) +=! A(i, k)\n}"
    e = tc_error(src, TCTypeError)
    assert "'O' is float16: a reduction into it would round at every step" in e.message
    assert e.hint and "reduce into a float tensor" in e.hint
    assert_located(e, src, "O(i) +=! A(i, k)")


UNKNOWN_FN = "def f(float(N) A) -> (O) {\n    O(i) = sigmoid(A(i))\n}"


def test_unknown_function():
    e = tc_error(UNKNOWN_FN, UndefinedNameError)
    assert "'sigmoid'" in e.message
    assert_located(e, UNKNOWN_FN, "sigmoid")


def test_unknown_function_is_called_a_function():
    e = tc_error(UNKNOWN_FN, UndefinedNameError)
    assert "function" in str(e)


@pytest.mark.parametrize("call, arity, got", [
    ("exp(A(i), 1.0)", 1, 2), ("pow(A(i))", 2, 1), ("fma(A(i), A(i))", 3, 2),
])
def test_builtin_wrong_arity(call, arity, got):
    src = "def f(float(N) A) -> (O) {\n    O(i) = " + call + "\n}"
    e = tc_error(src, TCSemanticError)
    assert f"expects {arity} argument" in e.message and f"got {got}" in e.message
    assert_located(e, src, call)


def test_dot4_takes_32_bit_words():
    src = "def f(float(N) A, int32(N) B) -> (O) {\n    O(i) = dot4(A(i), B(i))\n}"
    e = tc_error(src, TCTypeError)
    assert "'dot4' takes 32-bit integer words but got float" in e.message
    assert_located(e, src, "A(i)")


def test_float_subscript():
    src = "def f(float(N) A) -> (O) {\n    O(i) = A(A(i))\n}"
    e = tc_error(src, TCTypeError)
    assert "subscripts must be integers" in e.message and "float" in e.message
    assert_located(e, src, "A(i))")


def test_logical_and_on_non_booleans():
    src = "def f(float(N) A) -> (O) {\n    O(i) = A(i) && A(i)\n}"
    e = tc_error(src, TCTypeError)
    assert "expected a boolean but found float" in e.message
    assert_located(e, src, "A(i) &&")


def test_ternary_condition_must_be_boolean():
    src = "def f(int32(N) A) -> (O) {\n    O(i) = A(i) ? 1 : 0\n}"
    e = tc_error(src, TCTypeError)
    assert "expected a boolean" in e.message
    assert_located(e, src, "A(i) ?")


def test_let_shadowing_an_index():
    src = "def f(float(N) A) -> (O) {\n    O(i) = A(i) where i = 2\n}"
    e = tc_error(src, TCSemanticError)
    assert "'i' is already defined" in e.message
    assert_located(e, src, "i = 2")


def test_let_defined_twice():
    src = "def f(float(N) A) -> (O) {\n    O(i) = x where x = A(i), x = 2.0\n}"
    e = tc_error(src, TCSemanticError)
    assert "'x'" in e.message
    assert_located(e, src, "x = 2.0")


def test_two_defs_with_the_same_name():
    src = ("def f(float(N) A) -> (O) {\n    O(i) = A(i)\n}\n"
           "def f(float(N) A) -> (O) {\n    O(i) = A(i)\n}")
    e = tc_error(src, TCSemanticError)
    assert "two defs are named 'f'" in e.message
    assert_located(e, src, "def", nth=1)


def test_error_in_second_def_points_into_it():
    src = ("def f(float(N) A) -> (O) {\n    O(i) = A(i)\n}\n"
           "def g(float(N) A) -> (O) {\n    O(i) = A(i) + Z(i)\n}")
    e = tc_error(src, UndefinedNameError)
    assert_located(e, src, "Z(i)")


def test_integer_literal_too_large():
    src = "def f(int32(N) A) -> (O) {\n    O(i) = A(i) * 99999999999999999999999\n}"
    e = tc_error(src, TCSyntaxError)
    assert "too large" in e.message
    assert_located(e, src, "99999999999999999999999")


# --- out of bounds (proven at specialisation time) -----------------------------------------
def test_affine_access_out_of_bounds():
    src = "def f(float(N) A) -> (O) {\n    O(i) = A(i + 1) where i in 0:N\n}"
    k = polytc.tc(src)  # only the sizes of a call decide
    e = call_error(k, np.ones(4, F32), cls=OutOfBoundsError)
    assert "outside 'A'" in e.message and "A[4]" in e.message and "'N': 4" in e.message
    assert_located(e, src, "A(i + 1)")


def test_affine_write_out_of_bounds():
    src = ("def f(float(N) A) -> (float(N) O) {\n"
           "    O(i) = A(i - 1) where i in 1:N + 1\n}")
    e = call_error(polytc.tc(src), np.ones(3, F32), cls=OutOfBoundsError)
    assert "'O'" in e.message
    assert_located(e, src, "O(i) =")


# --- call-time argument errors -------------------------------------------------------------
def test_call_wrong_number_of_inputs(matmul):
    e = call_error(matmul, np.ones((3, 4), F32), cls=ArgumentError)
    assert "takes 2 inputs" in e.message and "1 was given" in e.message


def test_call_wrong_dtype(matmul):
    e = call_error(matmul, np.ones((3, 4)), np.ones((4, 5), F32), cls=ArgumentError)
    assert "'A'" in e.message and "float64" in e.message and "float32" in e.message
    assert e.hint and "astype" in e.hint
    assert_located(e, MATMUL, "float(M,K) A")


def test_call_wrong_rank(matmul):
    e = call_error(matmul, np.ones((3, 4), F32), np.ones(4, F32), cls=ArgumentError)
    assert "'B'" in e.message and "2 dimensions but has 1" in e.message
    assert_located(e, MATMUL, "float(K,N) B")


def test_call_mismatched_sizes(matmul):
    e = call_error(matmul, np.ones((3, 4), F32), np.ones((5, 6), F32), cls=ArgumentError)
    assert "size K" in e.message and "'A'" in e.message and "'B'" in e.message
    assert "4" in e.message and "5" in e.message
    assert_located(e, MATMUL, "float(K,N) B")


def test_call_constant_dimension_mismatch():
    src = "def f(float(3, N) A) -> (O) {\n    O(i, j) = A(i, j)\n}"
    e = call_error(polytc.tc(src), np.ones((4, 2), F32), cls=ArgumentError)
    assert "dimension 0 of input 'A' must be 3 but is 4" in e.message
    assert_located(e, src, "float(3, N) A")


@pytest.mark.parametrize("bad", [[[1.0] * 5] * 4, None, "B", 2.0],
                         ids=["list", "None", "str", "float"])
def test_call_non_array_argument(matmul, bad):
    e = call_error(matmul, np.ones((3, 4), F32), bad, cls=ArgumentError)
    assert "'B'" in e.message and "numpy array" in e.message
    assert_located(e, MATMUL, "float(K,N) B")


def test_call_scalar_input_of_wrong_kind():
    src = "def f(int32 a, float(N) A) -> (O) {\n    O(i) = A(i) * a\n}"
    k = polytc.tc(src)
    assert list(k(2, np.ones(2, F32))) == [2, 2]
    e = call_error(k, 2.5, np.ones(2, F32), cls=ArgumentError)
    assert "'a'" in e.message and "2.5" in e.message
    e = call_error(k, 2 ** 40, np.ones(2, F32), cls=ArgumentError)
    assert "does not fit in int32" in e.message
    assert_located(e, src, "int32 a")


@pytest.mark.filterwarnings("ignore::numpy.exceptions.ComplexWarning")
def test_call_complex_scalar_rejected():
    k = polytc.tc("def f(float a, float(N) A) -> (O) {\n    O(i) = A(i) * a\n}")
    call_error(k, np.complex64(1j), np.ones(2, F32), cls=ArgumentError)


def test_out_wrong_shape(matmul):
    A, B = np.ones((3, 4), F32), np.ones((4, 5), F32)
    e = call_error(matmul, A, B, out=np.zeros((3, 4), F32), cls=ArgumentError)
    assert "out= for 'C'" in e.message and "[3, 5]" in e.message and "[3, 4]" in e.message


def test_out_wrong_dtype(matmul):
    A, B = np.ones((3, 4), F32), np.ones((4, 5), F32)
    e = call_error(matmul, A, B, out=np.zeros((3, 5)), cls=ArgumentError)
    assert "out= for 'C'" in e.message and "float64" in e.message


def test_out_overlapping_an_input(matmul):
    buf = np.zeros(15, F32)
    A = buf[:12].reshape(3, 4)
    e = call_error(matmul, A, np.ones((4, 5), F32), out=buf.reshape(3, 5),
                   cls=ArgumentError)
    assert "overlaps the input 'A'" in e.message


def test_out_right_array_is_filled(matmul):
    A, B = np.ones((3, 4), F32), np.ones((4, 5), F32)
    out = np.full((3, 5), 7, F32)
    matmul(A, B, out=out)
    assert (out == 4).all()


# --- faults detected while the kernel runs ---------------------------------------------------
GATHER = "def gather(float(N) T, int32(M) idx) -> (O) {\n    O(i) = T(idx(i))\n}"


def test_runtime_indirect_read_out_of_bounds():
    k = polytc.tc(GATHER)
    T = np.arange(5, dtype=F32)
    np.testing.assert_array_equal(k(T, np.array([4, 0], np.int32)), [4, 0])
    for idx in ([1, 99], [-1, 0]):
        e = call_error(k, T, np.array(idx, np.int32), cls=KernelRuntimeError)
        assert "out of bounds" in str(e) and "'T'" in str(e)
        assert_located(e, GATHER, "T(idx(i))")


DIV = "def div(int32(N) A, int32(N) B) -> (O) {\n    O(i) = A(i) / B(i)\n}"


def test_runtime_integer_division_by_zero():
    k = polytc.tc(DIV)
    A = np.array([6, 7, 8], np.int32)
    np.testing.assert_array_equal(k(A, np.array([2, 7, -8], np.int32)), [3, 1, -1])
    for _ in range(2):  # the second call takes the fast path
        e = call_error(k, A, np.array([1, 0, 1], np.int32), cls=KernelRuntimeError)
        assert "division by zero" in str(e)
        assert_located(e, DIV, "A(i) / B(i)")


def test_runtime_integer_remainder_by_zero():
    src = "def rem(int64(N) A, int64(N) B) -> (O) {\n    O(i) = A(i) % B(i)\n}"
    e = call_error(polytc.tc(src), np.ones(2, np.int64), np.zeros(2, np.int64),
                   cls=KernelRuntimeError)
    assert "by zero" in str(e)
    assert_located(e, src, "A(i) % B(i)")


# --- tracebacks stop at the entry point ----------------------------------------------------
def polytc_frames(err) -> list:
    return [f for f in traceback.extract_tb(err.__traceback__)
            if os.path.abspath(f.filename).startswith(POLYTC_DIR + os.sep)]


def assert_short_traceback(err, entry: tuple = ()) -> None:
    """Every frame is outside polytc/ except the user_boundary wrapper in diagnostics.py
    and, for a call, the entry point itself (``entry``: (file name, function))."""
    bad = [f for f in polytc_frames(err)
           if not (os.path.basename(f.filename) == "diagnostics.py" and f.name == "wrapper")
           and (os.path.basename(f.filename), f.name) != entry]
    assert not bad, "polytc frames in the traceback: " + ", ".join(
        f"{os.path.basename(f.filename)}:{f.lineno} {f.name}" for f in bad)
    wrappers = [f for f in polytc_frames(err) if f.name == "wrapper"]
    assert len(wrappers) <= 1


@pytest.mark.parametrize("src", [
    "def f(float(N) A) -> (O) {\n    O(i) = A(i) @ A(i)\n}",
    "def f(float(N) A) -> (O) {\n    O(i) +=! A(i + j)\n}",
    "def f(float(N) A) -> (O) {\n    O(i) = B(i)\n}",
    "def f(float(N) A) -> (float16(1) O) {\n    O(i) +=! A(i + j)\n}",
], ids=["syntax", "range", "undefined", "float16"])
def test_traceback_of_definition_errors(src):
    e = tc_error(src)
    assert_short_traceback(e)


CALL_ENTRY = ("kernel.py", "__call__")


def test_traceback_of_call_errors(matmul):
    A, B = np.ones((3, 4), F32), np.ones((4, 5), F32)
    assert_short_traceback(call_error(matmul, A), CALL_ENTRY)
    assert_short_traceback(call_error(matmul, A, np.ones((5, 6), F32)), CALL_ENTRY)
    assert_short_traceback(call_error(matmul, A, B, out=np.zeros(2, F32)), CALL_ENTRY)
    src = "def f(float(N) A) -> (O) {\n    O(i) = A(i + 1) where i in 0:N\n}"
    assert_short_traceback(call_error(polytc.tc(src), np.ones(4, F32)), CALL_ENTRY)


def test_traceback_of_first_runtime_fault():
    e = call_error(polytc.tc(DIV), np.ones(3, np.int32), np.zeros(3, np.int32))
    assert_short_traceback(e, CALL_ENTRY)


def test_traceback_of_runtime_fault_on_fast_path():
    k = polytc.tc(DIV)
    k(np.ones(3, np.int32), np.ones(3, np.int32))  # compiles; the signature is cached
    e = call_error(k, np.ones(3, np.int32), np.zeros(3, np.int32))
    assert_short_traceback(e, CALL_ENTRY)


# --- message formatting --------------------------------------------------------------------
def test_caret_width_covers_the_span():
    src = "def f(float(N) A) -> (O) {\n    O(i) = A(i, i)\n}"
    e = tc_error(src)
    caret = str(e).splitlines()[2]
    assert caret.strip() == "^" + "~" * (len("A(i, i)") - 1)


def test_multi_line_span_is_cut_at_the_end_of_its_first_line():
    src = "def f(float(N) A) -> (O) {\n    O(i) = A(i,\n             i)\n}"
    e = tc_error(src)
    lines = str(e).splitlines()
    assert_located(e, src, "A(i,")
    assert len(lines[2]) <= len(lines[1])


def test_caret_under_tab_indented_line():
    src = "def f(float(N) A) -> (O) {\n\tO(i) = B(i)\n}"
    e = tc_error(src, UndefinedNameError)
    lines = str(e).splitlines()
    quoted, caret = lines[1].expandtabs(8), lines[2].expandtabs(8)
    assert quoted[caret.index("^")] == "B"


def test_kernel_of_text_or_bad_options_is_refused():
    """``polytc.Kernel`` takes a checked program: TC text there (``polytc.tc``'s job) or
    options that are not ``Options`` are named at once, not an internal error later."""
    with pytest.raises(polytc.PolytcError) as e:
        polytc.Kernel(MATMUL)
    assert "takes a checked program, not a str" in e.value.message
    assert "polytc.tc(text)" in e.value.hint
    program = polytc.tc(MATMUL).program
    with pytest.raises(polytc.PolytcError, match="must be a polytc.Options, not a dict"):
        polytc.Kernel(program, {"tile": 8})
    assert polytc.Kernel(program).program is program


def test_benchmark_checks_its_inputs(matmul):
    """``CompiledKernel.benchmark`` runs the C function on the arrays it is given: arrays
    of other sizes than the kernel's would be read past their ends, so they are refused
    (a generic kernel times itself at theirs); so are a repeat count below 1 and a
    negative warm-up."""
    a, b = np.ones((16, 8), F32), np.ones((8, 12), F32)
    ck = matmul.with_options(polytc.Options()).specialize(a, b)
    small = np.ones((1, 1), F32)
    e = call_error(ck.benchmark, small, small, cls=ArgumentError)
    assert "sizes K=1, M=1, N=1" in e.message and "compiled for K=8, M=16, N=12" in e.message
    for bad in ({"repeat": 0}, {"repeat": "x"}, {"warmup": -1}):
        e = call_error(ck.benchmark, a, b, cls=ArgumentError, **bad)
        assert "repeat >= 1 and warmup >= 0" in e.message
    assert ck.benchmark(a, b, repeat=3)["min"] > 0
    generic = polytc.tc(MATMUL, dynamic=("M",)).specialize(a, b)
    assert generic.benchmark(np.ones((40, 8), F32), b, repeat=3)["min"] > 0
    e = call_error(generic.benchmark, a, np.ones((8, 5), F32), cls=ArgumentError)
    assert "compiled for K=8, N=12" in e.message


def test_out_arrays_that_overlap_each_other_are_refused():
    """Two outputs written into one memory would each overwrite the other: refused on
    the first call and on the fast path of later ones alike."""
    two = polytc.tc("def two(float(N) A) -> (X, Y) {\n    X(i) = A(i) + 1\n"
                    "    Y(i) = A(i) * 2\n}")
    a = np.arange(4, dtype=F32)
    for _ in range(2):  # the second: after a call that filled the fast path's table
        z = np.zeros(4, F32)
        e = call_error(two, a, out=(z, z), cls=ArgumentError)
        assert "out= for 'Y' overlaps out= for 'X'" in e.message
        buf = np.zeros(6, F32)
        call_error(two, a, out=(buf[:4], buf[2:]), cls=ArgumentError)
        x, y = two(a)
        assert np.array_equal(x, a + 1) and np.array_equal(y, a * 2)


@pytest.mark.parametrize("dtype, value, text", [
    ("int32", np.int64(2**40), "1099511627776 does not fit in int32"),
    ("int32", 2**40, "1099511627776 does not fit in int32"),
    ("uint8", np.int32(300), "300 does not fit in uint8"),
    ("uint8", -1, "-1 does not fit in uint8"),
    ("int32", np.float32(2), "int32 but got the float"),
    ("float", np.float64(1e300), "does not fit in float"),
    ("float", 2**2000, "does not fit in float"),
    ("int32", np.str_("3"), "must be a numpy array, got str_"),
], ids=["np-int64", "int", "np-int32-uint8", "negative-uint8", "np-float-int32",
        "np-float64-float", "huge-int-float", "np-str"])
def test_scalar_inputs_that_would_change_value_are_refused(dtype, value, text):
    """A 0-d input takes Python and numpy numbers only where the value survives (numpy's
    own conversion wraps ``np.int64(2**40)`` to 0 in int32)."""
    k = polytc.tc(f"def f(float(N) A, {dtype} s) -> (B) {{\n    B(i) = A(i) * s\n}}")
    e = call_error(k, np.ones(3, F32), value, cls=ArgumentError)
    assert text in e.message and "'s'" in e.message


def test_scalar_inputs_that_fit_are_taken():
    k = polytc.tc("def f(float(N) A, uint8 s) -> (B) {\n    B(i) = A(i) * s\n}")
    for v in (255, np.int64(7), True, np.uint8(3)):
        assert np.array_equal(k(np.ones(2, F32), v), np.full(2, int(v), F32))


def test_an_array_lookalike_misses_the_fast_path(matmul):
    """The fast path keys calls on the arrays' type too: an object of another kind with
    numpy's shape, strides and dtype goes the checked way and is refused there."""
    a, b = np.ones((2, 3), F32), np.ones((3, 4), F32)
    matmul(a, b)

    class Lookalike:
        shape, strides, dtype = a.shape, a.strides, a.dtype

    e = call_error(matmul, Lookalike(), b, cls=ArgumentError)
    assert "must be a numpy array, got Lookalike" in e.message


@pytest.mark.parametrize("call, text", [
    (lambda: polytc.tc(MATMUL, target=["c"]), "unknown target ['c']"),
    (lambda: polytc.tc(MATMUL).to(["c"]), "unknown target ['c']"),
    (lambda: polytc.tc(MATMUL, dynamic=5), "dynamic= takes 'auto', a size name"),
    (lambda: polytc.tc(MATMUL, dynamic=True), "not True"),
    (lambda: polytc.tc(MATMUL).with_options("x", fusion="max"),
     "with_options takes a polytc.Options"),
])
def test_kernel_arguments_of_the_wrong_type(call, text):
    with pytest.raises(PolytcError) as e:
        call()
    assert not isinstance(e.value, polytc.InternalError) and text in e.value.message


@pytest.mark.parametrize("field", ["constants", "aligned"])
def test_options_naming_no_input_are_refused(field):
    """``Options.constants``/``aligned`` name inputs: a name the program has not is a
    mistake (a misspelt weight would silently be packed at every call)."""
    with pytest.raises(PolytcError) as e:
        polytc.tc(MATMUL, options=polytc.Options(**{field: ("Z",)}))
    assert f"Options.{field} names 'Z', which is not an input of matmul" in e.value.message
    assert "A, B" in e.value.hint
    assert polytc.tc(MATMUL, options=polytc.Options(**{field: ("B",)})) is not None
