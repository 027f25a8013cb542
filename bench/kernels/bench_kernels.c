/* bench_kernels.c — CPU backend micro-benchmark: matvec GB/s per weight dtype (1 and 2
 * threads), GEMM GFLOP/s at n = 512 for Q4_K / Q8_0 / F32, against a streaming-read
 * memory bandwidth measured in the same run. Build and run with bench/kernels/run.sh.
 *
 * Q4_K and Q6_K also get a row "(rp)" with the weights repacked at weight_prepare (the
 * layout the model runs with where the kernel level has repacked kernels; CINFER_CPU_REPACK=0
 * turns those rows off).
 *
 * Usage: bench_kernels [isa [threads_a threads_b]]  (isa = scalar|avx2|avx512|best;
 * default best; thread counts default 1 and 2)
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
    /* four streams at once, as a matvec over several rows has in flight; vectorized at -O3 */
    size_t q = r->n / 4;
    const uint64_t *p0 = r->p, *p1 = p0 + q, *p2 = p1 + q, *p3 = p2 + q;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i < q; i++)
        s0 += p0[i], s1 += p1[i], s2 += p2[i], s3 += p3[i];
    r->out = s0 + s1 + s2 + s3;
    return NULL;
}

static double read_bw(const uint64_t *buf, size_t n, int threads)
{
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        pthread_t t[256];
        struct rd r[256];
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
    for (size_t i = 0; i + 8 <= n; i += 8) {
        uint64_t r = rnd();
        memcpy(w + i, &r, 8);
    }
    if (dt == DT_F32) /* finite floats */
        for (size_t i = 0; i < n / 4; i++)
            ((float *)w)[i] = (float)(rnd() % 2001) / 1000.0f - 1.0f;
    else if (dt == DT_F16 || dt == DT_BF16)
        for (size_t i = 0; i < n / 2; i++)
            ((uint16_t *)w)[i] = (uint16_t)(dt == DT_F16 ? 0x3000 + rnd() % 0x800 : 0x3e00 + rnd() % 0x100);
    *bytes = n;
    return w;
}

/* Seconds per matmul call: median-free simple mean over reps after a warm-up, cycling
 * through nt copies of the weights so that they come from memory, not cache. */
static double time_mm(struct be *b, const struct be_tensor *t, int nt, const float *x, float *y,
                      int n, double budget)
{
    b->ops->matmul(b, y, x, n, &t[0]);
    double start = now();
    int reps = 0;
    while (reps < 3 || (now() - start < budget && reps < 400))
        b->ops->matmul(b, y, x, n, &t[reps++ % nt]);
    return (now() - start) / reps;
}

enum { MAX_COPIES = 256 };

/* Copies of a random (k, m) weight of dtype dt totalling at least min_bytes (the copies
 * share contents but not addresses, so each call streams its weights from memory). */
