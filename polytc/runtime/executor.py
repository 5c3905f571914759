"""The executor of a plan's steps (``graph/native.py``): the same C for every model,
compiled once per machine and compiler (then from the disk cache).  A model's own C
driver had cost each cold compile one more gcc run at its end (75 ms for BERT-2L)."""
from __future__ import annotations

import threading

import numpy as np

from ..codegen_c.compiler import build_shared_object
from .ffi import Library

_lock = threading.Lock()
_EXEC: list = []  # (library, function), once loaded


#: the executor: after the most arguments of a call, instructions ``CALL k nargs arg...``,
#: ``FILL k buffer count width word`` (``count`` elements of ``width`` bytes, each
#: ``word``) and ``RUNS k buffer start count inner istride outer ostride width word``
#: (``outer`` x ``inner`` runs of ``count`` elements, run ``(o, i)`` from element
#: ``start + o ostride + i istride``: the border of a padded buffer, ``graph/padplace.py``),
#: ``k`` the step
EXEC_SOURCE = r"""/* polytc's plan executor (polytc/graph/native.py) */
/* glue, not loops that count: -O1 (gcc 138 -> 95 ms of a model's first compile with an
   empty cache, BERT-2L's 0.965 -> 0.933 s; the fills below are vector stores at any
   level) */
#pragma GCC optimize ("O1")
#include <stdint.h>
#include <string.h>
#include <time.h>
#if defined(__linux__) && defined(_OPENMP) && !defined(PT_NO_PLACE)
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>
int sched_getcpu(void);

/* OpenMP's worker threads, each pinned to a CPU other than the calling thread's (see
   runtime/placement.py), again whenever the caller is on another CPU than the last
   time or its team size changed; left to Linux again while ``polytc_placement(0)``
   (a busy machine) */
static int pt_want = 1;
/* the caller's CPU and team size at the last decision; whether its workers are pinned */
static __thread int pt_seen_cpu = -2, pt_seen_team = 0, pt_pinned = 0;

void polytc_placement(int on)
{
  __atomic_store_n(&pt_want, on, __ATOMIC_RELAXED);
}

static void pt_place(void)
{
  int team = omp_get_max_threads();
  if (team < 2) return;
  int want = __atomic_load_n(&pt_want, __ATOMIC_RELAXED);
  int cpu = want ? sched_getcpu() : -1;
  if (cpu >= 1024) cpu = -1;
  if (cpu == pt_seen_cpu && team == pt_seen_team) return;
  pt_seen_cpu = cpu;
  pt_seen_team = team;
  unsigned long mask[16] = {0};  /* the caller's CPUs (1024 at most) */
  if (syscall(SYS_sched_getaffinity, 0, sizeof mask, mask) <= 0) return;
  int on[1024], n = 0;  /* the caller's other CPUs, from the one after its own round */
  for (int i = 1; i <= 1024 && cpu >= 0; ++i) {
    int c = (cpu + i) % 1024;
    if (c != cpu && (mask[c / 64] >> (c % 64) & 1)) on[n++] = c;
  }
  if (n == 0 || team - 1 > n)  /* one CPU, or more workers than CPUs: left to Linux */
    cpu = -1;
  if (cpu < 0 && !pt_pinned) return;
  pt_pinned = cpu >= 0;
  int now[256], pick[256];
  #pragma omp parallel num_threads(team < 256 ? team : 256)
  {
    int t = omp_get_thread_num(), nt = omp_get_num_threads();
    now[t] = sched_getcpu();
    #pragma omp barrier
    #pragma omp single
    if (cpu >= 0) {
      /* a worker keeps the CPU Linux gave it unless the caller or another worker has
         it; the others take the free ones after the caller's, in turn */
      char used[1024] = {0};
      used[cpu] = 1;
      for (int u = 1; u < nt; ++u) {
        int c = now[u];
        pick[u] = c >= 0 && c < 1024 && !used[c] && (mask[c / 64] >> (c % 64) & 1) ? c : -1;
        if (pick[u] >= 0) used[pick[u]] = 1;
      }
      for (int u = 1, k = 0; u < nt; ++u)
        if (pick[u] < 0) {
          int m = 0;
          while (m < n && used[on[(k + m) % n]]) ++m;
          pick[u] = on[(k + m) % n];
          used[pick[u]] = 1;
          k = (k + m + 1) % n;
        }
    }
    if (t > 0) {
      unsigned long one[16] = {0};
      if (cpu >= 0) one[pick[t] / 64] = 1UL << (pick[t] % 64);
      /* (unplaced: the caller's CPUs, as a new thread has them) */
      syscall(SYS_sched_setaffinity, 0, sizeof mask, cpu < 0 ? mask : one);
    }
  }
}
#else
void polytc_placement(int on) { (void)on; }
static void pt_place(void) {}
#endif

void polytc_place(void) { pt_place(); }

#ifdef __linux__
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
int sched_getcpu(void);
#define PT_CHUNK ((size_t)1 << 20)

/* faulting in the pages of ranges ``at[r]``, ``len[r]`` bytes (page-aligned) writable
   (madvise's MADV_POPULATE_WRITE, Linux 5.14) 1 MiB at a time, each chunk taken by
   whichever thread asks next (see memory.populate); a call refused (an older Linux)
   leaves its pages to fault at their first touch */
struct pt_job { long n; size_t count, next; int cpu; void **at; size_t *len; pthread_t th; };

static void pt_job_init(struct pt_job *j, void *const *at, const size_t *len, long n)
{
  j->n = n;
  j->next = 0;
  j->count = 0;
  j->at = (void **)at;
  j->len = (size_t *)len;
  for (long r = 0; r < n; ++r)
    j->count += (len[r] + PT_CHUNK - 1) / PT_CHUNK;
}

static void pt_drain(struct pt_job *j)
{
  for (;;) {
    size_t k = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
    if (k >= j->count) return;
    long r = 0;
    while (k >= (j->len[r] + PT_CHUNK - 1) / PT_CHUNK) {
      k -= (j->len[r] + PT_CHUNK - 1) / PT_CHUNK;
      ++r;
    }
    size_t lo = k * PT_CHUNK, hi = lo + PT_CHUNK < j->len[r] ? lo + PT_CHUNK : j->len[r];
    madvise((char *)j->at[r] + lo, hi - lo, 23);  /* MADV_POPULATE_WRITE */
  }
}

/* now, over ``threads`` threads of OpenMP's pool */
void polytc_populate(void *const *at, const size_t *len, long n, int threads)
{
  struct pt_job j;
  pt_job_init(&j, at, len, n);
  pt_place();
  #pragma omp parallel num_threads(threads)
  pt_drain(&j);
}

static void *pt_populating(void *p)
{
  struct pt_job *j = p;
  unsigned long one[16] = {0};
  one[j->cpu / 64] = 1UL << (j->cpu % 64);
  syscall(SYS_sched_setaffinity, 0, sizeof one, one);
  pt_drain(j);
  return NULL;
}

/* begun on a thread of its own, pinned to the calling thread's next CPU, while the
   caller goes on (a plan's Python); NULL where the caller has no other CPU or no
   thread starts (nothing begun) */
void *polytc_populate_start(void *const *at, const size_t *len, long n)
{
  int cpu = sched_getcpu();
  unsigned long mask[16] = {0};
  if (cpu < 0 || cpu >= 1024 || syscall(SYS_sched_getaffinity, 0, sizeof mask, mask) <= 0)
    return NULL;
  int other = -1;
  for (int i = 1; i < 1024 && other < 0; ++i) {
    int c = (cpu + i) % 1024;
    if (mask[c / 64] >> (c % 64) & 1) other = c;
  }
  if (other < 0) return NULL;
  struct pt_job *j = malloc(sizeof *j + (size_t)n * (sizeof(void *) + sizeof(size_t)));
  if (!j) return NULL;
  void **a = (void **)(j + 1);
  size_t *l = (size_t *)(a + n);
  memcpy(a, at, (size_t)n * sizeof *a);
  memcpy(l, len, (size_t)n * sizeof *l);
  pt_job_init(j, a, l, n);
  j->cpu = other;
  if (pthread_create(&j->th, NULL, pt_populating, j)) {
    free(j);
    return NULL;
  }
  return j;
}

/* the rest of a begun job done with ``threads`` - 1 threads of OpenMP's pool beside
   its own thread, which is then joined */
void polytc_populate_finish(void *job, int threads)
{
  struct pt_job *j = job;
  if (!j) return;
  pt_place();
  #pragma omp parallel num_threads(threads > 1 ? threads - 1 : 1)
  pt_drain(j);
  pthread_join(j->th, NULL);
  free(j);
}
#else
void polytc_populate(void *const *at, const size_t *len, long n, int threads)
{
  (void)at; (void)len; (void)n; (void)threads;
}
void *polytc_populate_start(void *const *at, const size_t *len, long n)
{
  (void)at; (void)len; (void)n;
  return 0;
}
void polytc_populate_finish(void *job, int threads) { (void)job; (void)threads; }
#endif

typedef int (*pt_kernel)(void *const *);

static double pt_now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef uint64_t pt_fill_v __attribute__((vector_size(32), aligned(1), may_alias));

static void pt_fill(void *dst, int64_t count, int64_t width, uint64_t word)
{
  size_t n = (size_t)(count * width);
  if (!word) { memset(dst, 0, n); return; }
  if (width == 1) { memset(dst, (int)word, n); return; }
  uint64_t w8 = word;  /* the element repeated over 8 bytes, then over 32 */
  for (int64_t b = width; b < 8; b *= 2)
    w8 |= w8 << (8 * b);
  pt_fill_v v = {w8, w8, w8, w8};
  char *d = dst;
  for (; n >= 32; n -= 32, d += 32)
    *(pt_fill_v *)d = v;
  memcpy(d, &v, n);  /* (d is a whole number of elements past dst) */
}

static void pt_runs(char *base, const int64_t *a, int64_t width, uint64_t word)
{
  int64_t start = a[0], count = a[1], inner = a[2], istride = a[3], outer = a[4];
  int64_t ostride = a[5];
  uint64_t w8 = word;  /* the element repeated over 8 bytes */
  for (int64_t b = width; b < 8; b *= 2)
    w8 |= w8 << (8 * b);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      char *dst = base + (start + o * ostride + i * istride) * width;
      if (count * width == 8) memcpy(dst, &w8, 8);  /* one store: a 1-pixel border */
      else pt_fill(dst, count, width, word);
    }
}

int polytc_exec(const int64_t *code, long n, void *const *fn, void *const *p, int *step,
                double *t)
{
  void *args[code[0] > 0 ? code[0] : 1];  /* code[0]: the most arguments of a call */
  long at = 1, k = -1;
  double t0 = 0.0;
  pt_place();
  while (at < n) {
    if (code[at + 1] != k) {  /* a new step */
      k = code[at + 1];
      if (t) t0 = pt_now();
    }
    if (code[at] == 1) {  /* FILL k buffer count width word */
      pt_fill(p[code[at + 2]], code[at + 3], code[at + 4], (uint64_t)code[at + 5]);
      at += 6;
      continue;
    }
    if (code[at] == 2) {  /* RUNS k buffer start count inner istride outer ostride ... */
      double r0 = t ? pt_now() : 0.0;
      pt_runs(p[code[at + 2]], code + at + 3, code[at + 9], (uint64_t)code[at + 10]);
      if (t) t[k] += pt_now() - r0;
      at += 11;
      continue;
    }
    int64_t nargs = code[at + 2];  /* CALL k nargs arg... */
    for (int64_t a = 0; a < nargs; ++a)
      args[a] = p[code[at + 3 + a]];
    int rc = ((pt_kernel)fn[k])(args);
    if (t) t[k] += pt_now() - t0;
    if (rc) { *step = (int)k; return rc; }
    at += 3 + nargs;
  }
  return 0;
}
"""
CALL, FILL, RUNS = 0, 1, 2


