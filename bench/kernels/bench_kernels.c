/* bench_kernels.c — CPU backend micro-benchmark: matvec GB/s per weight dtype (1 and 2
 * threads), GEMM GFLOP/s at n = 512 for Q4_K / Q8_0 / F32, against a streaming-read
 * memory bandwidth measured in the same run. Build and run with bench/kernels/run.sh.
 *
 * Usage: bench_kernels [isa]   (isa = scalar|avx2|avx512, default: best available)
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/cpu/cpu.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t g_rng = 88172645463325252ull;
static uint64_t rnd(void)
{
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return g_rng;
}

/* ---- streaming read bandwidth ---- */

struct rd { const uint64_t *p; size_t n; uint64_t out; };

static void *rd_main(void *arg)
{
    struct rd *r = arg;
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = 0; i + 4 <= r->n; i += 4)
        a += r->p[i], b ^= r->p[i + 1], c += r->p[i + 2], d ^= r->p[i + 3];
    r->out = a + b + c + d;
    return NULL;
}

static double read_bw(const uint64_t *buf, size_t n, int threads)
{
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        pthread_t t[8];
        struct rd r[8];
        double t0 = now();
        for (int i = 0; i < threads; i++) {
            r[i] = (struct rd){buf + n / threads * i, n / threads, 0};
            pthread_create(&t[i], NULL, rd_main, &r[i]);
        }
        for (int i = 0; i < threads; i++)
            pthread_join(t[i], NULL);
        double gbs = n * 8.0 / (now() - t0) / 1e9;
        best = gbs > best ? gbs : best;
    }
    return best;
}

/* ---- matmul ---- */

static void *make_w(int dt, int64_t k, int64_t m, size_t *bytes)
{
    size_t n = dtype_row_bytes(dt, k) * (size_t)m;
    uint8_t *w = aligned_alloc(64, (n + 63) & ~(size_t)63);
    for (size_t i = 0; i < n; i++)
        w[i] = (uint8_t)rnd();
    if (dt == DT_F32) /* finite floats */
        for (size_t i = 0; i < n / 4; i++)
            ((float *)w)[i] = (float)(rnd() % 2001) / 1000.0f - 1.0f;
    else if (dt == DT_F16 || dt == DT_BF16)
        for (size_t i = 0; i < n / 2; i++)
            ((uint16_t *)w)[i] = (uint16_t)(dt == DT_F16 ? 0x3000 + rnd() % 0x800 : 0x3e00 + rnd() % 0x100);
    *bytes = n;
    return w;
}

/* Seconds per matmul call (best of reps after a warm-up). */
static double time_mm(struct be *b, const struct be_tensor *t, const float *x, float *y, int n,
                      double budget)
{
    b->ops->matmul(b, y, x, n, t);
    double best = 1e9, start = now();
    int reps = 0;
    while (reps < 3 || (now() - start < budget && reps < 200)) {
        double t0 = now();
        b->ops->matmul(b, y, x, n, t);
        double dt = now() - t0;
        best = dt < best ? dt : best;
        reps++;
    }
    return best;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        setenv("CINFER_CPU_ISA", argv[1], 1);
    size_t nrd = (size_t)1 << 26; /* 512 MiB */
    uint64_t *buf = malloc(nrd * 8);
    for (size_t i = 0; i < nrd; i++)
        buf[i] = i * 2654435761u;
    double bw1 = read_bw(buf, nrd, 1), bw2 = read_bw(buf, nrd, 2);
    free(buf);
    printf("streaming read: %.1f GB/s (1 thread), %.1f GB/s (2 threads)\n", bw1, bw2);

    struct be *bes[2];
    for (int i = 0; i < 2; i++) {
        struct be_config cfg = {.n_threads = i + 1};
        bes[i] = be_new("cpu", &cfg, NULL);
        if (!bes[i]) {
            fprintf(stderr, "cannot create the CPU backend\n");
            return 1;
        }
    }
    printf("kernels: %s\n\n", be_cpu_isa(bes[0]));
    static const int types[] = {DT_F32, DT_F16, DT_BF16, DT_Q8_0, DT_Q4_0, DT_Q4_1, DT_Q5_0,
                                DT_Q5_1, DT_Q2_K, DT_Q3_K, DT_Q4_K, DT_Q5_K, DT_Q6_K};
    const int64_t K = 4096, M = 4096;
    float *x = malloc(sizeof(float) * 512 * K), *y = malloc(sizeof(float) * 512 * M);
    for (int64_t i = 0; i < 512 * K; i++)
        x[i] = (float)(rnd() % 2001) / 1000.0f - 1.0f;
    printf("matvec %lldx%lld (n = 1): weight GB/s, and %% of streaming read\n", (long long)M, (long long)K);
    printf("%-6s %10s %12s %12s\n", "dtype", "MiB", "1 thread", "2 threads");
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        int dt = types[ti];
        size_t nb;
        void *w = make_w(dt, K, M, &nb);
        struct be_tensor t = {.dtype = dt, .ne = {K, M, 1, 1}, .data = w, .nbytes = nb};
        double g1 = nb / time_mm(bes[0], &t, x, y, 1, 0.3) / 1e9;
        double g2 = nb / time_mm(bes[1], &t, x, y, 1, 0.3) / 1e9;
        printf("%-6s %10.1f %6.1f (%3.0f%%) %6.1f (%3.0f%%)\n", dtype_name(dt), nb / 1048576.0, g1,
               100 * g1 / bw1, g2, 100 * g2 / bw2);
        free(w);
    }
    printf("\nGEMM n = 512, %lldx%lld weights: GFLOP/s (2*n*M*K / time)\n", (long long)M, (long long)K);
    static const int gtypes[] = {DT_Q4_K, DT_Q8_0, DT_F32};
    for (size_t ti = 0; ti < 3; ti++) {
        int dt = gtypes[ti];
        size_t nb;
        void *w = make_w(dt, K, M, &nb);
        struct be_tensor t = {.dtype = dt, .ne = {K, M, 1, 1}, .data = w, .nbytes = nb};
        double fl = 2.0 * 512 * M * K;
        double g1 = fl / time_mm(bes[0], &t, x, y, 512, 0.5) / 1e9;
        double g2 = fl / time_mm(bes[1], &t, x, y, 512, 0.5) / 1e9;
        printf("%-6s %8.1f (1 thread) %8.1f (2 threads)\n", dtype_name(dt), g1, g2);
        free(w);
    }
    be_free(bes[0]);
    be_free(bes[1]);
    free(x), free(y);
    return 0;
}
