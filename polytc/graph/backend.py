"""polytc as an ``onnx.backend.base.Backend``, so ONNX's own backend tests run on it."""
from __future__ import annotations

import numpy as np
from onnx.backend.base import Backend, BackendRep, Device, DeviceType


class PolytcRep(BackendRep):
    def __init__(self, session):
        self.session = session

    def run(self, inputs, **kwargs):
        if isinstance(inputs, dict):
            feed = inputs
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            feed = {a.name: x for a, x in zip(self.session.get_inputs(), inputs)}
        return tuple(self.session.run(None, feed))


class PolytcBackend(Backend):
    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs):
        from .. import onnx as ponnx

        super().prepare(model, device, **kwargs)
        return PolytcRep(ponnx.compile(model, **kwargs))

    @classmethod
    def run_model(cls, model, inputs, device: str = "CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return Device(device).type == DeviceType.CPU
