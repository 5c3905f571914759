"""The tuning cache: the best ``Options`` :func:`polytc.autotune` found, on disk.

One JSON file per tuned problem, ``<cache dir>/tuning/<key[:2]>/<key>.json``, where the
key (:func:`tuning_key`) hashes the canonical program text (``str(program)``), the sizes,
the dtypes, the machine (:func:`polytc.machine.host`: caches, vector width, cores),
for an accelerator target the target and its device (``device_key()`` of its runtime),
and polytc's own source (as every cache key does, so a changed compiler re-tunes).  The
file holds the options and a record of the search (times, candidates, seed, budget).

:class:`~polytc.kernel.Kernel` objects created without explicit options consult
:func:`lookup` when they compile for new sizes and use the tuned options if there are
any; kernels given options (``polytc.tc(..., options=...)``, ``with_options``) never do.
``POLYTC_NO_TUNING_CACHE=1`` switches the lookup off (``autotune`` still stores).

Writes go to a temporary file renamed over the entry (atomic: a reader sees the old or
the new entry, never half of one; the last writer wins).  An unreadable or malformed entry
is a miss.  Results are remembered per process (hits and misses), so the slow path of a
call reads the disk at most once per program and sizes; :func:`store` updates the memo,
so a process sees its own tuning at once, and another process's on its next start.
"""
from __future__ import annotations

import json
import os
import tempfile
import threading
import time

from .. import backends, config
from ..options import Options
from ..machine import host
from ..cache import DiskCache, cache_key

__all__ = ["tuning_dir", "tuning_key", "bucket", "lookup", "get", "store", "remove",
           "clear_memo"]

FORMAT_VERSION = 1

_memo: dict = {}  # (dir, program text, sizes, target) -> (Options, record) | None
_memo_lock = threading.Lock()


def tuning_dir() -> str:
    """``tuning/`` under the kernel cache directory (``POLYTC_CACHE_DIR``; a per-process
    temporary directory with ``POLYTC_NO_DISK_CACHE=1``)."""
    return os.path.join(DiskCache().root, "tuning")


def _text(program) -> str:
    return program if isinstance(program, str) else str(program)


def _dtypes(program) -> list:
    if isinstance(program, str):
        return []  # the text declares them
    return [str(t.dtype) for t in tuple(program.inputs) + tuple(program.outputs)]


def _target_parts(target: str) -> dict:
    """What keys an accelerator target's entries: the target and its device (options
    tuned for one device are not the best on another).  Nothing for the host target,
    whose keys are those of the tuning cache before it had targets."""
    facts = backends.get(target).cache_facts()
    return {"target": target, **facts} if facts else {}


def bucket(env: dict, symbolic) -> dict:
    """The sizes that key a kernel symbolic in the sizes ``symbolic``: each of those
    rounded up to a power of two (a bucket: 33..64 share 64), the others as they are.  A
    generic kernel compiles at these sizes and looks its options up there; ``autotune``
    of a kernel with symbolic sizes stores there too."""
    return {k: (1 << max(0, int(v) - 1).bit_length()) if k in symbolic else v
            for k, v in env.items()}


def tuning_key(program, env: dict, target: str = "c") -> str:
    """The cache key of ``program`` (a ``Program`` or its canonical text) at sizes
    ``env`` on this machine, for ``target`` (and its device)."""
    parts = {"machine": host().key(), **_target_parts(target)}  # (the C target's
    # facts hold the machine too)
    return cache_key(tuning=FORMAT_VERSION, program=_text(program),
                     sizes={str(k): int(v) for k, v in env.items()},
                     dtypes=_dtypes(program), **parts)


def _path(key: str) -> str:
    return os.path.join(tuning_dir(), key[:2], key + ".json")


def _memo_key(program, env, text=None, target="c") -> tuple:
    # the settings that decide tuning_dir() (cheaper than computing it)
    where = (os.environ.get("POLYTC_CACHE_DIR"), config.disk_cache_enabled())
    return (where, text or _text(program), tuple(sorted(env.items())), target)


def _read(key: str):
    path = _path(key)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        config.log(1, f"tuning entry {path} is unreadable ({e}); ignoring it")
        return None
    try:
        if data.get("format") != FORMAT_VERSION or data.get("key") != key:
            raise ValueError("malformed")
        options = Options(**data["options"])
    except Exception as e:  # noqa: BLE001 - any malformed entry is a miss
        config.log(1, f"tuning entry {path} is malformed ({e}); ignoring it")
        return None
    return options, data.get("record", {})


def get(program, env: dict, text: str | None = None, target: str = "c"):
    """``(Options, record)`` stored for ``program`` at sizes ``env`` for ``target``, or
    ``None`` (also when the target's device cannot be queried).  ``text``:
    ``str(program)`` if the caller has it already."""
    mk = _memo_key(program, env, text, target)
    with _memo_lock:
        if mk in _memo:
            return _memo[mk]
    try:
        key = tuning_key(program, env, target)
    except Exception as e:  # noqa: BLE001 - no device: nothing tuned for it here
        config.log(1, f"tuning lookup for {target}: no device key ({e})")
        return None
    found = _read(key)
    with _memo_lock:
        _memo[mk] = found
    return found


def lookup(program, env: dict, text: str | None = None, target: str = "c") -> Options | None:
    """The tuned options of ``program`` at sizes ``env`` for ``target``, or ``None``
    (also when ``POLYTC_NO_TUNING_CACHE=1``).  ``text``: ``str(program)`` if the caller
    has it."""
    if not config.tuning_cache_enabled():
        return None
    found = get(program, env, text, target)
    return None if found is None else found[0]


def store(program, env: dict, options: Options, record: dict | None = None,
          target: str = "c") -> str | None:
    """Store ``options`` (and a JSON-able ``record`` of how they were found) for
    ``program`` at sizes ``env`` on ``target``, replacing any earlier entry.  The entry's
    path, or ``None`` when the directory cannot be written (the process still remembers
    it)."""
    record = dict(record or {})
    record.setdefault("stored_at", time.time())
    key = tuning_key(program, env, target)
    data = {"format": FORMAT_VERSION, "key": key, "options": options.key(),
            "program": _text(program), "sizes": {str(k): int(v) for k, v in env.items()},
            "target": target, "record": record}
    text = json.dumps(data, sort_keys=True, indent=1, default=str)
    with _memo_lock:
        _memo[_memo_key(program, env, target=target)] = (options, record)
    path = _path(key)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=os.path.dirname(path))
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError as e:
        config.log(1, f"could not write the tuning entry {path} ({e}); "
                      "it is kept for this process only")
        return None
    return path


def remove(program, env: dict, target: str = "c") -> bool:
    """Forget the tuned options of ``program`` at sizes ``env`` on ``target``; whether
    there were any."""
    with _memo_lock:
        _memo.pop(_memo_key(program, env, target=target), None)
    try:
        os.unlink(_path(tuning_key(program, env, target)))
        return True
    except Exception:  # noqa: BLE001 - no such entry, or no device to key it
        return False


def clear_memo() -> None:
    """Forget what this process has read (the next lookups read the disk again)."""
    with _memo_lock:
        _memo.clear()
