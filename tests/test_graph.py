"""The graph layer: passes, binding, fusion groups, memory planning, inlining."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import polytc
from polytc.graph import passes
from polytc.graph.onnx_import import import_model
from polytc.lang import reference
from polytc.lang.inline import inline_temporaries

F = np.float32


def model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info(n, t, s)
                                       for n, t, s in inputs],
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, **attrs)


def steps_of(sess):
    (plan,) = sess._plans.values()
    return plan


def mlp_layer(n=32, k=48, m=40):
    rng = np.random.default_rng(0)
    return model([node("MatMul", ["x", "w"], ["h"]), node("Add", ["h", "b"], ["a"]),
                  node("Relu", ["a"], ["y"])],
                 [("x", TP.FLOAT, [n, k])], [("y", TP.FLOAT, [n, m])],
                 [("w", rng.standard_normal((k, m)).astype(F)),
                  ("b", rng.standard_normal(m).astype(F))])


# --- passes -------------------------------------------------------------------------------
def test_import_prints_the_graph():
    g = import_model(mlp_layer())
    text = str(g)
    assert "input  x: float32[32x48]" in text
    assert "h = MatMul(x, w)" in text
    assert "output y: float32[32x40]" in text


def test_constant_folding_uses_onnx_reference():
    m = model([node("Add", ["c1", "c2"], ["c3"]), node("Mul", ["x", "c3"], ["y"])],
              [("x", TP.FLOAT, [3])], [("y", TP.FLOAT, [3])],
              [("c1", np.ones(3, F)), ("c2", np.full(3, 2, F))])
    g, _ = passes.run(import_model(m))
    assert [n.op for n in g.nodes] == ["Mul"]
    np.testing.assert_array_equal(g.constants["c3"], np.full(3, 3, F))


def test_identities_removed_and_outputs_keep_their_names():
    m = model([node("Identity", ["x"], ["a"]), node("Relu", ["a"], ["b"]),
               node("Dropout", ["b"], ["y"])],
              [("x", TP.FLOAT, [4])], [("y", TP.FLOAT, [4])])
    g, _ = passes.run(import_model(m))
    assert [n.op for n in g.nodes] == ["Relu"]
    assert g.nodes[0].inputs == ("x",) and g.nodes[0].outputs == ("y",)
    x = np.array([-1, 2, -3, 4], F)
    np.testing.assert_array_equal(polytc.onnx.compile(m).run(None, {"x": x})[0],
                                  np.maximum(x, 0))


def test_transpose_chain_composes():
    m = model([node("Transpose", ["x"], ["a"], perm=[1, 2, 0]),
               node("Transpose", ["a"], ["y"], perm=[2, 0, 1])],
              [("x", TP.FLOAT, [2, 3, 4])], [("y", TP.FLOAT, [2, 3, 4])])
    g, _ = passes.run(import_model(m))
    assert [n.op for n in g.nodes] == ["Identity"] or not g.nodes or \
        all(n.op != "Transpose" or list(n.attr("perm")) == [0, 1, 2] for n in g.nodes)
    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(F)
    np.testing.assert_array_equal(polytc.onnx.compile(m).run(None, {"x": x})[0], x)


def test_cse_and_dce():
    m = model([node("Exp", ["x"], ["a"]), node("Exp", ["x"], ["b"]),
               node("Add", ["a", "b"], ["y"]), node("Log", ["x"], ["unused"])],
              [("x", TP.FLOAT, [5])], [("y", TP.FLOAT, [5])])
    g, stages = passes.run(import_model(m))
    assert [n.op for n in g.nodes] == ["Exp", "Add"]
    assert set(stages) >= {"import", "fold_constants", "cse", "dce"}


def test_batchnorm_folds_into_conv():
    rng = np.random.default_rng(2)
    c = 4
    m = model([node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
               node("BatchNormalization", ["c", "s", "bb", "mu", "var"], ["y"])],
              [("x", TP.FLOAT, [1, 3, 6, 6])], [("y", TP.FLOAT, [1, c, 6, 6])],
              [("w", rng.standard_normal((c, 3, 3, 3)).astype(F)),
               ("s", rng.random(c).astype(F) + 0.5), ("bb", rng.standard_normal(c).astype(F)),
               ("mu", rng.standard_normal(c).astype(F)), ("var", rng.random(c).astype(F) + 0.5)])
    g, _ = passes.run(import_model(m))
    assert [n.op for n in g.nodes] == ["Conv"]
    x = rng.standard_normal((1, 3, 6, 6)).astype(F)
    from onnx.reference import ReferenceEvaluator

    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    got = polytc.onnx.compile(m).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_batchnorms_in_a_row_fold_into_the_conv():
    """Conv, BN, BN: the second BN reads the first one's folded Conv on the next sweep
    (``fold_batchnorm`` repeats while a sweep folds), and the sums stay the oracle's."""
    rng = np.random.default_rng(3)
    c = 4

    def bn_params(k):
        return [(f"s{k}", rng.random(c).astype(F) + 0.5),
                (f"b{k}", rng.standard_normal(c).astype(F)),
                (f"m{k}", rng.standard_normal(c).astype(F)),
                (f"v{k}", rng.random(c).astype(F) + 0.5)]

    m = model([node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
               node("BatchNormalization", ["c", "s1", "b1", "m1", "v1"], ["y1"]),
               node("BatchNormalization", ["y1", "s2", "b2", "m2", "v2"], ["y"])],
              [("x", TP.FLOAT, [1, 3, 6, 6])], [("y", TP.FLOAT, [1, c, 6, 6])],
              [("w", rng.standard_normal((c, 3, 3, 3)).astype(F))] + bn_params(1) +
              bn_params(2))
    g, _ = passes.run(import_model(m))
    assert [n.op for n in g.nodes] == ["Conv"]
    x = rng.standard_normal((1, 3, 6, 6)).astype(F)
    from onnx.reference import ReferenceEvaluator

    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    np.testing.assert_allclose(polytc.onnx.compile(m).run(None, {"x": x})[0], want,
                               rtol=1e-4, atol=1e-5)