def fill_word(dtype, fill) -> tuple[int, int]:
    """``(width, word)``: an element of ``dtype`` equal to ``fill``, as the unsigned
    integer of its bytes (bit-exact: -inf, NaN, -1)."""
    raw = np.full(1, fill, dtype).tobytes()
    word = int.from_bytes(raw, "little")
    return len(raw), word - (1 << 64) if word >= 1 << 63 else word


def executor():
    """``polytc_exec`` of this machine's build (``warm`` builds it in the background)."""
    return _executor()[1]


def placement():
    """``polytc_placement(on)`` of the same library: OpenMP's workers pinned (1, the
    default) or left to Linux (0) from the next run on."""
    return _executor()[0].function("polytc_placement", "int", "void")


def place():
    """``polytc_place()`` of the same library: the calling thread's workers placed as
    ``polytc_exec`` places them (before a kernel called alone)."""
    return _executor()[0].function("polytc_place", "void", "void")


def populate_pages():
    """``polytc_populate(at, len, n, threads)`` of the same library (``memory.populate``)."""
    return _executor()[0].function("polytc_populate", "void *const *, const size_t *, "
                                   "long, int", "void")


def populate_begun():
    """``(polytc_populate_start(at, len, n), polytc_populate_finish(job, threads))`` of the
    same library (``memory.populate_start``)."""
    lib = _executor()[0]
    return (lib.function("polytc_populate_start", "void *const *, const size_t *, long",
                         "void *"),
            lib.function("polytc_populate_finish", "void *, int", "void"))


def _executor():
    from .. import config

    with _lock:
        if not _EXEC:
            source = EXEC_SOURCE if config.pin_threads() else \
                "#define PT_NO_PLACE 1\n" + EXEC_SOURCE
            lib = Library(build_shared_object(source, {"name": "polytc_exec"}))
            _EXEC.append((lib, lib.function(
                "polytc_exec", "const int64_t *, long, void *const *, void *const *, "
                "int *, double *")))
    return _EXEC[0]
