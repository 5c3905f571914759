"""Example ONNX models for the tests and benchmarks, built with ``onnx.helper``.

Every builder returns an ``onnx.ModelProto`` (opset 17, IR version 8) that passes
``onnx.checker.check_model(m, full_check=True)`` and runs in onnxruntime and in
``onnx.reference.ReferenceEvaluator``.  Weights are float32 from
``np.random.default_rng(seed)``, scaled by fan-in so activations stay O(1).  ``batch``
given as a string (``batch="N"``) makes the batch dimension symbolic (a ``dim_param``);
reshapes never spell the batch out (a 0 in their shape copies it).  ``MODELS`` maps names
to builders; ``example_inputs(model)`` makes feeds for any of them::

    from polytc.graph import examples
    m = examples.resnet18(image=32, width=8)
    feeds = examples.example_inputs(m)      # {"input": float32 1x3x32x32}
"""
from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET, IR_VERSION = 17, 8
F32, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
SQRT2 = math.sqrt(2.0)


class _Graph:
    """Nodes and initializers of a graph under construction, with fresh value names."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.count = [], [], 0

    def fresh(self, hint: str) -> str:
        self.count += 1
        return f"{hint}_{self.count}"

    def const(self, hint: str, value, dtype=np.float32) -> str:
        """An initializer holding ``value``."""
        name = self.fresh(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def weight(self, hint: str, shape, fan_in: int, gain: float = 1.0) -> str:
        """N(0, gain^2 / fan_in) weights: unit-variance inputs give ~gain^2 variance."""
        return self.const(hint, self.rng.standard_normal(shape) * (gain / math.sqrt(fan_in)))

    def literal(self, value, dtype=np.float32) -> str:
        """A scalar ``Constant`` node, as exporters write literals like 0.5 or sqrt(2)."""
        out = self.fresh("const")
        tensor = numpy_helper.from_array(np.array(value, dtype), out)
        self.nodes.append(helper.make_node("Constant", [], [out], name=out, value=tensor))
        return out

    def op(self, op_type: str, inputs, out=None, n_out: int = 1, **attrs):
        """Append a node; ``out`` names its output(s) (graph outputs), else fresh names."""
        outs = ([out] if isinstance(out, str) else list(out) if out
                else [self.fresh(op_type.lower()) for _ in range(n_out)])
        self.nodes.append(helper.make_node(op_type, list(inputs), outs,
                                           name=self.fresh(op_type), **attrs))
        return outs[0] if len(outs) == 1 else outs

    def model(self, name: str, inputs, outputs) -> onnx.ModelProto:
        """``inputs``/``outputs``: (name, elem_type, shape) triples; str dims are symbolic."""
        vi = helper.make_tensor_value_info
        graph = helper.make_graph(self.nodes, name, [vi(*i) for i in inputs],
                                  [vi(*o) for o in outputs], initializer=self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              ir_version=IR_VERSION, producer_name="polytc.graph.examples")
        onnx.checker.check_model(m, full_check=True)
        return m


# --- multilayer perceptrons ------------------------------------------------------------

def mlp(batch=64, sizes=(784, 512, 512, 10), gemm=False, seed=0) -> onnx.ModelProto:
    """``input`` [batch, sizes[0]] -> (MatMul + Add, Relu) per layer, no Relu after the
    last -> Softmax -> ``probs`` [batch, sizes[-1]].  ``gemm``: one Gemm(transB=1) per
    layer instead, with weights stored [out, in] as PyTorch exports ``nn.Linear``."""
    g = _Graph(seed)
    h = "input"
    last = len(sizes) - 2
    for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
        gain = 1.0 if i == 0 else SQRT2  # the inputs of later layers went through a Relu
        b = g.const("bias", g.rng.normal(0, 0.1, n_out))
        if gemm:
            h = g.op("Gemm", [h, g.weight("weight", (n_out, n_in), n_in, gain), b], transB=1)
        else:
            h = g.op("Add", [g.op("MatMul", [h, g.weight("weight", (n_in, n_out), n_in, gain)]),
                             b])
        if i < last:
            h = g.op("Relu", [h])
    g.op("Softmax", [h], out="probs", axis=-1)
    return g.model("mlp_gemm" if gemm else "mlp", [("input", F32, [batch, sizes[0]])],
                   [("probs", F32, [batch, sizes[-1]])])


def mlp_gemm(batch=64, sizes=(784, 512, 512, 10), seed=0) -> onnx.ModelProto:
    """``mlp`` written with Gemm(transB=1) layers."""
    return mlp(batch, sizes, gemm=True, seed=seed)


# --- convolutional networks ------------------------------------------------------------

def _batchnorm(g: _Graph, x: str, c: int, gamma: float = 1.0) -> str:
    """Inference BatchNormalization with plausible running statistics."""
    r = g.rng
    return g.op("BatchNormalization", [
        x, g.const("bn_scale", gamma * r.uniform(0.5, 1.0, c)),
        g.const("bn_bias", r.normal(0, 0.1, c)), g.const("bn_mean", r.normal(0, 0.1, c)),
        g.const("bn_var", r.uniform(0.5, 1.5, c))], epsilon=1e-5)


def _conv_bn(g: _Graph, x: str, cin: int, cout: int, k: int, stride=1, pads=None, group=1,
             bias=False, relu=True, gamma=1.0) -> str:
    """Conv (+ bias) + BatchNormalization (+ Relu); ``pads`` default: k // 2 all round."""
    fan_in = cin // group * k * k
    ins = [x, g.weight("conv_w", (cout, cin // group, k, k), fan_in, SQRT2)]
    if bias:
        ins.append(g.const("conv_b", g.rng.normal(0, 0.1, cout)))
    y = g.op("Conv", ins, kernel_shape=[k, k], strides=[stride, stride], group=group,
             pads=[k // 2] * 4 if pads is None else pads)
    y = _batchnorm(g, y, cout, gamma)
    return g.op("Relu", [y]) if relu else y


def small_cnn(batch=2, image=32, classes=10, seed=0) -> onnx.ModelProto:
    """``input`` [batch, 3, image, image] -> ``logits`` [batch, classes]: Conv 3x3 with
    bias + BN + Relu, MaxPool 3/2 pad 1, depthwise Conv 3x3/2 with asymmetric pads
    (0,0,1,1) + BN + Relu, pointwise Conv + BN + Relu, AveragePool 3/1 pad 1 (padding
    not counted), GlobalAveragePool, Flatten, Gemm."""
    g = _Graph(seed)
    h = _conv_bn(g, "input", 3, 16, 3, bias=True)
    h = g.op("MaxPool", [h], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    h = _conv_bn(g, h, 16, 16, 3, stride=2, pads=[0, 0, 1, 1], group=16)
    h = _conv_bn(g, h, 16, 32, 1)
    h = g.op("AveragePool", [h], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1],
             count_include_pad=0)
    h = g.op("Flatten", [g.op("GlobalAveragePool", [h])], axis=1)
    g.op("Gemm", [h, g.weight("fc_w", (classes, 32), 32), g.const("fc_b", np.zeros(classes))],
         out="logits", transB=1)
    return g.model("small_cnn", [("input", F32, [batch, 3, image, image])],
                   [("logits", F32, [batch, classes])])


def _basic_block(g: _Graph, x: str, cin: int, cout: int, stride: int) -> str:
    """ResNet BasicBlock: conv3x3/stride-BN-Relu-conv3x3-BN, plus the identity or a
    1x1/stride conv + BN, then Relu.  The second BN's small scale keeps the sum O(1)."""
    h = _conv_bn(g, x, cin, cout, 3, stride)
    h = _conv_bn(g, h, cout, cout, 3, relu=False, gamma=0.5)
    if stride != 1 or cin != cout:
        x = _conv_bn(g, x, cin, cout, 1, stride, pads=[0, 0, 0, 0], relu=False)
    return g.op("Relu", [g.op("Add", [h, x])])


def resnet_block(batch=1, channels=64, image=56, out_channels=None, stride=1,
                 seed=0) -> onnx.ModelProto:
    """One BasicBlock: ``input`` [batch, channels, image, image] -> ``output`` [batch,
    out_channels, ceil(image/stride), ...]; a downsample branch when the shape changes."""
    g = _Graph(seed)
    cout = out_channels or channels
    _basic_block(g, "input", channels, cout, stride)
    g.nodes[-1].output[0] = "output"
    side = -(-image // stride)
    return g.model("resnet_block", [("input", F32, [batch, channels, image, image])],
                   [("output", F32, [batch, cout, side, side])])


def resnet18(batch=1, image=224, width=64, classes=1000, seed=0) -> onnx.ModelProto:
    """torchvision's ResNet-18 (BatchNormalization kept as separate nodes): Conv 7x7/2 +
    BN + Relu, MaxPool 3x3/2, 4 stages of 2 BasicBlocks with widths w, 2w, 4w, 8w (stride
    2 and a 1x1 downsample from stage 2), GlobalAveragePool, Flatten, Gemm -> ``logits``."""
    g = _Graph(seed)
    h = _conv_bn(g, "input", 3, width, 7, stride=2)
    h = g.op("MaxPool", [h], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = width
    for stage in range(4):
        cout = width << stage
        for block in range(2):
            h = _basic_block(g, h, cin, cout, 2 if stage and not block else 1)
            cin = cout
    h = g.op("Flatten", [g.op("GlobalAveragePool", [h])], axis=1)
    g.op("Gemm", [h, g.weight("fc_w", (classes, cin), cin), g.const("fc_b", np.zeros(classes))],
         out="logits", transB=1)
    return g.model("resnet18", [("input", F32, [batch, 3, image, image])],
                   [("logits", F32, [batch, classes])])


# --- model zoo: SqueezeNet 1.1 and ShuffleNetV2 as torchvision exports them -------------

def _channels(c: int, width: float, multiple: int) -> int:
    """``c`` scaled by ``width``, rounded to a multiple of ``multiple``, at least 8."""
    return max(8, int(round(c * width / multiple)) * multiple)


def _conv_relu(g: _Graph, x: str, cin: int, cout: int, k: int, stride=1, pad=0) -> str:
    """Conv with bias + Relu (SqueezeNet has biases and no BatchNormalization)."""
    w = g.weight("conv_w", (cout, cin, k, k), cin * k * k, SQRT2)
    y = g.op("Conv", [x, w, g.const("conv_b", g.rng.normal(0, 0.1, cout))],
             kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4)
    return g.op("Relu", [y])


def _fire(g: _Graph, x: str, cin: int, squeeze: int, expand: int) -> str:
    """SqueezeNet's Fire module: squeeze 1x1 Conv + Relu, then expand 1x1 and expand 3x3
    (pad 1) Conv + Relu each, Concat on the channels -> 2 * ``expand`` channels."""
    s = _conv_relu(g, x, cin, squeeze, 1)
    return g.op("Concat", [_conv_relu(g, s, squeeze, expand, 1),
                           _conv_relu(g, s, squeeze, expand, 3, pad=1)], axis=1)


def squeezenet(batch=1, image=224, classes=1000, width=1.0, seed=0) -> onnx.ModelProto:
    """torchvision's SqueezeNet 1.1: ``input`` [batch, 3, image, image] -> Conv 3x3/2 (64)
    + Relu, MaxPool 3/2 (ceil_mode), Fire x2, MaxPool, Fire x2, MaxPool, Fire x4 (squeeze
    16, 16, 32, 32, 48, 48, 64, 64; expand 4x the squeeze, twice), classifier Conv 1x1 +
    Relu (the Dropout before it is an identity at inference and left out),
    GlobalAveragePool, Flatten -> ``logits`` [batch, classes].  Every Conv has a bias;
    ``width`` scales every channel count but the classes' (multiples of 8, at least 8)."""
    g = _Graph(seed)

    def ch(c):
        return _channels(c, width, 8)

    def pool(x):
        return g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)

    cin = ch(64)
    h = pool(_conv_relu(g, "input", 3, cin, 3, stride=2))
    for i, squeeze in enumerate((16, 16, 32, 32, 48, 48, 64, 64)):
        if i in (2, 4):
            h = pool(h)
        h = _fire(g, h, cin, ch(squeeze), ch(4 * squeeze))
        cin = 2 * ch(4 * squeeze)
    h = _conv_relu(g, h, cin, classes, 1)
    g.op("Flatten", [g.op("GlobalAveragePool", [h])], out="logits", axis=1)
    return g.model("squeezenet", [("input", F32, [batch, 3, image, image])],
                   [("logits", F32, [batch, classes])])


def _shuffle_unit(g: _Graph, x: str, cin: int, cout: int, stride: int, side: int) -> str:
    """ShuffleNetV2's InvertedResidual on x [N, cin, side, side] -> [N, cout, ...]: stride
    2, branch1 (depthwise 3x3/2 + BN, 1x1 + BN + Relu) and branch2 (1x1 + BN + Relu,
    depthwise 3x3/2 + BN, 1x1 + BN + Relu) of the whole input; stride 1, the input Split
    in halves, branch2 of the second.  Concat, then the channel shuffle (2 groups):
    Reshape [N, 2, C/2, H, W], Transpose (0, 2, 1, 3, 4), Reshape [N, C, H, W]."""
    half = cout // 2
    if stride > 1:
        b1 = _conv_bn(g, x, cin, cin, 3, stride, group=cin, relu=False)
        b1 = _conv_bn(g, b1, cin, half, 1)
        b2_in, n_in = x, cin
    else:
        b1, b2_in = g.op("Split", [x, g.const("split", [half, half], np.int64)], n_out=2,
                         axis=1)
        n_in = half
    b2 = _conv_bn(g, b2_in, n_in, half, 1)
    b2 = _conv_bn(g, b2, half, half, 3, stride, group=half, relu=False)
    b2 = _conv_bn(g, b2, half, half, 1)
    h = g.op("Concat", [b1, b2], axis=1)
    side = -(-side // stride)
    h = g.op("Reshape", [h, g.const("shape", [0, 2, half, side, side], np.int64)])
    h = g.op("Transpose", [h], perm=[0, 2, 1, 3, 4])
    return g.op("Reshape", [h, g.const("shape", [0, cout, side, side], np.int64)])


def shufflenet_v2(batch=1, image=224, classes=1000, width=1.0, seed=0) -> onnx.ModelProto:
    """torchvision's ShuffleNetV2 x1.0: ``input`` [batch, 3, image, image] -> Conv 3x3/2
    (24) + BN + Relu, MaxPool 3/2 pad 1, stages of 4, 8 and 4 units (116, 232, 464
    channels; the first unit of each stride 2), Conv 1x1 (1024) + BN + Relu,
    GlobalAveragePool (torchvision's mean over H and W), Flatten, Gemm -> ``logits``
    [batch, classes].  ``width`` scales every channel count but the classes' (multiples
    of 4, at least 8)."""
    g = _Graph(seed)

    def ch(c):
        return _channels(c, width, 4)

    cin = ch(24)
    h = _conv_bn(g, "input", 3, cin, 3, stride=2)
    h = g.op("MaxPool", [h], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    side = -(-image // 4)  # two stride-2 windows with pad 1: ceil(ceil(image / 2) / 2)
    for repeats, cout in zip((4, 8, 4), (116, 232, 464)):
        cout = ch(cout)
        for unit in range(repeats):
            stride = 1 if unit else 2
            h = _shuffle_unit(g, h, cin, cout, stride, side)
            side, cin = -(-side // stride), cout
    h = _conv_bn(g, h, cin, ch(1024), 1)
    h = g.op("Flatten", [g.op("GlobalAveragePool", [h])], axis=1)
    g.op("Gemm", [h, g.weight("fc_w", (classes, ch(1024)), ch(1024)),
                  g.const("fc_b", np.zeros(classes))], out="logits", transB=1)
    return g.model("shufflenet_v2", [("input", F32, [batch, 3, image, image])],
                   [("logits", F32, [batch, classes])])


# --- transformers ----------------------------------------------------------------------

def _linear(g: _Graph, x: str, n_in: int, n_out: int, gain: float = 1.0) -> str:
    """MatMul by an [n_in, n_out] weight, then Add a bias (how exporters write Linear on
    3-d inputs)."""
    w = g.weight("weight", (n_in, n_out), n_in, gain)
    return g.op("Add", [g.op("MatMul", [x, w]), g.const("bias", g.rng.normal(0, 0.02, n_out))])


def _layernorm(g: _Graph, x: str, d: int, eps: float) -> str:
    return g.op("LayerNormalization", [x, g.const("ln_scale", 1 + g.rng.normal(0, 0.1, d)),
                                       g.const("ln_bias", g.rng.normal(0, 0.1, d))],
                axis=-1, epsilon=eps)


def _encoder_layer(g: _Graph, x: str, mask: str | None, d: int, heads: int, ffn: int,
                   where_mask: bool = False, eps: float = 1e-5) -> str:
    """Post-LN encoder layer on x [b, s, d].  ``mask``: an additive float [b, 1, 1, s]
    (Add to the scores), or with ``where_mask`` a bool [b, 1, 1, s] (Where(mask, scores,
    float32 min)); None: no mask."""
    dh = d // heads
    split = g.const("split_heads", [0, 0, heads, dh], np.int64)  # 0: copy b and s
    q, k, v = (g.op("Reshape", [_linear(g, x, d, d), split]) for _ in range(3))
    q = g.op("Transpose", [q], perm=[0, 2, 1, 3])                  # b, h, s, dh
    k = g.op("Transpose", [k], perm=[0, 2, 3, 1])                  # b, h, dh, s
    v = g.op("Transpose", [v], perm=[0, 2, 1, 3])
    scores = g.op("Div", [g.op("MatMul", [q, k]), g.literal(math.sqrt(dh))])
    if mask is not None and where_mask:
        scores = g.op("Where", [mask, scores, g.literal(np.finfo(np.float32).min)])
    elif mask is not None:
        scores = g.op("Add", [scores, mask])
    ctx = g.op("MatMul", [g.op("Softmax", [scores], axis=-1), v])  # b, h, s, dh
    ctx = g.op("Reshape", [g.op("Transpose", [ctx], perm=[0, 2, 1, 3]),
                           g.const("merge_heads", [0, 0, d], np.int64)])
    h = _layernorm(g, g.op("Add", [_linear(g, ctx, d, d), x]), d, eps)
    u = _linear(g, h, d, ffn)
    erf = g.op("Erf", [g.op("Div", [u, g.literal(SQRT2)])])        # Gelu, as BERT exports
    gelu = g.op("Mul", [g.op("Mul", [u, g.op("Add", [erf, g.literal(1.0)])]), g.literal(0.5)])
    return _layernorm(g, g.op("Add", [_linear(g, gelu, ffn, d), h]), d, eps)


def transformer_layer(batch=1, seq=128, d_model=256, heads=4, ffn=1024, mask="add",
                      seed=0) -> onnx.ModelProto:
    """``input`` [batch, seq, d_model] -> one post-LN encoder layer -> ``output``.
    ``mask="add"``: a float input ``mask`` [batch, 1, 1, seq] added to the scores (0 or
    -10000); ``"where"``: a bool input ``mask`` [batch, seq], True = attend, unsqueezed
    and applied with Where; None: no mask."""
    g = _Graph(seed)
    inputs = [("input", F32, [batch, seq, d_model])]
    m = None
    if mask == "add":
        inputs.append(("mask", F32, [batch, 1, 1, seq]))
        m = "mask"
    elif mask == "where":
        inputs.append(("mask", BOOL, [batch, seq]))
        m = g.op("Unsqueeze", ["mask", g.const("axes", [1, 2], np.int64)])
    elif mask is not None:
        raise ValueError(f"mask must be 'add', 'where' or None, not {mask!r}")
    _encoder_layer(g, "input", m, d_model, heads, ffn, where_mask=mask == "where")
    g.nodes[-1].output[0] = "output"
    return g.model("transformer_layer", inputs, [("output", F32, [batch, seq, d_model])])


def bert_encoder(batch=1, seq=128, vocab=1000, d_model=256, heads=4, ffn=1024, layers=2,
                 seed=0) -> onnx.ModelProto:
    """BERT's encoder: ``input_ids`` and ``attention_mask`` (int64 [batch, seq], 1 =
    attend) -> Gather word embeddings + Gather position embeddings at Range(0, seq) ->
    LayerNormalization -> ``layers`` encoder layers -> ``last_hidden_state``.  The mask
    becomes (1 - Cast(Unsqueeze(mask))) * -10000, added to every layer's scores."""
    g = _Graph(seed)
    words = g.op("Gather", [g.const("word_embeddings", g.rng.standard_normal((vocab, d_model))),
                            "input_ids"], axis=0)
    i64 = np.int64
    pos = g.op("Range", [g.literal(0, i64), g.literal(seq, i64), g.literal(1, i64)])
    table = g.const("position_embeddings", g.rng.standard_normal((max(seq, 512), d_model)))
    h = g.op("Add", [words, g.op("Gather", [table, pos], axis=0)])
    h = _layernorm(g, h, d_model, 1e-12)
    m = g.op("Unsqueeze", ["attention_mask", g.const("axes", [1, 2], i64)])
    m = g.op("Cast", [m], to=F32)
    m = g.op("Mul", [g.op("Sub", [g.literal(1.0), m]), g.literal(-10000.0)])
    for _ in range(layers):
        h = _encoder_layer(g, h, m, d_model, heads, ffn, eps=1e-12)
    g.nodes[-1].output[0] = "last_hidden_state"
    ids = [batch, seq]
    return g.model("bert_encoder", [("input_ids", I64, ids), ("attention_mask", I64, ids)],
                   [("last_hidden_state", F32, [batch, seq, d_model])])


# --- recurrent networks ----------------------------------------------------------------

def _rnn(op: str, gates: int, seq, batch, input, hidden, seed, **attrs) -> onnx.ModelProto:
    g = _Graph(seed)
    ins = ["X", g.weight("W", (1, gates * hidden, input), input),
           g.weight("R", (1, gates * hidden, hidden), hidden),
           g.const("B", g.rng.normal(0, 0.1, (1, 2 * gates * hidden))), "", "initial_h"]
    inputs = [("X", F32, [seq, batch, input]), ("initial_h", F32, [1, batch, hidden])]
    if op == "LSTM":
        ins.append("initial_c")
        inputs.append(("initial_c", F32, [1, batch, hidden]))
    g.op(op, ins, out=["Y", "Y_h"], hidden_size=hidden, direction="forward", **attrs)
    return g.model(op.lower(), inputs, [("Y", F32, [seq, 1, batch, hidden]),
                                        ("Y_h", F32, [1, batch, hidden])])


def lstm_model(seq=8, batch=2, input=16, hidden=32, seed=0) -> onnx.ModelProto:
    """One forward LSTM node with bias and initial states: inputs ``X`` [seq, batch,
    input], ``initial_h``, ``initial_c`` [1, batch, hidden]; outputs ``Y`` [seq, 1,
    batch, hidden] and ``Y_h`` [1, batch, hidden] (gates i, o, f, c as ONNX orders them)."""
    return _rnn("LSTM", 4, seq, batch, input, hidden, seed)


def gru_model(seq=8, batch=2, input=16, hidden=32, linear_before_reset=1,
              seed=0) -> onnx.ModelProto:
    """One forward GRU node, like ``lstm_model`` without ``initial_c``;
    ``linear_before_reset=1`` as PyTorch exports ``nn.GRU``."""
    return _rnn("GRU", 3, seq, batch, input, hidden, seed,
                linear_before_reset=linear_before_reset)


MODELS = {"mlp": mlp, "mlp_gemm": mlp_gemm, "small_cnn": small_cnn,
          "resnet_block": resnet_block, "resnet18": resnet18, "squeezenet": squeezenet,
          "shufflenet_v2": shufflenet_v2,
          "transformer_layer": transformer_layer, "bert_encoder": bert_encoder,
          "lstm_model": lstm_model, "gru_model": gru_model}


# --- inputs ----------------------------------------------------------------------------

def example_inputs(model: onnx.ModelProto, seed: int = 0, batch: int | None = None) -> dict:
    """Feeds for ``model``'s graph inputs: float ~N(0, 1); integer indices of a Gather in
    range of the gathered initializer (token ids < vocab); inputs named ``*mask*`` mask
    a random tail of each row's last axis (float: 0 or -10000, int: 1 or 0, bool: True
    or False).  Symbolic dims become ``batch`` (default 1)."""
    rng = np.random.default_rng(seed)
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    ranges = {n.input[1]: inits[n.input[0]].dims[0] for n in graph.node
              if n.op_type == "Gather" and n.input[0] in inits and len(n.input) > 1}
    feeds = {}
    for vi in graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else (batch or 1)
                 for d in tt.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if "mask" in vi.name and len(shape) >= 2:  # [batch, ..., seq]
            n, length = shape[0], shape[-1]
            keep = np.arange(length) < rng.integers(length // 2 + 1, length + 1, (n, 1))
            keep = keep.reshape([n] + [1] * (len(shape) - 2) + [length])
            if dtype.kind == "f":
                feeds[vi.name] = np.where(keep, 0.0, -10000.0).astype(dtype)
            else:
                feeds[vi.name] = keep.astype(dtype)
        elif dtype == np.bool_:
            feeds[vi.name] = rng.random(shape) < 0.5
        elif dtype.kind in "iu":
            feeds[vi.name] = rng.integers(0, ranges.get(vi.name, 10), shape).astype(dtype)
        else:
            feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
    return feeds