def test_stages_hold_no_weights():
    """The pass stages render the graph's text when read, from shape-only stand-ins
    of its constants: the weights of earlier passes are not kept alive."""
    m = model([node("MatMul", ["x", "w"], ["y"])], [("x", TP.FLOAT, [2, 64])],
              [("y", TP.FLOAT, [2, 64])], [("w", np.ones((64, 64), F))])
    g, stages = passes.run(import_model(m))
    assert "const  w: float32[64x64]" in stages["import"]
    for graph in stages._graphs.values():
        assert all(v.strides == (0,) * v.ndim for v in graph.constants.values())


def _pointwise_model(batch, stride=1, pads=0, group=1, cin=6, cout=10, side=7):
    rng = np.random.default_rng(5)
    out = (side + 2 * pads - 1) // stride + 1
    return model([node("Conv", ["x", "w", "b"], ["c"], strides=[stride, stride],
                       pads=[pads] * 4, group=group),
                  node("Relu", ["c"], ["r"]), node("Sigmoid", ["r"], ["y"])],
                 [("x", TP.FLOAT, [batch, cin, side, side])],
                 [("y", TP.FLOAT, [batch, cout, out, out])],
                 [("w", rng.standard_normal((cout, cin // group, 1, 1)).astype(F)),
                  ("b", rng.standard_normal(cout).astype(F))])


def test_pointwise_conv_becomes_a_matrix_product():
    """A 1x1 Conv of stride 1 without padding: Reshape, MatMul over the flattened image,
    the bias Add, the unary ops after it (Relu, Sigmoid) on the flat result, Reshape
    back; with a symbolic batch too.  Strided, padded or grouped ones stay Convs."""
    from onnx.reference import ReferenceEvaluator

    m = _pointwise_model("N")
    g, _ = passes.run(import_model(m))
    assert [n.op for n in g.nodes] == ["Reshape", "MatMul", "Add", "Relu", "Sigmoid",
                                       "Reshape"]
    sess = polytc.onnx.compile(m)
    for n in (1, 3, 0):  # an empty batch too
        x = np.random.default_rng(n).standard_normal((n, 6, 7, 7)).astype(F)
        np.testing.assert_allclose(sess.run(None, {"x": x})[0],
                                   ReferenceEvaluator(m).run(None, {"x": x})[0],
                                   rtol=1e-5, atol=1e-5)
    for kw in (dict(stride=2), dict(pads=1), dict(group=2)):
        g, _ = passes.run(import_model(_pointwise_model(2, **kw)))
        assert [n.op for n in g.nodes][0] == "Conv", kw


def test_global_pools_reduce_the_flattened_image():
    """GlobalAveragePool and GlobalMaxPool of [N, C, H, W] (a symbolic batch, an empty
    one, NaN) pool a [N, C, H*W] view, then reshape back; a 3-D input stays as it is."""
    for op, ref in (("GlobalAveragePool", np.mean), ("GlobalMaxPool", np.max)):
        m = model([node(op, ["x"], ["y"])],
                  [("x", TP.FLOAT, ["N", 5, 4, 3])], [("y", TP.FLOAT, ["N", 5, 1, 1])])
        g, _ = passes.run(import_model(m))
        assert [n.op for n in g.nodes] == ["Reshape", op, "Reshape"]
        sess = polytc.onnx.compile(m)
        for n in (2, 0):
            x = np.random.default_rng(n).standard_normal((n, 5, 4, 3)).astype(F)
            if n:
                x[1, 2, 3, 1] = np.nan
            got = sess.run(None, {"x": x})[0]
            assert got.shape == (n, 5, 1, 1)
            np.testing.assert_allclose(got, ref(x, axis=(2, 3), keepdims=True),
                                       rtol=1e-5, atol=1e-6)
    m = model([node("GlobalAveragePool", ["x"], ["y"])], [("x", TP.FLOAT, [2, 5, 7])],
              [("y", TP.FLOAT, [2, 5, 1])])
    assert [n.op for n in passes.run(import_model(m))[0].nodes] == ["GlobalAveragePool"]


def test_batch_of_one_epilogue_folds_into_its_matmul():
    """An elementwise op on a [1, S, D] product reads it at its own batch index (not a
    literal 0), so the bias Add folds into the product's register tiles."""
    rng = np.random.default_rng(6)
    m = model([node("MatMul", ["x", "w"], ["h"]), node("Add", ["h", "b"], ["y"])],
              [("x", TP.FLOAT, [1, 40, 48])], [("y", TP.FLOAT, [1, 40, 64])],
              [("w", rng.standard_normal((48, 64)).astype(F)),
               ("b", rng.standard_normal(64).astype(F))])
    plan = steps_of(polytc.onnx.compile(m))
    (ck,) = plan.kernels.values()
    assert "epilogue S1" in ck.stages["fold"]


def test_compile_leaves_the_callers_model_alone():
    m = mlp_layer()
    before = m.SerializeToString()
    polytc.onnx.compile(m)
    assert m.SerializeToString() == before


# --- fusion groups ------------------------------------------------------------------------
def test_matmul_bias_relu_is_one_group_with_inlined_epilogue():
    sess = polytc.onnx.compile(mlp_layer())
    plan = steps_of(sess)
    groups = [s for s in plan.steps if hasattr(s, "stmts")]
    assert len(groups) == 1 and groups[0].ops == ["MatMul", "Add", "Relu"]
    tc = plan.kernels[groups[0].name].stages["tc"]
    assert "max(" in tc and tc.count("=") >= 2
    x = np.random.default_rng(3).standard_normal((32, 48)).astype(F)
    w = numpy_helper.to_array(mlp_layer().graph.initializer[0])
    b = numpy_helper.to_array(mlp_layer().graph.initializer[1])
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], np.maximum(x @ w + b, 0),
                               rtol=1e-4, atol=1e-4)


def test_two_matmuls_are_two_groups_and_fuse_false_splits_everything():
    rng = np.random.default_rng(4)
    m = model([node("MatMul", ["x", "w1"], ["h"]), node("Relu", ["h"], ["a"]),
               node("MatMul", ["a", "w2"], ["y"])],
              [("x", TP.FLOAT, [8, 16])], [("y", TP.FLOAT, [8, 4])],
              [("w1", rng.standard_normal((16, 12)).astype(F)),
               ("w2", rng.standard_normal((12, 4)).astype(F))])
    ops = [s.ops for s in steps_of(polytc.onnx.compile(m)).steps]
    assert ops == [["MatMul", "Relu"], ["MatMul"]]
    ops = [s.ops for s in steps_of(polytc.onnx.compile(m, fuse=False)).steps]
    assert ops == [["MatMul"], ["Relu"], ["MatMul"]]


def test_a_transpose_read_by_a_product_joins_the_products_group():
    """Attention's query and value transposes (of reshaped projections) each join the
    group of the product that reads them, instead of a group of their own that writes
    the moved copy for that product to read again (and the attention is one group:
    ``test_attention_is_one_group``); a transpose also read by another node keeps its
    own group."""
    rng = np.random.default_rng(5)
    shapes = [("q", TP.FLOAT, [2, 8, 4, 16]), ("k", TP.FLOAT, [2, 8, 4, 16]),
              ("v", TP.FLOAT, [2, 8, 4, 16])]
    nodes = [node("Transpose", ["q"], ["qt"], perm=[0, 2, 1, 3]),
             node("Transpose", ["k"], ["kt"], perm=[0, 2, 3, 1]),
             node("MatMul", ["qt", "kt"], ["s"]), node("Softmax", ["s"], ["p"], axis=-1),
             node("Transpose", ["v"], ["vt"], perm=[0, 2, 1, 3]),
             node("MatMul", ["p", "vt"], ["o"])]
    m = model(nodes, shapes, [("o", TP.FLOAT, [2, 4, 8, 16])], [])
    ops = [s.ops for s in steps_of(polytc.onnx.compile(m)).steps]
    assert ops == [["Transpose", "Transpose", "MatMul", "Softmax", "Transpose", "MatMul"]]
    q, k, v = (rng.standard_normal((2, 8, 4, 16)).astype(F) for _ in range(3))
    s = np.einsum("bihd,bjhd->bhij", q, k)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    got = polytc.onnx.compile(m).run(None, {"q": q, "k": k, "v": v})[0]
    np.testing.assert_allclose(got, np.einsum("bhij,bjhd->bhid", p, v), rtol=1e-4, atol=1e-5)
    shared = model(nodes[:2] + [node("Relu", ["qt"], ["r"]), node("MatMul", ["qt", "kt"], ["s"])],
                   shapes[:2], [("s", TP.FLOAT, [2, 4, 8, 8]), ("r", TP.FLOAT, [2, 4, 8, 16])], [])
    ops = [s.ops for s in steps_of(polytc.onnx.compile(shared)).steps]
    assert ops[0][:2] == ["Transpose", "Relu"]  # (not deferred: read twice)


def _attention(axis=-1, values_first=False, returned=False, b=2, h=4, s=24, d=16):
    """Scores of a batched product, scaled and masked, their softmax along ``axis``, the
    product with the values (the softmax on the right when ``values_first``), moved
    back to the sequence's order; ``returned``: the softmax is an output too."""
    shapes = [("q", TP.FLOAT, [b, h, s, d]), ("kt", TP.FLOAT, [b, h, d, s]),
              ("v", TP.FLOAT, [b, h, s, s] if values_first else [b, h, s, d]),
              ("mask", TP.FLOAT, [b, 1, 1, s])]
    pv = ["v", "p"] if values_first else ["p", "v"]
    nodes = [node("MatMul", ["q", "kt"], ["s0"]), node("Div", ["s0", "scale"], ["s1"]),
             node("Add", ["s1", "mask"], ["s2"]), node("Softmax", ["s2"], ["p"], axis=axis),
             node("MatMul", pv, ["o"]), node("Transpose", ["o"], ["y"], perm=[0, 2, 1, 3])]
    out = [("y", TP.FLOAT, [b, s, h, s if values_first else d])]
    out += [("p", TP.FLOAT, [b, h, s, s])] if returned else []
    return model(nodes, shapes, out, [("scale", np.array(4.0, F))])


def _attention_reference(q, kt, v, mask, axis=-1, values_first=False):
    x = (q @ kt) / 4.0 + mask
    p = np.exp(x - x.max(axis, keepdims=True))
    p /= p.sum(axis, keepdims=True)
    return np.transpose(v @ p if values_first else p @ v, (0, 2, 1, 3))


def test_attention_is_one_group():
    """A batched product's scores, their last-axis softmax and its product with the
    values compile as one group (the scores never go to memory: ``group._attention``);
    the output transpose joins it too.  Not when the softmax runs along another axis or
    is the product's right operand."""
    rng = np.random.default_rng(7)
    q, kt = rng.standard_normal((2, 4, 24, 16)).astype(F), \
        rng.standard_normal((2, 4, 16, 24)).astype(F)
    mask = np.where(rng.random((2, 1, 1, 24)) < 0.2, -1e4, 0).astype(F)
    for kw, fused in (({}, True), ({"returned": True}, True), ({"axis": 2}, False),
                      ({"values_first": True}, False)):
        m = _attention(**{k: v for k, v in kw.items()})
        sess = polytc.onnx.compile(m)
        ops = [s.ops for s in steps_of(sess).steps]
        whole = ["MatMul", "Div", "Add", "Softmax", "MatMul", "Transpose"]
        assert (ops == [whole]) == fused, (kw, ops)
        assert fused or ["Softmax"] in ops  # (not with the scores alone either)
        if fused:  # per batch element and head, the transpose back included: the
            # scores and their softmax one head's each (fusion._matched)
            plan = steps_of(sess)
            stage = plan.kernels[plan.steps[0].name].stages["contraction"]
            # (a returned softmax is an output: its scores alone are a head's)
            assert stage.count("buffer 1x1x24x24") == (1 if kw else 2), stage
            assert "1x4x" not in stage
        vf = kw.get("values_first", False)
        v = rng.standard_normal((2, 4, 24, 24 if vf else 16)).astype(F)
        got = sess.run(None, {"q": q, "kt": kt, "v": v, "mask": mask})[0]
        want = _attention_reference(q, kt, v, mask, kw.get("axis", -1), vf)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_report_names_the_fused_ops():
    text = polytc.onnx.compile(mlp_layer()).report()
    assert "MatMul + Add + Relu" in text and "compiled groups" in text


# --- memory -------------------------------------------------------------------------------
def test_arena_reuses_buffers_and_outputs_are_fresh():
    chain = [node("Exp" if k % 2 else "MatMul", [f"v{k}"] + ([] if k % 2 else ["w"]),
                  [f"v{k + 1}"]) for k in range(8)]
    chain.append(node("Identity", ["v8"], ["y"]))
    m = model(chain, [("v0", TP.FLOAT, [16, 16])], [("y", TP.FLOAT, [16, 16])],
              [("w", (np.eye(16) * 0.5).astype(F))])
    sess = polytc.onnx.compile(m)
    plan = steps_of(sess)
    assert len(set(plan.slot.values())) < len(plan.slot)  # some buffer serves twice
    x = np.random.default_rng(5).standard_normal((16, 16)).astype(F)
    y1 = sess.run(None, {"v0": x})[0]
    keep = y1.copy()
    sess.run(None, {"v0": x * 2})
    np.testing.assert_array_equal(y1, keep)  # a later run does not overwrite results



def test_a_value_larger_than_every_free_buffer_grows_one():
    """A value that no free buffer holds grows the largest free one instead of taking a
    buffer of its own (a transformer layer's FFN product after its attention's values):
    the arena is the largest live set, not the sum of the sizes."""
    w = np.full((16, 64), 1 / 16, F)
    # a and b (16 x 16) die before c (16 x 64) is made; d reads c
    nodes = [node("Exp", ["x"], ["a"]), node("Exp", ["a"], ["b"]),
             node("MatMul", ["b", "w"], ["c"]), node("Exp", ["c"], ["d"]),
             node("MatMul", ["d", "u"], ["y"])]
    u = np.ones((64, 1), F)
    m = model(nodes, [("x", TP.FLOAT, [16, 16])], [("y", TP.FLOAT, [16, 1])],
              [("w", w), ("u", u)])
    sess = polytc.onnx.compile(m, fuse=False)
    plan = steps_of(sess)
    refs = plan.bound.refs
    live = max(refs[u].size + refs[v].size for u, v in (("a", "b"), ("b", "c"), ("c", "d")))
    assert plan.arena_bytes == live * 4  # (c and d live at once, in two buffers)
    assert plan.slot["c"][0] == plan.slot["a"][0]
    x = np.random.default_rng(1).standard_normal((16, 16)).astype(F) * 0.1
    want = np.exp(np.exp(np.exp(x)) @ w) @ u
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-5)


