"""What the accelerator targets share: kernels from the GPU emitter in the target's
dialect, checked by the device compiler, loaded by the target's runtime module."""
from __future__ import annotations

from ..codegen_c.gpu import GpuEmitter
from ..runtime.compiled import build_meta
from ..tiling.gpu import Launch
from .base import Backend


class Accelerator(Backend):
    grid = True
    device_arrays = True
    compiler = "device_compile"
    dialect = None  # the GPU emitter's dialect (codegen_opencl, codegen_cuda)
    runtime = None  # the runtime module (runtime/opencl.py, runtime/cuda.py)

    def device(self):
        return self.runtime.device()

    def cache_facts(self) -> dict:
        return {"device": self.runtime.device_key()}

    def generate(self, b):
        em = GpuEmitter(b.scop, self.dialect, list(b.launches), b.options.vectorize)
        code = em.source(b.ast)
        # a kernel whose statements have no instance for these sizes (M = 0) has no code
        launches = tuple(l for l in b.launches if l.name in em.emitted)
        return b.stage(self.name, code, code=code, launches=launches, sites=tuple(em.sites))

    def compile(self, b):
        self.runtime.compile_check(b.code)
        return {"kernel.src": b.code.encode()}, build_meta(
            b, launches=[Launch.to_json(l) for l in b.launches],
            temp_fill=[b.fills.get(t.name) for t in b.program.temporaries])

    def load(self, program, env, options, entry, build=None):
        return self.runtime.Compiled(program, env, options, entry["meta"], build)
