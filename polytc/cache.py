"""A content-addressed on-disk cache of build artifacts, safe under concurrency.

An entry is a directory ``root/<key[:2]>/<key>/`` holding the artifact files and a
``meta.json`` that records the sha256 of every file (a CRC-32 above ``LARGE_FILE``)
and free-form metadata.  Entries are
immutable: they are written into a temporary directory next to their final place and
renamed in atomically, so a reader sees either no entry or a whole one.  An entry whose
files do not match their recorded hashes (a crash, a full disk, a stray edit) is treated
as corrupt: it is removed and reported as a miss, so the caller rebuilds it.

Keys come from :func:`cache_key`, which hashes the given parts together with a
fingerprint of polytc's own source, so a changed compiler never serves a stale binary.

Several processes building the same artifact build it once::

    entry = cache.get(key)
    if entry is None:
        with cache.lock(key):
            entry = cache.get(key)
            if entry is None:
                entry = cache.put(key, build(), meta)

When the cache directory cannot be written the cache degrades to a per-process temporary
directory (a miss every time, but loading still works); ``POLYTC_NO_DISK_CACHE=1`` does
the same on purpose.
"""
from __future__ import annotations

import atexit
import errno
import hashlib
import json
import os
import shutil
import tempfile
import threading
import zlib

import filelock

from . import config
from .diagnostics import InternalError

__all__ = ["cache_key", "polytc_fingerprint", "DiskCache", "LOCK_TIMEOUT_S"]

META_NAME = "meta.json"
FORMAT_VERSION = 1
LOCK_TIMEOUT_S = 600.0

_fingerprint: str | None = None
_fingerprint_lock = threading.Lock()


# --- keys ------------------------------------------------------------------------------
def _polytc_version() -> str:
    import sys

    pkg = sys.modules.get("polytc")
    v = getattr(pkg, "__version__", None)
    if v:
        return str(v)
    try:
        from importlib.metadata import version

        return version("polytc")
    except Exception:  # noqa: BLE001 - not installed as a distribution: source hash decides
        return "unknown"


def polytc_fingerprint() -> str:
    """sha256 of polytc's version and the contents of every ``.py`` file of the package.

    Computed once per process."""
    global _fingerprint
    if _fingerprint is not None:
        return _fingerprint
    with _fingerprint_lock:
        if _fingerprint is None:
            pkg_root = os.path.dirname(os.path.abspath(__file__))
            files = []
            for dirpath, dirnames, filenames in os.walk(pkg_root):
                dirnames[:] = [d for d in dirnames
                               if d != "__pycache__" and not d.startswith(".")]
                for name in filenames:
                    if name.endswith(".py"):
                        full = os.path.join(dirpath, name)
                        rel = os.path.relpath(full, pkg_root).replace(os.sep, "/")
                        files.append((rel, full))
            files.sort()
            h = hashlib.sha256()
            h.update(f"polytc {_polytc_version()}\0".encode())
            for rel, full in files:
                with open(full, "rb") as f:
                    data = f.read()
                h.update(rel.encode() + b"\0" + str(len(data)).encode() + b"\0")
                h.update(data)
            _fingerprint = h.hexdigest()
    return _fingerprint


def _canonical(o):
    """``json.dumps`` fallback: stable encodings for the few non-JSON types keys use."""
    if isinstance(o, (bytes, bytearray)):
        return {"__bytes__": bytes(o).hex()}
    if isinstance(o, (set, frozenset)):
        return sorted(_canonical_json(x) for x in o)
    if isinstance(o, os.PathLike):
        return os.fspath(o)
    if type(o).__module__ == "numpy":
        if hasattr(o, "item") and getattr(o, "shape", None) == ():
            return o.item()  # numpy scalar
        if hasattr(o, "tolist"):
            return o.tolist()
        return str(o)  # numpy dtype
    raise InternalError(
        f"cache key part of type {type(o).__name__} cannot be encoded canonically",
        hint="this is a polytc bug; pass plain JSON values (str, int, list, dict) as key parts",
    )


