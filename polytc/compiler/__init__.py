"""The compiler after semantic analysis: one immutable ``Build`` record per
specialisation (``build.py``), the passes that make it (``passes.py``) and the pipeline
that runs them in order, named, timed, logged and switchable (``pipeline.py``)."""
