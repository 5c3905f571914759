"""Every call the tuner makes into the compiler and the runtime (``polytc.kernel``,
``polytc.backends``, ``polytc.compiler.pipeline``), gathered here."""
from __future__ import annotations

from .. import backends
from ..compiler import pipeline
from ..diagnostics import PolytcError, Source, user_boundary
from ..kernel import Kernel
from ..lang.parser import parse
from ..lang.sema import check
from ..options import Options


# --- kernels (the user's side) ---------------------------------------------------------
def is_kernel(obj) -> bool:
    """Whether ``obj`` is a polytc ``Kernel`` (what ``polytc.tc`` returns)."""
    return isinstance(obj, Kernel)


def explicit_options(kernel):
    """The options ``kernel`` was given explicitly, else ``None`` (it would take the
    tuning cache's)."""
    return kernel.options if kernel._explicit else None


def symbolic_sizes(kernel, env: dict) -> tuple:
    """The sizes of ``env`` that ``kernel`` keeps symbolic (its ``dynamic`` policy, the
    sizes an "auto" kernel has seen vary, its options' ``symbolic``); none on a target
    without symbolic sizes."""
    if not kernel.backend.symbolic:
        return ()
    dyn = kernel._varied if kernel.dynamic == "auto" else set(kernel.dynamic)
    return tuple(sorted((set(dyn) | set(kernel.options.symbolic)) & set(env)))


def with_options(kernel, options: Options):
    """A new kernel of the same program and target with explicit ``options``."""
    return kernel.with_options(options)


# --- compiling and running (the worker's side) ---------------------------------------------
@user_boundary
def program_from_text(text: str, name: str):
    """The program ``polytc.tc(text, name)`` holds, made without importing the ``polytc``
    package's top level (which imports the tuner)."""
    source = Source(text, "<tc>")
    chosen = [d for d in parse(text, "<tc>") if d.name == name]
    if not chosen:
        raise PolytcError(f"no def named '{name}' in this text")
    return [check(d, source) for d in chosen][0]


def specialize(program, options: Options, target: str, inputs):
    """The compiled kernel of ``program`` with ``options`` for these inputs' sizes."""
    return Kernel(program, options, target)._specialize(inputs)


def code_text(ck) -> str:
    """What identifies ``ck``'s generated code: its source, and on an accelerator its
    launches (grid and blocks)."""
    code = ck.code
    launches = getattr(ck, "launches", None)
    if launches is not None:
        import json

        code += "\n" + json.dumps(launches, sort_keys=True)
    return code


def run(ck, inputs):
    """``ck``'s outputs on ``inputs`` (an array, or a tuple of them)."""
    return ck.run(list(inputs))


def benchmark(ck, inputs, repeat: int, warmup: int) -> dict:
    """``ck.benchmark``: its ``min`` and ``median`` seconds over ``repeat`` runs."""
    return ck.benchmark(*inputs, repeat=repeat, warmup=warmup)


def has_contraction(ck, program) -> bool:
    """Whether the tiler found a contraction band when it compiled ``ck`` (its build, or
    the passes run again with the default options)."""
    build = ck._build
    if build is None:
        build = pipeline.run(program, ck.env, Options(), until="tile")
    return any(d.kind == "contraction" for d in build.tiling)


# --- accelerators ----------------------------------------------------------------------
def start_device(target: str) -> None:
    """Open ``target``'s device (its start-up cost is paid once, here)."""
    backends.get(target).device()


def find_device(target: str):
    """``target``'s device, or its default description when none can be opened (CUDA
    without a GPU); ``None`` when there is neither."""
    be = backends.get(target)
    try:
        return be.device()
    except Exception:  # noqa: BLE001 - no device here (CUDA without a GPU)
        default = getattr(be.runtime, "default_device", None)
        return None if default is None else default()


def mapping_report(program, env, options: Options, target: str, device) -> tuple:
    """The mapper's decisions (``tiling.decisions.Decision`` per kernel) for ``target``: the
    pipeline through its ``map`` pass; nothing is compiled."""
    return pipeline.run(program, env, options, target, device, until="map").mapping