static int make_copies(int dt, int64_t k, int64_t m, size_t min_bytes, struct be_tensor *t)
{
    size_t nb;
    void *w0 = make_w(dt, k, m, &nb);
    int nt = 0;
    t[nt++] = (struct be_tensor){.dtype = dt, .ne = {k, m, 1, 1}, .data = w0, .nbytes = nb};
    while (nt < MAX_COPIES && (size_t)nt * nb < min_bytes) {
        void *w = aligned_alloc(64, (nb + 63) & ~(size_t)63);
        memcpy(w, w0, nb);
        t[nt++] = (struct be_tensor){.dtype = dt, .ne = {k, m, 1, 1}, .data = w, .nbytes = nb};
    }
    return nt;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "best") != 0)
        setenv("CINFER_CPU_ISA", argv[1], 1);
    int tha = argc > 3 ? atoi(argv[2]) : 1, thb = argc > 3 ? atoi(argv[3]) : 2;
    size_t nrd = (size_t)1 << 26; /* 512 MiB */
    uint64_t *buf = malloc(nrd * 8);
    for (size_t i = 0; i < nrd; i++)
        buf[i] = i * 2654435761u;
    double bw1 = read_bw(buf, nrd, tha), bw2 = read_bw(buf, nrd, thb);
    free(buf);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nall = ncpu > 0 && ncpu <= 256 ? (int)ncpu : 1;
    buf = malloc(nrd * 8);
    for (size_t i = 0; i < nrd; i++)
        buf[i] = i;
    double bwall = read_bw(buf, nrd, nall);
    free(buf);
    printf("streaming read: %.1f GB/s (%d thr), %.1f GB/s (%d thr), %.1f GB/s (all %d cores)\n",
           bw1, tha, bw2, thb, bwall, nall);

    struct be *bes[2];
    for (int i = 0; i < 2; i++) {
        struct be_config cfg = {.n_threads = i ? thb : tha};
        bes[i] = be_new("cpu", &cfg, NULL);
        if (!bes[i]) {
            fprintf(stderr, "cannot create the CPU backend\n");
            return 1;
        }
    }
    /* weights cycle through a working set well above the last-level cache */
    size_t ws_bytes = (size_t)(getenv("BENCH_WS_MIB") ? atol(getenv("BENCH_WS_MIB")) : 1024) << 20;
    printf("kernels: %s; matvec working set %zu MiB\n\n", be_cpu_isa(bes[0]), ws_bytes >> 20);
    static const int types[] = {DT_F32, DT_F16, DT_BF16, DT_Q8_0, DT_Q4_0, DT_Q4_1, DT_Q5_0,
                                DT_Q5_1, DT_Q2_K, DT_Q3_K, DT_Q4_K, DT_Q5_K, DT_Q6_K};
    const int64_t K = 4096, M = 4096;
    float *x = malloc(sizeof(float) * 512 * K), *y = malloc(sizeof(float) * 512 * M);
    for (int64_t i = 0; i < 512 * K; i++)
        x[i] = (float)(rnd() % 2001) / 1000.0f - 1.0f;
    printf("matvec %lldx%lld (n = 1): weight GB/s, and %% of streaming read\n", (long long)M, (long long)K);
    printf("%-6s %10s %9d thr %9d thr\n", "dtype", "MiB", tha, thb);
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        int dt = types[ti];
        if (getenv("BENCH_KQ") && dt != DT_Q4_K && dt != DT_Q6_K) /* only the repacked types */
            continue;
        struct be_tensor t[MAX_COPIES];
        int nt = make_copies(dt, K, M, ws_bytes, t);
        size_t nb = t[0].nbytes;
        double g1 = nb / time_mm(bes[0], t, nt, x, y, 1, 0.4) / 1e9;
        double g2 = nb / time_mm(bes[1], t, nt, x, y, 1, 0.4) / 1e9;
        printf("%-6s %10.1f %6.1f (%3.0f%%) %6.1f (%3.0f%%)\n", dtype_name(dt), nb / 1048576.0, g1,
               100 * g1 / bw1, g2, 100 * g2 / bw2);
        for (int i = 0; i < nt; i++)
            free(t[i].data);
        if (dt == DT_Q4_K || dt == DT_Q6_K) { /* the same, repacked */
            nt = make_copies(dt, K, M, ws_bytes, t);
            void *orig[MAX_COPIES];
            for (int i = 0; i < nt; i++) {
                orig[i] = t[i].data;
                bes[0]->ops->weight_prepare(bes[0], &t[i], NULL);
            }
            if (t[0].data != orig[0]) {
                g1 = nb / time_mm(bes[0], t, nt, x, y, 1, 0.4) / 1e9;
                g2 = nb / time_mm(bes[1], t, nt, x, y, 1, 0.4) / 1e9;
                printf("%-6s %10.1f %6.1f (%3.0f%%) %6.1f (%3.0f%%)\n", dt == DT_Q4_K ? "Q4_K rp" : "Q6_K rp",
                       nb / 1048576.0, g1, 100 * g1 / bw1, g2, 100 * g2 / bw2);
            }
            for (int i = 0; i < nt; i++) {
                if (t[i].data != orig[i])
                    bes[0]->ops->free(bes[0], t[i].data);
                free(orig[i]);
            }
        }
    }
    printf("\nGEMM n = 512, %lldx%lld weights: GFLOP/s (2*n*M*K / time)\n", (long long)M, (long long)K);
    static const int gtypes[] = {DT_Q4_K, DT_Q6_K, DT_Q8_0, DT_F32, DT_Q4_K, DT_Q6_K};
    for (size_t ti = 0; ti < 6; ti++) {
        int dt = gtypes[ti];
        size_t nb;
        void *w = make_w(dt, K, M, &nb);
        struct be_tensor t = {.dtype = dt, .ne = {K, M, 1, 1}, .data = w, .nbytes = nb};
        if (ti >= 4) { /* repacked */
            bes[0]->ops->weight_prepare(bes[0], &t, NULL);
            if (t.data == w) {
                free(w);
                continue;
            }
        }
        double fl = 2.0 * 512 * M * K;
        double g1 = fl / time_mm(bes[0], &t, 1, x, y, 512, 0.5) / 1e9;
        double g2 = fl / time_mm(bes[1], &t, 1, x, y, 512, 0.5) / 1e9;
        printf("%-6s%s %8.1f (%d thr) %8.1f (%d thr)\n", dtype_name(dt), ti >= 4 ? " rp" : "", g1, tha,
               g2, thb);
        if (t.data != w)
            bes[0]->ops->free(bes[0], t.data);
        free(w);
    }
    be_free(bes[0]);
    be_free(bes[1]);
    free(x), free(y);
    return 0;
}
