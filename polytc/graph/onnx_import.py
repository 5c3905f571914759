"""ONNX -> ``Graph``, through the ``onnx`` package: its loader, checker, version converter,
function inliner and shape inference (symbolic dimensions stay names).  Every failure is a
``ModelError`` that says what is wrong and where."""
from __future__ import annotations

import os

import numpy as np
import onnx
import onnx.inliner  # (a submodule that `import onnx` leaves out)
from onnx import external_data_helper, helper, numpy_helper

from ..diagnostics import ModelError
from . import expand
from .ir import Graph, Node, TensorType

MIN_OPSET = 13
#: the domain of polytc's own forms of ONNX ops (int32 ``Conv``, ``QuantizeLinear`` to
#: float, ...) in an optimised model that polytc wrote (``save.py``): read as the ops
INTERNAL_DOMAIN = "ai.polytc"


def load(model, where: str = "<model>", external: list | None = None) -> onnx.ModelProto:
    """A ``ModelProto`` from a path, bytes or a ``ModelProto``.  ``external``: a list
    that gets the paths of the files a model file's external tensors were read from."""
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (str, os.PathLike)):
        where = os.fspath(model)
        if not os.path.isfile(where):
            raise ModelError(f"{where}: no such model file")
        try:
            m = onnx.load(where, load_external_data=False)
            found = {os.path.join(os.path.dirname(where), e.value)
                     for t in _tensors(m.graph) if external_data_helper.uses_external_data(t)
                     for e in t.external_data if e.key == "location"}
            if found:
                external_data_helper.load_external_data_for_model(m, os.path.dirname(where))
            if external is not None:
                external.extend(sorted(found))
            return m
        except Exception as e:  # noqa: BLE001 - protobuf and I/O errors alike
            raise ModelError(f"{where}: not a readable ONNX model (truncated or malformed: "
                             f"{_first_line(e)})") from None
    if isinstance(model, (bytes, bytearray, memoryview)):
        try:
            return onnx.load_from_string(bytes(model))
        except Exception as e:  # noqa: BLE001
            raise ModelError(f"{where}: the bytes are not an ONNX model (truncated or "
                             f"malformed: {_first_line(e)})") from None
    raise ModelError(f"polytc.onnx.compile takes a path, bytes or an onnx.ModelProto, "
                     f"not {type(model).__name__}")


def _tensors(g: onnx.GraphProto):
    """Every tensor of a graph: initialisers and attributes, subgraphs included."""
    yield from g.initializer
    for n in g.node:
        for a in n.attribute:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
            if a.HasField("g"):
                yield from _tensors(a.g)
            for sub in a.graphs:
                yield from _tensors(sub)


def _first_line(e, limit: int = 300) -> str:
    """The exception's message on one line (onnx's checker spreads one over several)."""
    text = " ".join(" ".join(str(e).split()).split(" ==> "))
    if len(text) > limit:
        text = text[:limit - 3] + "..."
    return text or type(e).__name__


def opset_of(model: onnx.ModelProto) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return o.version
    return 1


def prepare(model: onnx.ModelProto, where: str, own: bool = False) -> onnx.ModelProto:
    """Check, convert an old opset up to ``MIN_OPSET``, inline functions, infer shapes.
    ``own``: ``model`` is polytc's (loaded from a path or bytes), so the inferred types
    go into it rather than into a copy (ResNet-18's 45 MB: 17 ms)."""
    newest = onnx.defs.onnx_opset_version()
    opset = opset_of(model)
    if opset > newest:
        raise ModelError(f"{where}: opset {opset} is newer than this onnx package knows "
                         f"({newest})", hint="upgrade the onnx package, or export the model "
                         "for an older opset")
    if not model.graph.node and not model.graph.output:
        raise ModelError(f"{where}: the model has an empty graph")
    if opset >= MIN_OPSET and expand.needs_expansion(model, opset, typed=False):
        model, own = expand.expand_functions(model, opset, where, typed=False), True
        return prepare(model, where, own)
    if opset >= MIN_OPSET and not model.functions:
        return _expanded(_checked_and_inferred(model, where, own), where)
    _check(model, where)
    if opset < MIN_OPSET:
        try:
            model = onnx.version_converter.convert_version(model, MIN_OPSET)
        except Exception as e:  # noqa: BLE001
            raise ModelError(f"{where}: opset {opset} is older than {MIN_OPSET} and the "
                             f"onnx version converter cannot upgrade it ({_first_line(e)})",
                             hint="re-export the model with opset 13 or later") from None
    if model.functions:
        model = onnx.inliner.inline_local_functions(model)
    model = _expanded(_infer(model, where), where)
    return _resize10(model) if opset < 11 else model


