"""The worker processes of ``polytc.autotune`` and the protocol the tuner speaks with them.

Candidates are compiled and run in worker processes (``python -c``, talking pickles over
pipes: no ``if __name__ == "__main__"`` guard is needed in the user's script).  Each
worker is started by :mod:`subprocess` (fork and exec of a fresh Python interpreter, never
a bare fork of the tuner's process), so it is spawn-safe: it inherits no lock, thread or
half-initialised state of the parent, only the environment and the pipes.  A message is
a pickle framed by its length (8 bytes, big-endian); what a worker does with each request
is :class:`polytc.tuner.evaluate.WorkerState`.

:class:`Pool` serves requests on its workers, each with a timeout: a worker that crashes
(EOF on its pipe) or passes the timeout (it is killed) fails its request, and is replaced
before its next one.  A worker's stray output (prints, C stdio) goes to its log in the
session directory, not into the protocol.
"""
from __future__ import annotations

import os
import pickle
import select
import struct
import subprocess
import sys
import time

from ..diagnostics import PolytcError
from .evaluate import WorkerState

__all__ = ["Pool", "Worker", "worker_main", "WORKER_CMD"]

WORKER_CMD = "from polytc.tuner.workers import worker_main; worker_main()"
_HEADER = struct.Struct(">Q")
#: the directory that holds the ``polytc`` package (put on the workers' PYTHONPATH)
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _frame(obj) -> bytes:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(data)) + data


class _Failed(Exception):
    """A request that got no reply: the worker crashed or timed out."""


