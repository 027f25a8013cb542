/* test_engine_kvq.c — quantized KV through the engine on stories260K (CPU): for every
 * scheme (8, 4 rotated, turbo k8v4, turbo k8v3, a per-layer config):
 * - batched == solo: 8 concurrent greedy requests joining at different steps give the ids
 *   each gives alone, bit for bit;
 * - a prefix-cache hit equals the cold run (shared full blocks and the copied partial tail);
 * - preemption under a tiny pool completes every request with the solo ids;
 * - the pool holds fewer bytes per token than f16;
 * and across schemes: an entry written under one scheme is never served under another,
 * neither from RAM (the namespace root differs) nor from the SSD tier (a directory written
 * under k8v3, then opened under 8: no hit, the cold ids; under k8v3 again: hits).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/kvq.h"
#include "engine/engine.h"
#include "engine/plan.h"
#include "eng_coll.h"
#include "harness.h"
#include "kv/kvq_scheme.h"
#include "model/model.h"
#include "tokenizer/tok.h"
#include "util/clock.h"

static struct be *g_be;
static struct model *g_m;
static struct tok *g_tk;
static int g_ldt[64];
static int g_code;            /* the scheme under test */
static const int *g_layers;   /* per-layer dtypes or NULL */
static const char *g_ssd;     /* SSD dir or NULL */

static struct engine *mk_engine(int max_seqs, int n_blocks, int cache_blocks)
{
    struct engine_config c;
    engine_config_default(&c, g_m);
    c.n_ctx = n_blocks * 16 < 512 ? n_blocks * 16 : 512;
    c.max_seqs = max_seqs;
    c.max_step_tokens = 64;
    c.block_size = 16;
    c.n_blocks = n_blocks;
    c.kv_dtype = g_code;
    c.kv_layer_dtype = g_layers;
    c.prompt_cache_blocks = cache_blocks;
    c.check_invariants = 1;
    c.ssd_dir = g_ssd;
    c.ssd_max_bytes = (size_t)64 << 20;
    c.ssd_spill_queue_bytes = (size_t)16 << 20;
    c.ssd_close_timeout_s = 60;
    struct engine *e = NULL;
    struct cerr err = {0};
    if (engine_new(&e, g_m, g_tk, &c, &err))
        fprintf(stderr, "engine_new: %s\n", err.msg);
    return e;
}

static int encode(const char *text, int32_t **ids)
{
    int n = 0;
    if (tok_encode(g_tk, text, strlen(text), TOK_ADD_SPECIAL, ids, &n, NULL))
        return 0;
    return n;
}

static int submit(struct engine *e, const int32_t *ids, int n, int max_tokens, struct eng_coll *c)
{
    struct engine_req q = {.ids = ids, .n_ids = n, .max_tokens = max_tokens, .cb = eng_coll_cb,
                           .ud = c, .ignore_eos = 1};
    sampler_params_default(&q.sp);
    q.sp.temperature = 0;
    q.sp.top_logprobs = -1;
    uint64_t id;
    struct cerr err = {0};
    int rc = engine_submit(e, &q, &id, &err);
    if (rc)
        fprintf(stderr, "submit: %s\n", err.msg);
    return rc;
}

static int run_alone(const int32_t *ids, int n, int max_tokens, int32_t *out)
{
    struct engine *e = mk_engine(1, 64, -1);
    struct eng_coll c;
    eng_coll_init(&c);
    if (!e || submit(e, ids, n, max_tokens, &c)) {
        engine_free(e);
        return -1;
    }
    eng_coll_wait(&c);
    memcpy(out, c.ids, (size_t)c.n * sizeof *out);
    engine_free(e);
    return c.n;
}

static const char *const PROMPTS[8] = {
    "Once upon a time",
    "Lily and Ben were friends. One day they went to the park to play",
    "The cat",
    "Tom had a big red ball. He liked to throw it high in the sky. One day the ball",
    "The sun was shining and the birds were singing. Anna wanted to go outside",
    "Mom said",
    "There was a big tree in the garden. Every day a bird sat on it and sang a song. The",
    "Timmy liked to draw pictures of cars, trucks and planes. His favorite color was",
};

