"""The exported model's C: ``model.c`` (the plan as tables, its layout at the run's
dimensions, the C API of ``model.h``), one source per kernel, the weights and a Makefile.

``model.c`` holds polytc's executor (``runtime/executor.py``: the same C that runs a
plan in Python) and calls it as the plan's ``Driver`` does: the pointer table ``p``
holds the sizes, weights, arena slices and scratch of the layout (``layout.py``), the
feeds and the caller's output buffers.  The layout is computed when a run brings
dimensions other than the last run's: the buffers grow, the varying sizes, offsets and
fill counts are evaluated from their polynomials.  Kernels keep their own code; their
exported symbols get a prefix per kernel (``ptk3_polytc_kernel_argv``), since every
kernel names its entry point alike.
"""
from __future__ import annotations

import re

import numpy as np

from ..runtime.executor import EXEC_SOURCE, FILL
from .layout import Poly

#: the dtypes of half-precision inputs and outputs (the model computes them in float32),
#: as numpy writes them in .npy files (bfloat16, ml_dtypes', as two bytes) -> the C
#: conversions' suffix
HALVES = {np.dtype(np.float16).str: "f16", "<V2": "bf16"}
_EXPORTED = re.compile(r"\b(polytc_(?:kernel_argv|kernel|prepack\d+))\b")


