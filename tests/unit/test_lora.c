/* test_lora.c — LoRA adapters on the parity models (tests/data/lora, made by
 * scripts/lora_reference.py with transformers + peft):
 *   - logits of every prompt position within 1e-4 x max(1, max |logit|) of the reference
 *     and 32 greedy ids identical, for adapters a, b and the stacked a+b (reference: both
 *     merged into the weights), from the HF directory and the GGUF base, with the PEFT
 *     directory and the GGUF LoRA file (llama, qwen2, qwen3, gemma3), with the f32 files
 *     kept in f32 (CINFER_LORA_DTYPE=f32); kept in f16 (the default) the same greedy ids and
 *     the logits within 1e-2 x scale (f16's rounding of the adapter, nothing else: an f16
 *     copy computes what an f32 adapter of the rounded values does, bit for bit);
 *   - 8 sequences with 6 different sets and none in one batched step == each alone, bit
 *     for bit (CPU);
 *   - malformed adapters -> errors naming the tensor or the file;
 *   - the registry: "a+b", "a,b", "none", unknown ids, unmount while a set holds it.
 */
#include "harness.h"

#include <jansson.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend.h"
#include "engine/gen.h"
#include "engine/sampler.h"
#include "kv/kv_pool.h"
#include "engine/engine_int.h"
#include "model/lora.h"
#include "model/model.h"
#include "format/safetensors.h"
#include "util/base64.h"
#include "util/half.h"

static struct be *g_be;
static int g_round_bf16; /* st_rounded's F32 copies: bf16 (else f16) rounding */
static int g_exact = 1;  /* the CPU: a mixed batch is bit-identical to each row alone */
static const char *g_archs[] = {"llama", "qwen2", "qwen3", "gemma3"};
static const unsigned ALL_PATHS = (1u << LORA_NT) - 1;
static double g_tol = 1e-4; /* golden logits: the tolerance x max(1, max |logit|) */
static int g_distinct;      /* test_mixed_batch: 7 distinct sets (one row each) and none */

/* Sets CINFER_LORA_DTYPE for the adapters loaded from now on (NULL: the default, f16). */
static void store_as(const char *dt)
{
    if (dt)
        setenv("CINFER_LORA_DTYPE", dt, 1);
    else
        unsetenv("CINFER_LORA_DTYPE");
}

static float *b64_f32(const char *s, size_t n)
{
    float *f = malloc(n * 4 + 4);
    long got = base64_decode(s, strlen(s), (uint8_t *)f, n * 4 + 4);
    if (got != (long)(n * 4)) {
        free(f);
        return NULL;
    }
    return f;
}

static struct lora_adapter *load_ad(struct model *m, const char *arch, const char *name)
{
    char p[600];
    snprintf(p, sizeof p, "%s%s/%s", repo_path("tests/data/lora/"), arch, name);
    struct cerr e = {0};
    struct lora_adapter *a = NULL;
    int rc = lora_load(&a, m, p, &e);
    CHECK_MSG(rc == 0, "%s: %s", p, e.msg);
    return a;
}

/* One case: the set's logits and greedy ids against the golden. */
static void check_case(struct model *m, const struct lora_set *set, json_t *c, json_t *prompt,
                       const char *what)
{
    int np = (int)json_array_size(prompt);
    json_t *ids = json_object_get(c, "greedy_ids");
    int ng = (int)json_array_size(ids);
    int V = m->hp.n_vocab;
    float *ref = b64_f32(json_string_value(json_object_get(json_object_get(c, "logits"), "data")),
                         (size_t)np * V);
    CHECK_MSG(ref != NULL, "%s: malformed golden logits", what);
    struct cerr e = {0};
    struct gen *gn = NULL;
    CHECK_EQ_INT(gen_new(&gn, m, np + ng + 1, 64, DT_F32, &e), 0);
    if (!ref || !gn) {
        free(ref);
        gen_free(gn);
        return;
    }
    gn->lora = set;
    gn->lora_paths = ALL_PATHS;
    int32_t *pr = malloc((size_t)np * 4);
    for (int i = 0; i < np; i++)
        pr[i] = (int32_t)json_integer_value(json_array_get(prompt, (size_t)i));
    float *got = malloc((size_t)np * V * 4);
    CHECK_EQ_INT(gen_feed(gn, pr, np, got, &e), 0);
    double scale = 1, d = 0;
    for (size_t i = 0; i < (size_t)np * V; i++) {
        scale = fabs(ref[i]) > scale ? fabs(ref[i]) : scale;
        d = fabs(got[i] - ref[i]) > d ? fabs(got[i] - ref[i]) : d;
    }
    CHECK_MSG(d <= g_tol * scale, "%s: max |dlogit| %.3g > %.3g", what, d, g_tol * scale);
    int bad = -1;
    for (int i = 0; i < ng; i++) {
        int32_t id = sampler_argmax(gn->logits, V);
        if (id != (int32_t)json_integer_value(json_array_get(ids, (size_t)i))) {
            bad = i;
            break;
        }
        if (i + 1 < ng && gen_feed(gn, &id, 1, NULL, &e)) {
            bad = i;
            break;
        }
    }
    CHECK_MSG(bad < 0, "%s: greedy ids diverge at token %d", what, bad);
    printf("  %-44s max |dlogit| %.2e (scale %.1f)\n", what, d, scale);
    free(pr);
    free(got);
    free(ref);
    gen_free(gn);
}