static void check_scheme(const char *name)
{
    int32_t *ids[8];
    int n[8], mt[8], nref[8];
    static int32_t ref[8][512];
    for (int i = 0; i < 8; i++) {
        n[i] = encode(PROMPTS[i], &ids[i]);
        mt[i] = 24 + 9 * i;
        nref[i] = run_alone(ids[i], n[i], mt[i], ref[i]);
        CHECK(nref[i] == mt[i]);
    }
    /* batched == solo */
    struct engine *e = mk_engine(8, 256, -1);
    CHECK(e != NULL);
    static struct eng_coll c[8];
    for (int i = 0; i < 8; i++)
        eng_coll_init(&c[i]);
    for (int i = 0; i < 8; i++) {
        if (i >= 3)
            while (eng_coll_count(&c[i - 1]) < i % 4 && !c[i - 1].done)
                usleep(200);
        CHECK(submit(e, ids[i], n[i], mt[i], &c[i]) == 0);
    }
    int same = 0;
    for (int i = 0; i < 8; i++) {
        eng_coll_wait(&c[i]);
        same += c[i].n == nref[i] && !memcmp(c[i].ids, ref[i], (size_t)nref[i] * 4);
    }
    printf("%s: batched == solo %d/8\n", name, same);
    CHECK_MSG(same == 8, "%s: batched != solo", name);
    CHECK(eng_invariant_failures(e) == 0);
    engine_free(e);

    /* prefix cache: the same long prompt again (full blocks shared), then the next turn
     * (the partial tail copied) equal their cold runs */
    int32_t *ia;
    int na = encode("Once upon a time there was a little girl named Lily. She loved to play "
                    "outside in the park with her friends and her dog. One day Lily",
                    &ia);
    static int32_t cold[512], t2[1024], cold2[512];
    int nc = run_alone(ia, na, 30, cold);
    memcpy(t2, ia, (size_t)na * 4);
    memcpy(t2 + na, cold, (size_t)nc * 4);
    int nt2 = na + nc;
    int nc2 = run_alone(t2, nt2, 20, cold2);
    e = mk_engine(4, 128, 128);
    struct eng_coll a1, a2, a3;
    eng_coll_init(&a1);
    eng_coll_init(&a2);
    eng_coll_init(&a3);
    CHECK(submit(e, ia, na, 30, &a1) == 0);
    eng_coll_wait(&a1);
    CHECK(submit(e, ia, na, 30, &a2) == 0);
    eng_coll_wait(&a2);
    CHECK(submit(e, t2, nt2, 20, &a3) == 0);
    eng_coll_wait(&a3);
    printf("%s: prefix hit %d and next turn %d tokens cached\n", name, a2.n_cached, a3.n_cached);
    CHECK(a2.n_cached > 0 && a3.n_cached >= na + nc - 1);
    CHECK(a1.n == nc && !memcmp(a1.ids, cold, (size_t)nc * 4));
    CHECK_MSG(a2.n == nc && !memcmp(a2.ids, cold, (size_t)nc * 4), "%s: hit != cold", name);
    CHECK_MSG(a3.n == nc2 && !memcmp(a3.ids, cold2, (size_t)nc2 * 4), "%s: tail hit != cold",
              name);
    CHECK(eng_invariant_failures(e) == 0);
    engine_free(e);
    free(ia);

    /* preemption: 12 blocks for 4 requests of ~100 positions. The 4 requests must overlap
     * for a preemption to happen: on a loaded machine the submitting thread can stall until
     * the first finished, so the scenario runs again (at most 3 times) until one happened. */
    struct engine_stats st;
    for (int attempt = 0; attempt < 3; attempt++) {
    e = mk_engine(4, 12, 12);
    for (int i = 0; i < 4; i++) {
        eng_coll_init(&c[i]);
        CHECK(submit(e, ids[i * 2 + 1], n[i * 2 + 1], mt[i * 2 + 1], &c[i]) == 0);
    }
    same = 0;
    for (int i = 0; i < 4; i++) {
        for (int k = 0; getenv("KVQ_DEBUG") && k < 20 && !c[i].done; k++) {
            struct engine_stats s2;
            engine_get_stats(e, &s2);
            fprintf(stderr, "req %d: %d ids, running %d waiting %d preempted %ld\n", i,
                    eng_coll_count(&c[i]), s2.running, s2.waiting, s2.preempted);
            sleep(1);
        }
        eng_coll_wait(&c[i]);
        int k = i * 2 + 1; /* the solo ids from above */
        same += !c[i].err && c[i].n == nref[k] && !memcmp(c[i].ids, ref[k], (size_t)nref[k] * 4);
    }
    eng_invariant_failures(e);
    engine_get_stats(e, &st);
    printf("%s: preemption %d/4 correct, %ld preemptions\n", name, same, st.preempted);
    CHECK(same == 4);
    CHECK(st.invariant_failures == 0);
    engine_free(e);
    if (st.preempted > 0)
        break;
    }
    CHECK(st.preempted > 0);
    for (int i = 0; i < 8; i++)
        free(ids[i]);
}

