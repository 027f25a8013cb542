/* bench_attn.c — the CPU attention's split schedule against the in-place one, side by side:
 * one decode token (one sequence) at a long context, F16 KV, the heads of Qwen2.5-0.5B
 * (14 query / 2 KV heads of 64), Qwen2.5-1.5B (12 / 2 of 128) and Gemma 3 270M (4 / 1 of
 * 256); the token attends over `layers` copies of the cache in turn (a decode step's
 * layers: the K/V stream from memory, as in a real step). Each case is timed split off /
 * on alternately three times (wall clock, ~0.4 s each); prints microseconds per layer and
 * the K/V bytes read per second, the process CPU time per layer (all threads, spinning
 * workers included: at 1 thread the kernel's own cost), and the median of the three
 * off / on wall-time ratios (> 1: the split is faster). Build and run: BENCH=attn bench/kernels/run.sh [threads [ctx ...]].
 *
 * Usage: bench_attn [threads [ctx ...]]  (threads default 2, contexts default 2048 8192);
 * env BENCH_LAYERS (default 24), BENCH_NTOK (tokens of the step, default 1: a decode step;
 * e.g. 64: the last chunk of a long prefill, whose K/V rows are shared in cache).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/cpu/cpu.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static struct be *open_cpu(int threads, int split)
{
    if (!split)
        setenv("CINFER_CPU_ATTN_SPLIT", "0", 1);
    struct be_config cfg = {.n_threads = threads};
    struct cerr e = {0};
    struct be *b = be_new("cpu", &cfg, &e);
    unsetenv("CINFER_CPU_ATTN_SPLIT");
    if (!b)
        fprintf(stderr, "cpu backend: %s\n", e.msg);
    return b;
}

struct shape {
    const char *name;
    int n_head, n_kv, hd;
};

/* Seconds per layer: one token attending at position ctx - 1 over each layer's cache; *cpu:
 * process CPU seconds per layer (all threads, spinning workers included). */
static double time_attn(struct be *b, struct be_attn *a, void **kc, void **vc, int layers,
                        const float *q, float *out, double secs, double *cpu)
{
    int it = 0;
    double t0 = now(), c0 = cpu_now(), t1;
    do {
        for (int l = 0; l < layers; l++) {
            a->k_cache = kc[l], a->v_cache = vc[l];
            b->ops->attention(b, out, q, a);
        }
        it++;
        t1 = now();
    } while (t1 - t0 < secs);
    *cpu = (cpu_now() - c0) / ((double)it * layers);
    return (t1 - t0) / ((double)it * layers);
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    int ctxs[8] = {2048, 8192}, nctx = 2;
    if (argc > 2)
        for (nctx = 0; nctx < 8 && nctx + 2 < argc; nctx++)
            ctxs[nctx] = atoi(argv[nctx + 2]);
    int layers = getenv("BENCH_LAYERS") ? atoi(getenv("BENCH_LAYERS")) : 24;
    int ntok = getenv("BENCH_NTOK") ? atoi(getenv("BENCH_NTOK")) : 1;
    static const struct shape shapes[3] = {
        {"qwen2.5-0.5b", 14, 2, 64}, {"qwen2.5-1.5b", 12, 2, 128}, {"gemma3-270m", 4, 1, 256}};
    struct be *bes[2] = {open_cpu(threads, 0), open_cpu(threads, 1)};
    if (!bes[0] || !bes[1])
        return 1;
    printf("attention, %d token%s of one sequence ending at ctx, F16 KV, %d threads, %d layers; "
           "split off vs on\n", ntok, ntok > 1 ? "s" : "", threads, layers);
    for (int si = 0; si < 3; si++)
        for (int ci = 0; ci < nctx; ci++) {
            const struct shape *sh = &shapes[si];
            int ctx = ctxs[ci], bs = 16, nb = (ctx + bs - 1) / bs, kvd = sh->n_kv * sh->hd;
            size_t bytes = (size_t)nb * bs * kvd * 2;
            void **kc = malloc(sizeof(void *) * layers), **vc = malloc(sizeof(void *) * layers);
            for (int l = 0; l < layers; l++) {
                kc[l] = malloc(bytes), vc[l] = malloc(bytes);
                for (size_t i = 0; i < bytes / 2; i++) { /* small fp16 values: 0x2000 + noise */
                    ((uint16_t *)kc[l])[i] = (uint16_t)(0x2000 + (i * 2654435761u >> 20) % 2048);
                    ((uint16_t *)vc[l])[i] = (uint16_t)(0x2000 + (i * 40503u >> 4) % 2048);
                }
            }
            int32_t *bt = malloc(sizeof(int32_t) * nb), *pos = malloc(sizeof(int32_t) * ntok),
                    *seq = calloc((size_t)ntok, sizeof(int32_t));
            for (int i = 0; i < nb; i++)
                bt[i] = i;
            for (int t = 0; t < ntok; t++)
                pos[t] = ctx - ntok + t;
            size_t qn = (size_t)ntok * sh->n_head * sh->hd;
            float *q = malloc(sizeof(float) * qn), *out = malloc(sizeof(float) * qn);
            for (size_t i = 0; i < qn; i++)
                q[i] = (float)((i * 7919) % 200 - 100) / 400.0f;
            struct be_attn a = {.n_tok = ntok, .n_head = sh->n_head, .n_kv_head = sh->n_kv,
                                .head_dim = sh->hd, .scale = 0.125f, .pos = pos, .seq = seq,
                                .block_tables = bt, .max_blocks = nb, .block_size = bs,
                                .kv_dtype = DT_F16};
            double t[2][3], c[2][3], r[3], dummy;
            time_attn(bes[1], &a, kc, vc, layers, q, out, 0.1, &dummy); /* warm up */
            for (int rep = 0; rep < 3; rep++) {
                for (int l = 0; l < 2; l++)
                    t[l][rep] = time_attn(bes[l], &a, kc, vc, layers, q, out, 0.4, &c[l][rep]);
                r[rep] = t[0][rep] / t[1][rep];
            }
            qsort(r, 3, sizeof r[0], cmp_d);
            for (int l = 0; l < 2; l++)
                qsort(t[l], 3, sizeof(double), cmp_d), qsort(c[l], 3, sizeof(double), cmp_d);
            double kvbytes = 2.0 * ctx * kvd * 2;
            printf("%-13s ctx %6d: off %8.1f us (%5.1f GB/s; cpu %8.1f us), on %8.1f us "
                   "(%5.1f GB/s; cpu %8.1f us), off/on %.2f\n",
                   sh->name, ctx, t[0][1] * 1e6, kvbytes / t[0][1] * 1e-9, c[0][1] * 1e6,
                   t[1][1] * 1e6, kvbytes / t[1][1] * 1e-9, c[1][1] * 1e6, r[1]);
            fflush(stdout);
            for (int l = 0; l < layers; l++)
                free(kc[l]), free(vc[l]);
            free(kc), free(vc), free(bt), free(q), free(out), free(pos), free(seq);
        }
    be_free(bes[0]);
    be_free(bes[1]);
    return 0;
}
