/* test_cpu_chunking.c — on the CPU backend a row's result does not depend on how the rows
 * are grouped into calls (batch invariance, docs/backend-cpu.md), at every kernel level this
 * CPU has, with the file layout and with repacked weights:
 *
 *  - matmul, every weight dtype: the same x rows in one call, each row alone, a prefix and
 *    the rest at every split point, and uneven chunks, at 1, 2 and 3 threads, give the same
 *    bytes (weights of 130 rows: many work items and a repacked tail group);
 *  - model: a prompt prefilled in one step, as a prefix and then its tail (what a prefix-cache
 *    hit recomputes), in small chunks, and with its last tokens decoded one by one give the
 *    same logits bytes, with an F32 and an F16 KV cache (stories260K at every level, also
 *    past the attention's 256-position segments; Qwen2.5-Coder-0.5B Q4_K_M, whose
 *    Q4_K/Q6_K/Q5_0/Q8_0 weights take the repacked kernels, at the best level when
 *    ./models has it).
 */
#include "harness.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/quant.h"
#include "engine/gen.h"
#include "model/model.h"
#include "util/half.h"

static const char *const g_isas[] = {"scalar", "avx2", "avx512"};
static const int g_dts[] = {DT_F32,  DT_F16,  DT_BF16, DT_Q4_0, DT_Q4_1, DT_Q5_0, DT_Q5_1,
                            DT_Q8_0, DT_Q2_K, DT_Q3_K, DT_Q4_K, DT_Q5_K, DT_Q6_K};
enum { N_DTS = sizeof g_dts / sizeof g_dts[0] };

static uint64_t g_rng = 1;
static uint64_t rng_u64(void)
{
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return g_rng;
}
static float rng_f(void) /* [-1, 1) */
{
    return (float)((rng_u64() >> 40) * (1.0 / 8388608.0) - 1.0);
}

/* A CPU backend of level isa with n threads and the given CINFER_CPU_REPACK, or NULL when the
 * CPU lacks the level. */
static struct be *open_cpu(const char *isa, int threads, const char *repack)
{
    if (!be_cpu_isa_supported(isa))
        return NULL;
    setenv("CINFER_CPU_ISA", isa, 1);
    setenv("CINFER_CPU_REPACK", repack, 1);
    struct be_config cfg = {.n_threads = threads};
    struct cerr e = {0};
    struct be *b = be_new("cpu", &cfg, &e);
    unsetenv("CINFER_CPU_ISA");
    unsetenv("CINFER_CPU_REPACK");
    CHECK_MSG(b != NULL, "cpu:%s: %s", isa, e.msg);
    return b;
}

/* Random (rows, k) weights of dtype dt: random payload bytes, small sane fp16 scales. */
static void *make_weights(int dt, int rows, int k, size_t *nbytes)
{
    size_t n = dtype_row_bytes(dt, k) * (size_t)rows;
    uint8_t *w = malloc(n);
    *nbytes = n;
    if (dt == DT_F32) {
        for (int64_t i = 0; i < (int64_t)rows * k; i++)
            ((float *)w)[i] = rng_f();
        return w;
    }
    if (dt == DT_F16 || dt == DT_BF16) {
        for (int64_t i = 0; i < (int64_t)rows * k; i++)
            ((uint16_t *)w)[i] =
                dt == DT_F16 ? half_f32_to_f16(rng_f()) : half_f32_to_bf16(rng_f());
        return w;
    }
    for (size_t i = 0; i < n; i++)
        w[i] = (uint8_t)rng_u64();
    int offs[2] = {0, -1}; /* byte offsets of the fp16 scales in a block */
    switch (dt) {
    case DT_Q4_1:
    case DT_Q5_1:
    case DT_Q4_K:
    case DT_Q5_K:
        offs[1] = 2;
        break;
    case DT_Q2_K:
        offs[0] = 80, offs[1] = 82;
        break;
    case DT_Q3_K:
        offs[0] = 108;
        break;
    case DT_Q6_K:
        offs[0] = 208;
        break;
    default:
        break;
    }
    size_t bb = dtype_block_bytes(dt);
    float s = dtype_block_elems(dt) == 32 ? 0.1f : 0.01f;
    for (size_t b = 0; b < n / bb; b++)
        for (int j = 0; j < 2; j++)
            if (offs[j] >= 0) {
                uint16_t h = half_f32_to_f16(s * (0.5f + 0.5f * (rng_f() + 1.0f)));
                memcpy(w + b * bb + (size_t)offs[j], &h, 2);
            }
    return w;
}

/* y rows [i0, i0 + n) of x * w^T through b's matmul. */
static void mm_rows(struct be *b, const struct be_tensor *t, const float *x, int k, int i0, int n,
                    float *y)
{
    b->ops->matmul(b, y + (int64_t)i0 * t->ne[1], x + (int64_t)i0 * k, n, t);
    struct cerr e = {0};
    CHECK(b->ops->sync(b, &e) == 0);
}