def test_symbolic_batch_compiles_once_per_shape():
    m = model([node("Relu", ["x"], ["y"])], [("x", TP.FLOAT, ["N", 3])],
              [("y", TP.FLOAT, ["N", 3])])
    sess = polytc.onnx.compile(m)
    assert sess.get_inputs()[0].shape == ["N", 3]
    assert not sess._plans  # nothing compiled before the first run
    for n in (2, 5, 2):
        x = np.random.default_rng(n).standard_normal((n, 3)).astype(F)
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.maximum(x, 0))
    assert len(sess._plans) == 2


def test_output_that_is_an_input_is_copied():
    m = model([node("Identity", ["x"], ["y"])], [("x", TP.FLOAT, [3])],
              [("y", TP.FLOAT, [3])])
    x = np.arange(3, dtype=F)
    y = polytc.onnx.compile(m).run(None, {"x": x})[0]
    y[0] = 42
    assert x[0] == 0


# --- inlining -----------------------------------------------------------------------------
def test_inline_substitutes_single_reads_only():
    k = polytc.tc("""def f(float(N,K) A, float(K,M) B, float(M) b) -> (Y) {
        T(i, j) +=! A(i, k) * B(k, j)
        U(i, j) = T(i, j) + b(j)
        V(i, j) = max(U(i, j), 0.0)
        W(i, j) = exp(V(i, j))
        s(i) +=! W(i, j)
        Y(i, j) = W(i, j) / s(i)
    }""")
    p = inline_temporaries(k.program)
    names = [s.tensor for s in p.statements]
    assert names == ["T", "W", "s", "Y"]  # U and V inlined; W is read twice
    assert "exp(max(T(i, j) + b(j), 0.0))" in str(p)
    A = np.random.default_rng(6).standard_normal((5, 7)).astype(F)
    B = np.random.default_rng(7).standard_normal((7, 6)).astype(F)
    bb = np.ones(6, F)
    from polytc.kernel import Kernel

    np.testing.assert_allclose(Kernel(p)(A, B, bb), k(A, B, bb), rtol=1e-5)


