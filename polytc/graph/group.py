"""Fusion grouping: which nodes compile together into one polyhedral program.

Walking the nodes in order, a node joins the group that produced its latest input when
(1) every other input it reads exists before that group runs (a graph input, a constant,
or the result of an earlier step), (2) neither it nor the group is ``opaque``, (3) a
group holds at most one contraction, and never a contraction and a reduction together —
so a group is either elementwise and data-movement ops around one MatMul/Conv (a prologue
and an epilogue: bias, activation, residual), or a chain of elementwise, reduction and
movement ops (softmax, layer norm, pooling), which isl fuses into one loop nest; but an
attention (a batched product's scores, their last-axis softmax and its product with the
values: ``_attention``) is one group, run per batch element and head — and (4) the group
stays under ``MAX_STATEMENTS``, which bounds isl's scheduling time.  (5) A reduction of a
whole tensor to one value starts a group: it needs all of its input before anything
reads it, and in the group of that input's producer (a layer norm) isl's scheduler ran
past its 8 s limit looking for a fused schedule.  Inside a group isl decides
the actual loop fusion (``Options.fusion``); values that no other step reads become
temporaries of the program, never written to memory the executor sees.

The result is the list of steps the executor runs: ``Group``s, ``View``s and (on the
host) ``Join``s, concatenations whose inputs are written in place.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from .ops import tc_type

MAX_STATEMENTS = 24


@dataclass
class Group:
    name: str
    nodes: list = field(default_factory=list)
    stmts: list = field(default_factory=list)
    kinds: set = field(default_factory=set)
    temps: list = field(default_factory=list)  # Refs of node-internal temporaries
    produced: set = field(default_factory=set)  # values its nodes write
    inputs: list = field(default_factory=list)  # values read from outside, in order
    outputs: list = field(default_factory=list)  # values other steps or the user read
    position: int = 0
    #: the scores of its batched product and their softmax (``_attention``): the
    #: product with the values may join, and elementwise or movement nodes after it
    attention: bool = False

    @property
    def ops(self) -> list:
        return [n.op for n in self.nodes]

    def text(self, refs: dict) -> str:
        """The group as a TC program."""
        def decl(v):
            r = refs[v]
            dims = f"({', '.join(map(str, r.shape))})" if r.shape else ""
            return f"{tc_type(r.dtype)}{dims} {r.name}"

        params = ", ".join(decl(v) for v in self.inputs)
        outs = ", ".join(decl(v) for v in self.outputs)
        body = "\n".join(f"    {s}" for s in self.stmts)
        head = "# " + ", ".join(f"{n.name} ({n.op})" for n in self.nodes)
        return f"{head}\ndef {self.name}({params}) -> ({outs}) {{\n{body}\n}}\n"


_TENSOR = re.compile(r"\b[vt]\d+\b")


def canonical(text: str) -> str:
    """A group's program with its node comment dropped, the function called ``group`` and
    its tensors renamed in order of appearance (``a0``, ``a1``, ...): identical groups
    (the layers of a transformer or a ResNet stage) get one text, hence one cache key,
    and compile once.  Index names are never ``v<k>``/``t<k>`` (see ``ops``)."""
    body = text.split("\n", 1)[1] if text.startswith("#") else text
    names: dict = {}
    body = _TENSOR.sub(lambda m: names.setdefault(m.group(), f"a{len(names)}"), body)
    return re.sub(r"^def \w+\(", "def group(", body, count=1)


@dataclass
class View:
    source: str
    value: str
    shape: tuple
    node: object = None
    position: int = 0
    dtype: object = None  # the type its bytes are read as, when not the source's

    def of(self, a):
        """The view of ``a`` (the source's array: numpy or a device's)."""
        if self.dtype is not None and a.dtype != self.dtype:
            a = a.view(self.dtype)
        return a.reshape(self.shape)


@dataclass
class Join:
    """A concatenation done in place: the groups that make its ``sources`` write them
    straight into consecutive parts of ``value``'s buffer (``offsets``: in elements;
    ``Plan._plan_memory`` places them), so running it copies nothing."""
    sources: tuple
    value: str
    offsets: tuple
    node: object = None
    position: int = 0


def form_groups(bound, fuse: bool = True, join: bool = False) -> list:
    """The steps for ``bound`` (a ``bind.Bound``): groups, views and (``join``: on the
    host, where values are parts of one memory) in-place concatenations, in run order."""
    g = bound.graph
    steps: list = []
    where: dict = {}  # value -> the step that produces it
    joins = _in_place_concats(bound) if join else {}
    readers = g.consumers()
    deferred = _deferred(bound, readers) if fuse else set()
    waiting: dict = {}  # value -> (node, lowered) of a deferred node that makes it
    for n in g.nodes:
        outs = [o for o in n.outputs if o]
        if n.name in deferred:
            waiting[outs[0]] = (n, bound.lowered[n.name])
            continue
        if n.name in joins:
            sources, offsets = joins[n.name]
            steps.append(Join(sources, outs[0], offsets, n, len(steps)))
            where[outs[0]] = steps[-1]
            continue
        if n.name not in bound.lowered:  # a view
            for o in outs:
                if o in bound.views:
                    src, shape = bound.views[o]
                    dtype = bound.refs[o].dtype
                    steps.append(View(src, o, shape, n, len(steps),
                                      dtype if dtype != bound.refs[src].dtype else None))
                    where[o] = steps[-1]
            continue
        low = bound.lowered[n.name]
        # the deferred transposes it reads run first, in its group
        before = [waiting.pop(i) for i in dict.fromkeys(n.inputs) if i in waiting]
        target = _target(n, low, steps, where, bound, readers) if fuse else None
        if target is not None and (len(target.stmts) + len(low.stmts) + sum(
                len(lw.stmts) for _, lw in before) > MAX_STATEMENTS or any(
                where[i].position > target.position for m, _ in before
                for i in m.inputs if i in where)):
            target = None  # (a deferred node reads a value made after that group)
        if target is None:
            target = Group(f"g{len(steps)}", position=len(steps))
            steps.append(target)
        # (a softmax joins a product's group only as an attention's: ``_target``)
        target.attention |= n.op == "Softmax" and "contraction" in target.kinds
        for m, lw in before + [(n, low)]:
            target.nodes.append(m)
            target.stmts.extend(lw.stmts)
            target.kinds.add(lw.kind)
            target.temps.extend(lw.temps)
            made = [o for o in m.outputs if o]
            target.produced.update(made)
            for o in made:
                where[o] = target
    _interfaces(steps, bound)
    return steps


def _deferred(bound, readers: dict) -> set:
    """The transposes whose one result, not a graph output, only one node reads, a
    contraction, and no view: each joins its reader's group (its
    statements first), instead of a group of its own that writes the moved copy to
    memory for the reader to read again (a transformer layer's query and value
    transposes, read by the attention's products)."""
    g = bound.graph
    out = set()
    for n in g.nodes:
        low = bound.lowered.get(n.name)
        outs = [o for o in n.outputs if o]
        if low is None or n.op != "Transpose" or len(outs) != 1 or \
                outs[0] in g.outputs or outs[0] in bound.views:
            continue
        rs = readers.get(outs[0], [])
        if len(rs) != 1 or rs[0].name not in bound.lowered or \
                bound.lowered[rs[0].name].kind != "contraction":
            continue
        out.add(n.name)
    return out


def _in_place_concats(bound) -> dict:
    """Concat node -> (sources, element offsets) for each concatenation whose inputs can
    be written in place: along an axis before which every dimension is 1 (each input is
    then one contiguous part of the result: channels of one image), each input made by
    a computed node, or a view of one (then that node's result is placed), not an
    input, a constant or another such concatenation, of the result's type, a source of
    no other one, at a 64-byte aligned offset, and neither it nor the result returned
    to the user (a returned value has its own memory).  SqueezeNet's fire modules: the
    expand convolutions' outputs were copied into the concatenation, ~5% of the run."""
    g, refs = bound.graph, bound.refs
    kept = set(g.outputs)  # returned values, and the values they are views of
    while True:
        more = {src for v, (src, _shape) in bound.views.items() if v in kept} - kept
        if not more:
            break
        kept |= more
    made = {o for n in g.nodes if n.name in bound.lowered for o in n.outputs if o}
    out: dict = {}
    used: set = set()
    for n in g.nodes:
        xs = [i for i in n.inputs if i]
        if n.op != "Concat" or n.name not in bound.lowered or len(xs) < 2 or \
                len(set(xs)) != len(xs) or len(n.outputs) != 1:
            continue
        y = n.outputs[0]
        r = refs.get(y)
        if r is None or r.value is not None or y in kept or not r.shape:
            continue
        axis = int(n.attr("axis", 0)) % len(r.shape)
        if any(d != 1 for d in r.shape[:axis]):
            continue
        offsets, at, roots = [], 0, []
        for x in xs:
            while x in bound.views and x not in kept:  # a reshaped result: its source
                x = bound.views[x][0]
            roots.append(x)
            rx = refs.get(x)
            if rx is None or rx.value is not None or x in kept or x in used or \
                    x not in made or rx.dtype != r.dtype or (at * r.dtype.itemsize) % 64:
                break
            offsets.append(at)
            at += rx.size
        else:
            if at == r.size and len(set(roots)) == len(roots):
                out[n.name] = (tuple(roots), tuple(offsets))
                used.update(roots)
                made.discard(y)  # not a source of another one
    return out


def _target(n, low, steps, where, bound, readers: dict):
    """The group node ``n`` may join, or None (``readers``: value -> the nodes that
    read it)."""
    producers = [where[i] for i in n.inputs if i in where]
    groups = [s for s in producers if isinstance(s, Group)]
    if not groups or low.kind == "opaque":
        return None
    last = max(groups, key=lambda s: s.position)
    if low.kind == "reduction" and _to_one_value(n, bound):
        return None  # needs all of its input first: see the module's docstring
    if "opaque" in last.kinds:
        return None
    two_products = low.kind == "contraction" and "contraction" in last.kinds
    mixed = {"contraction", "reduction"} <= last.kinds | {low.kind}
    after_attention = last.attention and low.kind in ("elementwise", "movement")
    if (two_products or mixed and not after_attention) and \
            not _attention(n, low, last, bound, readers):
        return None  # isl keeps them apart anyway; alone, the reductions fuse by rows
    if len(last.stmts) + len(low.stmts) > MAX_STATEMENTS:
        return None
    if any(s is not last and s.position > last.position for s in producers):
        return None  # it reads a view made after that group ran
    return last


def _attention(n, low, last, bound, readers: dict) -> bool:
    """Whether ``n`` continues an attention in ``last``: the last-axis ``Softmax`` of the
    scores of the one batched product in ``last`` (which holds no reduction yet), or
    the product of that softmax, made last in ``last``, with the values (``last`` then
    holds one product and the softmax).  The three then run per batch element and head
    (``poly/fusion.batch_fused``): the scores and their softmax, contracted, stay in
    the caches instead of going to memory and back between three groups."""
    products = [m for m in last.nodes if bound.lowered[m.name].kind == "contraction"]
    if len(products) != 1 or products[0].op != "MatMul" or \
            len(bound.refs[products[0].outputs[0]].shape) < 3:
        return False
    if n.op == "Softmax":  # (and its one reader is the product with the values)
        x = bound.refs[n.inputs[0]]
        rs = readers.get(n.outputs[0], [])
        return "reduction" not in last.kinds and n.inputs[0] in last.produced and \
            int(n.attr("axis", -1)) % len(x.shape) == len(x.shape) - 1 and \
            len(rs) == 1 and rs[0].op == "MatMul" and rs[0].inputs[0] == n.outputs[0]
    return n.op == "MatMul" and low.kind == "contraction" and last.attention and \
        last.nodes[-1].op == "Softmax" and n.inputs[0] == last.nodes[-1].outputs[0] and \
        len(bound.refs[n.outputs[0]].shape) >= 3


def _to_one_value(n, bound) -> bool:
    """``n`` reduces a tensor of several elements to one (a quantised model's dynamic
    range: the min and max of a whole activation)."""
    out = bound.refs.get(n.outputs[0]) if n.outputs and n.outputs[0] else None
    src = bound.refs.get(n.inputs[0]) if n.inputs and n.inputs[0] else None
    return out is not None and src is not None and out.size == 1 and src.size > 1


def _interfaces(steps, bound):
    """Inputs and outputs of each group: what crosses its boundary."""
    g = bound.graph
    read_by: dict = {}
    for s in steps:
        if isinstance(s, View):
            read_by.setdefault(s.source, set()).add(id(s))
        elif isinstance(s, Join):
            for v in s.sources:
                read_by.setdefault(v, set()).add(id(s))
        else:
            for n in s.nodes:
                for i in n.inputs:
                    if i:
                        read_by.setdefault(i, set()).add(id(s))
    for s in steps:
        if not isinstance(s, Group):
            continue
        seen = set()
        named = set(_TENSOR.findall("\n".join(s.stmts)))  # (a scalar is inlined)
        for n in s.nodes:
            for i in n.inputs:
                r = bound.refs.get(i) if i else None
                if i and i not in s.produced and i not in seen and r is not None and \
                        r.name in named:
                    seen.add(i)
                    s.inputs.append(i)
        s.outputs = [o for n in s.nodes for o in n.outputs  # empty results are constants
                     if o and bound.refs[o].value is None and
                     (o in g.outputs or read_by.get(o, set()) - {id(s)})]
