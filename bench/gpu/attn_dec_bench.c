/* attn_dec_bench.c — times the CUDA decode attention path against the general kernel.
 *
 * Not a test: a standalone program compiled by hand against libcinfer_core.a (link it like
 * cinfer_gpu_bench). For Llama-3.1-8B (hd 128) and Llama-3.2-1B (hd 64) shapes (32 query
 * heads, 8 KV heads, f16 cache, block 16) and each (context, batch), it records one
 * attention call per "layer" over NL separate caches (together >= 256 MB, so K/V come from
 * HBM, not L2), replays that list as a CUDA graph and prints microseconds per call, for the
 * general kernel (CINFER_ATTN_DEC=0) and the decode path at several split targets. It also
 * prints the largest difference of each variant's output from the general kernel's, and
 * the cost of a list of tiny ops (the graph's per-node floor).
 *
 * "prof" mode is for ncu: graphs off, two layers and one pass per config, only the general
 * kernel, the default decode path and the fused-merge one (kernel order: variant, config,
 * layer).
 *
 * usage: attn_dec_bench [reps]      attn_dec_bench prof
 *
 * Build (after `cmake --build build-attndec`; the libraries cinfer_gpu_bench links):
 *   cd build-attndec && gcc -std=c17 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -I../src \
 *     -c ../bench/gpu/attn_dec_bench.c && g++ attn_dec_bench.o -o attn_dec_bench \
 *     libcinfer_core.a -ljansson -lpcre2-8 -lutf8proc -levent_pthreads -levent -lz -lcrypto -lm \
 *     /usr/local/cuda/lib/libcudart_static.a /usr/local/cuda/lib/libcublas.so \
 *     /usr/local/cuda/lib/libculibos.a /usr/local/cuda/lib/libcublasLt.so -lrt -lpthread -ldl
 *
 * H200, commit 3cc0fb8 (us per call, graph replay; node floor 1.16 us): 8B ctx 384 batch 1
 * general 19.08, decode path with the merge kernel 7.33; batch 64: 149.4 vs 53.7; ctx 4096
 * batch 1: 45.2 vs 16.5; batch 64: 1459 vs 378. 1B ctx 384 batch 1: 14.9 vs 7.5.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "util/clock.h"
#include "util/half.h"

enum { N_HEAD = 32, N_KV = 8, BS = 16, POOL_MIN = 256 << 20, HOST_CHUNK = 32 << 20 };

struct cfg {
    int hd, ctx, batch;
};
static const struct cfg g_cfgs[] = {
    {128, 384, 1}, {128, 384, 8}, {128, 384, 64}, {128, 4096, 1}, {128, 4096, 64},
    {64, 384, 1},  {64, 384, 8},  {64, 384, 64},  {64, 4096, 1},  {64, 4096, 64},
};
enum { N_CFG = sizeof g_cfgs / sizeof g_cfgs[0] };

struct variant {
    const char *name, *on, *splits, *pdl, *merge;
};
static const struct variant g_vars[] = {
    {"general", "0", NULL, NULL, NULL},
    {"dec", "1", NULL, NULL, NULL},
    {"dec-fused", "1", NULL, NULL, "fused"},
    {"dec-cl", "1", NULL, NULL, "cluster"},
    {"dec-nopdl", "1", NULL, "0", NULL},
    {"dec-s16", "1", "16", NULL, NULL},
    {"fused-s64", "1", "64", NULL, "fused"},
};
enum { N_VAR = sizeof g_vars / sizeof g_vars[0] };

static uint64_t g_rng = 88172645463325252ull;
static float rnd(void)
{
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static void setenv_or_unset(const char *k, const char *v)
{
    if (v)
        setenv(k, v, 1);
    else
        unsetenv(k);
}

/* Fills n bytes of device memory at d from a fixed host pattern. */
static int fill(struct be *b, char *d, size_t n, const uint16_t *host, struct cerr *e)
{
    for (size_t o = 0; o < n; o += HOST_CHUNK) {
        size_t k = n - o < (size_t)HOST_CHUNK ? n - o : (size_t)HOST_CHUNK;
        if (b->ops->upload(b, d + o, host, k, e))
            return -1;
    }
    return 0;
}