def test_inline_through_an_in_place_update():
    # a convolution's bias added in place, then its activation: one epilogue
    k = polytc.tc("""def f(float(N,K) A, float(K,M) B, float(M) b) -> (Y) {
        T(i, j) +=! A(i, k) * B(k, j)
        T(i, j) = T(i, j) + b(j)
        Y(i, j) = max(T(i, j), 0.0)
    }""")
    p = inline_temporaries(k.program)
    assert [s.tensor for s in p.statements] == ["T", "Y"]
    assert "max(T(i, j) + b(j), 0.0)" in str(p) and "T" in [t.name for t in p.temporaries]
    rng = np.random.default_rng(9)
    A, B, bb = (rng.standard_normal(s).astype(F) for s in ((5, 7), (7, 6), (6,)))
    from polytc.kernel import Kernel

    np.testing.assert_allclose(Kernel(p)(A, B, bb), k(A, B, bb), rtol=1e-5)
    # not when the update reads another element of T, or T is read again after it at
    # another element or by another statement
    for outs, body in (("Y", "T(i, j) = T(i, 0) + b(j)\nY(i, j) = max(T(i, j), 0.0)"),
                       ("Y", "T(i, j) = T(i, j) + b(j)\nY(i, j) = max(T(i, j), 0.0) + T(i, 0)"),
                       ("Y, Z", "T(i, j) = T(i, j) + b(j)\nY(i, j) = max(T(i, j), 0.0)\n"
                                "Z(i, j) = T(i, j)")):
        k = polytc.tc(f"def f(float(N,K) A, float(K,M) B, float(M) b) -> ({outs}) {{\n"
                      f"T(i, j) +=! A(i, k) * B(k, j)\n{body}\n}}")
        assert inline_temporaries(k.program) == k.program, body


