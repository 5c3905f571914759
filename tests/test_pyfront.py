"""The Python-syntax front end means the same as TC text.

Every kernel below is defined at module level (``inspect`` needs real source) and is never
called: its undefined names (``C``, ``m``, ...) are TC names, not Python ones.
"""
# flake8: noqa
import inspect
import math  # noqa: F401 - only named in kernel bodies, never executed
import textwrap

import numpy as np  # noqa: F401
import pytest

from polytc.diagnostics import TCSyntaxError
from polytc.lang import ast as A
from polytc.lang.pyfront import function_to_def

try:
    from polytc.lang.parser import parse
except ImportError:  # pragma: no cover - the parser is written concurrently
    parse = None

needs_parser = pytest.mark.skipif(parse is None, reason="polytc.lang.parser not available")


def tc(text):
    (d,) = parse(textwrap.dedent(text))
    return d


# --------------------------------------------------------------------------------------
# Kernels and their TC equivalents
# --------------------------------------------------------------------------------------
def matmul(A: "float(M,K)", B: "float(K,N)"):
    C[m, n] += A[m, k] * B[k, n]
    return C


MATMUL = """
def matmul(float(M,K) A, float(K,N) B) -> (C) {
    C(m, n) +=! A(m, k) * B(k, n)
}
"""


def scaled_matmul(A: "float(M,K)", B: "float(K,N)", alpha: "float"):
    C[m, n] += alpha * A[m, k] * B[k, n]
    return C


SCALED_MATMUL = """
def scaled_matmul(float(M,K) A, float(K,N) B, float alpha) -> (C) {
    C(m, n) +=! alpha * A(m, k) * B(k, n)
}
"""


def bmm(X: "float(Bt, M, K)", Y: "float(Bt, K, N)"):
    Z[b, m, n] += X[b, m, k] * Y[b, k, n]
    return Z


BMM = """
def bmm(float(Bt, M, K) X, float(Bt, K, N) Y) -> (Z) {
    Z(b, m, n) +=! X(b, m, k) * Y(b, k, n)
}
"""


def relu(I: "float(N, M)"):
    O[i, j] = max(I[i, j], 0.0)
    return O


RELU = """
def relu(float(N, M) I) -> (O) {
    O(i, j) = max(I(i, j), 0.0)
}
"""


def softmax(X: "float(N, C)"):
    mx[n] = max(mx[n], X[n, c])
    e[n, c] = exp(X[n, c] - mx[n])
    s[n] += e[n, c]
    Y[n, c] = e[n, c] / s[n]
    return Y


SOFTMAX = """
def softmax(float(N, C) X) -> (Y) {
    mx(n) max=! X(n, c)
    e(n, c) = exp(X(n, c) - mx(n))
    s(n) +=! e(n, c)
    Y(n, c) = e(n, c) / s(n)
}
"""


def conv1d(I: "float(N)", W: "float(K)"):
    for k in range(K):
        O[i] += I[i + k] * W[k]
    return O


CONV1D = """
def conv1d(float(N) I, float(K) W) -> (O) {
    O(i) +=! I(i + k) * W(k) where k in 0:K
}
"""


def conv2d(I: "float(H, W)", F: "float(KH, KW)"):
    for kh in range(KH):
        for kw in range(0, KW):
            O[h, w] += I[h + kh, w + kw] * F[kh, kw]
    return O


CONV2D = """
def conv2d(float(H, W) I, float(KH, KW) F) -> (O) {
    O(h, w) +=! I(h + kh, w + kw) * F(kh, kw) where kh in 0:KH, kw in 0:KW
}
"""


def lets(A: "float(N)"):
    x = A[i] * 2.0
    y = x + 1.0
    z = 3.0
    B[i] = y * y
    C[i] = A[i] + z
    D[i] = A[i]
    return B, C, D


LETS = """
def lets(float(N) A) -> (B, C, D) {
    B(i) = y * y where x = A(i) * 2.0, y = x + 1.0
    C(i) = A(i) + z where z = 3.0
    D(i) = A(i)
}
"""


def shifted(A: "float(N)"):
    exists(A[i + 1])
    B[i] = A[i]
    C[i] = A[i + 1] - A[i]
    return B, C


SHIFTED = """
def shifted(float(N) A) -> (B, C) {
    B(i) = A(i) where exists A(i + 1)
    C(i) = A(i + 1) - A(i) where exists A(i + 1)
}
"""