static int set_scheme(const char *v)
{
    struct kvq_scheme s = {.rotate = -1};
    struct kvq_layers_info info;
    struct cerr e = {0};
    if (kvq_scheme_parse(v, &s, &e) ||
        kvq_scheme_layers(&s, &g_m->hp, g_m->path, DT_F16, g_ldt, &g_code, &info, &e)) {
        fprintf(stderr, "%s: %s\n", v, e.msg);
        return -1;
    }
    g_layers = g_ldt;
    struct engine_config c;
    engine_config_default(&c, g_m);
    c.kv_dtype = g_code;
    c.kv_layer_dtype = g_layers;
    size_t q = engine_kv_token_bytes(g_m, &c);
    c.kv_layer_dtype = NULL;
    c.kv_dtype = DT_F16;
    size_t f = engine_kv_token_bytes(g_m, &c);
    printf("%s: %zu bytes per token (f16 %zu), %d quantized layers\n", v, q, f, info.n_quant);
    CHECK(q == info.bytes_per_token);
    if (s.mode == KVQ_U4) { /* layer 0 keeps 8-bit keys; the others and /stats say 4 */
        CHECK(kvq_fmt_of(g_ldt[0], 0) == KVF_A8 && kvq_fmt_of(g_ldt[0], 1) == KVF_A4);
        for (int l = 1; l < g_m->hp.n_layer; l++)
            CHECK(g_ldt[l] == g_code && kvq_fmt_of(g_ldt[l], 0) == KVF_A4);
        CHECK(info.kbits == 4 && info.vbits == 4 && info.n_quant == g_m->hp.n_layer);
    }
    CHECK(s.mode == KVQ_OFF ? q == f : q < f);
    return 0;
}

static void test_schemes(void)
{
    /* "off" (f16) too on another backend: the same contracts without quantization, so a
     * failure there is the backend's, not the scheme's */
    const char *schemes[] = {"8", "4", "turbo:k8v4", "turbo", "off"};
    const char *only = getenv("KVQ_ONLY");
    for (int i = 0; i < 5; i++) {
        if (only ? strcmp(only, schemes[i]) != 0
                 : i == 4 && !strcmp(g_be->ops->name, "cpu"))
            continue;
        CHECK(set_scheme(schemes[i]) == 0);
        check_scheme(schemes[i]);
    }
}

/* config: the first and last layer f16, the rest k8v3 (kv_config.json under a temp dir) */
static void test_config(void)
{
    char dir[] = "/tmp/cinfer_kvq_XXXXXX", path[256], arg[300];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/kv_config.json", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fputs("{\"default\": \"k8v3\", \"layers\": {\"0\": \"f16\", \"-1\": \"off\", \"1\": \"ka8va4\", "
          "\"2\": \"kf16vlm3\"}}\n",
          f);
    fclose(f);
    snprintf(arg, sizeof arg, "config:%s", path);
    CHECK(set_scheme(arg) == 0);
    CHECK(!kvq_is(g_ldt[0]) && kvq_is(g_ldt[1]) && !kvq_is(g_ldt[g_m->hp.n_layer - 1]));
    /* explicit formats per side: "k<fmt>v<fmt>" */
    CHECK(kvq_fmt_of(g_ldt[1], 0) == KVF_A8 && kvq_fmt_of(g_ldt[1], 1) == KVF_A4);
    CHECK(kvq_fmt_of(g_ldt[2], 0) == KVF_F16 && kvq_fmt_of(g_ldt[2], 1) == KVF_L3);
    CHECK(kvq_fmt_of(g_ldt[3], 0) == KVF_A8 && kvq_fmt_of(g_ldt[3], 1) == KVF_L3);
    check_scheme("config");
    /* a bad file is refused naming it */
    f = fopen(path, "w");
    fputs("{\"layers\": {\"99\": \"8\"}}", f);
    fclose(f);
    struct kvq_scheme s = {.rotate = -1};
    struct kvq_layers_info info;
    struct cerr e = {0};
    CHECK(kvq_scheme_parse(arg, &s, &e) == 0);
    CHECK(kvq_scheme_layers(&s, &g_m->hp, g_m->path, DT_F16, g_ldt, &g_code, &info, &e) != 0);
    CHECK(strstr(e.msg, "kv_config.json") && strstr(e.msg, "99"));
    f = fopen(path, "w"); /* an unknown format name */
    fputs("{\"layers\": {\"1\": \"ka9va4\"}}", f);
    fclose(f);
    CHECK(kvq_scheme_parse(arg, &s, &e) == 0);
    CHECK(kvq_scheme_layers(&s, &g_m->hp, g_m->path, DT_F16, g_ldt, &g_code, &info, &e) != 0);
    CHECK(strstr(e.msg, "kv_config.json") && strstr(e.msg, "ka9va4"));
    unlink(path);
    rmdir(dir);
}