def test_inline_into_a_shifted_read():
    # an epilogue writing the inside of a padded buffer reads T shifted: still once per
    # element of T, so the bias and the activation are substituted there
    k = polytc.tc("""def f(float(N,K) A, float(K,M) B, float(M) b) -> (Y) {
        T(i, j) +=! A(i, k) * B(k, j)
        T(i, j) = T(i, j) + b(j)
        U(i, j) = max(T(i, j), 0.0)
        Y(i, j) = U(i - 1, j - 2) where i in 1:N+1, j in 2:M+2
    }""")
    p = inline_temporaries(k.program)
    assert [s.tensor for s in p.statements] == ["T", "Y"]
    assert "max(T(i - 1, j - 2) + b(j - 2), 0.0)" in str(p)
    rng = np.random.default_rng(10)
    A, B, bb = (rng.standard_normal(s).astype(F) for s in ((5, 7), (7, 6), (6,)))
    from polytc.kernel import Kernel

    np.testing.assert_allclose(Kernel(p)(A, B, bb), k(A, B, bb), rtol=1e-5)


def test_inline_a_cheap_value_read_twice_at_one_element():
    """A value of at most two operations that one statement reads several times at the
    same element (a bias add, then a GELU) is substituted at each read, so that the
    product's epilogue is one statement and folds into its register tiles; not a value
    that calls a function, nor reads at different elements."""
    gelu = """def f(float(N,K) A, float(K,M) B, float(M) b) -> (Y) {
        T(i, j) +=! A(i, k) * B(k, j)
        U(i, j) = T(i, j) + b(j)
        Y(i, j) = U(i, j) * (erf(U(i, j) / 1.4142135) + 1.0) * 0.5
    }"""
    k = polytc.tc(gelu)
    p = inline_temporaries(k.program)
    assert [s.tensor for s in p.statements] == ["T", "Y"]
    assert str(p).count("T(i, j) + b(j)") == 2
    rng = np.random.default_rng(3)
    A, B, bb = (rng.standard_normal(s).astype(F) for s in ((9, 70), (70, 40), (40,)))
    from polytc.kernel import Kernel

    ck = Kernel(p).specialize(A, B, bb)
    assert "epilogue S1" in ck.stages["fold"], ck.stages["fold"]
    want = reference.run(k.program, [A, B, bb])["Y"]
    np.testing.assert_allclose(ck.run([A, B, bb]), want, rtol=1e-5, atol=1e-5)
    for src in (gelu.replace("T(i, j) + b(j)", "exp(T(i, j))"),
                gelu.replace("erf(U(i, j)", "erf(U(i, 0)")):
        k = polytc.tc(src)
        assert [s.tensor for s in inline_temporaries(k.program).statements] == \
            ["T", "U", "Y"]


