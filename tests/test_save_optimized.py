"""The optimised model written back as ONNX (polytc/graph/save.py): it passes onnx's
checker, keeps the model's inputs and outputs (symbolic dimensions, half precision),
shows the fusion groups as local functions, and compiles again to the same outputs."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import polytc
from polytc.graph import examples as ex
from polytc.graph import onnx_import as onx
from polytc.graph import save
from polytc.graph.group import Group
from polytc.graph.ir import Graph, Node

F16 = np.float16


def _model(nodes, inputs, outputs, inits=(), opset=17):
    return helper.make_model(helper.make_graph(nodes, "m", inputs, outputs, list(inits)),
                             opset_imports=[helper.make_opsetid("", opset)])


def _info(name, elem, dims):
    return helper.make_tensor_value_info(name, elem, dims)


def folded():
    """y = reshape(relu(x + c1 * c2), [4, 2]): c1 * c2 and the target shape fold."""
    c1 = numpy_helper.from_array(np.arange(4, dtype=np.float32), "c1")
    c2 = numpy_helper.from_array(np.full(4, 0.5, np.float32), "c2")
    dims = [numpy_helper.from_array(np.array([d], np.int64), f"d{d}") for d in (4, 2)]
    nodes = [helper.make_node("Mul", ["c1", "c2"], ["c"], name="scale"),
             helper.make_node("Add", ["x", "c"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["r"], name="relu"),
             helper.make_node("Concat", ["d4", "d2"], ["shape"], axis=0, name="shape"),
             helper.make_node("Reshape", ["r", "shape"], ["y"], name="reshape")]
    return _model(nodes, [_info("x", TensorProto.FLOAT, [2, 4])],
                  [_info("y", TensorProto.FLOAT, [4, 2])], [c1, c2] + dims)


def half():
    """float16 x[4, 16] @ w + b, relu: computed in float32, float16 at the boundary."""
    r = np.random.default_rng(0)
    w = numpy_helper.from_array((r.standard_normal((16, 8)) / 4).astype(F16), "w")
    b = numpy_helper.from_array(r.standard_normal(8).astype(F16), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Add", ["h", "b"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["y"])]
    return _model(nodes, [_info("x", TensorProto.FLOAT16, [4, 16])],
                  [_info("y", TensorProto.FLOAT16, [4, 8])], [w, b], opset=18)


def quantised(k=18):
    """DynamicQuantizeLinear -> MatMulInteger(int8 weights) -> Cast -> Mul: with rows of
    18 values the product runs in float, on an internal QuantizeLinear to float; with
    16 (whole int32 words) as ``MatMulWords`` where int8 words are on (quantised.py)."""
    w = np.random.default_rng(1).integers(-128, 128, (k, 8)).astype(np.int8)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"]),
             helper.make_node("MatMulInteger", ["q", "w", "z"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["f", "s"], ["y"])]
    return _model(nodes, [_info("x", TensorProto.FLOAT, [3, k])],
                  [_info("y", TensorProto.FLOAT, [3, 8])], [numpy_helper.from_array(w, "w")])


def conv_integer(batch=1):
    """ConvInteger whose sums may pass 2^24: an int32 Conv, the graph's output typed
    without a shape by the rewrite (quantised.py)."""
    w = np.random.default_rng(1).integers(-128, 128, (2, 16, 9, 9)).astype(np.int8)
    nodes = [helper.make_node("ConvInteger", ["x", "w"], ["y"])]
    return _model(nodes, [_info("x", TensorProto.UINT8, [batch, 16, 9, 9])],
                  [_info("y", TensorProto.INT32, [batch, 2, 1, 1])],
                  [numpy_helper.from_array(w, "w")])


def upsample():
    """An opset-9 Upsample: polytc keeps it as Upsample in opset 13, which ONNX does not."""
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    nodes = [helper.make_node("Upsample", ["x", "scales"], ["u"], mode="nearest"),
             helper.make_node("Relu", ["u"], ["y"])]
    return _model(nodes, [_info("x", TensorProto.FLOAT, [1, 2, 3, 3])],
                  [_info("y", TensorProto.FLOAT, [1, 2, 6, 6])], [scales], opset=9)


def entangled():
    """y = -(relu(x) * ConstantOfShape(Shape(relu(x)))) with a symbolic batch: one group
    once bound (the product's operand folds), a cycle through Shape unbound."""
    two = numpy_helper.from_array(np.array([2.0], np.float32))
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Shape", ["a"], ["sh"], name="shape"),
             helper.make_node("ConstantOfShape", ["sh"], ["c"], value=two, name="fill"),
             helper.make_node("Mul", ["a", "c"], ["b"], name="mul"),
             helper.make_node("Neg", ["b"], ["y"], name="neg")]
    return _model(nodes, [_info("x", TensorProto.FLOAT, ["N", 4])],
                  [_info("y", TensorProto.FLOAT, ["N", 4])])