def _cstr(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _ints(values) -> str:
    return "{" + ", ".join(str(int(v)) for v in values) + "}" if len(values) else "{0}"


def _num(x) -> str:
    """A fitted number as C: a literal when it is constant."""
    if isinstance(x, Poly):
        c = x.constant
        return f"INT64_C({c})" if c is not None else f"({x.c()})"
    return f"INT64_C({int(x)})"


class Emitter:
    """The sources of one exported model.  ``layout``: ``layout.fit``'s structure;
    ``dims``: the symbolic dimensions' names; ``inputs``: (name, dtype str, shape of
    ints and ``-(j + 1)`` for dimension ``j``); ``data``: name -> array for every
    constant and packed operand the layout names."""

    def __init__(self, layout: dict, dims: list, inputs: list, data: dict):
        self.L, self.dims, self.inputs = layout, dims, inputs
        self.blob, self.offset = bytearray(), {}
        for key in sorted(data, key=str):
            self.blob += bytes(-len(self.blob) % 64)
            self.offset[key] = len(self.blob)
            self.blob += np.ascontiguousarray(data[key]).tobytes()
        self.sources: list = []  # unique kernel texts
        self.fn: list = []  # per fn index: its unique kernel
        for code, _sites in layout["kernels"].values():
            if code not in self.sources:
                self.sources.append(code)
            self.fn.append(self.sources.index(code))

    # --- files ----------------------------------------------------------------------
    def kernel_sources(self) -> list:
        return [_EXPORTED.sub(rf"ptk{u}_\1", code) for u, code in enumerate(self.sources)]

    def model_c(self) -> str:
        L = self.L
        p = L["p"]
        buffers = sorted({b for b, _at, _end in L["arena"].values()})
        scratch = [k for k, e in enumerate(p) if e[0] == "scratch"]
        sizes = [k for k, e in enumerate(p) if e[0] == "size"]
        nbuf = len(buffers) + len(scratch)
        code = [L["code"][0]] + [w for v, (width, word), count in L["fills"]
                                 for w in (FILL, 0, self._position(v), count, width, word)] \
            + list(L["code"][1:])
        out = ["/* An ONNX model compiled by polytc (polytc.aot): see model.h */",
               "#include <stdint.h>", "#include <stdio.h>", "#include <stdlib.h>",
               "#include <string.h>", "#ifdef _OPENMP", "#include <omp.h>", "#endif",
               '#include "model.h"', "",
               "extern const unsigned char pt_weights[];  /* weights.S: weights.bin */"]
        out += [f"int ptk{u}_polytc_kernel_argv(void *const *);"
                for u in range(len(self.sources))]
        out.append(EXEC_SOURCE.replace("int polytc_exec(", "static int polytc_exec("))
        out += [f"#define PT_NP {max(len(p), 1)}", f"#define PT_NCODE {len(code)}",
                f"#define PT_NBUF {max(nbuf, 1)}", f"#define PT_NDIMS {len(self.dims)}",
                f"#define PT_NIN {len(self.inputs)}", f"#define PT_NOUT {len(L['outputs'])}",
                f"#define PT_NSIZES {max(len(sizes), 1)}", ""]
        out.append("static const int64_t pt_code0[PT_NCODE] = " +
                   _ints([w if not isinstance(w, Poly) else (w.constant or 0)
                          for w in code]) + ";")
        out.append("static void *const pt_fn[] = {" + ", ".join(
            f"(void *)ptk{u}_polytc_kernel_argv" for u in self.fn) + ("" if self.fn else
                                                                     "0") + "};")
        out += self._sites() + self._info() + [_STRUCT, ""]
        out += self._layout(code, buffers, scratch, sizes) + self._run(buffers) + [_API]
        return "\n".join(out) + "\n"

    def weights_s(self) -> str:
        return ("/* the model's weights (weights.bin), aligned for the kernels */\n"
                "\t.section .rodata\n\t.balign 64\n\t.globl pt_weights\n"
                "\t.hidden pt_weights\npt_weights:\n\t.incbin \"weights.bin\"\n"
                "\t.byte 0\n\t.section .note.GNU-stack,\"\",@progbits\n")

    # --- parts of model.c ----------------------------------------------------------
    def _position(self, value) -> int:
        return next(k for k, e in enumerate(self.L["p"]) if e[0] in ("fresh", "arena")
                    and e[1] == value)

    def _sites(self) -> list:
        out = []
        for k, (_code, sites) in enumerate(self.L["kernels"].values()):
            out.append(f"static const char *const pt_sites{k}[] = {{" +
                       ", ".join(_cstr(s) for s in sites) + (", " if sites else "") + "0};")
        out.append("static const char *const *const pt_sites[] = {" + ", ".join(
            f"pt_sites{k}" for k in range(len(self.L["kernels"]))) +
            ("" if self.L["kernels"] else "0") + "};")
        return out

    def _info(self) -> list:
        """The tables behind the info functions of the API."""
        ins, outs = self.inputs, self.L["outputs"]
        rank = max([len(s) for _n, _d, s in ins] + [len(o[2]) for o in outs] + [1])
        out = [f"#define PT_RANK {rank}",
               "static const char *const pt_dim_names[] = {" +
               ", ".join(_cstr(n) for n in self.dims) + ("" if self.dims else "0") + "};",
               "static const char *const pt_in_names[] = {" +
               ", ".join(_cstr(n) for n, _d, _s in ins) + ("" if ins else "0") + "};",
               "static const char *const pt_in_dtypes[] = {" +
               ", ".join(_cstr(d) for _n, d, _s in ins) + ("" if ins else "0") + "};",
               "static const int pt_in_rank[] = " + _ints([len(s) for *_x, s in ins]) + ";",
               "static const int64_t pt_in_dims[][PT_RANK] = {" + ", ".join(
                   _ints(list(s) + [0] * (rank - len(s))) for *_x, s in ins) +
               ("" if ins else "{0}") + "};",
               "static const char *const pt_out_names[] = {" +
               ", ".join(_cstr(o[0]) for o in outs) + ("" if outs else "0") + "};",
               "static const char *const pt_out_dtypes[] = {" +
               ", ".join(_cstr(o[3]) for o in outs) + ("" if outs else "0") + "};",
               "static const int pt_out_rank[] = " + _ints([len(o[2]) for o in outs]) + ";",
               "static void pt_out_shape(int j, const int64_t *d, int64_t *s)", "{",
               "  (void)d; (void)s;", "  switch (j) {"]
        for j, o in enumerate(outs):
            out.append(f"  case {j}:" + "".join(f" s[{a}] = {_num(x)};"
                                                 for a, x in enumerate(o[2])) + " break;")
        out += ["  default: break;", "  }", "}", ""]
        return out

    def _layout(self, code, buffers, scratch, sizes) -> list:
        L = self.L
        out = ["/* the buffers, sizes, offsets and fill counts at the dimensions d */",
               "static int pt_layout(polytc_model *m, const int64_t *d)", "{",
               "  int64_t need[PT_NBUF] = {0}, e;", "  (void)d; (void)e;"]
        for i, b in enumerate(buffers):
            for v, (bb, _at, end) in sorted(L["arena"].items()):
                if bb == b:
                    out.append(f"  e = {_num(end)}; if (e > need[{i}]) need[{i}] = e;"
                               f"  /* {v} */")
        for i, k in enumerate(scratch):
            out.append(f"  need[{len(buffers) + i}] = {_num(L['p'][k][1])};")
        out += ["  for (int b = 0; b < PT_NBUF; ++b) {",
                "    if (need[b] < 0) return pt_fail(m, -3, \"a buffer's size is negative "
                "at these dimensions\");",
                "    if ((size_t)need[b] > m->cap[b] || !m->buf[b]) {",
                "      size_t n = ((size_t)need[b] + 63) / 64 * 64 + 64;",
                "      free(m->buf[b]);", "      m->buf[b] = aligned_alloc(64, n);",
                "      if (!m->buf[b]) { m->cap[b] = 0; return pt_fail(m, -4, "
                "\"out of memory\"); }",
                "      memset(m->buf[b], 0, n);", "      m->cap[b] = n - 64;", "    }", "  }"]
        for i, w in enumerate(code):
            if isinstance(w, Poly) and w.constant is None:
                out.append(f"  m->code[{i}] = {_num(w)};")
        for i, k in enumerate(sizes):
            out.append(f"  m->sizes[{i}] = {_num(L['p'][k][1])};")
            out.append(f"  m->p[{k}] = &m->sizes[{i}];")
        for k, e in enumerate(L["p"]):
            if e[0] == "arena":
                b, at, _end = L["arena"][e[1]]
                out.append(f"  m->p[{k}] = (char *)m->buf[{buffers.index(b)}] + "
                           f"{_num(at)};  /* {e[1]} */")
            elif e[0] == "scratch":
                out.append(f"  m->p[{k}] = m->buf[{len(buffers) + scratch.index(k)}];")
            elif e[0] in ("const", "packed"):
                out.append(f"  m->p[{k}] = (void *)(pt_weights + "
                           f"{self.offset[self._key(e)]});")
        out += ["  return 0;", "}", ""]
        return out

    @staticmethod
    def _key(e) -> str:
        return e[1] if e[0] == "const" else f"{e[1]}:packed{e[2]}"

    def _run(self, buffers) -> list:
        """Binding the feeds and outputs of a run, and the outputs no kernel writes."""
        L = self.L
        p = L["p"]
        out = ["static int pt_bind(polytc_model *m, const int64_t *d, const void *const *in,",
               "                   void *const *out)", "{", "  (void)d; (void)in; (void)out;"]
        for k, e in enumerate(p):
            if e[0] == "feed":
                i = e[1]
                name, dtype, _shape = self.inputs[i]
                if dtype in HALVES:  # widened into a float buffer of the model's own
                    out.append(f"  if (!(m->p[{k}] = pt_widen(m, {i}, in[{i}], d, "
                               f"pt_from_{HALVES[dtype]}))) return -1;")
                elif name in L["aligned"]:  # a kernel reads it at full vector width
                    out.append(f"  if (!(m->p[{k}] = pt_aligned(m, {i}, in[{i}], d))) "
                               "return -1;")
                else:
                    out.append(f"  m->p[{k}] = (void *)in[{i}];")
        store: dict = {}  # a returned value -> the output whose buffer holds it
        copies = []
        names = [nm for nm, *_x in self.inputs]
        for j, (n, r, _shape, dtype) in enumerate(L["outputs"]):
            half = HALVES.get(dtype)  # computed in float, rounded into the caller's buffer
            if any(e == ("fresh", r) for e in p):
                if r not in store:
                    store[r] = j
                    k = p.index(("fresh", r))
                    if half:
                        out.append(f"  if (!(m->p[{k}] = pt_wide_out(m, {j}, d))) "
                                   f"return -1;  /* {n} */")
                        copies.append(f"  pt_to_{half}(out[{j}], m->wide[{j}], "
                                      f"pt_out_bytes({j}, d) / 2);  /* {n} */")
                    else:
                        out.append(f"  m->p[{k}] = out[{j}];  /* {n} */")
                    continue
                j0 = store[r]
                src = f"m->wide[{j0}]" if L["outputs"][j0][3] in HALVES else f"out[{j0}]"
            elif r in L["arena"]:
                b, at, _end = L["arena"][r]
                src = f"(char *)m->buf[{buffers.index(b)}] + {_num(at)}"
            elif r in names:  # (a half input's bytes are the half output's)
                src = f"in[{names.index(r)}]"
                half = half if self.inputs[names.index(r)][1] not in HALVES else None
            else:
                src = f"pt_weights + {self.offset[r]}"
            copies.append(f"  pt_to_{half}(out[{j}], {src}, pt_out_bytes({j}, d) / 2);  /* {n} */"
                          if half else
                          f"  memcpy(out[{j}], {src}, (size_t)pt_out_bytes({j}, d));  /* {n} */")
        out += ["  return 0;", "}", "",
                "static void pt_copy_outputs(polytc_model *m, const int64_t *d, "
                "const void *const *in, void *const *out)", "{",
                "  (void)m; (void)d; (void)in; (void)out;"] + copies + ["}", ""]
        return out


#: the model's state: its layout at the last run's dimensions
_STRUCT = r"""
struct polytc_model {
  int threads, ready;
  int64_t dims[PT_NDIMS > 0 ? PT_NDIMS : 1];
  int64_t code[PT_NCODE];
  int64_t sizes[PT_NSIZES];
  void *p[PT_NP];
  void *buf[PT_NBUF];  /* the arena's buffers, then the kernels' scratch */
  size_t cap[PT_NBUF];
  void *copy[PT_NIN > 0 ? PT_NIN : 1];  /* feeds copied aligned, or widened to float */
  size_t copy_cap[PT_NIN > 0 ? PT_NIN : 1];
  void *wide[PT_NOUT > 0 ? PT_NOUT : 1];  /* float16 outputs as computed, in float */
  size_t wide_cap[PT_NOUT > 0 ? PT_NOUT : 1];
  char error[1024];
};

/* *buf holds at least n bytes, 64-byte aligned; 0 when out of memory */
static void *pt_grow(void **buf, size_t *cap, size_t n)
{
  if (n > *cap || !*buf) {
    free(*buf);
    *buf = aligned_alloc(64, (n + 63) / 64 * 64 + 64);
    *cap = *buf ? n : 0;
  }
  return *buf;
}

static int pt_fail(polytc_model *m, int rc, const char *what)
{
  snprintf(m->error, sizeof m->error, "%s", what);
  return rc;
}

static int64_t pt_item(const char *dtype)
{
  return strtol(dtype + 2, 0, 10);  /* "<f4" */
}

static int64_t pt_in_bytes(int i, const int64_t *d)
{
  int64_t n = pt_item(pt_in_dtypes[i]);
  for (int a = 0; a < pt_in_rank[i]; ++a)
    n *= pt_in_dims[i][a] >= 0 ? pt_in_dims[i][a] : d[-pt_in_dims[i][a] - 1];
  return n;
}

static int64_t pt_out_bytes(int j, const int64_t *d)
{
  int64_t s[PT_RANK], n = pt_item(pt_out_dtypes[j]);
  pt_out_shape(j, d, s);
  for (int a = 0; a < pt_out_rank[j]; ++a)
    n *= s[a];
  return n;
}

static void *pt_aligned(polytc_model *m, int i, const void *a, const int64_t *d)
{
  if (!((uintptr_t)a & 63))
    return (void *)a;
  size_t n = (size_t)pt_in_bytes(i, d);
  if (!pt_grow(&m->copy[i], &m->copy_cap[i], n))
    return 0;
  memcpy(m->copy[i], a, n);
  return m->copy[i];
}

/* half precision in and out: float16, and bfloat16 (the top half of a float's bits),
   both rounded to nearest even as numpy and ml_dtypes do */
static float pt_from_f16(const void *a, size_t k) { return (float)((const _Float16 *)a)[k]; }
static float pt_from_bf16(const void *a, size_t k)
{
  uint32_t u = (uint32_t)((const uint16_t *)a)[k] << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void *pt_widen(polytc_model *m, int i, const void *a, const int64_t *d,
                      float (*from)(const void *, size_t))
{
  size_t n = (size_t)pt_in_bytes(i, d) / 2;
  float *f = pt_grow(&m->copy[i], &m->copy_cap[i], 4 * n);
  for (size_t k = 0; f && k < n; ++k)
    f[k] = from(a, k);
  return f;
}

static void *pt_wide_out(polytc_model *m, int j, const int64_t *d)
{
  return pt_grow(&m->wide[j], &m->wide_cap[j], 2 * (size_t)pt_out_bytes(j, d));
}

static void pt_to_f16(void *dst, const void *src, int64_t n)
{
  _Float16 *h = dst;
  const float *f = src;
  for (int64_t k = 0; k < n; ++k)
    h[k] = (_Float16)f[k];
}

static void pt_to_bf16(void *dst, const void *src, int64_t n)
{
  uint16_t *h = dst;
  for (int64_t k = 0; k < n; ++k) {
    uint32_t u;
    memcpy(&u, (const float *)src + k, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)  /* NaN: quiet, sign kept */
      h[k] = (uint16_t)((u >> 16) | 0x40);
    else
      h[k] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
}"""

#: the functions of model.h
_API = r"""
POLYTC_API polytc_model *polytc_model_create(int num_threads)
{
  polytc_model *m = calloc(1, sizeof *m);
  if (!m)
    return 0;
  m->threads = num_threads;
  memcpy(m->code, pt_code0, sizeof pt_code0);
  return m;
}

POLYTC_API void polytc_model_destroy(polytc_model *m)
{
  if (!m)
    return;
  for (int b = 0; b < PT_NBUF; ++b)
    free(m->buf[b]);
  for (int i = 0; i < PT_NIN; ++i)
    free(m->copy[i]);
  for (int j = 0; j < PT_NOUT; ++j)
    free(m->wide[j]);
  free(m);
}

POLYTC_API void polytc_model_set_threads(polytc_model *m, int num_threads)
{
  m->threads = num_threads;
}

POLYTC_API const char *polytc_model_error(const polytc_model *m)
{
  return m ? m->error : "no model";
}

POLYTC_API int polytc_model_run(polytc_model *m, const int64_t *dims,
                                const void *const *inputs, void *const *outputs)
{
  int64_t none[1] = {0};
  const int64_t *d = PT_NDIMS ? dims : none;
  if (!m)
    return -1;
  if (PT_NDIMS && !d)
    return pt_fail(m, -2, "the model has symbolic dimensions: pass their values");
  for (int j = 0; j < PT_NDIMS; ++j)
    if (d[j] < 1) {
      snprintf(m->error, sizeof m->error, "dimension '%s' is %lld; it must be at least 1",
               pt_dim_names[j], (long long)d[j]);
      return -2;
    }
  if (!m->ready || memcmp(m->dims, d, sizeof(int64_t) * (PT_NDIMS ? PT_NDIMS : 1))) {
    int rc = pt_layout(m, d);
    if (rc)
      return rc;
    memcpy(m->dims, d, sizeof(int64_t) * (PT_NDIMS ? PT_NDIMS : 1));
    m->ready = 1;
  }
  if (pt_bind(m, d, inputs, outputs))
    return pt_fail(m, -4, "out of memory");
#ifdef _OPENMP
  if (m->threads > 0)
    omp_set_num_threads(m->threads);
#endif
  int step = 0;
  int rc = polytc_exec(m->code, PT_NCODE, pt_fn, m->p, &step, 0);
  if (rc) {
    const char *const *sites = pt_sites[step];
    int n = 0;
    while (sites[n])
      ++n;
    snprintf(m->error, sizeof m->error, "%s", rc > 0 && rc <= n ? sites[rc - 1]
             : "a kernel failed");
    return rc;
  }
  pt_copy_outputs(m, d, inputs, outputs);
  return 0;
}

POLYTC_API int polytc_model_num_dims(void) { return PT_NDIMS; }
POLYTC_API const char *polytc_model_dim_name(int j)
{ return j >= 0 && j < PT_NDIMS ? pt_dim_names[j] : 0; }
POLYTC_API int polytc_model_num_inputs(void) { return PT_NIN; }
POLYTC_API const char *polytc_model_input_name(int i)
{ return i >= 0 && i < PT_NIN ? pt_in_names[i] : 0; }
POLYTC_API const char *polytc_model_input_dtype(int i)
{ return i >= 0 && i < PT_NIN ? pt_in_dtypes[i] : 0; }
POLYTC_API int polytc_model_input_rank(int i)
{ return i >= 0 && i < PT_NIN ? pt_in_rank[i] : -1; }
POLYTC_API int64_t polytc_model_input_dim(int i, int axis)
{ return i >= 0 && i < PT_NIN && axis >= 0 && axis < pt_in_rank[i] ? pt_in_dims[i][axis] : 0; }
POLYTC_API int polytc_model_num_outputs(void) { return PT_NOUT; }
POLYTC_API const char *polytc_model_output_name(int j)
{ return j >= 0 && j < PT_NOUT ? pt_out_names[j] : 0; }
POLYTC_API const char *polytc_model_output_dtype(int j)
{ return j >= 0 && j < PT_NOUT ? pt_out_dtypes[j] : 0; }
POLYTC_API int polytc_model_output_rank(int j)
{ return j >= 0 && j < PT_NOUT ? pt_out_rank[j] : -1; }
POLYTC_API int polytc_model_output_shape(int j, const int64_t *dims, int64_t *shape)
{
  int64_t none[1] = {0};
  if (j < 0 || j >= PT_NOUT)
    return -1;
  pt_out_shape(j, PT_NDIMS ? dims : none, shape);
  return 0;
}
"""