class Worker:
    """One worker process; requests one at a time, replies read without blocking."""

    def __init__(self, session: str, number: int):
        self.log_path = os.path.join(session, f"worker-{number}.log")
        self._log = open(self.log_path, "ab")
        env = dict(os.environ)
        env["PYTHONPATH"] = _ROOT + (os.pathsep + env["PYTHONPATH"]
                                    if env.get("PYTHONPATH") else "")
        self.proc = subprocess.Popen([sys.executable, "-c", WORKER_CMD],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._log, env=env, close_fds=True)
        self.fd = self.proc.stdout.fileno()
        os.set_blocking(self.fd, False)
        self._buf = b""
        self.busy = None  # (tag, deadline) of the request in flight

    def send(self, msg, tag, timeout: float) -> None:
        self.busy = (tag, time.monotonic() + timeout)
        try:
            self.proc.stdin.write(_frame(msg))
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # it died: the read sees EOF

    def read(self):
        """The reply if a whole one has arrived, else None; raises _Failed on EOF."""
        while True:
            try:
                chunk = os.read(self.fd, 1 << 20)
            except BlockingIOError:
                break
            if not chunk:
                raise _Failed(self._death())
            self._buf += chunk
        if len(self._buf) >= _HEADER.size:
            (n,) = _HEADER.unpack_from(self._buf)
            if len(self._buf) >= _HEADER.size + n:
                msg = pickle.loads(self._buf[_HEADER.size:_HEADER.size + n])
                self._buf = self._buf[_HEADER.size + n:]
                self.busy = None
                return msg
        return None

    def _death(self) -> str:
        try:
            rc = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            rc = None
        if rc is not None and rc < 0:
            import signal

            try:
                return f"crashed ({signal.Signals(-rc).name})"
            except ValueError:
                return f"crashed (signal {-rc})"
        tail = self.log_tail()  # a Python-level death leaves its reason in the log
        return f"worker exited (status {rc})" + (f": {tail}" if tail else "")

    def log_tail(self, n: int = 300) -> str:
        try:
            self._log.flush()
            with open(self.log_path, "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - n))
                lines = f.read().decode("utf-8", "replace").strip().splitlines()
            return lines[-1] if lines else ""
        except OSError:
            return ""

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self._close()

    def close(self) -> None:
        try:
            self.proc.stdin.close()  # the worker exits on EOF
            self.proc.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()

    def _close(self) -> None:
        for f in (self.proc.stdin, self.proc.stdout, self._log):
            try:
                f.close()
            except OSError:
                pass


class Pool:
    """Worker processes serving ``(tag, message, timeout)`` requests."""

    def __init__(self, session: str, init: tuple, jobs: int, start_timeout: float):
        self.session, self.init, self.start_timeout = session, init, start_timeout
        self.spawned = 0
        self.workers = []
        try:
            for _ in range(jobs):
                self.workers.append(self._spawn(wait=False))
            for w in self.workers:
                self._await_init(w)
        except BaseException:
            self.close()
            raise

    def _spawn(self, wait=True) -> Worker:
        w = Worker(self.session, self.spawned)
        self.spawned += 1
        w.send(self.init, "init", self.start_timeout)
        if wait:
            self._await_init(w)
        return w

    def _await_init(self, w: Worker) -> None:
        try:
            while w.busy is not None:
                for _tag, ok, payload in self._poll([w]):
                    if not ok:
                        raise _Failed(payload)
        except _Failed as e:
            w.kill()
            raise PolytcError(f"autotune: a worker process failed to start: {e}",
                              hint=f"workers run `{sys.executable} -c "
                                   f"'{WORKER_CMD}'`: polytc must import there") from None

    def _poll(self, busy) -> list:
        """Wait until a busy worker replies, fails or passes its deadline; the
        ``(tag, ok, payload)`` results (possibly none: a partial reply)."""
        wait = max(0.0, min(w.busy[1] for w in busy) - time.monotonic())
        ready, _, _ = select.select([w.fd for w in busy], [], [], wait)
        now = time.monotonic()
        out = []
        for w in busy:
            tag = w.busy[0]
            try:
                msg = w.read() if w.fd in ready else None
            except _Failed as e:
                w.busy = None
                out.append((tag, False, str(e)))
                continue
            if msg is not None:
                out.append((tag, msg[0] == "ok", msg[1]))
            elif now >= w.busy[1]:
                w.busy = None
                w.kill()
                out.append((tag, False, "timed out"))
        return out

    def run(self, requests, may_start, use=None):
        """Yield ``(tag, ok, payload)`` for each ``(tag, message, timeout)`` request that
        was started (``may_start()`` is asked before each), as they finish; workers that
        crashed or timed out are replaced before their next request."""
        pending = list(requests)
        idx = list(range(len(self.workers))) if use is None else list(use)
        while True:
            for i in idx:
                w = self.workers[i]
                if w.busy is None and pending and may_start():
                    if w.proc.poll() is not None:
                        w.kill()
                        self.workers[i] = w = self._spawn()
                    tag, msg, timeout = pending.pop(0)
                    w.send(msg, tag, timeout)
            busy = [self.workers[i] for i in idx if self.workers[i].busy is not None]
            if not busy:
                return
            yield from self._poll(busy)

    def close(self) -> None:
        for w in self.workers:
            w.close()
        self.workers = []


# --- the worker's loop ---------------------------------------------------------------------
def worker_main() -> None:
    """The worker's loop: one pickled request in on stdin, one reply out."""
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # stray prints (and C stdio) go to the log, not into the protocol
    sys.stdout = sys.stderr
    inp = sys.stdin.buffer
    state = None
    while True:
        head = inp.read(_HEADER.size)
        if len(head) < _HEADER.size:
            return
        (n,) = _HEADER.unpack(head)
        msg = pickle.loads(inp.read(n))
        try:
            if msg[0] == "init":
                state = WorkerState(*msg[1:])
                reply = ("ok", None)
            else:
                reply = ("ok", state.handle(msg))
        except Exception as e:  # noqa: BLE001 - every failure is the candidate's score
            text = str(e).strip().splitlines()
            reply = ("err", f"{type(e).__name__}: {text[0] if text else ''}")
        out.write(_frame(reply))