CASES = {
    "mlp": lambda: ex.mlp(4, sizes=(32, 64, 48, 10)),
    "small_cnn_batch_N": lambda: ex.small_cnn("N", image=16),
    "small_cnn_nchw": lambda: ex.small_cnn("N", image=16),
    "transformer": lambda: ex.transformer_layer(2, seq=8, d_model=16, heads=2, ffn=32),
    "folded": folded,
    "float16": half,
    "quantised": quantised,
    "quantised_words": lambda: quantised(16),
    "conv_integer": conv_integer,
    "conv_integer_batch_N": lambda: conv_integer("N"),
    "upsample": upsample,
    "entangled": entangled,
}
#: graph passes a case's session skips (its saved model then holds no blocked channels)
DISABLE = {"small_cnn_nchw": ("blocked_layout",)}
#: the batch sizes a model with a symbolic batch runs at (the first compiles the plan
#: whose groups are saved)
BATCHES = (2, 3)


class Case:
    def __init__(self, name):
        with pytest.MonkeyPatch.context() as mp:  # (int8 words on any CPU: exact anyway)
            mp.setenv("POLYTC_INT8_DOT", "1" if name.endswith("_words") else "0")
            self._build(name)

    def _build(self, name):
        self.model = CASES[name]()
        self.session = polytc.onnx.compile(self.model, disable=DISABLE.get(name, ()))
        symbolic = any(d.dim_param for i in self.model.graph.input
                       for d in i.type.tensor_type.shape.dim)
        self.feeds = [ex.example_inputs(self.model, seed=1, batch=b)
                      for b in (BATCHES if symbolic else (None,))]
        self.want = [self.session.run(None, f) for f in self.feeds]  # compiles a plan
        self.saved = save.optimized_model(self.session)
        self.again = polytc.onnx.compile(self.saved)


@pytest.fixture(scope="module")
def cases():
    made: dict = {}

    def get(name):
        if name not in made:
            made[name] = Case(name)
        return made[name]
    return get


def _domains(m: onnx.ModelProto) -> set:
    return {n.domain for n in m.graph.node} | {n.domain for f in m.functions for n in f.node}


@pytest.mark.parametrize("name", list(CASES))
def test_saved_model_is_valid_and_compiles_to_the_same_outputs(cases, name):
    c = cases(name)
    onnx.checker.check_model(c.saved, full_check=True)
    for feeds, want in zip(c.feeds, c.want):
        got = c.again.run(None, feeds)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64),
                                       rtol=1e-6, atol=1e-6)
    assert [a.name for a in c.again.get_inputs()] == [a.name for a in c.session.get_inputs()]
    assert c.again.get_inputs() == c.session.get_inputs()  # types, symbolic dims
    for a, b in zip(c.again.get_outputs(), c.session.get_outputs(), strict=True):
        assert (a.name, a.type) == (b.name, b.type) and b.shape in (None, a.shape)
    assert c.saved.opset_import[0].version == c.session.graph.opset


@pytest.mark.parametrize("name", ["mlp", "small_cnn_nchw", "transformer", "folded",
                                  "float16"])
