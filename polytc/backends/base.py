"""The protocol every target implements, and what all of them share: the cache key, the
process-wide table of loaded kernels, and building through the pipeline and the disk
cache.

A backend says what its code is (``generate``: the pipeline's ``codegen`` pass), how it
becomes something that runs (``compile``: gcc, or the device compiler as a check), how a
build is loaded (``load``: a ``runtime`` object), which device it runs on and what of that
device keys the caches (``device``, ``cache_facts``), and whether it can run here at all
(``available``).  ``grid`` says whether the pipeline maps loops to a launch grid (the
``map`` pass); ``device_arrays`` whether calls may pass device arrays; ``host`` whether it
runs on the CPU that compiles (explain() and gcc's vectoriser report apply).
"""
from __future__ import annotations

import time

from .. import config
from ..compiler import pipeline
from ..diagnostics import PolytcError
from ..cache import DiskCache, cache_key

#: disk key -> loaded kernel, shared by every Kernel object of the process
_LOADED: dict = {}


def forget_loaded() -> None:
    """Drop every loaded kernel from the process-wide table (``polytc.clear_cache``)."""
    _LOADED.clear()


class Backend:
    name = "?"
    grid = False
    device_arrays = False
    host = False
    #: whether its code generator reads packed operands (``tiling/pack.py``)
    packing = False
    #: whether it packs constant operands once, before the first call (``prepack``)
    prepacking = False
    #: whether its code generator keeps contracted temporaries (``tiling/contract.py``)
    contracting = False
    #: whether its code generator folds inits and epilogues into register tiles
    #: (``tiling/fold.py``)
    folding = False
    #: whether a parallel loop may keep a private copy of a reduction's result per
    #: thread, combined at its end (``poly/privatize.py``: OpenMP array reductions)
    private_reductions = False
    #: whether its kernels may keep sizes symbolic (``Options.symbolic``)
    symbolic = False

    def __repr__(self):
        return f"<polytc backend {self.name}>"

    # --- what each target provides ---------------------------------------------------
    def available(self) -> bool:
        try:
            self.cache_facts()  # finds the device, or says why there is none
            return True
        except PolytcError:
            return False

    def device(self):
        """The ``tiling.gpu.Device`` the mapping is made for (None on the host)."""
        return None

    def warm(self) -> None:
        """Start what a first build waits for (the scheduler's helper process, the C
        compiler's probes) in the background, while the graph passes or the isl work run."""
        from ..poly import schedworker

        schedworker.prestart()

    def cache_facts(self) -> dict:
        """What, besides the program, sizes and options, keys a compiled kernel."""
        return {}

    def generate(self, b):
        """The pipeline's ``codegen`` pass: ``b`` with ``code`` and its stage."""
        raise NotImplementedError

    def compile(self, b) -> tuple:
        """``(files, meta)`` of a generated build: the files the disk cache keeps and the
        JSON-able description ``load`` needs (``runtime.compiled.build_meta``)."""
        raise NotImplementedError

    def load(self, program, env, options, entry: dict, build=None):
        """The runnable kernel of a disk-cache entry (``build``: the pipeline's Build when
        it was compiled in this process)."""
        raise NotImplementedError

    # --- shared ----------------------------------------------------------------------
    def key(self, text: str, env: dict, options) -> str:
        """The content address of ``text`` compiled at ``env`` with ``options``."""
        return cache_key(program=text, sizes=env, options=options.key(), target=self.name,
                         **self.cache_facts())

    def compiled(self, program, env: dict, options, text: str | None = None):
        """The loaded kernel of ``program`` at ``env``: from this process's table, else
        the disk cache, else built (pipeline, then ``compile``)."""
        key = self.key(text if text is not None else str(program), env, options)
        ck = _LOADED.get(key)
        if ck is None:
            ck = _LOADED[key] = self._load_or_build(program, env, options, key)
        return ck

    def build(self, program, env: dict, options) -> tuple:
        """``(build, files, meta)``: the whole pipeline, then ``compile``."""
        b = pipeline.run(program, env, options, self.name)
        t0 = time.perf_counter()
        files, meta = self.compile(b)
        meta["timings"][self.compiler] = time.perf_counter() - t0
        return b, files, meta

    compiler = "compile"  # the timing name of ``compile``

    def _load_or_build(self, program, env, options, key):
        made = []

        def make():
            self.warm()
            b, files, meta = self.build(program, env, options)
            made.append(b)
            config.log(1, f"compiled {program.name} {env} for {self.name} in "
                          f"{sum(meta['timings'].values()) * 1e3:.0f} ms")
            return files, meta

        entry, built = DiskCache().get_or_build(key, make)
        if not built:
            config.log(1, f"{program.name} {env}: loaded from the disk cache")
        return self.load(program, env, options, entry, made[0] if made else None)
