"""Recurrent layers: LSTM, GRU, RNN (forward, reverse, bidirectional; layouts 0 and 1).

The input projection of every time step and direction is one contraction
(``XW(t, d, b, g) +=! X(t, b, k) * W(d, g, k)``).  The recurrence is unrolled: each time
step of each direction is a few statements (the product of the previous hidden state with
``R``, then the gates, cell and hidden state, elementwise), since a statement runs over
its whole domain before the next one starts and so one statement cannot carry a
recurrence through a product.  The hidden states are written straight into ``Y``
(zero-initialised first: inside a program an unused ``Y`` is an untyped temporary, sized
by its first write).  Compiled alone (``opaque``).
"""
from __future__ import annotations

import numpy as np

from .registry import literal, op

# index names: none is a tensor name (v<k>, t<k>), a builtin (j0, y1) or a size
_T, _D, _B, _H, _G, _K = "st", "dr", "bt", "hd", "gt", "rk"

_DEFAULTS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"),
             "RNN": ("Tanh",)}
_N_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
# activation -> (template, default alpha, default beta); None: the parameter is unused
_ACTS = {
    "sigmoid": ("{one} / ({one} + exp(-({x})))", None, None),
    "tanh": ("tanh({x})", None, None),
    "relu": ("max({x}, {zero})", None, None),
    "affine": ("({a} * ({x}) + {b})", 1.0, 0.0),
    "leakyrelu": ("(({x}) >= {zero} ? ({x}) : {a} * ({x}))", 0.01, None),
    "thresholdedrelu": ("(({x}) > {a} ? ({x}) : {zero})", 1.0, None),
    "scaledtanh": ("{a} * tanh({b} * ({x}))", 1.0, 1.0),
    "hardsigmoid": ("max({zero}, min({one}, {a} * ({x}) + {b}))", 0.2, 0.5),
    "elu": ("(({x}) >= {zero} ? ({x}) : {a} * expm1({x}))", 1.0, None),
    "softsign": ("({x}) / ({one} + fabs({x}))", None, None),
    "softplus": ("log1p(exp({x}))", None, None),
}


def _plus(i, off):
    return i if off == 0 else f"{i} + {off}"


