/* The machine's fp32 peak: FMA throughput of independent vector chains on every core.

       gcc -O3 -march=native -mprefer-vector-width=512 -fopenmp peak.c -o peak && ./peak

   Each OpenMP thread runs CHAINS independent multiply-add chains (acc = acc * a + b) on
   the widest vectors the target has (__m512 with AVX-512, __m256 with AVX2+FMA, else
   GCC vector extensions), 16 of them, or 12 with 16 vector registers; CHAINS exceeds
   FMA latency x FMA ports on current x86 cores, so the loop is bound by FMA
   throughput.  One FMA = 2 flops per lane.  Prints the best of several trials as one
   line:

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

/* 16 chains where there are 32 vector registers (AVX-512); 12 where there are 16: with
   16 chains, a and b and the accumulators took 18 of them, and gcc kept three chains on
   the stack (AVX2 on a Zen 5: 166 GFLOP/s on 2 cores, where polytc's sgemm ran 244) */
#if defined(__AVX512F__)
#define CHAINS 16
#else
#define CHAINS 12
#endif
#define CHAIN(k) c##k = FMA(c##k, a, b)

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
                c10 = SET1(seed + 10), c11 = SET1(seed + 11);
#if CHAINS == 16
            vec c12 = SET1(seed + 12), c13 = SET1(seed + 13), c14 = SET1(seed + 14),
                c15 = SET1(seed + 15);
#endif
            for (long i = 0; i < iters; i++) {
                CHAIN(0); CHAIN(1); CHAIN(2); CHAIN(3); CHAIN(4); CHAIN(5);
                CHAIN(6); CHAIN(7); CHAIN(8); CHAIN(9); CHAIN(10); CHAIN(11);
#if CHAINS == 16
                CHAIN(12); CHAIN(13); CHAIN(14); CHAIN(15);
#endif
            }
            vec s = c0 + c1 + c2 + c3 + c4 + c5 + c6 + c7 + c8 + c9 + c10 + c11;
#if CHAINS == 16
            s += c12 + c13 + c14 + c15;
#endif
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