def _canonical_json(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=True, default=_canonical)


def cache_key(**parts) -> str:
    """sha256 hex of a canonical JSON of ``parts`` and :func:`polytc_fingerprint`."""
    text = _canonical_json({"parts": parts, "polytc": polytc_fingerprint()})
    return hashlib.sha256(text.encode()).hexdigest()


# --- private fallback directory ---------------------------------------------------------
_private_root_path: str | None = None
_private_lock = threading.Lock()


def _private_root() -> str:
    """A per-process temporary directory, removed at exit."""
    global _private_root_path
    with _private_lock:
        if _private_root_path is None:
            _private_root_path = tempfile.mkdtemp(prefix="polytc-cache-")
            atexit.register(shutil.rmtree, _private_root_path, True)
        return _private_root_path


#: files above this size are checked with a CRC-32 (``crc32:`` and 8 hex digits) instead
#: of a sha256: a model's weights (ResNet-18's 45 MB) are read at every load, and their
#: sha256 took 23 ms of it, the CRC 7 (it finds a truncated or damaged file as well)
LARGE_FILE = 1 << 20


def _digest(data) -> str:
    if len(data) > LARGE_FILE:
        return f"crc32:{zlib.crc32(data):08x}"
    return hashlib.sha256(data).hexdigest()


def _file_digest(path: str, like: str) -> str:
    """The digest of the file at ``path`` of the kind of ``like`` (``_digest``)."""
    crc = like.startswith("crc32:")
    h, value = hashlib.sha256(), 0
    buf = bytearray(1 << 20)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            chunk = memoryview(buf)[:n]
            if crc:
                value = zlib.crc32(chunk, value)
            else:
                h.update(chunk)
    return f"crc32:{value:08x}" if crc else h.hexdigest()


def _valid_key(key) -> bool:
    return isinstance(key, str) and len(key) >= 3 and all(c in "0123456789abcdef" for c in key)


def _check_key(key: str) -> None:
    if not _valid_key(key):
        raise InternalError(f"invalid cache key {key!r}",
                            hint="this is a polytc bug; keys come from cache_key()")


