"""GridSample (ops/sample.py) against onnxruntime: every mode, padding mode and corner
alignment, on grids that reach past the image."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from polytc.diagnostics import ModelError, UnsupportedError
from polytc.graph.ir import Node
from polytc.graph.ops import Ref, lower

from .test_onnx_movement_ops import _model, run_model


def _case(xshape, gshape, seed=0, **attrs):
    r = np.random.default_rng(seed)
    x = r.standard_normal(xshape).astype(np.float32)
    grid = (r.uniform(-1.3, 1.3, gshape)).astype(np.float32)
    grid.reshape(-1)[:4] = [-1, 1, 0, 1.25]  # the corners, the centre, past the edge
    n = helper.make_node("GridSample", ["x", "g"], ["y"], **attrs)
    return _model([n], {"x": x, "g": grid}, ["y"], opset=20), {"x": x, "g": grid}


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("pad", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample(mode, pad, align):
    m, feeds = _case((2, 3, 5, 7), (2, 4, 6, 2), mode=mode, padding_mode=pad,
                     align_corners=align)
    run_model(m, feeds, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_grid_sample_volumetric(mode):
    m, feeds = _case((1, 2, 3, 4, 5), (1, 2, 3, 4, 3), mode=mode, padding_mode="border")
    run_model(m, feeds, rtol=1e-4, atol=1e-4, ort=False)


@pytest.mark.parametrize("gshape,attrs,err,match", [
    ((1, 2, 2, 3), {}, ModelError, r"grid of shape \[1, 2, 2, 3\] for an input of shape "
                                   r"\[1, 1, 4, 4\]: it must be \(N, out..., 2\)"),
    ((1, 2, 2, 2), {"mode": "lanczos"}, UnsupportedError, "mode 'lanczos' is not supported"),
    ((1, 2, 2, 2), {"padding_mode": "wrap"}, UnsupportedError,
     "padding_mode 'wrap' is not supported")])
def test_grid_sample_errors(gshape, attrs, err, match):
    """Lowered straight away: onnx's checker rejects these models first."""
    refs = [Ref("x", (1, 1, 4, 4), np.float32), Ref("g", gshape, np.float32)]
    node = Node("GridSample", "gs", ("x", "g"), ("y",), tuple(sorted(attrs.items())))
    with pytest.raises(err, match=match):
        lower(node, refs, lambda v: v or "tmp")