def scoped(A: "float(N, K)"):
    c = 2.0
    for k in range(K):
        exists(A[i, k])
        t = A[i, k] * c
        S[i] += t
    T[i] = c * A[i, 0]
    return S, T


SCOPED = """
def scoped(float(N, K) A) -> (S, T) {
    S(i) +=! t where c = 2.0, k in 0:K, exists A(i, k), t = A(i, k) * c
    T(i) = c * A(i, 0) where c = 2.0
}
"""


def dot(x: "float(N)", y: "float(N)"):
    s += x[i] * y[i]
    return s


DOT = """
def dot(float(N) x, float(N) y) -> (s) {
    s +=! x(i) * y(i)
}
"""


def dot_empty_subscript(x: "float(N)", y: "float(N)"):
    s[()] += x[i] * y[i]
    t = s * 2.0
    u = max(u, s[()] + t)
    return s, u


DOT_EMPTY_SUBSCRIPT = """
def dot_empty_subscript(float(N) x, float(N) y) -> (s, u) {
    s() +=! x(i) * y(i)
    u max=! s() + t where t = s * 2.0
}
"""


def typed(A: "float(M,N)") -> ("float(M,N)", "int32(M)"):
    B[m, n] = A[m, n] * 2.0
    C[m] += int32(A[m, n])
    return B, C


TYPED = """
def typed(float(M,N) A) -> (float(M,N) B, int32(M) C) {
    B(m, n) = A(m, n) * 2.0
    C(m) +=! int32(A(m, n))
}
"""


def typed_single(A: "double(N)", s: "int64") -> "double(N)":
    B[i] = A[i] * s
    return B


TYPED_SINGLE = """
def typed_single(double(N) A, int64 s) -> (double(N) B) {
    B(i) = A(i) * s
}
"""


def typed_partial(A: "float(N)") -> ("float(N)", None):
    B[i] = A[i]
    C[i] = A[i]
    return B, C


TYPED_PARTIAL = """
def typed_partial(float(N) A) -> (float(N) B, C) {
    B(i) = A(i)
    C(i) = A(i)
}
"""


def mask(A: "float(N)"):
    O[i] = A[i] if A[i] > 0.0 else 0.0
    return O


MASK = """
def mask(float(N) A) -> (O) {
    O(i) = A(i) > 0.0 ? A(i) : 0.0
}
"""


def chain(A: "float(N)", L: "int32"):
    O[i] = A[i - 1] if L <= i - 1 < N and not A[i] == 0.0 or i == 0 else -1.0
    return O


CHAIN = """
def chain(float(N) A, int32 L) -> (O) {
    O(i) = (L <= i - 1 && i - 1 < N) && !(A(i) == 0.0) || i == 0 ? A(i - 1) : -1.0
}
"""


def casts(A: "int8(N)", B: "float(N)"):
    O[i] = float(A[i]) + double(B[i]) + np.float64(A[i])
    P[i] = int(B[i]) + int32(B[i]) + uint8(A[i]) + bool(A[i])
    return O, P


CASTS = """
def casts(int8(N) A, float(N) B) -> (O, P) {
    O(i) = float(A(i)) + double(B(i)) + float64(A(i))
    P(i) = int32(B(i)) + int32(B(i)) + uint8(A(i)) + bool(A(i))
}
"""


def mathy(A: "float(N)"):
    O[i] = math.exp(A[i]) + np.sqrt(A[i]) + polytc.tanh(A[i]) + A[i] ** 2 + exp(-A[i])
    P[i] = np.maximum(A[i], 1.0) + min(A[i], 2.0, A[i + 1]) + fma(A[i], A[i], 1.0)
    return O, P


MATHY = """
def mathy(float(N) A) -> (O, P) {
    O(i) = exp(A(i)) + sqrt(A(i)) + tanh(A(i)) + pow(A(i), 2) + exp(-A(i))
    P(i) = max(A(i), 1.0) + min(min(A(i), 2.0), A(i + 1)) + fma(A(i), A(i), 1.0)
}
"""


def reductions(A: "float(N, K)", B: "float(N, K)"):
    hi[i] = max(hi[i], A[i, k])
    hi[i] = max(B[i, k], hi[i])
    lo[i] = min(A[i, k], lo[i])
    P[i] *= A[i, k]
    P[i] *= B[i, k]
    S[i] = B[i, 0]
    S[i] += A[i, k]
    return hi, lo, P, S


