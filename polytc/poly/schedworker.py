"""isl's scheduler in a helper process, with a deadline.

Some scheduling problems never finish, and isl's operation budget is not checked
everywhere, nor can isl be interrupted from outside: the scheduler must run in another
process that can be killed.  Forking this one for every problem cost 13 ms a schedule
(ResNet-18's 21 groups: 0.27 s of its cold compile, on the serial isl path): the fork
copies a large process's page tables, and the child's first writes fault its pages in.
Instead one small helper process (this file run as a script: islpy only, not polytc)
serves every problem of this process, one at a time: it reads the scheduler's options
and the schedule constraints as isl text, and answers with the schedule as text.  Past
``DEADLINE`` it is killed (the caller falls back) and the next problem starts a new one.

A message is a line with the byte length, then that many bytes of UTF-8 (JSON for a
request: ``{"options": {...}, "constraints": text}``; ``ok\\n`` + the schedule, or
``error\\n`` + why, for an answer).
"""
from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading

import islpy as isl

#: the ``isl.Context`` setters a request may carry, by option name
OPTIONS = ("schedule_maximize_coincidence", "schedule_outer_coincidence",
           "schedule_serialize_sccs", "schedule_whole_component",
           "schedule_treat_coalescing", "schedule_max_coefficient",
           "schedule_max_constant_term", "max_operations")


def _send(f, data: bytes) -> None:
    f.write(b"%d\n" % len(data) + data)
    f.flush()


def _receive(f) -> bytes | None:
    head = f.readline()
    if not head:
        return None
    n = int(head)
    data = f.read(n)
    if len(data) != n:
        return None
    return data


def serve(inp, out) -> None:
    """The helper's loop: a schedule for each request, until end of input."""
    while (req := _receive(inp)) is not None:
        try:
            r = json.loads(req)
            ctx = isl.Context()
            for name, value in r["options"].items():
                if name in OPTIONS:
                    getattr(ctx, f"set_{name}")(value)
            sc = isl.ScheduleConstraints.read_from_str(ctx, r["constraints"])
            answer = b"ok\n" + sc.compute_schedule().to_str().encode()
        except Exception as e:  # noqa: BLE001 - any failure: the caller falls back
            answer = b"error\n" + str(e).encode()
        _send(out, answer)


class Worker:
    """The helper process of this process (started on first use)."""

    def __init__(self):
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def _start(self) -> subprocess.Popen:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__)],  # islpy only, not polytc
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_child_env())
        return self._proc

    def schedule(self, options: dict, constraints: str, deadline: float) -> str | None:
        """The schedule's text, None past ``deadline`` seconds; raises ``isl.Error``
        when isl failed."""
        with self._lock:
            request = json.dumps({"options": options, "constraints": constraints}).encode()
            try:
                out = self._ask(request)
            except OSError:  # it died (killed from outside): once more, anew
                self._proc = None
                out = self._ask(request)
            if not select.select([out], [], [], deadline)[0]:
                self.stop()
                return None
            answer = _receive(out)  # it comes whole, once it comes
            if answer is None:
                self.stop()
                raise isl.Error("the scheduler's helper process ended")
            kind, _, text = answer.decode().partition("\n")
            if kind != "ok":
                raise isl.Error(text or "the scheduler failed")
            return text

    def _ask(self, request: bytes):
        """Send ``request`` to the helper (started if need be): its output stream."""
        proc = self._start()
        assert proc.stdin is not None and proc.stdout is not None
        _send(proc.stdin, request)
        return proc.stdout

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None


def _child_env() -> dict:
    """This process's environment, with its ``sys.path`` (polytc may not be installed)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


_WORKER = Worker()


def prestart() -> None:
    """Start the helper now (its islpy import overlaps the caller's work)."""
    with _WORKER._lock:
        _WORKER._start()


def schedule(options: dict, constraints: str, deadline: float) -> str | None:
    return _WORKER.schedule(options, constraints, deadline)


def main() -> None:
    serve(sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    main()
