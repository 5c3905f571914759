"""The house rules of the code base, checked: data flows one way through the layers of
docs/architecture.md (no module imports a later layer, no import cycles, function-level
imports included), and no module grows past ~600 lines."""
from __future__ import annotations

import ast
import os

import polytc

ROOT = os.path.dirname(polytc.__file__)

#: low to high; a module belongs to the layer of its longest matching prefix
LAYERS = [
    ("base", ["polytc.config", "polytc.diagnostics", "polytc.options", "polytc.cache",
              "polytc.machine",
              "polytc.backends"]),  # the registry only: backend modules load on demand
    ("front-ends", ["polytc.lang", "polytc.graph"]),  # TC text; ONNX graphs, fusion groups
    ("polyhedral", ["polytc.poly"]),
    ("tiling", ["polytc.tiling"]),
    ("code generators", ["polytc.codegen_c", "polytc.codegen_opencl", "polytc.codegen_cuda"]),
    ("compiler", ["polytc.compiler"]),
    ("views", ["polytc.display", "polytc.explain", "polytc.loopdiff"]),
    ("runtimes", ["polytc.runtime", "polytc.aot"]),  # the exported model's C: a runtime
    ("backends", ["polytc.backends.base", "polytc.backends.c", "polytc.backends.accelerator",
                  "polytc.backends.opencl", "polytc.backends.cuda"]),
    ("kernels", ["polytc.kernel"]),
    ("tools", ["polytc.graph.plan", "polytc.graph.arena", "polytc.graph.native",
               "polytc.graph.governor",
               "polytc.graph.session", "polytc.graph.staged", "polytc.graph.ortapi",
               "polytc.graph.profiling",
               "polytc.graph.save", "polytc.perftest",
               "polytc.exploration", "polytc.tuner"]),
    ("entry points", ["polytc.onnx", "polytc.graph.backend", "polytc.graph.conformance",
                      "polytc.cli", "polytc.demo",
                      "polytc.__main__", "polytc"]),
]


def modules() -> dict:
    out = {}
    for dirpath, _, files in os.walk(ROOT):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, os.path.dirname(ROOT))[:-3].replace(os.sep, ".")
                out[rel[:-9] if rel.endswith(".__init__") else rel] = path
    return out


def imports(name: str, path: str, known: dict) -> set:
    """The polytc modules ``name`` imports anywhere in its body."""
    package = name if path.endswith("__init__.py") else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else base)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m in known and m != name}


def layer(name: str) -> int:
    best, rank = -1, None
    for k, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (name == p or name.startswith(p + ".")) and len(p) > best:
                best, rank = len(p), k
    assert rank is not None, f"{name} belongs to no layer: add it to LAYERS"
    return rank


def graph() -> dict:
    known = modules()
    return {m: imports(m, p, known) for m, p in known.items()}


def test_no_module_imports_a_later_layer():
    bad = [f"{m} ({LAYERS[layer(m)][0]}) imports {t} ({LAYERS[layer(t)][0]})"
           for m, targets in graph().items() for t in targets if layer(t) > layer(m)]
    assert not bad, "\n".join(sorted(bad))


def test_no_import_cycles():
    g = graph()
    index, low, stack, on, cycles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    assert not cycles, cycles


def test_modules_stay_small():
    big = {m: n for m, p in modules().items()
           if (n := sum(1 for _ in open(p, encoding="utf-8"))) > 600}
    assert not big, big
