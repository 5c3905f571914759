"""A model file's imported graph in the disk cache.

Loading a model polytc has compiled before still imported it: ``import onnx``, parsing
the protobuf, copying out every initialiser and running the graph passes (ResNet-18:
~110 ms of a 0.25 s load).  The graph after the passes is cached instead, keyed by the
file's identity as the file system gives it (real path, size, inode, device and the
modification and change times in nanoseconds: any rewrite changes the change time, as
no tool can set it) with the disabled passes and polytc's own source (``cache_key``);
the files its external tensors are in are checked likewise at each load (the model is
imported anew when one changed).  A new version of a file replaces the entry of the
one before (``DiskCache.supersede``): a model exported again and again keeps one copy
of its weights in the cache.  A model handed over as a ``ModelProto`` or bytes is
imported every time.

The entry holds ``graph.pickle``, the graph and its stages with every numeric constant
replaced by its place in ``constants.bin``, where the constants lie one after another
at multiples of 64 bytes.  A load maps that file read-only: the constants are views of
the page cache, aligned, copied by no one (a kernel that reads weights packed never
touches the originals again).
"""
from __future__ import annotations

import mmap
import os
import pickle

import numpy as np

from .. import config
from ..cache import DiskCache, cache_key
from ..machine import host
from . import passes, qwords
from .onnx_import import import_model

ALIGN = 64


def imported(model, where: str | None, disable=()) -> tuple:
    """``(graph, stages)`` of ``model`` after the graph passes (``passes.run``), from
    the disk cache when ``model`` is the path of a file seen before."""
    key = _key(model, disable)
    if key is None:
        return passes.run(import_model(model, where), disable)

    def build():
        external: list = []
        graph, stages = passes.run(import_model(model, where, external), disable)
        return _files(graph, stages), {"kind": "onnx-graph", "external": _stats(external)}

    cache = DiskCache()
    entry, built = cache.get_or_build(key, build)
    if built:  # the entry of an earlier version of the file goes
        cache.supersede(f"{os.path.realpath(os.fspath(model))}\0{sorted(disable)}", key)
    external = entry["meta"].get("external", [])
    if _stats([path for path, *_ in external]) != external:
        # the weights in a file of their own changed, the model file did not: imported
        # anew (another load, with the same model file, finds the same stale entry)
        config.log(1, f"{model}: its external data changed since it was cached")
        return passes.run(import_model(model, where), disable)
    return _load(entry["dir"])  # (also when just built: one kind of constants)


def _stats(paths) -> list:
    """``[path, size, inode, mtime, ctime]`` of each file (``None`` for a missing one)."""
    out = []
    for p in paths:
        try:
            st = os.stat(p)
            out.append([p, st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns])
        except OSError:
            out.append([p, None, None, None, None])
    return out


def _key(model, disable) -> str | None:
    if not isinstance(model, (str, os.PathLike)) or not config.disk_cache_enabled():
        return None
    path = os.fspath(model)
    try:
        st = os.stat(path)
    except OSError:
        return None  # the importer says what is wrong with the path
    return cache_key(kind="onnx-graph", path=os.path.realpath(path), size=st.st_size,
                     inode=st.st_ino, device=st.st_dev, mtime=st.st_mtime_ns,
                     ctime=st.st_ctime_ns, disable=sorted(disable),
                     words=qwords.words_enabled(),  # (the passes' machine choices:
                     lanes=host().lanes(4))  # blocked channels are a vector's floats)


def _files(graph, stages) -> dict:
    blob = bytearray()
    places, inline = {}, {}
    for name, value in graph.constants.items():
        a = np.asarray(value)
        if a.dtype.hasobject:
            inline[name] = value
            continue
        blob += bytes(-len(blob) % ALIGN)
        places[name] = (len(blob), a.dtype.str, a.shape)
        blob += np.ascontiguousarray(a).tobytes()
    state = (graph.replace(constants=inline), places, stages)
    return {"graph.pickle": pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL),
            "constants.bin": bytes(blob)}


def _load(d: str) -> tuple:
    with open(os.path.join(d, "graph.pickle"), "rb") as f:
        graph, places, stages = pickle.load(f)
    constants = dict(graph.constants)
    if places:
        with open(os.path.join(d, "constants.bin"), "rb") as f:
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        for name, (at, dtype, shape) in places.items():
            dt = np.dtype(dtype)
            n = int(np.prod(shape, dtype=np.int64))
            constants[name] = np.frombuffer(data, dt, n, at).reshape(shape)
    return graph.replace(constants=constants), stages