def _resize10(model: onnx.ModelProto) -> onnx.ModelProto:
    """The Resize nodes of a model converted from before opset 11, which were Upsample or
    Resize-10, back to Upsample (with its scales): onnx's converter writes Resize-13 with
    that version's default coordinates (half_pixel), where the old ops meant asymmetric
    ones and their own nearest rounding (ops/resize.py).  After shape inference: no
    opset of 13 or later has Upsample."""
    for n in model.graph.node:
        if n.op_type == "Resize" and n.domain in ("", "ai.onnx") and len(n.input) > 2 and \
                n.input[2] and (len(n.input) < 4 or not n.input[3]):
            scales = n.input[2]
            n.op_type = "Upsample"
            del n.input[1:]
            n.input.append(scales)
            keep = [a for a in n.attribute if a.name == "mode"]
            del n.attribute[:]
            n.attribute.extend(keep)
    return model


def _expanded(model: onnx.ModelProto, where: str) -> onnx.ModelProto:
    """``model`` with every op polytc has no lowering for but ONNX defines as a function
    written out in its body's ops (graph/expand.py), shapes inferred again."""
    opset = opset_of(model)
    for _ in range(expand.MAX_DEPTH):
        if not expand.needs_expansion(model, opset):
            return model
        model = _checked_and_inferred(expand.expand_functions(model, opset, where), where,
                                      own=True)
    return model


#: initialisers of at least this many floats reach the checker and shape inference as
#: typed graph inputs: both serialise the model they get, weights and all
SKELETON_MIN = 1024


def _checked_and_inferred(model: onnx.ModelProto, where: str,
                          own: bool = False) -> onnx.ModelProto:
    """``model`` checked and its shapes inferred, as ``prepare`` does, on a skeleton whose
    large float initialisers (weights: no shape depends on their values) are typed graph
    inputs instead: the checker and shape inference each serialise the model they get,
    ResNet-18's 45 MB of weights 0.11 s a time.  The inferred types are copied back."""
    g = model.graph
    heavy = [t for t in g.initializer if t.data_type in _FLOATS and
             int(np.prod(t.dims, dtype=np.int64)) >= SKELETON_MIN]
    if not heavy:
        return _infer(_check(model, where), where)
    skeleton = onnx.ModelProto(ir_version=model.ir_version, opset_import=model.opset_import,
                               producer_name=model.producer_name)
    names = {t.name for t in heavy}
    listed = {i.name for i in g.input}
    sg = skeleton.graph
    sg.name = g.name
    sg.node.extend(g.node)
    sg.input.extend(g.input)
    sg.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                    for t in heavy if t.name not in listed)
    sg.output.extend(g.output)
    sg.value_info.extend(g.value_info)
    sg.initializer.extend(t for t in g.initializer if t.name not in names)
    sg.sparse_initializer.extend(g.sparse_initializer)
    inferred = _infer(_check(skeleton, where), where)
    out = model
    if not own:  # the caller's model stays as it was
        out = onnx.ModelProto()
        out.CopyFrom(model)
    del out.graph.value_info[:]
    out.graph.value_info.extend(inferred.graph.value_info)
    del out.graph.output[:]
    out.graph.output.extend(inferred.graph.output)
    return out


