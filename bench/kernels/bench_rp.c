/* bench_rp.c — repacked weights against the file layout, side by side: for each dtype with
 * a repacked layout, matvec (n = 1) with the weights in cache (1536 x 1536) and streaming
 * from memory (4096 x 4096 copies over BENCH_WS_MIB, default 256), and GEMM (n = 64), each
 * timed file / repacked alternately three times; prints weight GB/s (GEMM: GMAC/s) and the
 * median of the three repacked / file ratios. Build and run: BENCH=rp bench/kernels/run.sh.
 *
 * Usage: bench_rp [threads [dtype ...]]  (threads default 1; dtypes by name, default all
 * repacked ones). The repacked side is CINFER_CPU_REPACK=all.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/quant.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static uint64_t g_rng = 88172645463325252ull;
static uint64_t rnd(void)
{
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return g_rng;
}

/* Random blocks with small fp16 scales (d, and dmin where the type has one). */
static void *make_w(int dt, int64_t k, int64_t m, size_t *nb)
{
    *nb = dtype_row_bytes(dt, k) * (size_t)m;
    uint8_t *w = malloc(*nb);
    for (size_t i = 0; i < *nb; i++)
        w[i] = (uint8_t)rnd();
    size_t bb = dtype_block_bytes(dt);
    int off = dt == DT_Q6_K ? 208 : 0;
    uint16_t h = 0x2000;
    for (size_t b = 0; b < *nb / bb; b++) {
        memcpy(w + b * bb + off, &h, 2);
        if (dt == DT_Q4_K || dt == DT_Q5_K || dt == DT_Q4_1 || dt == DT_Q5_1)
            memcpy(w + b * bb + 2, &h, 2);
    }
    return w;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Seconds per call of y = x * w^T (n rows) over the copies, run for ~secs. */
static double time_mm(struct be *b, struct be_tensor *t, int nt, const float *x, float *y, int n,
                      double secs)
{
    int it = 0;
    double t0 = now(), t1;
    do {
        b->ops->matmul(b, y, x, n, &t[it % nt]);
        it++;
        t1 = now();
    } while (t1 - t0 < secs);
    return (t1 - t0) / it;
}

static void run(struct be *bes[2], int dt, int64_t k, int64_t m, int copies, int n, const char *what)
{
    struct be_tensor t[2][64];
    size_t nb = 0;
    for (int l = 0; l < 2; l++)
        for (int c = 0; c < copies; c++) {
            void *w = make_w(dt, k, m, &nb);
            t[l][c] = (struct be_tensor){.dtype = dt, .ne = {k, m, 1, 1}, .data = w, .nbytes = nb};
            bes[l]->ops->weight_prepare(bes[l], &t[l][c], NULL);
            if (t[l][c].data != w)
                free(w);
        }
    float *x = malloc(sizeof(float) * (size_t)k * n), *y = malloc(sizeof(float) * (size_t)m * n);
    for (int64_t i = 0; i < k * n; i++)
        x[i] = (float)(rnd() % 2001) / 1000.0f - 1.0f;
    double v[2][3], r[3];
    for (int rep = 0; rep < 3; rep++) {
        for (int l = 0; l < 2; l++) {
            double s = time_mm(bes[l], t[l], copies, x, y, n, 0.3);
            v[l][rep] = n == 1 ? nb / s / 1e9 : (double)n * m * k / s / 1e9;
        }
        r[rep] = v[1][rep] / v[0][rep];
    }
    qsort(r, 3, sizeof r[0], cmp_d);
    printf("%-5s %-14s file %6.1f %6.1f %6.1f  rp %6.1f %6.1f %6.1f  %s  rp/file %.2f\n",
           dtype_name(dt), what, v[0][0], v[0][1], v[0][2], v[1][0], v[1][1], v[1][2],
           n == 1 ? "GB/s  " : "GMAC/s", r[1]);
    fflush(stdout);
    for (int l = 0; l < 2; l++)
        for (int c = 0; c < copies; c++)
            bes[l]->ops->free(bes[l], t[l][c].data);
    free(x), free(y);
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    static const int all[] = {DT_Q4_K, DT_Q6_K, DT_Q8_0, DT_Q5_0, DT_Q4_0};
    int dts[16], nd = 0;
    for (int i = 2; i < argc && nd < 16; i++)
        for (int d = 0; d < DT_COUNT; d++)
            if (!strcasecmp(argv[i], dtype_name(d)))
                dts[nd++] = d;
    if (!nd)
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            dts[nd++] = all[i];
    struct be *bes[2];
    const char *modes[2] = {"0", "all"};
    for (int l = 0; l < 2; l++) {
        setenv("CINFER_CPU_REPACK", modes[l], 1);
        struct be_config cfg = {.n_threads = threads};
        bes[l] = be_new("cpu", &cfg, NULL);
        if (!bes[l]) {
            fprintf(stderr, "cannot create the CPU backend\n");
            return 1;
        }
    }
    size_t ws = (size_t)(getenv("BENCH_WS_MIB") ? atol(getenv("BENCH_WS_MIB")) : 256) << 20;
    printf("kernels %s, %d thread%s; streaming working set %zu MiB\n", be_cpu_isa(bes[0]), threads,
           threads > 1 ? "s" : "", ws >> 20);
    for (int i = 0; i < nd; i++) {
        int dt = dts[i];
        int copies = (int)(ws / (dtype_row_bytes(dt, 4096) * 4096));
        copies = copies < 1 ? 1 : copies > 64 ? 64 : copies;
        run(bes, dt, 1536, 1536, 1, 1, "matvec cache");
        run(bes, dt, 4096, 4096, copies, 1, "matvec stream");
        run(bes, dt, 1536, 1536, 1, 64, "gemm n=64");
    }
    be_free(bes[0]);
    be_free(bes[1]);
    return 0;
}
