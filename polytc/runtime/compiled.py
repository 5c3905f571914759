"""What a program compiled for one set of sizes shows and shares on every target: its
stages, its run-time check sites, its repr and HTML view, and how a fault reads."""
from __future__ import annotations

from ..diagnostics import KernelRuntimeError, PolytcError
from ..display import wrap


class Specialised:
    """The base of ``native.CompiledKernel`` (C) and ``accel.AcceleratorKernel``."""

    target = "?"

    def _common(self, program, env, options, meta, build):
        self.program, self.env, self.options = program, env, options
        self.stages: dict = wrap(meta["stages"])  # text that shows as HTML
        self.sites: list = meta["sites"]
        self.timings: dict = meta.get("timings", {})
        self.out_shapes = [tuple(s) for s in meta["out_shapes"]]
        self.out_dtypes = [t.dtype.np_dtype for t in program.outputs]
        #: per output, what every element holds before the kernel runs (None: anything;
        #: see ``compiler.passes.p_initial_values``)
        self.out_fill = meta["out_fill"]
        self._build = build  # the pipeline's Build when compiled in this process

    @property
    def code(self) -> str:
        return self.stages[self.target]

    @property
    def schedule(self) -> str:
        return self.stages["schedule"]

    def __repr__(self):
        sizes = ", ".join(f"{k}={v}" for k, v in self.env.items())
        return f"<CompiledKernel {self.program.name} [{sizes}] target={self.target}>"

    def _repr_html_(self) -> str:
        from ..display import stages_html

        sizes = ", ".join(f"{k}={v}" for k, v in self.env.items())
        return stages_html(self.stages, f"{self.program.name} [{sizes}] target={self.target}")

    def _fail(self, rc):
        if rc < 0 or rc > len(self.sites):
            raise PolytcError(f"{self.program.name}: the kernel failed (code {rc})")
        raise KernelRuntimeError(self.sites[rc - 1])


def build_meta(b, **extra) -> dict:
    """The JSON-able description of a build that the disk cache keeps beside the
    binary: what a ``Specialised`` needs to load and run without the pipeline."""
    import json

    program, env = b.program, b.env
    sites = [f"{span.location()}: {what} ({program.name}, sizes {dict(env)})\n{span.quote()}"
             if span is not None else what for span, what in b.sites]
    return {"stages": dict(b.stages), "sites": sites, "timings": dict(b.timings),
            "out_fill": [b.fills.get(t.name) for t in program.outputs],
            "out_shapes": [t.extents(env) for t in program.outputs],
            "options": json.loads(b.options.to_json()), **extra}