class _Rnn:
    """What the three layers share: reading the node, the input projection, the
    bookkeeping of time steps and the final states."""

    def __init__(self, ctx, kind):
        self.ctx, self.kind = ctx, kind
        ctx.result.kind = "opaque"
        x, w, r = ctx.input(0), ctx.input(1), ctx.input(2)
        self.x, self.w, self.r = x, w, r
        if x.dtype.kind != "f":
            ctx.fail(f"{kind} of {x.dtype.name} is not supported", unsupported=True)
        self.layout = int(ctx.attr("layout", 0))
        if self.layout not in (0, 1):
            ctx.fail(f"layout {self.layout}")
        if x.rank != 3 or w.rank != 3 or r.rank != 3:
            ctx.fail(f"X, W, R of ranks {x.rank}, {w.rank}, {r.rank}; they must be 3-d")
        self.T, self.B = (x.shape[0], x.shape[1]) if self.layout == 0 else \
            (x.shape[1], x.shape[0])
        self.I = x.shape[2]
        self.D = w.shape[0]
        self.H = r.shape[2]
        self.ng = _N_GATES[kind]
        GH = self.ng * self.H
        direction = ctx.attr("direction", "forward")
        if direction not in ("forward", "reverse", "bidirectional"):
            ctx.fail(f"direction '{direction}'")
        if self.D != (2 if direction == "bidirectional" else 1):
            ctx.fail(f"direction '{direction}' with W of {self.D} directions")
        self.reverse = [direction == "reverse" or d == 1 for d in range(self.D)]
        hs = ctx.attr("hidden_size")
        if hs is not None and int(hs) != self.H:
            ctx.fail(f"hidden_size {hs} but R has {self.H} columns")
        if w.shape != (self.D, GH, self.I) or r.shape != (self.D, GH, self.H):
            ctx.fail(f"W {list(w.shape)} and R {list(r.shape)} do not match "
                     f"{self.D} direction(s), {self.ng} gate(s) of {self.H} and {self.I} inputs")
        if self.T == 0:
            ctx.fail("an empty sequence", unsupported=True)
        self.bias = self._optional(3, (self.D, 2 * GH))
        lens = ctx.input(4, required=False) if len(ctx.inputs) > 4 else None
        if lens is not None:
            if lens.shape != (self.B,) or lens.dtype.kind not in "iu":
                ctx.fail(f"sequence_lens of shape {list(lens.shape)} and type "
                         f"{lens.dtype.name}; it must be int32[{self.B}]")
            if lens.value is not None:
                v = np.asarray(lens.value)
                if (v < 0).any() or (v > self.T).any():
                    ctx.fail(f"sequence_lens {v.tolist()} out of range 0..{self.T}")
                if (v == self.T).all():
                    lens = None
        self.lens = lens  # None: every sequence has the full length
        hshape = (self.D, self.B, self.H) if self.layout == 0 else (self.B, self.D, self.H)
        self.hshape = hshape
        self.h0 = self._optional(5, hshape)
        self.clip = ctx.attr("clip")
        self._acts()
        self.one, self.zero = literal(1, x.dtype), literal(0, x.dtype)

    # --- reading the node ------------------------------------------------------------------
    def _optional(self, k, shape):
        """Input ``k``, or None if absent or a constant zero."""
        ctx = self.ctx
        r = ctx.input(k, required=False) if len(ctx.inputs) > k else None
        if r is None:
            return None
        if r.shape != tuple(shape):
            ctx.fail(f"input {k} has shape {list(r.shape)}, not {list(shape)}")
        if r.dtype != self.x.dtype:
            ctx.fail(f"input {k} is {r.dtype.name}, X is {self.x.dtype.name}")
        if r.value is not None and not np.asarray(r.value).any():
            return None
        return r

    def _acts(self):
        ctx = self.ctx
        names = ctx.attr("activations")
        n = len(_DEFAULTS[self.kind])
        names = list(_DEFAULTS[self.kind]) * self.D if names is None else list(names)
        if len(names) != n * self.D:
            ctx.fail(f"{len(names)} activations for {self.D} direction(s); {self.kind} "
                     f"takes {n} per direction")
        alphas = list(ctx.attr("activation_alpha", ()) or ())
        betas = list(ctx.attr("activation_beta", ()) or ())
        self.acts = []
        for name in names:
            key = name.lower()
            if key not in _ACTS:
                ctx.fail(f"activation '{name}' is not supported", unsupported=True)
            t, a, b = _ACTS[key]
            if a is not None:
                a = alphas.pop(0) if alphas else a
            if b is not None:
                b = betas.pop(0) if betas else b
            self.acts.append((t, a, b))

    def act(self, d, k, text):
        """Activation ``k`` (f, g, h order) of direction ``d`` applied to ``text``."""
        t, a, b = self.acts[d * len(_DEFAULTS[self.kind]) + k]
        dt = self.x.dtype
        if self.clip is not None and not (self.kind == "LSTM" and k == 2):
            # the gates' inputs, not the cell state's (as onnxruntime does)
            c = literal(self.clip, dt)
            text = f"min(max({text}, -{c}), {c})"
        return t.format(x=text, one=self.one, zero=self.zero,
                        a=literal(a if a is not None else 0, dt),
                        b=literal(b if b is not None else 0, dt))

    # --- statements ------------------------------------------------------------------------
    def stmt(self, target, indices, rhs, op="=", ranges=None):
        """``target(indices) op rhs``; each index over ``ranges.get(i)``, by default the
        whole dimension (left-hand indices), reduction indices only from ``ranges``."""
        ranges = dict(ranges or {})
        where = []
        for i, d in zip(indices, target.shape):
            lo, hi = ranges.pop(i, (0, d))
            where.append(f"{i} in {lo}:{hi}")
        where += [f"{i} in {lo}:{hi}" for i, (lo, hi) in ranges.items()]
        self.ctx.result.stmts.append(f"{target(*indices)} {op} {rhs} where {', '.join(where)}")

    def project(self):
        """``XW(t, d, b, g)``: the input projection of every step and direction."""
        x, w = self.x, self.w
        GH = self.ng * self.H
        self.xw = self.ctx.temp((self.T, self.D, self.B, GH), x.dtype)
        xr = x(_T, _B, _K) if self.layout == 0 else x(_B, _T, _K)
        if self.I == 0:
            self.stmt(self.xw, [_T, _D, _B, _G], self.zero)
        else:
            rows = self.T * self.B
            self.stmt(self.xw, [_T, _D, _B, _G], f"{xr} * {self.operand(w, rows, _D, _G)}",
                      "+=!", {_K: (0, self.I)})

    def operand(self, m, rows, d, g):
        """The read of ``m`` (D, G, K) at (d, g, rk) as the right-hand operand of a
        product with ``rows`` rows per use.  From a few rows on, ``m`` is first
        transposed to a temporary (D, K, G): the products then read it unit-stride along
        the result's last dimension and become register-tiled contractions (``A B^T``
        vectorises each dot product instead, which suits a matrix-vector product).  A
        constant ``m`` (weights) is read as it is: the C target packs it into the
        contraction's micro-panels once, when the plan is made (``Options.constants``;
        the LSTM benchmark's recurrent product 54 -> 25 us a step)."""
        if rows < 4 or m.value is not None:
            return m(d, g, _K)
        key = "_t" + m.name
        if not hasattr(self, key):
            t = self.ctx.temp((m.shape[0], m.shape[2], m.shape[1]), m.dtype)
            self.stmt(t, [_D, _K, _G], m(_D, _G, _K))
            setattr(self, key, t)
        return getattr(self, key)(d, _K, g)

    def pre(self, d, t, gate, gates=None, bias_r=True):
        """The pre-activation of ``gate`` at hidden index ``hd`` (batch ``bt``): input
        projection, recurrent product ``gates`` (a temp (B, n*H) or None) and biases."""
        H, GH = self.H, self.ng * self.H
        text = self.xw(t, d, _B, _plus(_H, gate * H))
        if gates is not None:
            text += f" + {gates(_B, _plus(_H, gate * H))}"
        if self.bias is not None:
            text += f" + {self.bias(d, _plus(_H, gate * H))}"
            if bias_r:
                text += f" + {self.bias(d, _plus(_H, GH + gate * H))}"
        return f"({text})"

    def steps(self):
        """(direction, step, time index, previous time index or None) in run order."""
        for s in range(self.T):
            for d in range(self.D):
                t = self.T - 1 - s if self.reverse[d] else s
                prev = None if s == 0 else (t + 1 if self.reverse[d] else t - 1)
                yield d, s, t, prev

    def y(self):
        """The hidden states: ``Y`` itself (or a temporary in its place) or, with
        ``sequence_lens``, a temporary (T, D, B, H) whose states carry over the padding
        steps, copied to ``Y`` by ``finish``.  Zero-initialised: a temporary is sized by
        its first write."""
        shape = (self.T, self.D, self.B, self.H) if self.layout == 0 else \
            (self.B, self.T, self.D, self.H)
        if self.lens is None:
            self.state = self.ctx.out(0, shape, self.x.dtype)
            self.slayout = self.layout
        else:
            self.state = self.ctx.temp((self.T, self.D, self.B, self.H), self.x.dtype)
            self.slayout = 0
        self.sidx = [_T, _D, _B, _H] if self.slayout == 0 else [_B, _T, _D, _H]
        self.stmt(self.state, self.sidx, self.zero)

    def y_at(self, t, d, h=_H):
        """Text of the hidden state at time ``t``, direction ``d``, batch ``bt``, hidden
        ``h``."""
        return self.state(t, d, _B, h) if self.slayout == 0 else self.state(_B, t, d, h)

    def masked(self, t, new, old):
        """``new`` at the valid steps of each sequence, else ``old`` (None: zero)."""
        if self.lens is None:
            return new
        return f"(({t} < {self.lens(_B)}) ? {new} : {old if old is not None else self.zero})"

    def write_y(self, t, d, rhs, prev_text=None):
        """The state at time ``t`` and direction ``d`` is ``rhs`` (a text at (bt, hd)),
        or ``prev_text`` after the end of a shorter sequence."""
        self.stmt(self.state, self.sidx, self.masked(t, rhs, prev_text),
                  ranges={_T: (t, t + 1), _D: (d, d + 1)})

    def finish(self):
        """``Y`` from the carried states (zero after the end of each sequence)."""
        if self.lens is None or not self.ctx.wants(0):
            return
        shape = (self.T, self.D, self.B, self.H) if self.layout == 0 else \
            (self.B, self.T, self.D, self.H)
        y = self.ctx.out(0, shape, self.x.dtype)
        ix = [_T, _D, _B, _H] if self.layout == 0 else [_B, _T, _D, _H]
        self.stmt(y, ix, f"({_T} < {self.lens(_B)}) ? {self.state(_T, _D, _B, _H)} : "
                         f"{self.zero}")

    def h_prev(self, d, prev, h=_H):
        """The previous hidden state's text, or None (zero)."""
        if prev is not None:
            return self.y_at(prev, d, h)
        if self.h0 is None:
            return None
        return self.h0(d, _B, h) if self.layout == 0 else self.h0(_B, d, h)

    def recurrent(self, d, prev, rows):
        """Temp ``G(b, g) +=! Hprev(b, k) * R(d, g, k)`` for the first ``rows`` gate rows,
        or None if the previous state is zero."""
        hp = self.h_prev(d, prev, _K)
        if hp is None:
            return None
        g = self.ctx.temp((self.B, rows), self.x.dtype)
        self.stmt(g, [_B, _G], f"{hp} * {self.operand(self.r, self.B, d, _G)}", "+=!",
                  {_K: (0, self.H)})
        return g

    def final(self, k, last):
        """Output ``k`` (Y_h or Y_c): ``last[d]`` is direction d's text at (bt, hd)."""
        if not self.ctx.wants(k):
            return
        out = self.ctx.out(k, self.hshape, self.x.dtype)
        rhs = last[-1]
        for d in range(self.D - 2, -1, -1):
            rhs = f"({_D} < {d + 1} ? {last[d]} : {rhs})"
        ix = [_D, _B, _H] if self.layout == 0 else [_B, _D, _H]
        self.stmt(out, ix, rhs)

    def last_h(self):
        return [self.y_at(0 if self.reverse[d] else self.T - 1, d) for d in range(self.D)]


