"""ONNX's backend node tests on polytc: every node test whose ops polytc supports.

The cases are ``polytc.graph.conformance.node_cases()``: the models and data sets of the
installed onnx package's node tests, each compiled once through ``PolytcBackend`` and
run on all its data sets, compared with onnx's own ``Runner.assert_similar_outputs``
(the tolerances the test declares).  ``python -m polytc.graph.conformance`` prints the
same results as a per-op table.

Tests that cannot pass by design are skipped by the rule in
``polytc.graph.conformance.exclusion`` (element types polytc has not, non-tensor
values, training mode, random ops), never one by one.  ``XFAIL`` lists failures that are
clearly out of scope, with the reason.

The suite compiles hundreds of small models.  Compiled kernels go to the session's
kernel cache (tests/conftest.py), and the content-addressed cache makes the tests that
share a program (an op's ``_expanded`` twin, the same op on other data) compile it once.
``POLYTC_BACKEND_TESTS=0`` skips the whole suite; ``=OP,OP`` runs only those ops' tests.
"""
from __future__ import annotations

import os

import pytest

from polytc.graph import conformance

#: test name -> reason, for failures that are clearly out of scope
XFAIL: dict = {
    "test_scan_sum": "onnx's version converter takes opset 8's batch axis out of Scan's "
                     "graph inputs, so the converted model no longer takes the test's data",
    **{name: "the expected values carry a float32 FFT's rounding (1.9e-7 where the exact "
             "inverse is 3e-15); polytc's sums in double are within 2e-15 of numpy's "
             "float64 transform, past the test's atol of 1e-7"
       for name in ("test_dft_inverse", "test_dft_inverse_opset19")},
}


def _cases():
    only = os.environ.get("POLYTC_BACKEND_TESTS", "").strip()
    if only == "0":
        return []
    ops = [o for o in only.split(",") if o] or None
    params = []
    for _op, t in conformance.node_cases(ops):
        why = conformance.exclusion(t)
        marks = []
        if why is not None:
            marks.append(pytest.mark.skip(reason=f"excluded by rule: {why}"))
        elif t.name in XFAIL:
            marks.append(pytest.mark.xfail(reason=XFAIL[t.name], strict=True))
        params.append(pytest.param(t, id=t.name, marks=marks))
    return params


CASES = _cases()


@pytest.mark.parametrize("case", CASES)
def test_node(case):
    conformance.check_case(case)


def test_cases_found():
    """The suite is not silently empty: the elementwise ops alone have ~300 tests."""
    if os.environ.get("POLYTC_BACKEND_TESTS", "").strip():
        pytest.skip("POLYTC_BACKEND_TESTS selects the cases")
    assert len(CASES) > 300
    assert not set(XFAIL) - {p.id for p in CASES}, "stale XFAIL entries"


def test_exclusion_rule():
    """Spot checks of the rule, on tests the onnx package ships."""
    by_name = {t.name: t for t in conformance.all_node_tests()}
    expect = {
        "test_cast_FLOAT_to_FLOAT8E4M3FN": "element type",
        "test_cast_FLOAT_to_INT4": "element type",
        "test_cast_FLOAT_to_FLOAT16": None,  # computed in float32 (graph/halves.py)
        "test_cast_FLOAT_to_BFLOAT16": None,
        "test_cast_FLOAT_to_STRING": "element type",
        "test_identity_sequence": "sequence, optional or map",
        "test_identity_opt": "sequence, optional or map",
        "test_training_dropout": "training mode",
        "test_batchnorm_epsilon_training_mode": "training mode",
        "test_bernoulli": "random op",
        "test_cast_FLOAT_to_DOUBLE": None,
        "test_relu": None,
        "test_batchnorm_epsilon": None,
        "test_dropout_default": None,
    }
    for name, want in expect.items():
        if name not in by_name:
            continue  # an older or newer onnx package
        why = conformance.exclusion(by_name[name])
        if want is None:
            assert why is None, (name, why)
        else:
            assert why is not None and want in why, (name, why)


def test_op_attribution():
    by_name = {t.name: t for t in conformance.all_node_tests()}
    for name, op in [("test_relu", "Relu"), ("test_selu_expanded", "Selu"),
                     ("test_softmax_axis_0_expanded", "Softmax"),
                     ("test_hardsigmoid_expanded_ver18", "HardSigmoid")]:
        if name in by_name:
            assert conformance.op_of(by_name[name]) == op, name


def test_conformance_command(tmp_path, capsys):
    """``python -m polytc.graph.conformance Relu --markdown FILE``: the table, the totals,
    the markdown file."""
    md = tmp_path / "table.md"
    rc = conformance.main(["Relu", "Abs", "--markdown", str(md), "-v"])
    out = capsys.readouterr().out
    assert rc == 0, out
    lines = out.splitlines()
    assert lines[0].split() == ["op", "pass", "fail", "excl"]
    relu = next(ln.split() for ln in lines if ln.startswith("Relu "))
    assert int(relu[1]) >= 1 and relu[2:] == ["0", "0"], relu
    assert "tests pass (100.0%)" in out and f"wrote {md}" in out
    text = md.read_text()
    assert "| op | pass | fail | excluded |" in text
    assert f"| Relu | {relu[1]} | 0 | 0 |" in text


def test_update_docs(tmp_path, capsys):
    """``--update-docs FILE --ops-only`` rewrites docs/onnx.md's op list from the registry
    (run it after adding ops)."""
    from polytc.graph.ops import REGISTRY

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    page = tmp_path / "onnx.md"
    page.write_text(open(os.path.join(root, "docs", "onnx.md")).read())
    assert conformance.main(["--update-docs", str(page), "--ops-only"]) == 0
    text = page.read_text()
    section = text.split("<!-- BEGIN generated: ops -->")[1].split("<!-- END generated: ops")[0]
    assert all(f"`{op}`" in section for op in REGISTRY)
    own = [op for op, fn in REGISTRY.items() if fn.__module__.endswith(".words")]
    assert own and f"{len(REGISTRY) - len(own)} op types" in section  # (polytc's own apart)
    assert text.count("<!-- BEGIN generated: ops -->") == 1


def test_backend_runs_compile_time_inputs_in_stages():
    """A Reshape whose target shape is a graph input: the session compiles the rest of
    the model per distinct fed shape value (graph/staged.py), the other inputs stay
    run-time inputs."""
    import numpy as np
    from onnx import TensorProto, helper

    from polytc.graph.backend import PolytcBackend

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])
    s = helper.make_tensor_value_info("s", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None])
    nodes = [helper.make_node("Reshape", ["x", "s"], ["r"]),
             helper.make_node("Relu", ["r"], ["y"])]
    m = helper.make_model(helper.make_graph(nodes, "reshape", [x, s], [y]),
                          opset_imports=[helper.make_opsetid("", 17)])
    rep = PolytcBackend.prepare(m)
    a = np.arange(-6, 6, dtype=np.float32).reshape(2, 6)
    for shape in ([3, 4], [4, 3], [3, 4]):
        (out,) = rep.run([a, np.array(shape, np.int64)])
        np.testing.assert_array_equal(out, np.maximum(a, 0).reshape(shape))
    (staged,) = {id(p): p for p in rep.session._plans.values()}.values()
    assert staged.values == ("s",) and len(staged.rests) == 2
    (out,) = rep.run({"x": a, "s": np.array([12, 1], np.int64)})
    assert out.shape == (12, 1)