def test_inline_keeps_contraction_operands():
    k = polytc.tc("""def f(float(N,K) A, float(K,M) B) -> (C) {
        S(i, k) = A(i, k) * 2.0
        C(i, j) +=! S(i, k) * B(k, j)
    }""")
    assert inline_temporaries(k.program) == k.program


def test_profile_times_every_group():
    sess = polytc.onnx.compile(mlp_layer())
    x = np.random.default_rng(8).standard_normal((32, 48)).astype(F)
    rows = steps_of(sess).profile({"x": x}, repeat=3)
    assert [ops for _, ops, _ in rows] == [["MatMul", "Add", "Relu"]]
    assert all(t > 0 for _, _, t in rows)


def test_weights_are_aligned_once_and_scalars_stay_0d():
    rng = np.random.default_rng(9)
    m = model([node("MatMul", ["x", "w"], ["h"]), node("Mul", ["h", "s"], ["y"])],
              [("x", TP.FLOAT, [64, 64])], [("y", TP.FLOAT, [64, 64])],
              [("w", rng.standard_normal((64, 64)).astype(F)), ("s", np.array(2.0, F))])
    plan = steps_of(polytc.onnx.compile(m))
    from polytc.runtime.memory import is_aligned

    # no aligned copy per run: the weights aligned once, or packed once (aligned) by
    # every kernel that reads them, and then not copied at all
    packed = [a for arrays in plan.prepacked.values() for a in arrays]
    assert is_aligned(plan.constants["w"]) or (packed and all(map(is_aligned, packed)))
    assert plan.constants["s"].shape == ()