_FLOATS = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
           onnx.TensorProto.BFLOAT16}


def _check(model: onnx.ModelProto, where: str) -> onnx.ModelProto:
    try:
        onnx.checker.check_model(model)
    except Exception as e:  # noqa: BLE001 - ValidationError and friends
        raise ModelError(f"{where}: the ONNX checker rejects the model: {_first_line(e)}") \
            from None
    return model


def _infer(model: onnx.ModelProto, where: str) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except Exception as e:  # noqa: BLE001 - InferenceError
        raise ModelError(f"{where}: shape inference fails: {_first_line(e)}") from None


def _type(t, name, where) -> TensorType | None:
    if not t.HasField("tensor_type"):
        raise ModelError(f"{where}: value '{name}' is not a tensor "
                         f"({t.WhichOneof('value')}); polytc handles tensors only")
    tt = t.tensor_type
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
    except Exception:  # noqa: BLE001 - undefined element type
        return None
    if not tt.HasField("shape"):
        return TensorType(dtype, None)
    dims = tuple(d.dim_value if d.HasField("dim_value") else
                 (d.dim_param or None) for d in tt.shape.dim)
    return TensorType(dtype, dims)


def _attr(a):
    v = helper.get_attribute_value(a)
    if isinstance(v, onnx.TensorProto):
        return numpy_helper.to_array(v)
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, list):
        return tuple(x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in v)
    if isinstance(v, onnx.GraphProto):
        return v  # subgraphs (If, Loop, Scan): no op of polytc takes them
    return v


def nodes_of(g: onnx.GraphProto, prefix: str = "") -> list:
    """The ``Node``s of ``g``, each named (``prefix`` + its name, or its op and position)
    uniquely."""
    nodes, seen = [], set()
    for k, n in enumerate(g.node):
        name = prefix + (n.name or f"{n.op_type}_{k}")
        if name in seen:
            name = f"{name}_{k}"
        seen.add(name)
        attrs = tuple(sorted((a.name, _attr(a)) for a in n.attribute))
        domain = "" if n.domain == INTERNAL_DOMAIN else n.domain
        nodes.append(Node(n.op_type, name, tuple(n.input), tuple(n.output), attrs, domain))
    return nodes


def to_graph(model: onnx.ModelProto, where: str = "<model>") -> Graph:
    """The ``Graph`` of a loaded model (``prepare`` it first)."""
    g = model.graph
    constants = {}
    for init in g.initializer:
        try:
            constants[init.name] = numpy_helper.to_array(init)
        except Exception as e:  # noqa: BLE001 - external data missing, bad raw data
            raise ModelError(f"{where}: initialiser '{init.name}' cannot be read "
                             f"({_first_line(e)})") from None
    for sp in g.sparse_initializer:
        raise ModelError(f"{where}: sparse initialiser '{sp.values.name}' is not supported")
    types = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        t = _type(vi.type, vi.name, where)
        if t is not None:
            types[vi.name] = t
    nodes = nodes_of(g)
    inputs = tuple(i.name for i in g.input if i.name not in constants)
    for i in g.input:
        if i.name in inputs and i.name not in types:
            raise ModelError(f"{where}: input '{i.name}' has element type "
                             f"{i.type.tensor_type.elem_type}, which is not a tensor type "
                             "onnx knows")
    outputs = tuple(o.name for o in g.output)
    return Graph(g.name or "model", inputs, outputs, tuple(nodes), types, constants,
                 opset_of(model))


def import_model(model, where: str | None = None, external: list | None = None) -> Graph:
    """Load, check and convert a model: the whole importer (``external``: see ``load``)."""
    where = where or (os.fspath(model) if isinstance(model, (str, os.PathLike)) else "<model>")
    own = not isinstance(model, onnx.ModelProto)
    return to_graph(prepare(load(model, where, external), where, own), where)