static void check_arch(const char *arch, const char *base_file, int gguf_lora)
{
    char dir[600], gp[700], mp[700];
    snprintf(dir, sizeof dir, "%s%s", repo_path("tests/data/lora/"), arch);
    snprintf(gp, sizeof gp, "%s/golden.json", dir);
    json_error_t je;
    json_t *g = json_load_file(gp, 0, &je);
    CHECK_MSG(g != NULL, "%s: %s", gp, je.text);
    if (!g)
        return;
    snprintf(mp, sizeof mp, "%s%s%s%s", repo_path("tests/data/parity/"), arch, base_file ? "/" : "",
             base_file ? base_file : "");
    struct cerr e = {0};
    struct model *m = NULL;
    CHECK_MSG(model_load(&m, mp, g_be, &e) == 0, "%s: %s", mp, e.msg);
    struct lora_adapter *a = m ? load_ad(m, arch, gguf_lora ? "a.gguf" : "a") : NULL;
    struct lora_adapter *b = m ? load_ad(m, arch, gguf_lora ? "b.gguf" : "b") : NULL;
    if (a && b) {
        json_t *prompt = json_object_get(g, "prompt_ids"), *cases = json_object_get(g, "cases");
        struct lora_set sa = {1, {a}, {1}}, sb = {1, {b}, {1}}, sab = {2, {a, b}, {1, 1}};
        const struct lora_set *sets[3] = {&sa, &sb, &sab};
        const char *names[3] = {"a", "b", "a+b"};
        for (int i = 0; i < 3; i++) {
            char what[160];
            snprintf(what, sizeof what, "%s %s base, %s %s, %s", arch, base_file ? "gguf" : "hf",
                     gguf_lora ? "gguf lora" : "peft", names[i], g_tol < 1e-3 ? "f32" : "f16");
            check_case(m, sets[i], json_object_get(cases, names[i]), prompt, what);
        }
        CHECK(a->targets == ALL_PATHS);
        CHECK(b->targets == ((1u << LORA_Q) | (1u << LORA_V) | (1u << LORA_O) | (1u << LORA_DOWN)));
        CHECK(b->rslora || gguf_lora);
    }
    lora_unref(a);
    lora_unref(b);
    model_free(m);
    json_decref(g);
}

static void test_goldens(void)
{
    store_as("f32"); /* the arithmetic: f32 adapters within 1e-4 */
    g_tol = 1e-4;
    for (size_t i = 0; i < sizeof g_archs / sizeof g_archs[0]; i++)
        for (int base = 0; base < 2; base++)
            for (int gl = 0; gl < 2; gl++)
                check_arch(g_archs[i], base ? "model.gguf" : NULL, gl);
    store_as(NULL); /* the default f16 copy: the rounding of the adapter (seen <= 4e-3) */
    g_tol = 1e-2;
    for (size_t i = 0; i < sizeof g_archs / sizeof g_archs[0]; i++)
        for (int gl = 0; gl < 2; gl++)
            check_arch(g_archs[i], NULL, gl);
    g_tol = 1e-4;
}

/* ---- a GGUF LoRA equals its PEFT source ---------------------------------------------------- */

static float *prompt_logits(struct model *m, const struct lora_set *set, const int32_t *ids, int n)
{
    struct cerr e = {0};
    struct gen *gn = NULL;
    float *lg = malloc((size_t)n * m->hp.n_vocab * 4);
    CHECK_EQ_INT(gen_new(&gn, m, 32, 32, DT_F32, &e), 0);
    if (gn) {
        gn->lora = set;
        gn->lora_paths = ALL_PATHS;
        CHECK_EQ_INT(gen_feed(gn, ids, n, lg, &e), 0);
    }
    gen_free(gn);
    return lg;
}

static void test_gguf_equals_peft(void)
{
    int32_t ids[10] = {1, 30, 31, 90, 91, 150, 151, 200, 201, 250};
    for (size_t i = 0; i < sizeof g_archs / sizeof g_archs[0]; i++)
        for (int base = 0; base < 2; base++) {
            char mp[700];
            snprintf(mp, sizeof mp, "%s%s%s", repo_path("tests/data/parity/"), g_archs[i],
                     base ? "/model.gguf" : "");
            struct cerr e = {0};
            struct model *m = NULL;
            CHECK_MSG(model_load(&m, mp, g_be, &e) == 0, "%s: %s", mp, e.msg);
            if (!m)
                continue;
            for (int k = 0; k < 2; k++) {
                struct lora_adapter *p = load_ad(m, g_archs[i], k ? "b" : "a");
                struct lora_adapter *q = load_ad(m, g_archs[i], k ? "b.gguf" : "a.gguf");
                if (p && q) {
                    struct lora_set sp = {1, {p}, {1}}, sq = {1, {q}, {1}};
                    float *x = prompt_logits(m, &sp, ids, 10), *y = prompt_logits(m, &sq, ids, 10);
                    size_t n = (size_t)10 * m->hp.n_vocab;
                    double d = 0;
                    for (size_t j = 0; j < n; j++)
                        d = fabs(x[j] - y[j]) > d ? fabs(x[j] - y[j]) : d;
                    /* a: the same f32 values and scale, bit for bit; b (rsLoRA: the GGUF
                     * alpha is alpha * sqrt(r) in f32) within float rounding */
                    if (k == 0)
                        CHECK_MSG(memcmp(x, y, n * 4) == 0, "%s %s: gguf a != peft a (max %.3g)",
                                  g_archs[i], base ? "gguf" : "hf", d);
                    else
                        CHECK_MSG(d <= 1e-5, "%s %s: gguf b vs peft b: max %.3g", g_archs[i],
                                  base ? "gguf" : "hf", d);
                    free(x);
                    free(y);
                }
                lora_unref(p);
                lora_unref(q);
            }
            model_free(m);
        }
}