/* Every grouping of the N x rows into calls gives the bytes of the one-call result. */
static void check_matmul(struct be *b, const char *what, int dt, const void *w, size_t wb, int rows,
                         int k, const float *x, int n, const float *want, float *y)
{
    struct be_tensor t = {.dtype = dt, .ne = {k, rows, 1, 1}, .nbytes = wb, .name = "w"};
    t.data = b->ops->alloc(b, wb);
    struct cerr e = {0};
    CHECK(t.data && b->ops->upload(b, t.data, w, wb, &e) == 0);
    void *orig = t.data;
    CHECK(b->ops->weight_prepare(b, &t, &e) == 0);
    size_t rb = sizeof(float) * (size_t)rows;
    int bad = 0;
    char how[64] = "";
    /* one call */
    mm_rows(b, &t, x, k, 0, n, y);
    if (memcmp(y, want, rb * (size_t)n))
        bad++, snprintf(how, sizeof how, "all %d rows in one call", n);
    /* each row alone */
    memset(y, 0, rb * (size_t)n);
    for (int i = 0; i < n; i++)
        mm_rows(b, &t, x, k, i, 1, y);
    if (memcmp(y, want, rb * (size_t)n))
        bad++, snprintf(how, sizeof how, "rows one by one");
    /* a prefix, then the rest (what a prefix-cache hit recomputes) */
    for (int p = 1; p < n; p++) {
        memset(y, 0, rb * (size_t)n);
        mm_rows(b, &t, x, k, 0, p, y);
        mm_rows(b, &t, x, k, p, n - p, y);
        if (memcmp(y, want, rb * (size_t)n))
            bad++, snprintf(how, sizeof how, "split at row %d", p);
    }
    /* uneven chunks */
    static const int sz[] = {3, 5, 2, 7, 1, 4, 6, 9, 8};
    memset(y, 0, rb * (size_t)n);
    for (int i = 0, c = 0; i < n; c++) {
        int m = sz[c % 9] < n - i ? sz[c % 9] : n - i;
        mm_rows(b, &t, x, k, i, m, y);
        i += m;
    }
    if (memcmp(y, want, rb * (size_t)n))
        bad++, snprintf(how, sizeof how, "chunks of 3, 5, 2, 7, ...");
    CHECK_MSG(bad == 0, "%s %s (k %d): %d groupings differ from one call, e.g. %s", what,
              dtype_name(dt), k, bad, how);
    if (t.data != orig)
        b->ops->free(b, orig);
    b->ops->free(b, t.data);
}

static void test_matmul_groupings(void)
{
    enum { ROWS = 130, N = 23 };
    int levels = 0;
    for (int li = 0; li < 3; li++) {
        if (!be_cpu_isa_supported(g_isas[li]))
            continue;
        levels++;
        /* the avx2 and avx512 levels repack; "0" keeps the file layout */
        static const char *const rp[2] = {"0", "all"};
        for (int ri = 0; ri < (li >= 1 ? 2 : 1); ri++) {
            struct be *bs[3];
            for (int th = 0; th < 3; th++)
                bs[th] = open_cpu(g_isas[li], th + 1, rp[ri]);
            if (!bs[0] || !bs[1] || !bs[2])
                goto next;
            for (int di = 0; di < N_DTS; di++) {
                int dt = g_dts[di];
                /* K-quants: 3 blocks; 32-element types: an odd block count; floats: tails */
                int be_ = dtype_block_elems(dt);
                int k = be_ == 256 ? 768 : be_ == 32 ? 544 : 200;
                g_rng = 0x9e3779b97f4a7c15ull + (uint64_t)dt;
                size_t wb;
                void *w = make_weights(dt, ROWS, k, &wb);
                float *x = malloc(sizeof(float) * N * k);
                for (int i = 0; i < N * k; i++)
                    x[i] = rng_f() * (i % 7 == 0 ? 4.0f : 1.0f);
                float *want = malloc(sizeof(float) * N * ROWS),
                      *y = malloc(sizeof(float) * N * ROWS);
                /* the reference: one call of all rows on one thread */
                struct be_tensor t = {
                    .dtype = dt, .ne = {k, ROWS, 1, 1}, .nbytes = wb, .name = "w"};
                struct cerr e = {0};
                t.data = bs[0]->ops->alloc(bs[0], wb);
                bs[0]->ops->upload(bs[0], t.data, w, wb, &e);
                void *orig = t.data;
                CHECK(bs[0]->ops->weight_prepare(bs[0], &t, &e) == 0);
                mm_rows(bs[0], &t, x, k, 0, N, want);
                if (t.data != orig)
                    bs[0]->ops->free(bs[0], orig);
                bs[0]->ops->free(bs[0], t.data);
                for (int th = 0; th < 3; th++) {
                    char what[64];
                    snprintf(what, sizeof what, "cpu:%s repack=%s %d thread%s", g_isas[li], rp[ri],
                             th + 1, th ? "s" : "");
                    check_matmul(bs[th], what, dt, w, wb, ROWS, k, x, N, want, y);
                }
                free(w), free(x), free(want), free(y);
            }
        next:
            for (int th = 0; th < 3; th++)
                be_free(bs[th]);
        }
    }
    CHECK(levels >= 1);
}