# --- the cache -------------------------------------------------------------------------
class DiskCache:
    """Content-addressed artifact store under ``root`` (default ``config.cache_dir()``).

    With ``POLYTC_NO_DISK_CACHE=1`` and no explicit ``root`` it lives in a per-process
    temporary directory."""

    def __init__(self, root: str | os.PathLike | None = None):
        if root is None:
            root = config.cache_dir() if config.disk_cache_enabled() else _private_root()
        self.root = os.path.abspath(os.fspath(root))
        self._write_root: str | None = None  # decided on first write

    def __repr__(self):
        return f"DiskCache({self.root!r})"

    # -- layout
    @staticmethod
    def _entry_dir(root: str, key: str) -> str:
        return os.path.join(root, key[:2], key)

    def _writable_root(self) -> str:
        """``self.root`` if it can be written, else the private temporary directory."""
        if self._write_root is None:
            try:
                os.makedirs(self.root, exist_ok=True)
                fd, probe = tempfile.mkstemp(prefix=".probe-", dir=self.root)
                os.close(fd)
                os.unlink(probe)
                self._write_root = self.root
            except OSError as e:
                config.log(1, f"cache dir {self.root} is not writable ({e}); "
                              "using a private temporary directory for this process")
                self._write_root = _private_root()
        return self._write_root

    def _roots(self) -> list[str]:
        roots = [self.root]
        if self._write_root is not None and self._write_root != self.root:
            roots.append(self._write_root)
        return roots

    # -- reading
    def get(self, key: str) -> dict | None:
        """``{'meta': dict, 'dir': path}`` of a valid entry, or ``None``.

        A corrupt entry is removed (so it gets rebuilt) and reported as a miss."""
        _check_key(key)
        for root in self._roots():
            entry = self._get_in(root, key)
            if entry is not None:
                return entry
        return None

    def _get_in(self, root: str, key: str) -> dict | None:
        d = self._entry_dir(root, key)
        if not os.path.isdir(d):
            return None
        problem = self._validate(d, key)
        if isinstance(problem, dict):
            return {"meta": problem, "dir": d}
        config.log(1, f"cache entry {d} is corrupt ({problem}); removing it")
        self._remove_corrupt(root, d, key)
        return None

    @staticmethod
    def _validate(d: str, key: str) -> dict | str:
        """The entry's user meta if ``d`` is a valid entry, else a reason string."""
        try:
            with open(os.path.join(d, META_NAME), "rb") as f:
                record = json.loads(f.read().decode("utf-8"))
        except FileNotFoundError:
            return "missing meta.json"
        except (OSError, UnicodeDecodeError, ValueError) as e:
            return f"unreadable meta.json: {e}"
        if (not isinstance(record, dict) or record.get("format") != FORMAT_VERSION
                or record.get("key") != key or not isinstance(record.get("files"), dict)
                or not isinstance(record.get("meta"), dict)):
            return "malformed meta.json"
        for name, digest in record["files"].items():
            if not isinstance(name, str) or not _valid_name(name):
                return f"bad file name {name!r}"
            try:
                actual = _file_digest(os.path.join(d, name), digest)
            except FileNotFoundError:
                return f"missing file {name}"
            except OSError as e:
                return f"unreadable file {name}: {e}"
            if actual != digest:
                return f"hash mismatch for {name}"
        return record["meta"]

    @staticmethod
    def _move_aside(d: str) -> str | None:
        """Move entry ``d`` into a new trash directory (atomically: the final path never
        holds half a directory); the trash directory, or None when it could not."""
        try:
            aside = tempfile.mkdtemp(prefix=".trash-", dir=os.path.dirname(d))
            os.rename(d, os.path.join(aside, "entry"))
        except OSError:
            return None
        return aside

    def _remove_corrupt(self, root: str, d: str, key: str) -> None:
        aside = self._move_aside(d)
        if aside is None:
            shutil.rmtree(d, ignore_errors=True)
            return
        target = os.path.join(aside, "entry")
        # Another process may have replaced the entry by a valid one between our check and
        # the rename: put it back then.
        if isinstance(self._validate(target, key), dict):
            try:
                os.rename(target, d)
            except OSError:
                pass
        shutil.rmtree(aside, ignore_errors=True)

    # -- writing
    def put(self, key: str, files: dict[str, bytes], meta: dict) -> dict:
        """Store ``files`` under ``key`` atomically and return :meth:`get`'s entry.

        If another process stored the key first, its entry is kept and returned."""
        _check_key(key)
        for name in files:
            if not _valid_name(name) or name == META_NAME:
                raise InternalError(f"invalid cache file name {name!r}",
                                    hint="this is a polytc bug")
        try:
            _canonical_json(meta)
        except (TypeError, ValueError) as e:
            raise InternalError(f"cache meta is not JSON: {e}",
                                hint="this is a polytc bug") from None
        root = self._writable_root()
        try:
            return self._put_in(root, key, files, meta)
        except OSError as e:
            if root == _private_root():
                raise
            config.log(1, f"could not write cache entry under {root} ({e}); "
                          "using a private temporary directory")
            self._write_root = _private_root()
            return self._put_in(self._write_root, key, files, meta)

    def _put_in(self, root: str, key: str, files: dict[str, bytes], meta: dict) -> dict:
        final = self._entry_dir(root, key)
        shard = os.path.dirname(final)
        for _attempt in range(5):
            existing = self._get_in(root, key)
            if existing is not None:
                return existing
            os.makedirs(shard, exist_ok=True)
            tmp = tempfile.mkdtemp(prefix=f".tmp-{key[:16]}-", dir=shard)
            try:
                os.chmod(tmp, 0o755)
                hashes = {}
                for name, data in files.items():
                    with open(os.path.join(tmp, name), "wb") as f:
                        f.write(data)
                    hashes[name] = _digest(data)
                record = {"format": FORMAT_VERSION, "key": key, "files": hashes,
                          "meta": meta}
                with open(os.path.join(tmp, META_NAME), "w", encoding="utf-8") as f:
                    f.write(_canonical_json(record))
                try:
                    os.rename(tmp, final)
                except OSError as e:
                    if e.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR):
                        raise
                    # another process won the race: keep theirs (checked next iteration)
                    config.log(2, f"cache entry {key[:16]} was stored concurrently")
                    continue
                entry = self._get_in(root, key)
                if entry is not None:
                    return entry
            finally:
                if os.path.isdir(tmp):
                    shutil.rmtree(tmp, ignore_errors=True)
        raise InternalError(f"could not store cache entry {final}",
                            hint="the cache directory keeps changing under polytc; "
                                 "remove it or set POLYTC_CACHE_DIR elsewhere")

    def get_or_build(self, key: str, build) -> tuple[dict, bool]:
        """The entry of ``key``, made by ``build() -> (files, meta)`` when missing.  The
        build runs under the key's inter-process lock, so concurrent processes build it
        once; past the lock's timeout this one builds anyway.  Returns ``(entry, True)``
        when this call built it."""
        entry = self.get(key)
        if entry is not None:
            return entry, False
        lock = self.lock(key)
        try:
            lock.acquire()
            locked = True
        except filelock.Timeout:
            config.log(1, f"timed out waiting for the build lock of {key[:16]}; "
                          "building anyway")
            locked = False
        try:
            entry = self.get(key)  # another process may have built it meanwhile
            if entry is not None:
                return entry, False
            files, meta = build()
            return self.put(key, files, meta), True
        finally:
            if locked:
                lock.release()

    def clear(self) -> int:
        """Remove every entry (compiled kernels, PTX); the tuning cache and the lock files
        stay.  Returns how many entries were removed.  An entry another process is using
        stays usable there (a loaded shared object survives its file's removal)."""
        removed = 0
        for root in self._roots():
            try:
                shards = os.listdir(root)
            except OSError:
                continue
            for shard in shards:
                if len(shard) != 2 or not all(c in "0123456789abcdef" for c in shard):
                    continue  # tuning/, locks/
                d = os.path.join(root, shard)
                removed += len(os.listdir(d))
                shutil.rmtree(d, ignore_errors=True)
        return removed

    def supersede(self, tag: str, key: str) -> None:
        """Record ``key`` as the entry of ``tag`` (a model file's path) and remove the
        entry recorded before it, if another: a file recompiled after each change keeps
        one entry of its size (a model's weights), not one per version."""
        root = self._writable_root()
        index = os.path.join(root, "index")
        name = os.path.join(index, hashlib.sha256(tag.encode()).hexdigest())
        try:
            os.makedirs(index, exist_ok=True)
            with open(name, encoding="utf-8") as f:
                old = f.read().strip()
        except OSError:
            old = None
        try:
            with tempfile.NamedTemporaryFile("w", dir=index, delete=False) as f:
                f.write(key)
            os.replace(f.name, name)
        except OSError:
            return
        if old and old != key and _valid_key(old):
            d = self._entry_dir(root, old)
            aside = self._move_aside(d) if os.path.isdir(d) else None
            if aside is not None:  # (readers see all of an entry or nothing)
                shutil.rmtree(aside, ignore_errors=True)

    def lock(self, key: str) -> filelock.FileLock:
        """An inter-process lock for building ``key`` (``with cache.lock(key): ...``)."""
        _check_key(key)
        root = self._writable_root()
        locks = os.path.join(root, "locks")
        try:
            os.makedirs(locks, exist_ok=True)
        except OSError as e:
            config.log(1, f"cannot create lock dir {locks} ({e}); locking privately")
            locks = os.path.join(_private_root(), "locks")
            os.makedirs(locks, exist_ok=True)
        return filelock.FileLock(os.path.join(locks, key + ".lock"), timeout=LOCK_TIMEOUT_S)


def _valid_name(name: str) -> bool:
    return (bool(name) and name not in (".", "..") and "/" not in name and "\\" not in name
            and "\0" not in name and not name.startswith("."))