/* ---- 8 rows, 6 sets + none, in one step == each alone ------------------------------ */

#define NS 8
#define NP 9
#define ND 6

static void test_mixed_batch(void)
{
    struct cerr e = {0};
    struct model *m = NULL;
    CHECK_EQ_INT(model_load(&m, repo_path("tests/data/parity/qwen2"), g_be, &e), 0);
    if (!m)
        return;
    struct lora_adapter *a = load_ad(m, "qwen2", "a"), *b = load_ad(m, "qwen2", "b");
    if (!a || !b) {
        model_free(m);
        return;
    }
    struct lora_set none = {0}, sa = {1, {a}, {1}}, sb = {1, {b}, {1}}, sab = {2, {a, b}, {1, 1}};
    struct lora_set sa2 = {1, {a}, {0.5f}}; /* a with another weight: a set of its own */
    struct lora_set sb2 = {1, {b}, {0.5f}}, sab2 = {2, {a, b}, {1, 0.5f}};
    struct lora_set sba = {2, {b, a}, {1, 1}}; /* the other order: a set of its own */
    /* decode steps: groups of 2 rows (b) and of one row (a, a+b, a/2, b/2, a+b/2); with
     * g_distinct 7 one-row groups and none (the CPU op then runs each group's two passes in
     * one item, and with one thread prefetches the next group) */
    const struct lora_set *set2[NS] = {&sa, &none, &sb, &sab, &sa2, &sb2, &sab2, &sb};
    const struct lora_set *set1[NS] = {&sa, &none, &sb, &sab, &sa2, &sb2, &sab2, &sba};
    const struct lora_set *const *set = g_distinct ? set1 : set2;
    int V = m->hp.n_vocab;
    /* alone: each sequence through gen (prefill NP, then ND greedy decode steps) */
    float *alone = malloc((size_t)NS * (ND + 1) * V * 4);
    int32_t ids[NS][NP + ND + 1];
    for (int s = 0; s < NS; s++) {
        for (int i = 0; i < NP; i++)
            ids[s][i] = (int32_t)((s * 37 + i * 11) % (V - 3) + 3);
        struct gen *gn = NULL;
        CHECK_EQ_INT(gen_new(&gn, m, 64, 64, DT_F32, &e), 0);
        if (!gn)
            continue;
        gn->lora = set[s]->n ? set[s] : NULL;
        gn->lora_paths = ALL_PATHS;
        CHECK_EQ_INT(gen_feed(gn, ids[s], NP, NULL, &e), 0);
        for (int d = 0; d <= ND; d++) {
            memcpy(alone + ((size_t)s * (ND + 1) + d) * V, gn->logits, (size_t)V * 4);
            ids[s][NP + d] = sampler_argmax(gn->logits, V);
            if (d < ND)
                CHECK_EQ_INT(gen_feed(gn, &ids[s][NP + d], 1, NULL, &e), 0);
        }
        gen_free(gn);
    }
    /* together: one prefill step with all 8 prompts, then ND batched decode steps */
    struct kv_pool *kv = NULL;
    CHECK_EQ_INT(kv_pool_new(&kv, g_be, m->hp.n_layer, m->hp.n_kv_head * m->hp.head_dim, 16, NS * 4,
                             DT_F32, -1, &e),
                 0);
    struct model_ws *ws = NULL;
    CHECK_EQ_INT(model_ws_new(&ws, m, NS * NP, NS, NS, 4, &e), 0);
    struct kv_seq seq[NS];
    int32_t tok[NS * NP], pos[NS * NP], sq[NS * NP], slot[NS * NP], out[NS], tab[NS * 4];
    float *lg = malloc((size_t)NS * V * 4);
    int mism = 0;
    double maxd = 0, scale = 0;
    for (int s = 0; kv && ws && s < NS; s++) {
        kv_seq_init(&seq[s]);
        CHECK_EQ_INT(kv_seq_reserve(kv, &seq[s], NP + ND + 1, &e), 0);
    }
    for (int d = -1; kv && ws && d < ND; d++) {
        int n = 0;
        for (int s = 0; s < NS; s++) {
            int p0 = d < 0 ? 0 : NP + d, cnt = d < 0 ? NP : 1;
            for (int j = 0; j < cnt; j++, n++) {
                tok[n] = ids[s][p0 + j], pos[n] = p0 + j, sq[n] = s;
                slot[n] = kv_seq_slot(kv, &seq[s], p0 + j);
            }
            out[s] = n - 1;
            for (int k = 0; k < 4; k++)
                tab[s * 4 + k] = k < seq[s].n_blocks ? seq[s].blocks[k] : 0;
        }
        struct model_kv_view view = kv_pool_view(kv);
        struct model_batch bt = {.n_tok = n,
                                 .tokens = tok,
                                 .pos = pos,
                                 .seq = sq,
                                 .slots = slot,
                                 .n_seq = NS,
                                 .max_blocks = 4,
                                 .block_tables = tab,
                                 .n_out = NS,
                                 .out_idx = out,
                                 .lora = set,
                                 .lora_paths = ALL_PATHS};
        CHECK_EQ_INT(model_forward(m, ws, &view, &bt, lg, &e), 0);
        for (int s = 0; s < NS; s++) {
            const float *x = lg + (size_t)s * V, *y = alone + ((size_t)s * (ND + 1) + d + 1) * V;
            mism += memcmp(x, y, (size_t)V * 4) != 0;
            for (int i = 0; i < V; i++) {
                maxd = fabs(x[i] - y[i]) > maxd ? fabs(x[i] - y[i]) : maxd;
                scale = fabs(y[i]) > scale ? fabs(y[i]) : scale;
            }
        }
    }
    CHECK_MSG(mism == 0 || !g_exact, "%d of %d rows differ from the same sequence alone", mism,
              NS * (ND + 1));
    CHECK_MSG(maxd <= 1e-4 * (scale > 1 ? scale : 1), "mixed batch vs alone: max |dlogit| %.3g",
              maxd);
    printf("  mixed batch (%s): %d of %d rows bit-identical to the row alone, max |d| %.2e\n",
           g_be->ops->name, NS * (ND + 1) - mism, NS * (ND + 1), maxd);
    /* and the adapters change something: a's row != the none row of the same prompt */
    int differ = 0;
    for (int d = 0; d <= ND; d++)
        differ += memcmp(alone + (size_t)d * V, alone + ((size_t)1 * (ND + 1) + d) * V, 4) != 0;
    CHECK(differ > 0);
    for (int s = 0; kv && s < NS; s++)
        kv_seq_release(kv, &seq[s]);
    free(lg);
    free(alone);
    model_ws_free(ws);
    kv_pool_free(kv);
    lora_unref(a);
    lora_unref(b);
    model_free(m);
}