def test_onnxruntime_runs_the_saved_model(cases, name):
    """Without polytc's own ops the saved model is plain ONNX, functions and all."""
    ort = pytest.importorskip("onnxruntime")
    c = cases(name)
    assert _domains(c.saved) <= {"", save.FUSED}

    def run(m, feeds):
        return ort.InferenceSession(m.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, feeds)
    for feeds in c.feeds:
        for got, want in zip(run(c.saved, feeds), run(c.model, feeds)):
            np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32),
                                       rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("name", ["mlp", "small_cnn_batch_N", "transformer", "quantised"])
def test_fusion_groups_are_local_functions(cases, name):
    c = cases(name)
    plan = next(iter(c.session._plans.values()))
    groups = [s for s in plan.steps if isinstance(s, Group)]
    names = [f"{s.name}_" + "_".join(dict.fromkeys(s.ops)) for s in groups]
    assert [f.name for f in c.saved.functions] == names
    assert all(f.domain == save.FUSED for f in c.saved.functions)
    calls = [n for n in c.saved.graph.node if n.domain == save.FUSED]
    assert sorted(n.op_type for n in calls) == sorted(names)
    assert save.FUSED in {o.domain for o in c.saved.opset_import}
    # inlined, the functions are the graph's nodes again
    inlined = onnx.inliner.inline_local_functions(c.saved)
    assert sorted(n.op_type for n in inlined.graph.node) == \
        sorted(n.op for n in c.session.graph.nodes)
    # saved again, the reloaded model shows the same groups
    assert [f.name for f in save.optimized_model(c.again).functions] == names


def test_small_cnn_groups(cases):
    names = [f.name for f in cases("small_cnn_nchw").saved.functions]
    assert "g0_Conv_Relu" in names and "g1_MaxPool" in names


def test_blocked_channels_are_polytc_ops(cases):
    """The small CNN in blocked channels (``layout.py``) saves its blocked forms in
    polytc's own domain, as onnxruntime saves its NCHWc ops in its own: the model is
    for polytc, which reads it back to the same results."""
    c = cases("small_cnn_batch_N")
    assert onx.INTERNAL_DOMAIN in _domains(c.saved)
    names = [f.name for f in c.saved.functions]
    assert "g0_BlockedConv_Relu" in names and "g1_BlockedMaxPool" in names
    for feeds, want in zip(c.feeds, c.want):
        np.testing.assert_array_equal(c.again.run(None, feeds)[0], want[0])


def test_symbolic_dimensions_stay_symbolic(cases):
    saved = cases("small_cnn_batch_N").saved
    for v in list(saved.graph.input) + list(saved.graph.output):
        assert v.type.tensor_type.shape.dim[0].dim_param == "N"
    typed = {v.name: v for v in saved.graph.value_info}
    assert typed  # the main graph's values are typed, the batch symbolic
    assert all(v.type.tensor_type.shape.dim[0].dim_param == "N" for v in typed.values()
               if v.type.tensor_type.shape.dim)


def test_without_a_compiled_plan_no_functions():
    """A model with a symbolic batch that never ran has no groups yet."""
    m = CASES["small_cnn_batch_N"]()
    session = polytc.onnx.compile(m)
    saved = save.optimized_model(session)
    assert not saved.functions and save.FUSED not in _domains(saved)
    assert [n.op_type for n in saved.graph.node] == [n.op for n in session.graph.nodes]
    feeds = ex.example_inputs(m, batch=2)
    np.testing.assert_array_equal(polytc.onnx.compile(saved).run(None, feeds)[0],
                                  session.run(None, feeds)[0])


def test_constants_are_folded_initialisers(cases):
    c = cases("folded")
    saved = c.saved
    inits = {t.name: numpy_helper.to_array(t) for t in saved.graph.initializer}
    assert "c1" not in inits and "c2" not in inits  # only the folded product is left
    np.testing.assert_array_equal(inits["c"], np.arange(4, dtype=np.float32) * 0.5)
    inlined = onnx.inliner.inline_local_functions(saved)
    assert "Mul" not in {n.op_type for n in inlined.graph.node}
    assert "Concat" not in {n.op_type for n in inlined.graph.node}