REDUCTIONS = """
def reductions(float(N, K) A, float(N, K) B) -> (hi, lo, P, S) {
    hi(i) max=! A(i, k)
    hi(i) max= B(i, k)
    lo(i) min=! A(i, k)
    P(i) *=! A(i, k)
    P(i) *= B(i, k)
    S(i) = B(i, 0)
    S(i) += A(i, k)
}
"""


def arith(A: "int32(N)"):
    O[i] = -A[i // 2] % 3 + +A[i] - A[i] / 2 * 7
    return O


ARITH = """
def arith(int32(N) A) -> (O) {
    O(i) = -A(i / 2) % 3 + A(i) - A(i) / 2 * 7
}
"""


def _decorator(fn):
    return fn


@_decorator
def decorated(A: "float(N)"):
    """A docstring is ignored, and so are 'pass' and decorators."""
    pass
    B[i] = A[i]  # a comment
    return (B)


DECORATED = """
def decorated(float(N) A) -> (B) {
    B(i) = A(i)
}
"""


class Holder:
    @staticmethod
    def in_class(A: "float(N)"):
        B[i] = A[i] * 2
        return B

    @staticmethod
    def bad_in_class(A: "float(N)"):
        B[i - 1] = A[i]
        return B


IN_CLASS = """
def in_class(float(N) A) -> (B) {
    B(i) = A(i) * 2
}
"""

CASES = [
    (matmul, MATMUL), (scaled_matmul, SCALED_MATMUL), (bmm, BMM), (relu, RELU),
    (softmax, SOFTMAX), (conv1d, CONV1D), (conv2d, CONV2D), (lets, LETS),
    (shifted, SHIFTED), (scoped, SCOPED), (dot, DOT),
    (dot_empty_subscript, DOT_EMPTY_SUBSCRIPT), (typed, TYPED),
    (typed_single, TYPED_SINGLE), (typed_partial, TYPED_PARTIAL), (mask, MASK),
    (chain, CHAIN), (casts, CASTS), (mathy, MATHY), (reductions, REDUCTIONS),
    (arith, ARITH), (decorated, DECORATED), (Holder.in_class, IN_CLASS),
]


@needs_parser
@pytest.mark.parametrize("fn,text", CASES, ids=[c[0].__name__ for c in CASES])
def test_same_as_tc(fn, text):
    got = function_to_def(fn)
    want = tc(text)
    assert got == want, f"\n{got}\n!=\n{want}"


def test_matmul_by_hand():
    """The expected tree built by hand, for when the parser is not there."""
    d = function_to_def(matmul)
    assert d.name == "matmul"
    assert [(p.name, p.type_name, tuple(x.value for x in p.dims)) for p in d.params] == [
        ("A", "float", ("M", "K")), ("B", "float", ("K", "N"))]
    assert [(o.name, o.type_name, o.dims) for o in d.outputs] == [("C", None, None)]
    (st,) = d.body
    assert st.tensor == "C" and [i.name for i in st.indices] == ["m", "n"]
    assert st.op == "+=!" and st.where == ()
    assert isinstance(st.rhs, A.Binary) and st.rhs.op == "*"
    assert st.rhs.lhs.tensor == "A" and [i.name for i in st.rhs.lhs.indices] == ["m", "k"]


def test_scalar_param_is_0d():
    d = function_to_def(scaled_matmul)
    assert d.params[2].dims == ()


def test_spans_point_into_the_real_file():
    d = function_to_def(conv1d)
    lines, first = inspect.getsourcelines(conv1d)
    (st,) = d.body
    assert st.span.location() == f"{__file__}:{first + 2}:9"
    assert st.span.text == "O[i] += I[i + k] * W[k]"
    assert st.tensor_span.text == "O"
    assert st.rhs.lhs.span.text == "I[i + k]"
    assert d.params[1].dims[0].span.text == "K"


def test_spans_in_a_class_keep_real_columns():
    d = function_to_def(Holder.in_class)
    (st,) = d.body
    line = inspect.getsourcelines(Holder.in_class)[1] + 2
    assert st.span.location() == f"{__file__}:{line}:9"
    assert st.span.text == "B[i] = A[i] * 2"


def test_annotation_dim_spans_point_inside_the_string():
    d = function_to_def(bmm)
    dim = d.params[0].dims[1]
    assert dim.value == "M" and dim.span.text == "M"


# --------------------------------------------------------------------------------------
# The programs pass semantic analysis
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("fn", [matmul, scaled_matmul, bmm, relu, softmax, conv1d, conv2d,
                                dot, typed, mask, mathy, reductions, scoped])
def test_sema_accepts(fn):
    sema = pytest.importorskip("polytc.lang.sema")
    if parse is None:
        pytest.skip("polytc.lang.parser not available")
    sema.check(function_to_def(fn))


# --------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------
def line_of(fn, needle):
    lines, first = inspect.getsourcelines(fn)
    for k, line in enumerate(lines):
        if needle in line:
            return first + k, line.index(needle) + 1
    raise AssertionError(needle)


def check_error(fn, needle, *words, hint=None):
    with pytest.raises(TCSyntaxError) as info:
        function_to_def(fn)
    msg = str(info.value)
    line, col = line_of(fn, needle)
    assert f"{__file__}:{line}:{col}:" in msg, msg
    assert "^" in msg
    caret_line = msg.split("\n")[2]
    assert caret_line.index("^") - 4 == col - 1, msg
    for w in words:
        assert w in msg, msg
    assert info.value.hint
    if hint:
        assert hint in info.value.hint, info.value.hint
    return info.value


def err_no_annotation(A: "float(N)", B):
    C[i] = A[i] + B[i]
    return C


def test_missing_annotation():
    check_error(err_no_annotation, "B)", "parameter 'B' has no type", hint='"float(M, K)"')


def err_bad_type(A: "flaot(N)"):
    C[i] = A[i]
    return C


def test_bad_type_points_into_the_string():
    check_error(err_bad_type, "flaot", "unknown type 'flaot'", hint="float")


def err_bad_dim(A: "float(N, 2.5)"):
    C[i] = A[i]
    return C


def test_bad_dim():
    check_error(err_bad_dim, "2.5", "a size name or an integer")


def err_name_in_type(A: "float(N) A"):
    C[i] = A[i]
    return C


def test_name_in_type():
    check_error(err_name_in_type, "A\"", "unexpected 'A'")


def err_unquoted(A: float):
    C[i] = A[i]
    return C


def test_unquoted_annotation():
    check_error(err_unquoted, "float)", "must be a string", hint='"float"')


def err_if(A: "float(N)"):
    if A[0] > 0:
        C[i] = A[i]
    return C


def test_if_statement():
    check_error(err_if, "if A", "'if'", hint="a if cond else b")


def err_return_not_last(A: "float(N)"):
    C[i] = A[i]
    return C
    D[i] = A[i]


def test_return_not_last():
    check_error(err_return_not_last, "D[i] = A[i]", "must end with a return")


def err_return_in_loop(A: "float(N)"):
    for k in range(3):
        return C
    return C


def test_return_in_loop():
    check_error(err_return_in_loop, "return C", "return must be the last")


def err_lhs_expr(A: "float(N)"):
    C[i - 1] = A[i]
    return C


def test_lhs_index_must_be_a_name():
    check_error(err_lhs_expr, "i - 1", "plain index names", hint="right-hand side")


def test_lhs_error_in_a_class():
    check_error(Holder.bad_in_class, "i - 1", "plain index names")


def err_unknown_function(A: "float(N)", foo: "float(N)"):
    C[i] = foo(A[i])
    return C


def test_unknown_function():
    check_error(err_unknown_function, "foo(A", "unknown function 'foo'", hint="foo[i]")


def err_true(A: "float(N)"):
    C[i] = A[i] if True else 0.0
    return C


def test_true_literal():
    check_error(err_true, "True", "'True'", hint="comparison")


def err_keyword(A: "float(N)"):
    C[i] = pow(A[i], y=2.0)
    return C


def test_keyword_argument():
    check_error(err_keyword, "y=2.0", "keyword arguments")


def err_minus_equals(A: "float(N)"):
    C[i] -= A[i]
    return C


def test_minus_equals():
    check_error(err_minus_equals, "C[i] -=", "'-=' is not a TC reduction", hint="+= -(")


def err_return_annotation_count(A: "float(N)") -> "float(N)":
    C[i] = A[i]
    D[i] = A[i]
    return C, D


def test_return_annotation_count():
    check_error(err_return_annotation_count, '"float(N)":', "1 type but the kernel returns 2")


def err_attribute(A: "float(N)"):
    C[i] = A[i] * math.pi
    return C


def test_attribute():
    check_error(err_attribute, "math.pi", "attribute access", hint="literal")


def err_lambda_in_body(A: "float(N)"):
    C[i] = (lambda x: x)(A[i])
    return C


def test_lambda_in_body():
    check_error(err_lambda_in_body, "lambda x: x", "only named functions")


def err_list(A: "float(N)"):
    C[i] = [A[i]]
    return C


def test_list():
    check_error(err_list, "[A[i]]", "lists are not supported")


def err_string(A: "float(N)"):
    C[i] = "x"
    return C


def test_string_literal():
    check_error(err_string, '"x"', "strings are not supported")


def err_while(A: "float(N)"):
    while True:
        pass
    return C


def test_while():
    check_error(err_while, "while True", "'while'", hint="range")


def err_range_step(A: "float(N)"):
    for k in range(0, N, 2):
        C[i] += A[i]
    return C


def test_range_step():
    check_error(err_range_step, "range(0, N, 2)", "step")


def err_no_return(A: "float(N)"):
    C[i] = A[i]


def test_no_return():
    check_error(err_no_return, "C[i] = A[i]", "must end with a return", hint="return C")


def err_return_expr(A: "float(N)"):
    return A[0] + 1


def test_return_expression():
    check_error(err_return_expr, "A[0] + 1", "return tensors by name")


def err_write_input(A: "float(N)"):
    A[i] = 1.0
    return C


def test_write_input():
    check_error(err_write_input, "A[i] = 1.0", "inputs are immutable")


def err_let_redefined(A: "float(N)"):
    x = A[i]
    x = x + 1.0
    C[i] = x
    return C


def test_let_redefined():
    check_error(err_let_redefined, "x = x + 1.0", "already defined as a let")


def err_accumulate_let(A: "float(N)"):
    x += A[i]
    return C


def test_accumulate_into_a_non_output_name():
    check_error(err_accumulate_let, "x +=", "'x' is not an output", hint="return x")


def err_slice(A: "float(N, M)"):
    C[i] = A[i, :]
    return C


def test_slice():
    check_error(err_slice, ":]", "slices are not supported")


def err_bitand(A: "float(N)"):
    C[i] = A[i] if (i > 0) & (i < 3) else 0.0
    return C


def test_bitand():
    check_error(err_bitand, "(i > 0) & (i < 3)", "operator '&'", hint="'and'")


def err_cast_arity(A: "float(N)"):
    C[i] = float(A[i], 2)
    return C


def test_cast_arity():
    check_error(err_cast_arity, "float(A[i], 2)", "takes one argument")


def err_arity(A: "float(N)"):
    C[i] = exp(A[i], 2.0)
    return C


def test_builtin_arity():
    check_error(err_arity, "exp(A[i], 2.0)", "expects 1 argument but got 2")


def test_lambda_kernel():
    with pytest.raises(TCSyntaxError) as info:
        function_to_def(lambda A: A)
    assert "polytc.tc(" in info.value.hint


def test_no_source():
    ns = {}
    exec("def f(A: 'float(N)'):\n    B[i] = A[i]\n    return B\n", ns)
    with pytest.raises(TCSyntaxError) as info:
        function_to_def(ns["f"])
    assert "cannot read the source" in info.value.message
    assert "polytc.tc(" in info.value.hint


def test_not_a_function():
    with pytest.raises(TCSyntaxError):
        function_to_def(42)


def long_sum(A: "float(N)"):
    C[i] = (A[i] + A[i] + A[i] + A[i] + A[i] + A[i] + A[i] + A[i] + A[i] + A[i] + A[i]
            + A[i] + A[i] + A[i] + A[i] + A[i] + A[i] + A[i] + A[i] + A[i] + A[i] + A[i])
    return C


def test_long_sum_is_fine():
    d = function_to_def(long_sum)
    assert isinstance(d.body[0].rhs, A.Binary)


def load_module(tmp_path, name, text):
    import importlib.util

    path = tmp_path / f"{name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod, str(path)


@needs_parser
def test_too_deep_is_refused(tmp_path):
    terms = " + ".join(["A[i]"] * 300)
    mod, path = load_module(tmp_path, "deep_kernel",
                            f'def deep(A: "float(N)"):\n    C[i] = {terms}\n    return C\n')
    with pytest.raises(TCSyntaxError) as info:
        function_to_def(mod.deep)
    assert "nested too deeply" in info.value.message
    assert info.value.span.location().startswith(f"{path}:2:")


def test_non_ascii_columns(tmp_path):
    mod, path = load_module(tmp_path, "uni_kernel",
                            'def uni(A: "float(N)"):\n'
                            '    C[i] = A[i] * 2.0  # é\n'
                            '    D[i] = "é" + A[i]\n'
                            '    return C, D\n')
    with pytest.raises(TCSyntaxError) as info:
        function_to_def(mod.uni)
    assert info.value.span.location() == f"{path}:3:12"
    assert info.value.span.text == '"é"'