/* Repacked Q4_K, Q6_K, Q8_0, Q5_0, Q4_0, Q4_1: the AVX2 and AVX-512 kernels make the same integer
 * sums and the same float steps, so they give the same bits (rp_avx2.c). */
static void test_rp_levels_agree(void)
{
    if (!be_cpu_isa_supported("avx512") || !be_cpu_isa_supported("avx2")) {
        printf("  needs avx2 and avx512: not checked here\n");
        return;
    }
    enum { ROWS = 37, N = 5, K = 1024 };
    struct be *b2 = open_cpu("avx2", 1, "1"), *b5 = open_cpu("avx512", 1, "1");
    static const int dts[6] = {DT_Q4_K, DT_Q6_K, DT_Q8_0, DT_Q5_0, DT_Q4_0, DT_Q4_1};
    for (int di = 0; di < 6 && b2 && b5; di++) {
        int dt = dts[di];
        g_rng = 4242 + (uint64_t)dt;
        size_t wb;
        void *w = make_weights(dt, ROWS, K, &wb);
        float *x = malloc(sizeof(float) * N * K), *y2 = malloc(sizeof(float) * N * ROWS),
              *y5 = malloc(sizeof(float) * N * ROWS);
        for (int i = 0; i < N * K; i++)
            x[i] = rng_f();
        struct be *bs[2] = {b2, b5};
        float *ys[2] = {y2, y5};
        int repacked = 0;
        for (int l = 0; l < 2; l++) {
            struct be_tensor t = {.dtype = dt, .ne = {K, ROWS, 1, 1}, .nbytes = wb, .name = "w"};
            struct cerr e = {0};
            t.data = bs[l]->ops->alloc(bs[l], wb);
            bs[l]->ops->upload(bs[l], t.data, w, wb, &e);
            void *orig = t.data;
            CHECK(bs[l]->ops->weight_prepare(bs[l], &t, &e) == 0);
            repacked += t.data != orig;
            mm_rows(bs[l], &t, x, K, 0, N, ys[l]);
            if (t.data != orig)
                bs[l]->ops->free(bs[l], orig);
            bs[l]->ops->free(bs[l], t.data);
        }
        CHECK_MSG(repacked == 2, "%s: repacked on %d of 2 levels", dtype_name(dt), repacked);
        CHECK_MSG(!memcmp(y2, y5, sizeof(float) * N * ROWS), "repacked %s: avx2 and avx512 differ",
                  dtype_name(dt));
        free(w), free(x), free(y2), free(y5);
    }
    be_free(b2);
    be_free(b5);
}

/* ---- the model: prompt chunkings ---- */

/* Logits after feeding ids[0..n) as the steps listed in cuts (cut points, ascending, then
 * n), each step of at most `chunk` tokens; all_rows (may be NULL): every position's row. */
static int feed(const struct model *m, int kv_dt, const int32_t *ids, int n, const int *cuts,
                int ncut, int chunk, float *last, float *all_rows)
{
    struct gen *g = NULL;
    struct cerr e = {0};
    int V = m->hp.n_vocab, rc = gen_new(&g, m, n + 8, chunk, kv_dt, &e);
    CHECK_MSG(rc == 0, "gen_new: %s", e.msg);
    if (rc)
        return -1;
    int p = 0;
    for (int c = 0; c <= ncut && !rc; c++) {
        int end = c < ncut ? cuts[c] : n;
        rc = gen_feed(g, ids + p, end - p, all_rows ? all_rows + (size_t)p * V : NULL, &e);
        p = end;
    }
    CHECK_MSG(rc == 0, "gen_feed: %s", e.msg);
    if (!rc)
        memcpy(last, g->logits, sizeof(float) * (size_t)V);
    gen_free(g);
    return rc;
}

/* One step of the whole prompt vs: every prefix/tail split in `splits`, chunks of 5 and 7
 * tokens (all rows compared), and the last 3 tokens decoded one by one. */