/* us per attention call of config c on backend b; the last layer's output into res. */
static double run_cfg(struct be *b, const struct cfg *c, const uint16_t *host, int reps,
                      int warm, int nl_max, float *res, int *nl_out)
{
    struct cerr e = {0};
    g_rng = 88172645463325252ull ^
            ((uint64_t)c->hd << 40 | (uint64_t)c->ctx << 8 | (uint64_t)c->batch);
    const int mb = (c->ctx + BS - 1) / BS, nblk = mb * c->batch;
    const size_t layer = (size_t)nblk * BS * N_KV * c->hd * 2; /* bytes of K (or V) */
    int nl = (int)((POOL_MIN + 2 * layer - 1) / (2 * layer));
    if (nl > nl_max)
        nl = nl_max;
    *nl_out = nl;
    char *kc = b->ops->alloc(b, layer * nl), *vc = b->ops->alloc(b, layer * nl);
    const size_t qn = (size_t)c->batch * N_HEAD * c->hd;
    float *q = b->ops->alloc(b, qn * 4), *out = b->ops->alloc(b, qn * 4);
    int32_t *pos = b->ops->alloc(b, 4 * (size_t)c->batch);
    int32_t *seq = b->ops->alloc(b, 4 * (size_t)c->batch);
    int32_t *bt = b->ops->alloc(b, 4 * (size_t)nblk);
    double us = -1;
    if (!kc || !vc || !q || !out || !pos || !seq || !bt) {
        fprintf(stderr, "out of device memory\n");
        goto done;
    }
    if (fill(b, kc, layer * nl, host, &e) || fill(b, vc, layer * nl, host + 7, &e))
        goto done;
    {
        float *hq = malloc(qn * 4);
        int32_t *hp = malloc(4 * (size_t)c->batch), *hs = malloc(4 * (size_t)c->batch);
        int32_t *hb = malloc(4 * (size_t)nblk);
        for (size_t i = 0; i < qn; i++)
            hq[i] = rnd();
        for (int t = 0; t < c->batch; t++)
            hp[t] = c->ctx - 1 - (t % 5), hs[t] = t;
        for (int i = 0; i < nblk; i++)
            hb[i] = i;
        for (int i = nblk - 1; i > 0; i--) { /* paged: shuffled blocks */
            int j = (int)((g_rng = g_rng * 6364136223846793005ull + 1) >> 33) % (i + 1), x = hb[i];
            hb[i] = hb[j], hb[j] = x;
        }
        b->ops->upload(b, q, hq, qn * 4, &e);
        b->ops->upload(b, pos, hp, 4 * (size_t)c->batch, &e);
        b->ops->upload(b, seq, hs, 4 * (size_t)c->batch, &e);
        b->ops->upload(b, bt, hb, 4 * (size_t)nblk, &e);
        free(hq), free(hp), free(hs), free(hb);
    }
    struct be_attn a = {
        .n_tok = c->batch, .n_head = N_HEAD, .n_kv_head = N_KV, .head_dim = c->hd,
        .scale = 1.0f / 11.3137f, .softcap = 0.0f, .window = 0, .pos = pos, .seq = seq,
        .block_tables = bt, .max_blocks = mb, .block_size = BS, .kv_dtype = DT_F16,
    };
    double t0 = 0;
    for (int it = 0; it < reps + warm; it++) {
        if (it == warm)
            t0 = clock_now_s();
        for (int l = 0; l < nl; l++) {
            a.k_cache = kc + (size_t)l * layer, a.v_cache = vc + (size_t)l * layer;
            b->ops->attention(b, out, q, &a);
        }
        if (b->ops->sync(b, &e)) {
            fprintf(stderr, "attention failed: %s\n", e.msg);
            goto done;
        }
    }
    us = (clock_now_s() - t0) * 1e6 / ((double)reps * nl);
    b->ops->download(b, res, out, qn * 4, &e);
done:
    b->ops->free(b, kc), b->ops->free(b, vc), b->ops->free(b, q), b->ops->free(b, out);
    b->ops->free(b, pos), b->ops->free(b, seq), b->ops->free(b, bt);
    return us;
}

