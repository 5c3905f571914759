"""polytc as an ``onnx.backend.base.Backend``, so ONNX's own backend tests run on it.

>>> rep = PolytcBackend.prepare(model)          # compiles
>>> outputs = rep.run([x, y])                    # a list in graph-input order, or a dict

Inputs that decide shapes (Reshape's ``shape``, Slice's ``starts``, the ``axes`` of the
reductions, Pad's ``pads``, an If's condition ...), which ONNX's node tests feed as graph
inputs where real models hold initialisers, need nothing of their own here: the session
runs such a model in stages and compiles the rest of it for each set of values it meets
(``graph/staged.py``).
"""
from __future__ import annotations

import numpy as np
from onnx.backend.base import Backend, BackendRep, Device, DeviceType

from ..diagnostics import ModelError, UnsupportedError


class PolytcRep(BackendRep):
    """A prepared model: a ``polytc.onnx.Session``."""

    def __init__(self, session):
        self.session = session
        self.input_names = [a.name for a in session.get_inputs()]

    def run(self, inputs, **kwargs):
        if isinstance(inputs, dict):
            feed = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            if isinstance(inputs, (str, bytes)) or not hasattr(inputs, "__iter__"):
                raise ModelError(f"run takes a list of arrays (in the order of the graph's "
                                 f"inputs) or a dict of input name -> array, not "
                                 f"{type(inputs).__name__}",
                                 hint="inputs: " + ", ".join(self.input_names))
            inputs = list(inputs)
            if len(inputs) > len(self.input_names):
                raise ModelError(f"{len(inputs)} inputs given; the model takes "
                                 f"{len(self.input_names)}: {', '.join(self.input_names)}")
            feed = dict(zip(self.input_names, inputs))
        return tuple(self.session.run(None, feed))


class PolytcBackend(Backend):
    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs):
        from . import session as ponnx

        if not cls.supports_device(device):
            raise UnsupportedError(f"the polytc backend runs models on the CPU, not on "
                                   f"device {device!r}",
                                   hint="device='CPU' (for an accelerator: "
                                   "polytc.onnx.compile(model, target='cuda'))")
        # (no super().prepare: polytc's importer runs onnx's checker and reports a
        # ModelError, where onnx's backend base would raise its ValidationError)
        return PolytcRep(ponnx.compile(model, **kwargs))

    @classmethod
    def run_model(cls, model, inputs, device: str = "CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """Whether ``device`` (``"CPU"``, ``"CUDA:1"``, as onnx's ``Device`` parses it)
        is one the backend runs on: the CPU; False for anything else."""
        if not isinstance(device, str):
            return False
        try:
            return Device(device).type == DeviceType.CPU
        except (AttributeError, ValueError):  # not a device onnx knows: 'GPU', 'CPU:x'
            return False
