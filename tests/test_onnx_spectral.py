"""DFT (ops/spectral.py) against numpy's float64 FFT."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from polytc import onnx as ponnx
from polytc.diagnostics import UnsupportedError

from .test_onnx_movement_ops import _model


def _run(x, opset=20, dft_length=None, axis=1, **attrs):
    inputs, consts = ["x"], {}
    if dft_length is not None:
        consts["n"] = np.array(dft_length, np.int64)
    inputs.append("n" if dft_length is not None else "")
    consts["a"] = np.array(axis, np.int64)
    inputs.append("a")
    m = _model([helper.make_node("DFT", inputs, ["y"], **attrs)], {"x": x}, ["y"], consts,
               opset=opset)
    return ponnx.compile(m).run(None, {"x": x})[0]


def _complex(y):
    return y[..., 0] + 1j * y[..., 1]


@pytest.mark.parametrize("n", [None, 6, 13])
@pytest.mark.parametrize("axis", [1, 2])
def test_dft(n, axis):
    """Real and complex signals, truncated (6) and zero-padded (13) to dft_length."""
    r = np.random.default_rng(0)
    x = r.standard_normal((2, 9, 8, 2)).astype(np.float32)
    y = _run(x, dft_length=n, axis=axis)
    want = np.fft.fft(_complex(x.astype(np.float64)), n=n, axis=axis)
    np.testing.assert_allclose(_complex(y), want, rtol=1e-5, atol=1e-4)
    real = x[..., :1]
    y = _run(real, dft_length=n, axis=axis, onesided=1)
    want = np.fft.rfft(real[..., 0].astype(np.float64), n=n, axis=axis)
    np.testing.assert_allclose(_complex(y), want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("n", [None, 15])
def test_inverse_dft(n):
    r = np.random.default_rng(1)
    x = r.standard_normal((3, 8, 2)).astype(np.float32)
    y = _run(x, dft_length=n, inverse=1)
    want = np.fft.ifft(_complex(x.astype(np.float64)), n=n, axis=1)
    np.testing.assert_allclose(_complex(y), want, rtol=1e-5, atol=1e-5)
    y = _run(x, dft_length=n, inverse=1, onesided=1)  # a real signal from one side
    want = np.fft.irfft(_complex(x.astype(np.float64)), n=n, axis=1)
    np.testing.assert_allclose(y[..., 0], want, rtol=1e-5, atol=1e-5)


def test_dft_without_an_axis_is_refused():
    x = np.zeros((1, 4, 1), np.float32)
    m = _model([helper.make_node("DFT", ["x"], ["y"])], {"x": x}, ["y"], opset=17)
    with pytest.raises(UnsupportedError, match="DFT without an axis"):
        ponnx.compile(m).run(None, {"x": x})


@pytest.mark.parametrize("window", [False, True])
def test_stft(window):
    """Frames of 16 samples every 8, one-sided, against numpy's rfft of each frame."""
    r = np.random.default_rng(2)
    x = r.standard_normal((2, 64, 1)).astype(np.float32)
    w = np.hanning(16).astype(np.float32)
    inputs = ["x", "step"] + (["w"] if window else ["", "n"])
    consts = {"step": np.array(8, np.int64)}
    consts.update({"w": w} if window else {"n": np.array(16, np.int64)})
    m = _model([helper.make_node("STFT", inputs, ["y"])], {"x": x}, ["y"], consts, opset=17)
    y = ponnx.compile(m).run(None, {"x": x})[0]
    frames = np.stack([x[:, f * 8:f * 8 + 16, 0] for f in range(7)], 1).astype(np.float64)
    want = np.fft.rfft(frames * (w if window else 1), axis=-1)
    assert y.shape == (2, 7, 9, 2)
    np.testing.assert_allclose(_complex(y), want, rtol=1e-5, atol=1e-4)
