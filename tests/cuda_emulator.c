/* A CUDA driver (libcuda) that runs polytc's kernels on the host, for the tests of the
   cuda target where there is no GPU (tests/conftest.py builds it and points
   POLYTC_CUDA_DRIVER at it).  It exports `polytc_cuda_emulator`, so polytc's runtime
   hands it CUDA source instead of PTX.
   - Memory is host memory (not zeroed); a module is the source compiled by gcc as C
     (its `extern "C"` blanked) with a prelude that maps the CUDA keywords to the
     emulator's (threadIdx, __shared__, __syncthreads, ...), and one trampoline per
     kernel that passes it the launch's pointers.
   - A launch runs the blocks one after another.  The threads of a block run one at a
     time, each up to its next __syncthreads (coroutines: ucontext), so a barrier holds
     exactly when every thread of the block has reached it; a read of another thread's
     write that no barrier orders sees the write or not deterministically, which is how
     a missing barrier shows.  A block whose threads leave at different barriers (a
     barrier some threads skip) fails the launch with CUDA_ERROR_LAUNCH_FAILED. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

typedef int CUresult;
enum { OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, INVALID_DEVICE = 101,
       INVALID_CONTEXT = 201, INVALID_SOURCE = 300, INVALID_PTX = 218, NOT_FOUND = 500,
       LAUNCH_FAILED = 719 };
int polytc_cuda_emulator = 1;

typedef struct { unsigned x, y, z; } dim3;
typedef struct { dim3 t, b, bd, gd; void (*sync)(void); } state_t;  /* the prelude's */
typedef struct { void *so; state_t *st; int barriers; } module_t;
typedef struct { void (*run)(void **); module_t *m; } function_t;

static const char PRELUDE[] =
    "#define _GNU_SOURCE\n#include <stdint.h>\n#include <stdbool.h>\n#include <math.h>\n"
    "struct pt_emu_dim3 { unsigned x, y, z; };\n"
    "struct { struct pt_emu_dim3 t, b, bd, gd; void (*sync)(void); } pt_emu;\n"
    "#define threadIdx pt_emu.t\n#define blockIdx pt_emu.b\n"
    "#define blockDim pt_emu.bd\n#define gridDim pt_emu.gd\n"
    "#define __global__\n#define __device__\n#define __shared__ static\n"
    "#define __launch_bounds__(n)\n#define __syncthreads() pt_emu.sync()\n"
    "static inline int atomicCAS(int *p, int cmp, int v) {\n"
    "  int old = *p; if (old == cmp) *p = v; return old; }\n#line 1 \"kernel.cu\"\n";

static int context, current;

CUresult cuInit(unsigned flags) { return flags ? INVALID_VALUE : OK; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return OK; }
CUresult cuDeviceGetCount(int *n) { *n = 1; return OK; }
CUresult cuDeviceGet(int *d, int ordinal) { *d = 0; return ordinal ? INVALID_DEVICE : OK; }
CUresult cuDeviceGetName(char *buf, int n, int d) {
    snprintf(buf, n, "polytc CUDA emulator");
    return d ? INVALID_DEVICE : OK;
}
CUresult cuDeviceGetAttribute(int *v, int attr, int d) {
    switch (attr) {
    case 1: *v = 1024; break;   /* threads per block */
    case 8: *v = 49152; break;  /* shared memory per block */
    case 16: *v = 132; break;   /* multiprocessors (an H100's) */
    case 75: *v = 9; break;     /* compute capability */
    case 76: *v = 0; break;
    default: return INVALID_VALUE;
    }
    return d ? INVALID_DEVICE : OK;
}
CUresult cuDevicePrimaryCtxRetain(void **c, int d) { *c = &context; return d ? INVALID_DEVICE : OK; }
CUresult cuCtxSetCurrent(void *c) { current = c == &context; return current ? OK : INVALID_CONTEXT; }
CUresult cuCtxSynchronize(void) { return current ? OK : INVALID_CONTEXT; }

/* --- modules: gcc on the source, one trampoline per kernel -------------------------- */
static void log_to(unsigned n, int *opts, void **vals, const char *text) {
    for (unsigned i = 0; i < n; i++)
        if (opts[i] == 5) {
            size_t cap = 0;
            for (unsigned j = 0; j < n; j++)
                if (opts[j] == 6) cap = (size_t)(uintptr_t)vals[j];
            if (cap) snprintf((char *)vals[i], cap, "%s", text);
        }
}

/* the kernels: the identifier before the '(' after each "__global__ void" (and its
   __launch_bounds__), and how many parameters the list holds (all pointers) */