static void check_model(const char *what, const struct model *m, int kv_dt, const int32_t *ids,
                        int n, const int *splits, int nsplit)
{
    int V = m->hp.n_vocab;
    float *want = malloc(sizeof(float) * V), *got = malloc(sizeof(float) * V);
    float *rows_want = malloc(sizeof(float) * (size_t)V * n),
          *rows = malloc(sizeof(float) * (size_t)V * n);
    const char *kvn = kv_dt == DT_F16 ? "f16" : "f32";
    if (feed(m, kv_dt, ids, n, NULL, 0, n, want, rows_want))
        goto out;
    for (int s = 0; s < nsplit; s++)
        if (!feed(m, kv_dt, ids, n, &splits[s], 1, n, got, NULL))
            CHECK_MSG(!memcmp(got, want, sizeof(float) * V),
                      "%s, KV %s: prefix %d + tail %d gives other logits than one step", what, kvn,
                      splits[s], n - splits[s]);
    for (int ch = 5; ch <= 7; ch += 2)
        if (!feed(m, kv_dt, ids, n, NULL, 0, ch, got, rows)) {
            int bad = -1;
            for (int i = 0; i < n && bad < 0; i++)
                if (memcmp(rows + (size_t)i * V, rows_want + (size_t)i * V, sizeof(float) * V))
                    bad = i;
            CHECK_MSG(bad < 0, "%s, KV %s: chunks of %d: position %d differs from one step", what,
                      kvn, ch, bad);
        }
    int cuts[3] = {n - 3, n - 2, n - 1};
    if (!feed(m, kv_dt, ids, n, cuts, 3, n, got, NULL))
        CHECK_MSG(!memcmp(got, want, sizeof(float) * V),
                  "%s, KV %s: the last 3 tokens decoded one by one give other logits", what, kvn);
out:
    free(want), free(got), free(rows_want), free(rows);
}

static void model_case(const char *path, const char *isa, const char *repack, int threads, int n,
                       const int *splits, int nsplit)
{
    struct be *b = open_cpu(isa, threads, repack);
    if (!b)
        return;
    struct model *m = NULL;
    struct cerr e = {0};
    CHECK_MSG(model_load(&m, path, b, &e) == 0, "%s: %s", path, e.msg);
    if (m) {
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
        g_rng = 7;
        for (int i = 0; i < n; i++) /* no special ids: the text tokens of the vocabulary */
            ids[i] = 3 + (int32_t)(rng_u64() %
                                   (uint64_t)(m->hp.n_vocab < 20000 ? m->hp.n_vocab - 3 : 20000));
        char what[160];
        snprintf(what, sizeof what, "%s on cpu:%s repack=%s, %d threads", strrchr(path, '/') + 1,
                 isa, repack, threads);
        check_model(what, m, DT_F32, ids, n, splits, nsplit);
        check_model(what, m, DT_F16, ids, n, splits, nsplit);
        free(ids);
        model_free(m);
    }
    be_free(b);
}

static void test_stories_chunkings(void)
{
    /* splits around the attention's 32-position chunks and 8-token tiles and the KV blocks */
    static const int splits[] = {1, 7, 8, 9, 16, 31, 32, 33, 47, 64, 77};
    for (int li = 0; li < 3; li++)
        for (int th = 1; th <= 2; th++)
            model_case(fixture_path("stories260K/stories260K.gguf"), g_isas[li], "all", th, 80,
                       splits, sizeof splits / sizeof splits[0]);
    /* past the attention's 256-position segments (folded in one work item for a long step,
     * split over threads with a merge pass for a decode step: the same arithmetic) */
    static const int long_splits[] = {255, 256, 257, 300, 513};
    for (int li = 0; li < 3; li++)
        model_case(fixture_path("stories260K/stories260K.gguf"), g_isas[li], "all", 2, 530,
                   long_splits, sizeof long_splits / sizeof long_splits[0]);
}

static void test_qwen_chunkings(void)
{
    const char *mdir = getenv("MODELS_DIR") ? getenv("MODELS_DIR") : repo_path("models");
    char path[1024];
    snprintf(path, sizeof path, "%s/qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf", mdir);
    struct stat st;
    if (stat(path, &st) != 0) {
        printf("  %s missing (scripts/fetch_models.sh): the real-model chunkings are not checked\n",
               path);
        return;
    }
    static const int splits[] = {16, 33};
    const char *best = be_cpu_isa_supported("avx512") ? "avx512"
                       : be_cpu_isa_supported("avx2") ? "avx2"
                                                      : "scalar";
    /* the serving defaults: best level, default repack, 2 threads */
    model_case(path, best, "1", 2, 40, splits, 2);
}

int main(void)
{
    RUN(test_matmul_groupings);
    RUN(test_rp_levels_agree);
    RUN(test_stories_chunkings);
    RUN(test_qwen_chunkings);
    return harness_done();
}