def test_a_reduction_to_one_value_starts_its_group():
    """A quantised model's dynamic range (the min of a whole layer-norm output) is not
    fused into the layer norm's group: it needs all of that output first, and isl's
    scheduler ran past its 8 s limit on the fused program (polytc/graph/group.py)."""
    import onnx
    from onnx import helper, numpy_helper

    from polytc import onnx as ponnx

    vi = helper.make_tensor_value_info
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["n"], axis=-1),
             helper.make_node("ReduceMin", ["n"], ["lo"], keepdims=0)]
    m = helper.make_model(helper.make_graph(
        nodes, "t", [vi("x", onnx.TensorProto.FLOAT, [8, 16])],
        [vi("n", onnx.TensorProto.FLOAT, [8, 16]), vi("lo", onnx.TensorProto.FLOAT, [])],
        [numpy_helper.from_array(np.ones(16, np.float32), "g"),
         numpy_helper.from_array(np.zeros(16, np.float32), "b")]),
        opset_imports=[helper.make_opsetid("", 18)])
    x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    sess = ponnx.compile(m)
    n, lo = sess.run(None, {"x": x})
    np.testing.assert_allclose(lo, n.min(), rtol=0)
    texts = sess.plan({"x": x.shape}).texts.values()
    assert len(texts) == 2 and not any("LayerNormalization" in t and "ReduceMin" in t
                                       for t in texts)