static int kernels(const char *src, char names[][128], int *params, int max) {
    int n = 0;
    for (const char *p = strstr(src, "__global__ void"); p && n < max;
         p = strstr(p + 1, "__global__ void")) {
        const char *open = strchr(p, '(');
        if (open && !strncmp(open - 17, "__launch_bounds__", 17)) open = strchr(strchr(open, ')'), '(');
        if (!open) break;
        const char *end = open;
        while (end > p && end[-1] == ' ') end--;
        const char *start = end;
        while (start > p && (start[-1] == '_' || (start[-1] >= '0' && start[-1] <= '9') ||
                             ((start[-1] | 32) >= 'a' && (start[-1] | 32) <= 'z'))) start--;
        snprintf(names[n], 128, "%.*s", (int)(end - start), start);
        int count = 0, any = 0;
        for (const char *c = open + 1; *c && *c != ')'; c++) {
            count += *c == ',';
            any |= *c != ' ';
        }
        params[n++] = any ? count + 1 : 0;
    }
    return n;
}

CUresult cuModuleLoadDataEx(void **mod, const char *image, unsigned n, int *opts, void **vals) {
    if (!current) return INVALID_CONTEXT;
    if (strstr(image, ".version") && strstr(image, ".target")) {
        log_to(n, opts, vals, "the CUDA emulator runs CUDA source, not PTX");
        return INVALID_PTX;
    }
    module_t *m = calloc(1, sizeof *m);
    *mod = m;  /* a module without kernels, until one is compiled */
    if (!strstr(image, "__global__")) return OK;
    char dir[] = "/tmp/polytc-cuda-emu-XXXXXX", path[256], so[256], cmd[1024];
    if (!mkdtemp(dir)) return OUT_OF_MEMORY;
    snprintf(path, sizeof path, "%s/k.c", dir);
    snprintf(so, sizeof so, "%s/k.so", dir);
    FILE *f = fopen(path, "w");
    if (!f) return OUT_OF_MEMORY;
    static char names[64][128];
    int params[64], k = kernels(image, names, params, 64);
    char *text = strdup(image);
    for (char *e = strstr(text, "extern \"C\""); e; e = strstr(e, "extern \"C\""))
        memset(e, ' ', 10);
    fprintf(f, "%s%s\n", PRELUDE, text);
    free(text);
    for (int i = 0; i < k; i++) {
        fprintf(f, "void pt_emu_%s(void **p) { %s(", names[i], names[i]);
        for (int j = 0; j < params[i]; j++)
            fprintf(f, "%s(void *)(uintptr_t)*(uint64_t *)p[%d]", j ? ", " : "", j);
        fprintf(f, "); }\n");
    }
    fclose(f);
    snprintf(cmd, sizeof cmd, "gcc -std=gnu11 -O1 -w -shared -fPIC -o %s %s -lm 2>%s/log",
             so, path, dir);
    int rc = system(cmd);
    void *h = rc ? NULL : dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        char msg[4096] = "gcc failed: ", logpath[300];
        snprintf(logpath, sizeof logpath, "%s/log", dir);
        FILE *l = fopen(logpath, "r");
        if (l) { size_t r = fread(msg + 12, 1, sizeof msg - 13, l); msg[12 + r] = 0; fclose(l); }
        log_to(n, opts, vals, msg);
    }
    unlink(path); unlink(so);
    snprintf(path, sizeof path, "%s/log", dir); unlink(path); rmdir(dir);
    if (!h) return INVALID_SOURCE;
    m->so = h;
    m->st = dlsym(h, "pt_emu");
    m->barriers = strstr(image, "__syncthreads") != NULL;
    return OK;
}

CUresult cuModuleGetFunction(void **fn, void *mod, const char *name) {
    char sym[160];
    snprintf(sym, sizeof sym, "pt_emu_%s", name);
    module_t *m = mod;
    void *run = m && m->so ? dlsym(m->so, sym) : NULL;
    if (!run) return NOT_FOUND;
    function_t *f = calloc(1, sizeof *f);
    f->run = (void (*)(void **))run;
    f->m = m;
    *fn = f;
    return OK;
}

/* --- launches ------------------------------------------------------------------------ */
enum { STACK = 256 * 1024 };
static ucontext_t sched, *ctx;
static char **stacks;
static int nstacks, cur, *done, *arrived;
static function_t *running;
static void **running_params;
static pthread_mutex_t launching = PTHREAD_MUTEX_INITIALIZER;  /* one launch at a time */

static void barrier(void) {
    arrived[cur]++;
    swapcontext(&ctx[cur], &sched);
}

static void thread_main(void) {
    running->run(running_params);
    done[cur] = 1;
}

static void set_thread(state_t *st, int i) {
    st->t.x = i % st->bd.x;
    st->t.y = i / st->bd.x % st->bd.y;
    st->t.z = i / (st->bd.x * st->bd.y);
}