@pytest.mark.parametrize("name,ops", [("quantised", ["QuantizeLinear"]),
                                      ("quantised_words", ["QuantWords", "MatMulWords"]),
                                      ("conv_integer", ["Conv"]), ("upsample", ["Upsample"])])
def test_polytc_internal_ops_are_in_polytc_domain(cases, name, ops):
    saved = cases(name).saved
    nodes = list(saved.graph.node) + [n for f in saved.functions for n in f.node]
    internal = [n for n in nodes if n.domain == save.INTERNAL]
    assert [n.op_type for n in internal] == ops
    assert all(n.op_type not in ops for n in nodes if n.domain == "")
    assert any(save.INTERNAL in {o.domain for o in f.opset_import} for f in saved.functions)


def test_output_of_unknown_rank_gets_the_plans_shape(cases):
    """The int32 rewrite of ConvInteger leaves the graph's output without a shape; ONNX
    wants one for a graph output: the compiled plan's."""
    c = cases("conv_integer")
    assert c.session.get_outputs()[0].shape is None
    dims = c.saved.graph.output[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims] == [1, 2, 1, 1]
    # with a symbolic batch the plan's sizes are one batch's: the rank alone
    dims = cases("conv_integer_batch_N").saved.graph.output[0].type.tensor_type.shape.dim
    assert len(dims) == 4 and not any(d.dim_value or d.dim_param for d in dims)


def test_half_precision_boundary(cases):
    saved = cases("float16").saved
    assert saved.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT16
    assert saved.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT16
    casts = [n for n in saved.graph.node if n.op_type == "Cast"]
    assert [helper.get_attribute_value(n.attribute[0]) for n in casts] == \
        [TensorProto.FLOAT, TensorProto.FLOAT16]
    assert casts[0].input == ["x"] and casts[1].output == ["y"]
    # float32 inside: the weights as the passes widened them
    assert {t.data_type for t in saved.graph.initializer} == {TensorProto.FLOAT}


def test_a_group_entangled_with_folded_nodes_stays_unfused(cases):
    c = cases("entangled")
    plan = next(iter(c.session._plans.values()))
    assert [s.ops for s in plan.steps if isinstance(s, Group)] == [["Relu", "Mul", "Neg"]]
    assert not c.saved.functions
    assert [n.op_type for n in c.saved.graph.node] == ["Relu", "Shape", "ConstantOfShape",
                                                       "Mul", "Neg"]


def test_save_optimized_writes_a_file(cases, tmp_path):
    c = cases("mlp")
    path = tmp_path / "opt.onnx"
    save.save_optimized(c.session, path)
    assert onnx.load(path) == c.saved
    got = polytc.onnx.compile(str(path)).run(None, c.feeds[0])
    np.testing.assert_array_equal(got[0], c.want[0][0])
    with pytest.raises(polytc.ModelError, match=r"nowhere/opt.onnx: cannot write the "
                       r"optimised model \(No such file or directory\)"):
        save.save_optimized(c.session, tmp_path / "nowhere" / "opt.onnx")


def test_large_constants_go_to_a_data_file(cases, tmp_path, monkeypatch):
    c = cases("mlp")
    monkeypatch.setattr(save, "EXTERNAL_BYTES", 0)
    path = tmp_path / "big.onnx"
    save.save_optimized(c.session, path)
    assert (tmp_path / "big.onnx.data").stat().st_size > 32 * 64 * 4
    got = polytc.onnx.compile(str(path)).run(None, c.feeds[0])
    np.testing.assert_array_equal(got[0], c.want[0][0])


def test_empty_list_attributes_keep_their_type():
    """An empty list has no type of its own: the op's schema gives it (else ints)."""
    g = Graph("g", ("x",), ("y",), (), {}, {}, 17)
    attrs = (("activation_alpha", ()), ("activations", ()), ("polytc_extra", ()))
    p = save._proto(Node("LSTM", "l", ("x",), ("y",), attrs), g)
    types = {a.name: a.type for a in p.attribute}
    assert types == {"activation_alpha": onnx.AttributeProto.FLOATS,
                     "activations": onnx.AttributeProto.STRINGS,
                     "polytc_extra": onnx.AttributeProto.INTS}
