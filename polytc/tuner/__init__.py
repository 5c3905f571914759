"""The autotuner: ``polytc.autotune``, an evolutionary search over ``Options`` whose
candidates are compiled and timed in worker processes.

* ``space.py``: the values each searched ``Options`` field can take (:class:`Space`).
* ``search.py``: the candidate generator (:class:`Search`: mutation, crossover) and the
  ranking of measured candidates.
* ``workers.py``: the worker processes and the protocol the tuner speaks with them.
* ``evaluate.py``: what a worker does: the reference result, compiling, checking and
  timing a candidate, probing the accelerator's mapping.
* ``bridge.py``: every call the tuner makes into the compiler and the runtime.
* ``plot.py``: the live plot of a run (``progress="plot"``); ``units.py``: time formats.
* ``driver.py``: :func:`autotune`, the entry point, as a sequence of named steps;
  ``result.py``: its last step (the winner, its record, the summary line).

This file imports nothing: the runtime reads the tuning cache
(:mod:`polytc.runtime.tuning`) without loading the tuner.
"""