static CUresult run_block(function_t *f, void **params, int threads) {
    state_t *st = f->m->st;
    if (!f->m->barriers) {
        for (int i = 0; i < threads; i++) {
            set_thread(st, i);
            f->run(params);
        }
        return OK;
    }
    if (threads > nstacks) {
        stacks = realloc(stacks, threads * sizeof *stacks);
        ctx = realloc(ctx, threads * sizeof *ctx);
        done = realloc(done, threads * sizeof *done);
        arrived = realloc(arrived, threads * sizeof *arrived);
        for (int i = nstacks; i < threads; i++) stacks[i] = malloc(STACK);
        nstacks = threads;
    }
    running = f;
    for (int i = 0; i < threads; i++) {
        getcontext(&ctx[i]);
        ctx[i].uc_stack.ss_sp = stacks[i];
        ctx[i].uc_stack.ss_size = STACK;
        ctx[i].uc_link = &sched;
        makecontext(&ctx[i], thread_main, 0);
        done[i] = arrived[i] = 0;
    }
    for (int left = threads; left;) {
        for (cur = 0; cur < threads; cur++)
            if (!done[cur]) {
                set_thread(st, cur);
                swapcontext(&sched, &ctx[cur]);
            }
        left = 0;
        for (int i = 0; i < threads; i++) {  /* all at the same barrier, or all out */
            left += !done[i];
            if (arrived[i] != arrived[0] || done[i] != done[0]) return LAUNCH_FAILED;
        }
    }
    return OK;
}

CUresult cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shared, void *stream,
                        void **params, void **extra) {
    function_t *f = fn;
    if (!current) return INVALID_CONTEXT;
    if (!f || shared || stream || extra || !gx || !gy || !gz || !bx || !by || !bz ||
        bx * by * bz > 1024) return INVALID_VALUE;
    pthread_mutex_lock(&launching);
    running_params = params;
    state_t *st = f->m->st;
    st->sync = barrier;
    st->gd.x = gx; st->gd.y = gy; st->gd.z = gz;
    st->bd.x = bx; st->bd.y = by; st->bd.z = bz;
    CUresult rc = OK;
    for (unsigned z = 0; z < gz && !rc; z++)
        for (unsigned y = 0; y < gy && !rc; y++)
            for (unsigned x = 0; x < gx && !rc; x++) {
                st->b.x = x; st->b.y = y; st->b.z = z;
                rc = run_block(f, params, bx * by * bz);
            }
    pthread_mutex_unlock(&launching);
    return rc;
}

/* --- memory -------------------------------------------------------------------------- */
CUresult cuMemAlloc_v2(uint64_t *p, size_t n) {
    if (!current || !n) return INVALID_VALUE;
    void *m = aligned_alloc(256, (n + 255) / 256 * 256);
    if (m) memset(m, 0xa5, n);  /* not zeros: a read of memory nothing wrote shows */
    *p = (uintptr_t)m;
    return m ? OK : OUT_OF_MEMORY;
}
CUresult cuMemFree_v2(uint64_t p) { free((void *)(uintptr_t)p); return OK; }
CUresult cuMemcpyHtoD_v2(uint64_t d, const void *s, size_t n) {
    memcpy((void *)(uintptr_t)d, s, n);
    return OK;
}
CUresult cuMemcpyDtoH_v2(void *d, uint64_t s, size_t n) {
    memcpy(d, (void *)(uintptr_t)s, n);
    return OK;
}
CUresult cuMemsetD8_v2(uint64_t d, unsigned char v, size_t n) {
    memset((void *)(uintptr_t)d, v, n);
    return OK;
}
CUresult cuMemsetD16_v2(uint64_t d, unsigned short v, size_t n) {
    for (size_t i = 0; i < n; i++) ((uint16_t *)(uintptr_t)d)[i] = v;
    return OK;
}
CUresult cuMemsetD32_v2(uint64_t d, unsigned v, size_t n) {
    for (size_t i = 0; i < n; i++) ((uint32_t *)(uintptr_t)d)[i] = v;
    return OK;
}
CUresult cuGetErrorName(int rc, const char **s) {
    switch (rc) {
    case INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; return OK;
    case INVALID_PTX: *s = "CUDA_ERROR_INVALID_PTX"; return OK;
    case INVALID_SOURCE: *s = "CUDA_ERROR_INVALID_SOURCE"; return OK;
    case NOT_FOUND: *s = "CUDA_ERROR_NOT_FOUND"; return OK;
    case LAUNCH_FAILED: *s = "CUDA_ERROR_LAUNCH_FAILED"; return OK;
    default: return INVALID_VALUE;
    }
}
