/* The machine's fp32 peak: FMA throughput of independent vector chains on every core.

       gcc -O3 -march=native -mprefer-vector-width=512 -fopenmp peak.c -o peak && ./peak

   Each OpenMP thread runs CHAINS independent multiply-add chains (acc = acc * a + b) on
   the widest vectors the target has (__m512 with AVX-512, __m256 with AVX2+FMA, else
   GCC vector extensions); CHAINS exceeds FMA latency x FMA ports on current x86 cores,
   so the loop is bound by FMA throughput.  One FMA = 2 flops per lane.  Prints the best
   of several trials as one line:

       fp32_peak_gflops=<GFLOP/s> threads=<n> vector_bits=<bits> chains=<n>

   The optional argument is the number of loop iterations per thread and trial.
*/
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#if defined(__AVX512F__)
#include <immintrin.h>
typedef __m512 vec;
#define LANES 16
#define SET1(x) _mm512_set1_ps(x)
#define FMA(acc, a, b) _mm512_fmadd_ps(acc, a, b)
static float hsum(vec v) { return _mm512_reduce_add_ps(v); }
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
typedef __m256 vec;
#define LANES 8
#define SET1(x) _mm256_set1_ps(x)
#define FMA(acc, a, b) _mm256_fmadd_ps(acc, a, b)
static float hsum(vec v) {
    float t[8];
    _mm256_storeu_ps(t, v);
    return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}
#else
#define LANES 4
typedef float vec __attribute__((vector_size(4 * LANES)));
#define SET1(x) ((vec){x, x, x, x})
#define FMA(acc, a, b) ((acc) * (a) + (b))
static float hsum(vec v) { return v[0] + v[1] + v[2] + v[3]; }
#endif

#define CHAINS 16

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 20000000L;
    int threads = omp_get_max_threads();
    double best = 0.0;
    float sink = 0.0f;
    for (int trial = 0; trial < 7; trial++) {
        double t0 = omp_get_wtime();
#pragma omp parallel reduction(+ : sink)
        {
            const float seed = 1.0f + 1e-3f * (float)omp_get_thread_num();
            const vec a = SET1(0.9999999f), b = SET1(1e-7f);
            vec c0 = SET1(seed), c1 = SET1(seed + 1), c2 = SET1(seed + 2), c3 = SET1(seed + 3),
                c4 = SET1(seed + 4), c5 = SET1(seed + 5), c6 = SET1(seed + 6),
                c7 = SET1(seed + 7), c8 = SET1(seed + 8), c9 = SET1(seed + 9),
                c10 = SET1(seed + 10), c11 = SET1(seed + 11), c12 = SET1(seed + 12),
                c13 = SET1(seed + 13), c14 = SET1(seed + 14), c15 = SET1(seed + 15);
            for (long i = 0; i < iters; i++) {
                c0 = FMA(c0, a, b); c1 = FMA(c1, a, b); c2 = FMA(c2, a, b);
                c3 = FMA(c3, a, b); c4 = FMA(c4, a, b); c5 = FMA(c5, a, b);
                c6 = FMA(c6, a, b); c7 = FMA(c7, a, b); c8 = FMA(c8, a, b);
                c9 = FMA(c9, a, b); c10 = FMA(c10, a, b); c11 = FMA(c11, a, b);
                c12 = FMA(c12, a, b); c13 = FMA(c13, a, b); c14 = FMA(c14, a, b);
                c15 = FMA(c15, a, b);
            }
            vec s = c0 + c1 + c2 + c3 + c4 + c5 + c6 + c7 + c8 + c9 + c10 + c11 + c12 +
                    c13 + c14 + c15;
            sink += hsum(s);
        }
        double t = omp_get_wtime() - t0;
        double gflops = 2.0 * LANES * CHAINS * (double)iters * threads / t * 1e-9;
        if (gflops > best) best = gflops;
    }
    printf("fp32_peak_gflops=%.1f threads=%d vector_bits=%d chains=%d\n", best, threads,
           LANES * 32, CHAINS);
    fprintf(stderr, "(checksum %g)\n", (double)sink);
    return 0;
}