/* The same prompt under two schemes: never a hit across them, in RAM or on the SSD. */
static void test_scheme_isolation(void)
{
    char dir[] = "/tmp/cinfer_kvq_ssd_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    int32_t *ia;
    int na = encode("Once upon a time there was a little girl named Lily. She loved to play "
                    "outside in the park with her friends and her dog. One day Lily went",
                    &ia);
    static int32_t cold8[512], coldt[512];
    /* whole blocks only (no partial tail registered at the end): this checks the scheme
     * separation, not the SSD tier's partial blocks */
    int mt = 20 + (16 - (na + 19) % 16) % 16;
    CHECK(set_scheme("8") == 0);
    int n8 = run_alone(ia, na, mt, cold8);
    CHECK(set_scheme("turbo") == 0);
    int nt = run_alone(ia, na, mt, coldt);
    CHECK(n8 == mt && nt == mt);
    /* written under turbo k8v3 onto the SSD */
    g_ssd = dir;
    struct engine *e = mk_engine(2, 64, 64);
    CHECK(e != NULL);
    struct eng_coll c;
    eng_coll_init(&c);
    CHECK(submit(e, ia, na, mt, &c) == 0);
    eng_coll_wait(&c);
    CHECK(c.n == nt && !memcmp(c.ids, coldt, (size_t)nt * 4));
    engine_free(e); /* writes what is cached to the directory */
    if (getenv("KVQ_DEBUG")) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "ls -laR '%s' >&2", dir);
        CHECK(system(cmd) == 0);
    }
    /* opened under 8: nothing served from it */
    CHECK(set_scheme("8") == 0);
    e = mk_engine(2, 64, 64);
    eng_coll_init(&c);
    CHECK(submit(e, ia, na, mt, &c) == 0);
    eng_coll_wait(&c);
    printf("ssd written under turbo, read under 8: %d cached\n", c.n_cached);
    CHECK_EQ_INT(c.n_cached, 0);
    CHECK(c.n == n8 && !memcmp(c.ids, cold8, (size_t)n8 * 4));
    engine_free(e);
    /* under turbo again: served (the check above can fail) */
    CHECK(set_scheme("turbo") == 0);
    e = mk_engine(2, 64, 64);
    eng_coll_init(&c);
    CHECK(submit(e, ia, na, mt, &c) == 0);
    eng_coll_wait(&c);
    printf("ssd read under turbo again: %d cached\n", c.n_cached);
    CHECK(c.n_cached > 0);
    CHECK(c.n == nt && !memcmp(c.ids, coldt, (size_t)nt * 4));
    engine_free(e);
    g_ssd = NULL;
    free(ia);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

int main(void)
{
    const char *fx = getenv("CINFER_FIXTURES");
    char path[1024];
    snprintf(path, sizeof path, "%s/stories260K/stories260K.gguf", fx ? fx : "tests/data/fixtures");
    struct cerr e = {0};
    struct be_config bc = {.n_threads = 2};
    /* CINFER_TEST_BACKEND=cuda runs the same contracts on the GPU backend (device runs) */
    const char *bn = getenv("CINFER_TEST_BACKEND");
    g_be = be_new(bn && *bn ? bn : "cpu", &bc, &e);
    if (!g_be || model_load(&g_m, path, g_be, &e) || tok_load(&g_tk, path, &e)) {
        fprintf(stderr, "setup: %s\n", e.msg);
        return 1;
    }
    if (!getenv("KVQ_ONLY_SSD")) {
        RUN(test_schemes);
        RUN(test_config);
    }
    RUN(test_scheme_isolation);
    tok_free(g_tk);
    model_free(g_m);
    be_free(g_be);
    return harness_done();
}