@op("LSTM")
def _lstm(ctx):
    m = _Rnn(ctx, "LSTM")
    H, dt = m.H, m.x.dtype
    c0 = m._optional(6, m.hshape)
    peep = m._optional(7, (m.D, 3 * H))
    forget = bool(ctx.attr("input_forget", 0))
    m.project()
    m.y()
    cells = {}  # direction -> the temp of the latest cell state
    for d, _s, t, prev in m.steps():
        g = m.recurrent(d, prev, 4 * H)
        if prev is not None:
            c_prev = cells[d](_B, _H)
        elif c0 is not None:
            c_prev = c0(d, _B, _H) if m.layout == 0 else c0(_B, d, _H)
        else:
            c_prev = None

        # gates in ONNX order i, o, f, c; peepholes i, o, f
        def gate(k, pk=None, c=c_prev, d=d, t=t, g=g):
            text = m.pre(d, t, k, g)
            if peep is not None and pk is not None and c is not None:
                text = f"({text} + {peep(d, _plus(_H, pk * H))} * {c})"
            return text
        i_g = m.act(d, 0, gate(0, 0))
        f_g = f"({m.one} - {i_g})" if forget else m.act(d, 0, gate(2, 2))
        c_g = m.act(d, 1, gate(3))
        cell = ctx.temp((m.B, H), dt)
        rhs = f"{i_g} * {c_g}" if c_prev is None else f"{f_g} * {c_prev} + {i_g} * {c_g}"
        m.stmt(cell, [_B, _H], m.masked(t, rhs, c_prev))
        cells[d] = cell
        o_g = m.act(d, 0, gate(1, 1, cell(_B, _H)))
        m.write_y(t, d, f"{o_g} * {m.act(d, 2, cell(_B, _H))}", m.h_prev(d, prev))
    m.finish()
    m.final(1, m.last_h())
    m.final(2, [cells[d](_B, _H) for d in range(m.D)])