/* ---- malformed adapters ---------------------------------------------------------------- */

static const char *tmpdir(void)
{
    static char d[256];
    if (!d[0]) {
        snprintf(d, sizeof d, "%s/cinfer_test_lora_%d",
                 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
        mkdir(d, 0755);
    }
    return d;
}

static void copy_file(const char *src, const char *dst, long keep)
{
    FILE *f = fopen(src, "rb"), *g = fopen(dst, "wb");
    CHECK(f && g);
    if (f && g) {
        char buf[4096];
        size_t n;
        long left = keep < 0 ? 1L << 40 : keep;
        while (left > 0 && (n = fread(buf, 1, sizeof buf, f)) > 0) {
            size_t w = (long)n > left ? (size_t)left : n;
            fwrite(buf, 1, w, g);
            left -= (long)w;
        }
    }
    if (f)
        fclose(f);
    if (g)
        fclose(g);
}

/* A PEFT dir under tmpdir()/name: the config text (NULL = none) and the llama "a"
 * safetensors cut to keep bytes (-1 = whole, -2 = none). */
static const char *make_dir(const char *name, const char *config, long keep)
{
    static char d[512];
    char p[700];
    snprintf(d, sizeof d, "%s/%s", tmpdir(), name);
    mkdir(d, 0755);
    if (config) {
        snprintf(p, sizeof p, "%s/adapter_config.json", d);
        FILE *f = fopen(p, "w");
        if (f) {
            fputs(config, f);
            fclose(f);
        }
    }
    if (keep != -2) {
        snprintf(p, sizeof p, "%s/adapter_model.safetensors", d);
        copy_file(repo_path("tests/data/lora/llama/a/adapter_model.safetensors"), p, keep);
    }
    return d;
}

/* safetensors bytes with these F32 tensors (zeros): names[i], shape rows x cols */
static uint8_t *st_build(int n, const char *const *names, const int (*shape)[2], size_t *len)
{
    char hdr[4096];
    size_t o = 0, off = 0;
    o += (size_t)snprintf(hdr + o, sizeof hdr - o, "{");
    for (int i = 0; i < n; i++) {
        size_t sz = (size_t)shape[i][0] * shape[i][1] * 4;
        o += (size_t)snprintf(
            hdr + o, sizeof hdr - o,
            "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%d,%d],\"data_offsets\":[%zu,%zu]}",
            i ? "," : "", names[i], shape[i][0], shape[i][1], off, off + sz);
        off += sz;
    }
    o += (size_t)snprintf(hdr + o, sizeof hdr - o, "}");
    *len = 8 + o + off;
    uint8_t *b = calloc(1, *len);
    uint64_t hl = o;
    memcpy(b, &hl, 8);
    memcpy(b + 8, hdr, o);
    for (size_t i = 8 + o; i < *len; i += 4) { /* small nonzero floats */
        float v = 0.01f;
        memcpy(b + i, &v, 4);
    }
    return b;
}

static void expect_err(int rc, const struct cerr *e, const char *needle, const char *what)
{
    CHECK_MSG(rc != 0, "%s: loaded", what);
    CHECK_MSG(rc == 0 || strstr(e->msg, needle) != NULL, "%s: '%s' lacks '%s'", what, e->msg,
              needle);
    if (rc)
        printf("  %-28s -> %s\n", what, e->msg);
}

static const char *CFG = "{\"peft_type\":\"LORA\",\"r\":4,\"lora_alpha\":8,"
                         "\"target_modules\":[\"q_proj\",\"v_proj\"]}";

static void test_malformed(void)
{
    struct cerr e = {0};
    struct model *m = NULL, *gm = NULL;
    CHECK_EQ_INT(model_load(&m, repo_path("tests/data/parity/llama"), g_be, &e), 0);
    CHECK_EQ_INT(model_load(&gm, repo_path("tests/data/parity/gemma3"), g_be, &e), 0);
    if (!m || !gm)
        return;
    struct lora_adapter *a = NULL;
    int rc;
    /* wrong shapes: llama's adapter (hidden 64) on gemma3 (hidden 32) */
    rc = lora_load(&a, gm, repo_path("tests/data/lora/llama/a"), &e);
    expect_err(rc, &e, "lora_A.weight' has shape", "wrong shapes (peft)");
    rc = lora_load(&a, m, repo_path("tests/data/lora/gemma3/a.gguf"), &e);
    expect_err(rc, &e, "architecture 'gemma3'", "wrong architecture (gguf)");
    /* corrupt safetensors: cut in the middle */
    rc = lora_load(&a, m, make_dir("cut", CFG, 3000), &e);
    expect_err(rc, &e, "adapter_model.safetensors", "corrupt safetensors");
    rc = lora_load(&a, m, make_dir("nocfg", NULL, -1), &e);
    expect_err(rc, &e, "missing adapter_config.json", "missing config");
    rc = lora_load(&a, m, make_dir("nost", CFG, -2), &e);
    expect_err(rc, &e, "missing adapter_model.safetensors", "missing safetensors");
    rc = lora_load(&a, m, make_dir("rank0", "{\"r\":0,\"lora_alpha\":8}", -1), &e);
    expect_err(rc, &e, "rank r = 0", "rank 0");
    rc = lora_load(&a, m, make_dir("dora", "{\"r\":4,\"use_dora\":true}", -1), &e);
    expect_err(rc, &e, "DoRA", "DoRA");
    rc = lora_load(&a, m, make_dir("badjson", "{\"r\":4,", -1), &e);
    expect_err(rc, &e, "adapter_config.json", "config syntax");
    rc = lora_load(&a, m, repo_path("tests/data/lora/nope"), &e);
    expect_err(rc, &e, "not a PEFT adapter directory", "no such path");
    /* in memory: a missing B, an unknown module, a layer out of range, a rank-0 tensor */
    const char *q = "base_model.model.model.layers.0.self_attn.q_proj.";
    char n1[200], n2[200];
    snprintf(n1, sizeof n1, "%slora_A.weight", q);
    snprintf(n2, sizeof n2, "%slora_B.weight", q);
    struct {
        const char *what, *needle;
        int n;
        const char *names[2];
        int shape[2][2];
    } cases[] = {
        {"A without B", "has no matching B", 1, {n1}, {{4, 64}}},
        {"B of the wrong rank",
         "lora_B.weight' has shape [64, 3]",
         2,
         {n1, n2},
         {{4, 64}, {64, 3}}},
        {"A rank 0", "has rank 0", 2, {n1, n2}, {{0, 64}, {64, 0}}},
        {"unknown module",
         "embed_tokens",
         1,
         {"base_model.model.model.embed_tokens.lora_embedding_A"},
         {{4, 64}}},
        {"layer out of range",
         "names layer 7",
         1,
         {"base_model.model.model.layers.7.mlp.up_proj.lora_A.weight"},
         {{4, 64}}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int shp[2][2];
        memcpy(shp, cases[i].shape, sizeof shp);
        size_t len = 0;
        uint8_t *st = st_build(cases[i].n, cases[i].names, (const int(*)[2])shp, &len);
        rc = lora_load_peft_mem(&a, m, CFG, strlen(CFG), st, len, &e);
        expect_err(rc, &e, cases[i].needle, cases[i].what);
        free(st);
    }
    /* and a well-formed one from memory loads */
    {
        const char *names[2] = {n1, n2};
        const int shp[2][2] = {{4, 64}, {64, 4}};
        size_t len = 0;
        uint8_t *st = st_build(2, names, shp, &len);
        rc = lora_load_peft_mem(&a, m, CFG, strlen(CFG), st, len, &e);
        CHECK_MSG(rc == 0, "good adapter from memory: %s", e.msg);
        CHECK(a && a->targets == (1u << LORA_Q) && a->p[0].rank == 4);
        lora_unref(a);
        free(st);
    }
    model_free(m);
    model_free(gm);
}

/* ---- 16-bit adapters stay 16-bit -------------------------------------------------------- */

/* The qwen2 adapter "a" rewritten: every tensor rounded to f16/bf16 and stored as dtype
 * (F32 = the rounded values as f32). */
static uint8_t *st_rounded(const char *dir, int dt16, size_t *len)
{
    char p[700];
    snprintf(p, sizeof p, "%s/adapter_model.safetensors", dir);
    struct st_model *st = NULL;
    struct cerr e = {0};
    if (st_open(&st, p, &e))
        return NULL;
    size_t cap = 65536, o = 0, data = 0;
    char *hdr = malloc(cap);
    o += (size_t)snprintf(hdr, cap, "{");
    for (int i = 0; i < st_count(st); i++) {
        const struct st_tensor *t = st_get(st, i);
        size_t n = (size_t)(t->ne[0] * t->ne[1]), sz = n * (dt16 ? 2 : 4);
        o += (size_t)snprintf(hdr + o, cap - o,
                              "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld,%lld],"
                              "\"data_offsets\":[%zu,%zu]}",
                              i ? "," : "", t->name,
                              dt16 == 1   ? "F16"
                              : dt16 == 2 ? "BF16"
                                          : "F32",
                              (long long)t->ne[1], (long long)t->ne[0], data, data + sz);
        data += sz;
    }
    o += (size_t)snprintf(hdr + o, cap - o, "}");
    *len = 8 + o + data;
    uint8_t *b = malloc(*len), *w = b + 8 + o;
    uint64_t hl = o;
    memcpy(b, &hl, 8);
    memcpy(b + 8, hdr, o);
    for (int i = 0; i < st_count(st); i++) {
        const struct st_tensor *t = st_get(st, i);
        for (int64_t k = 0; k < t->ne[0] * t->ne[1]; k++) {
            float v;
            memcpy(&v, t->data + 4 * k, 4);
            int bf = dt16 == 2 || (dt16 == 0 && g_round_bf16);
            uint16_t h = bf ? half_f32_to_bf16(v) : half_f32_to_f16(v);
            float r = bf ? half_bf16_to_f32(h) : half_f16_to_f32(h);
            if (dt16) {
                memcpy(w, &h, 2);
                w += 2;
            } else {
                memcpy(w, &r, 4);
                w += 4;
            }
        }
    }
    free(hdr);
    st_close(st);
    return b;
}

static void test_mixed_batch_1thread(void)
{
    g_distinct = 1;
    test_mixed_batch();
    g_distinct = 0;
}

/* 16-bit adapters: a 16-bit file stays as it is; an f32 file of the same (rounded) values
 * kept in f32 (CINFER_LORA_DTYPE=f32) and kept in f16 (the default: scaled by powers of
 * two, folded into the scale) all give the same bits. An unknown CINFER_LORA_DTYPE fails. */
static void test_dtype16(void)
{
    struct cerr e = {0};
    struct model *m = NULL;
    CHECK_EQ_INT(model_load(&m, repo_path("tests/data/parity/qwen2"), g_be, &e), 0);
    if (!m)
        return;
    const char *dir = repo_path("tests/data/lora/qwen2/a");
    char cp[700];
    snprintf(cp, sizeof cp, "%s/adapter_config.json", dir);
    FILE *f = fopen(cp, "rb");
    char cfg[8192];
    size_t cl = f ? fread(cfg, 1, sizeof cfg, f) : 0;
    if (f)
        fclose(f);
    int32_t ids[12] = {1, 40, 41, 42, 100, 200, 7, 8, 9, 10, 11, 12};
    int V = m->hp.n_vocab;
    for (int d16 = 1; d16 <= 2; d16++) {
        g_round_bf16 = d16 == 2;
        size_t l16 = 0, l32 = 0;
        uint8_t *b16 = st_rounded(dir, d16, &l16), *b32 = st_rounded(dir, 0, &l32);
        struct lora_adapter *ad[3] = {NULL, NULL, NULL}; /* 16-bit file, f32 kept, f32 as f16 */
        CHECK(b16 && b32);
        if (!b16 || !b32)
            break;
        CHECK_EQ_INT(lora_load_peft_mem(&ad[0], m, cfg, cl, b16, l16, &e), 0);
        store_as("f32");
        CHECK_EQ_INT(lora_load_peft_mem(&ad[1], m, cfg, cl, b32, l32, &e), 0);
        store_as(NULL);
        CHECK_EQ_INT(lora_load_peft_mem(&ad[2], m, cfg, cl, b32, l32, &e), 0);
        if (ad[0] && ad[1] && ad[2]) {
            CHECK(ad[0]->p[0].dtype == (d16 == 1 ? DT_F16 : DT_BF16));
            CHECK(ad[1]->p[0].dtype == DT_F32 && ad[2]->p[0].dtype == DT_F16);
            CHECK(ad[0]->bytes * 2 == ad[1]->bytes && ad[2]->bytes == ad[0]->bytes);
            /* the f16 copy is scaled (so not the f16 file's bits), the products are not */
            CHECK(d16 == 2 || ad[2]->p[0].scale != ad[0]->p[0].scale);
            float *lg[3];
            for (int k = 0; k < 3; k++) {
                struct lora_set sk = {1, {ad[k]}, {1}};
                struct gen *gn = NULL;
                lg[k] = malloc((size_t)12 * V * 4);
                CHECK_EQ_INT(gen_new(&gn, m, 32, 32, DT_F32, &e), 0);
                gn->lora = &sk;
                gn->lora_paths = ALL_PATHS;
                CHECK_EQ_INT(gen_feed(gn, ids, 12, lg[k], &e), 0);
                gen_free(gn);
            }
            /* the same values: the same bits (16-bit elements widen exactly, and a power of
             * two moves no rounding) */
            for (int k = 1; k < 3; k++)
                CHECK_MSG(memcmp(lg[0], lg[k], (size_t)12 * V * 4) == 0,
                          "%s adapter != its f32 copy kept as %s", d16 == 1 ? "f16" : "bf16",
                          k == 1 ? "f32" : "f16");
            for (int k = 0; k < 3; k++)
                free(lg[k]);
        }
        for (int k = 0; k < 3; k++)
            lora_unref(ad[k]);
        if (d16 == 2) { /* an unknown storage type: an error naming the variable */
            struct lora_adapter *bad = NULL;
            store_as("f8");
            CHECK(lora_load_peft_mem(&bad, m, cfg, cl, b32, l32, &e) != 0 && bad == NULL);
            CHECK_MSG(strstr(e.msg, "CINFER_LORA_DTYPE") != NULL, "%s", e.msg);
            store_as(NULL);
        }
        free(b16);
        free(b32);
    }
    model_free(m);
}

/* ---- the registry ---------------------------------------------------------------------- */

/* A free hook that only records what it was handed (the test frees it later). */
static struct lora_adapter *g_hooked[4];
static int g_n_hooked;
static void hook_record(struct lora_adapter *a, void *ud)
{
    CHECK(ud == (void *)&g_n_hooked);
    if (g_n_hooked < 4)
        g_hooked[g_n_hooked++] = a;
}

static void test_registry(void)
{
    struct cerr e = {0};
    struct model *m = NULL;
    CHECK_EQ_INT(model_load(&m, repo_path("tests/data/parity/qwen3"), g_be, &e), 0);
    if (!m)
        return;
    struct lora_reg *r = NULL;
    CHECK_EQ_INT(lora_reg_new(&r, &e), 0);
    struct lora_adapter *a = load_ad(m, "qwen3", "a"), *b = load_ad(m, "qwen3", "b.gguf");
    if (!r || !a || !b)
        return;
    CHECK_EQ_INT(lora_reg_paths(r), 0);
    CHECK_EQ_INT(lora_reg_mount(r, "sql", a, 1.0f, &e), 0);
    CHECK_EQ_INT(lora_reg_mount(r, "tone", b, 0.5f, &e), 0);
    lora_ref(a);
    CHECK(lora_reg_mount(r, "sql", a, 1.0f, &e) != 0 && strstr(e.msg, "already mounted"));
    CHECK(lora_reg_mount(r, "a+b", a, 1.0f, &e) != 0);
    CHECK(lora_reg_mount(r, "none", a, 1.0f, &e) != 0);
    lora_unref(a);
    CHECK_EQ_INT(lora_reg_paths(r), ALL_PATHS);
    struct lora_set s;
    char bad[64] = "";
    CHECK_EQ_INT(lora_reg_resolve(r, "sql+tone", &s, bad, sizeof bad, &e), 0);
    CHECK(s.n == 2 && s.a[0] == a && s.a[1] == b && s.w[1] == 0.5f);
    struct lora_set s2;
    CHECK_EQ_INT(lora_reg_resolve(r, "sql, tone", &s2, bad, sizeof bad, &e), 0);
    CHECK(lora_set_eq(&s, &s2));
    lora_set_unref(&s2);
    CHECK_EQ_INT(lora_reg_resolve(r, "none", &s2, bad, sizeof bad, &e), 0);
    CHECK_EQ_INT(s2.n, 0);
    CHECK(lora_reg_resolve(r, "sql+nope", &s2, bad, sizeof bad, &e) != 0);
    CHECK_STR(bad, "nope");
    CHECK_STR(e.msg, "unknown adapter 'nope'");
    char k1[128], k2[128];
    struct lora_set one = {1, {a}, {1}};
    lora_set_key(&s, k1, sizeof k1);
    lora_set_key(&one, k2, sizeof k2);
    CHECK(strcmp(k1, k2) != 0 && strchr(k1, '+'));
    /* unmount while s holds a: s stays usable; a is freed at the last unref (ASan) */
    lora_reg_count(r, &s, 1);
    struct lora_reg_entry ent[4];
    CHECK_EQ_INT(lora_reg_list(r, ent, 4), 2);
    CHECK(ent[0].active == 1 && ent[0].requests == 1 && ent[0].running == 0);
    lora_reg_admit(r, &s, 1);
    CHECK_EQ_INT(lora_reg_list(r, ent, 4), 2);
    CHECK(ent[0].running == 1 && ent[1].running == 1);
    lora_reg_admit(r, &s, -1);
    /* from now on the last reference of a mounted adapter goes to the hook (a server posts
     * the free to its engine thread) */
    lora_reg_set_free_hook(r, hook_record, &g_n_hooked);
    CHECK_EQ_INT(lora_reg_unmount(r, "sql", &e), 0);
    CHECK_EQ_INT(g_n_hooked, 0); /* s still holds it */
    CHECK(lora_reg_unmount(r, "sql", &e) != 0);
    CHECK(!lora_reg_has(r, "sql") && lora_reg_has(r, "tone"));
    CHECK(lora_reg_resolve(r, "sql", &s2, NULL, 0, &e) != 0);
    CHECK_EQ_INT(lora_reg_paths(r), ALL_PATHS); /* never shrinks */
    CHECK(s.a[0]->targets == ALL_PATHS);
    lora_reg_count(r, &s, -1);
    lora_set_unref(&s);
    CHECK(g_n_hooked == 1 && g_hooked[0] == a); /* a's last reference: handed over, not freed */
    if (g_n_hooked == 1)
        lora_destroy(g_hooked[0]);
    struct lora_adapter *c = load_ad(m, "qwen3", "a"); /* mounted after the hook was set */
    CHECK(c && lora_reg_mount(r, "c", c, 1.0f, &e) == 0 && c->free_hook == hook_record);
    lora_reg_free(r); /* after the engine: frees b and c at once (ASan: nothing leaks) */
    CHECK_EQ_INT(g_n_hooked, 1);
    model_free(m);
}

/* The engine's running/waiting accounting per adapter (lora_eng.c, the router metric's
 * running_lora_adapters / waiting_lora_adapters): admitted -> running; preempted -> waiting
 * again; admitted again -> running once (not twice); a request ending while preempted
 * leaves nothing counted. */
static void test_running_accounting(void)
{
    struct cerr e = {0};
    struct model *m = NULL;
    CHECK_EQ_INT(model_load(&m, repo_path("tests/data/parity/qwen3"), g_be, &e), 0);
    struct lora_reg *reg = NULL;
    CHECK_EQ_INT(lora_reg_new(&reg, &e), 0);
    struct lora_adapter *a = m ? load_ad(m, "qwen3", "a") : NULL;
    if (!m || !reg || !a)
        return;
    CHECK_EQ_INT(lora_reg_mount(reg, "a", a, 1.0f, &e), 0);
    struct engine *g = calloc(1, sizeof *g);
    struct ereq *r1 = calloc(1, sizeof *r1), *r2 = calloc(1, sizeof *r2);
    if (!g || !r1 || !r2)
        return;
    g->c.lora = reg;
    g->m = m;
    struct lora_reg_entry ent[2];
#define RUNNING() (lora_reg_list(reg, ent, 2) == 1 ? ent[0].running : -1)
#define WAITING() (lora_reg_list(reg, ent, 2) == 1 ? ent[0].active - ent[0].running : -1)
    struct lora_set one = {1, {a}, {1}};
    struct engine_req q = {.lora = &one};
    CHECK_EQ_INT(eng_lora_submit(g, r1, &q, &e), 0);
    CHECK_EQ_INT(eng_lora_submit(g, r2, &q, &e), 0);
    CHECK(RUNNING() == 0 && WAITING() == 2);
    eng_lora_admitted(g, r1);
    eng_lora_admitted(g, r2);
    eng_lora_admitted(g, r2); /* admitted again while running: no double count */
    CHECK(RUNNING() == 2 && WAITING() == 0);
    eng_lora_preempted(g, r2); /* back in the waiting queue */
    CHECK(RUNNING() == 1 && WAITING() == 1);
    eng_lora_admitted(g, r2);
    CHECK(RUNNING() == 2 && WAITING() == 0);
    eng_lora_preempted(g, r1);
    eng_lora_release(g, r1); /* ends while preempted (e.g. cancelled) */
    CHECK(RUNNING() == 1 && WAITING() == 0);
    eng_lora_release(g, r2);
    CHECK(RUNNING() == 0 && WAITING() == 0);
#undef RUNNING
#undef WAITING
    free(r1);
    free(r2);
    free(g);
    lora_reg_free(reg);
    model_free(m);
}

int main(void)
{
    struct cerr e = {0};
    struct be_config bc = {.n_threads = 2};
    /* CINFER_LORA_BACKEND=cuda: the same checks on the GPU (bench/lora/device_lora.sh); the
     * mixed batch then within the logit tolerance (bits are the CPU's promise) */
    const char *bn = getenv("CINFER_LORA_BACKEND");
    g_be = be_new(bn && *bn ? bn : "cpu", &bc, &e);
    g_exact = !bn || !*bn || !strcmp(bn, "cpu");
    if (!g_be) {
        fprintf(stderr, "backend: %s\n", e.msg);
        return 1;
    }
    RUN(test_goldens);
    RUN(test_gguf_equals_peft);
    RUN(test_mixed_batch);
    RUN(test_malformed);
    RUN(test_dtype16);
    RUN(test_registry);
    RUN(test_running_accounting);
    be_free(g_be);
    if (g_exact) { /* the CPU op with one thread and 7 one-row groups: both passes per group
                    * in one item, the next group's matrices prefetched (only with one
                    * thread); the bits stay the same */
        bc.n_threads = 1;
        g_be = be_new("cpu", &bc, &e);
        CHECK(g_be != NULL);
        if (g_be) {
            RUN(test_mixed_batch_1thread);
            be_free(g_be);
        }
    }
    return harness_done();
}