/* us per node of a graph of 256 tiny scale ops (the floor any one-kernel op pays). */
static double node_floor(struct be *b, int reps)
{
    struct cerr e = {0};
    float *x = b->ops->alloc(b, 1024 * 4);
    b->ops->upload(b, x, (float[1024]){0}, 1024 * 4, &e);
    double t0 = 0;
    for (int it = 0; it < reps + 3; it++) {
        if (it == 3)
            t0 = clock_now_s();
        for (int l = 0; l < 256; l++)
            b->ops->scale(b, x, x, 1.0f, 1024);
        b->ops->sync(b, &e);
    }
    double us = (clock_now_s() - t0) * 1e6 / (reps * 256.0);
    b->ops->free(b, x);
    return us;
}

int main(int argc, char **argv)
{
    const int prof = argc > 1 && strcmp(argv[1], "prof") == 0;
    int reps = argc > 1 && !prof ? atoi(argv[1]) : 10;
    if (reps < 1)
        reps = 10;
    const int n_var = prof ? 3 : N_VAR;
    uint16_t *host = malloc((size_t)HOST_CHUNK + 64);
    for (size_t i = 0; i < (size_t)HOST_CHUNK / 2 + 32; i++)
        host[i] = half_f32_to_f16(rnd());
    static float res[N_VAR][N_CFG][64 * N_HEAD * 128];
    double us[N_VAR][N_CFG];
    int nl[N_CFG];
    for (int v = 0; v < n_var; v++) {
        setenv_or_unset("CINFER_ATTN_DEC", g_vars[v].on);
        setenv_or_unset("CINFER_ATTN_DEC_SPLITS", g_vars[v].splits);
        setenv_or_unset("CINFER_ATTN_DEC_PDL", g_vars[v].pdl);
        setenv_or_unset("CINFER_ATTN_DEC_MERGE", g_vars[v].merge);
        struct be_config bc = {.n_threads = 1, .graphs = prof ? -1 : 1};
        struct cerr e = {0};
        struct be *b = be_new("cuda", &bc, &e);
        if (!b) {
            fprintf(stderr, "no cuda backend: %s\n", e.msg);
            return 1;
        }
        if (v == 0 && !prof)
            printf("graph node floor (tiny scale op): %.2f us\n", node_floor(b, reps));
        for (int ci = 0; ci < N_CFG; ci++)
            us[v][ci] = prof ? run_cfg(b, &g_cfgs[ci], host, 1, 0, 2, res[v][ci], &nl[ci])
                             : run_cfg(b, &g_cfgs[ci], host, reps, 3, 400, res[v][ci], &nl[ci]);
        be_free(b);
    }
    printf("%-5s %5s %5s %4s", "hd", "ctx", "batch", "NL");
    for (int v = 0; v < n_var; v++)
        printf(" %10s", g_vars[v].name);
    printf("   (us per call; max |diff| vs general)\n");
    for (int ci = 0; ci < N_CFG; ci++) {
        const struct cfg *c = &g_cfgs[ci];
        printf("%-5d %5d %5d %4d", c->hd, c->ctx, c->batch, nl[ci]);
        for (int v = 0; v < n_var; v++)
            printf(" %10.2f", us[v][ci]);
        size_t qn = (size_t)c->batch * N_HEAD * c->hd;
        printf("  ");
        for (int v = 1; v < n_var; v++) {
            double d = 0;
            for (size_t i = 0; i < qn; i++) {
                double x = res[v][ci][i] - res[0][ci][i];
                d = d > (x < 0 ? -x : x) ? d : (x < 0 ? -x : x);
            }
            printf(" %.1e", d);
        }
        double gb = 2.0 * c->batch * c->ctx * N_KV * c->hd * 2 / 1e9;
        printf("  [%.1f MB K+V; %.0f GB/s at dec]\n", gb * 1e3, gb / (us[1][ci] * 1e-6));
    }
    free(host);
    return 0;
}