@op("GRU")
def _gru(ctx):
    m = _Rnn(ctx, "GRU")
    H, dt = m.H, m.x.dtype
    lbr = bool(ctx.attr("linear_before_reset", 0))
    m.project()
    m.y()
    for d, _s, t, prev in m.steps():
        g = m.recurrent(d, prev, 3 * H if lbr else 2 * H)
        hp = m.h_prev(d, prev)
        z = m.act(d, 0, m.pre(d, t, 0, g))
        r = m.act(d, 0, m.pre(d, t, 1, g))
        if lbr:
            rec = []  # r . (Hprev R_h^T + Rb_h)
            if g is not None:
                rec.append(g(_B, _plus(_H, 2 * H)))
            if m.bias is not None:
                rec.append(m.bias(d, _plus(_H, 5 * H)))
            h_in = m.pre(d, t, 2, None, bias_r=False)
            if rec:
                h_in = f"({h_in} + {r} * ({' + '.join(rec)}))"
        else:
            gh = None
            if hp is not None:  # (r . Hprev) R_h^T
                rh = ctx.temp((m.B, H), dt)
                m.stmt(rh, [_B, _H], f"{r} * {hp}")
                gh = ctx.temp((m.B, H), dt)
                rr = m.operand(m.r, m.B, d, _plus(_H, 2 * H))
                m.stmt(gh, [_B, _H], f"{rh(_B, _K)} * {rr}",
                       "+=!", {_K: (0, H)})
            h_in = m.pre(d, t, 2, None)
            if gh is not None:
                h_in = f"({h_in} + {gh(_B, _H)})"
        h_new = m.act(d, 1, h_in)
        rhs = f"({m.one} - {z}) * {h_new}"
        if hp is not None:
            rhs += f" + {z} * {hp}"
        m.write_y(t, d, rhs, hp)
    m.finish()
    m.final(1, m.last_h())


@op("RNN")
def _rnn(ctx):
    m = _Rnn(ctx, "RNN")
    m.project()
    m.y()
    for d, _s, t, prev in m.steps():
        g = m.recurrent(d, prev, m.H)
        m.write_y(t, d, m.act(d, 0, m.pre(d, t, 0, g)), m.h_prev(d, prev))
    m.finish()
    m.final(1, m.last_h())
