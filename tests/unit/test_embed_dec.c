/* test_embed_dec.c — embeddings from decoder models against transformers.
 *
 * tests/data/embeddings/decoders.json (scripts/gen_embed_goldens.py) holds, for the tiny
 * random decoders of tests/data/parity/{llama,qwen2,gemma3}, the last-token and mean pooling
 * (then L2 normalization) of transformers' final-normed hidden states for a 12-, an 80- and a
 * 300-token sequence (the first two are packed into one forward, the 300 is prefilled alone
 * in 256-token chunks; gemma3's sliding window is shorter than them). Both the Hugging Face
 * directory and the GGUF of each model must give cosine >= 0.9999 and max |delta| <= 1e-4;
 * each input embedded alone gives the same bits as packed, and so does the embedding
 * scheduler; bad input is refused. CINFER_TEST_BACKEND=cuda runs the same checks on the GPU
 * backend (device runs: bench/gpu/device_s4.sh).
 */
#include "harness.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "backend/backend.h"
#include "engine/embed.h"
#include "engine/engine.h"
#include "model/model.h"

static struct be *g_be;
static json_t *g_gold;

static void compare(const char *what, const float *v, json_t *want, int d)
{
    double dot = 0, na = 0, nb = 0, mx = 0;
    for (int i = 0; i < d; i++) {
        double a = v[i], b = json_real_value(json_array_get(want, (size_t)i));
        dot += a * b, na += a * a, nb += b * b;
        mx = fabs(a - b) > mx ? fabs(a - b) : mx;
    }
    double cs = dot / sqrt(na * nb);
    CHECK_MSG(cs >= 0.9999 && mx <= 1e-4, "%s: cosine %.8f, max |delta| %.3g", what, cs, mx);
}

struct wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
};

static void on_done(struct embed_job *j, void *ud)
{
    (void)j;
    struct wait *w = ud;
    pthread_mutex_lock(&w->mu);
    w->done = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* ---- decoder embeddings driven by the generation engine (engine_set_side) ---- */

struct gen {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t ids[256];
    int n, done;
    struct embedq *q;   /* submit j at the first token (from the engine thread) */
    struct embed_job *j;
    int n_at_emb_done;  /* tokens out when the embedding job finished */
    int emb_done;
};

static void gen_cb(void *ud, const struct engine_event *ev)
{
    struct gen *g = ud;
    pthread_mutex_lock(&g->mu);
    if (ev->type == ENGINE_EV_DELTA && g->n < 256)
        g->ids[g->n++] = ev->token;
    int first = ev->type == ENGINE_EV_DELTA && g->n == 1;
    if (ev->type != ENGINE_EV_DELTA)
        g->done = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    if (first && g->q)
        CHECK(embedq_submit(g->q, g->j) == 0);
}

static void emb_done(struct embed_job *j, void *ud)
{
    (void)j;
    struct gen *g = ud;
    pthread_mutex_lock(&g->mu);
    g->n_at_emb_done = g->done ? -1 : g->n;
    g->emb_done = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

static struct engine *mk_engine(const struct model *m)
{
    struct engine_config c;
    engine_config_default(&c, m);
    c.n_ctx = 256, c.max_seqs = 4, c.max_step_tokens = 32, c.block_size = 16;
    c.n_blocks = 64, c.kv_dtype = DT_F32, c.check_invariants = 1;
    struct engine *g = NULL;
    struct cerr e = {0};
    if (engine_new(&g, m, NULL, &c, &e))
        fprintf(stderr, "engine_new: %s\n", e.msg);
    return g;
}

/* A greedy 120-token generation on eng into *out (out->q / out->j set: the embedding job
 * is submitted at its first token). Returns the tokens generated. */
static int generate(struct engine *eng, struct gen *out)
{
    static int32_t prompt[20];
    for (int i = 0; i < 20; i++)
        prompt[i] = (i * 7 + 3) % 200 + 1;
    pthread_mutex_init(&out->mu, NULL);
    pthread_cond_init(&out->cv, NULL);
    struct engine_req r = {.ids = prompt, .n_ids = 20, .max_tokens = 120, .cb = gen_cb,
                           .ud = out, .ignore_eos = 1};
    sampler_params_default(&r.sp);
    r.sp.temperature = 0;
    r.sp.top_logprobs = -1;
    uint64_t id;
    struct cerr e = {0};
    if (engine_submit(eng, &r, &id, &e))
        return -1;
    pthread_mutex_lock(&out->mu);
    while (!out->done || (out->q && !out->emb_done))
        pthread_cond_wait(&out->cv, &out->mu);
    pthread_mutex_unlock(&out->mu);
    return out->n;
}

static atomic_int g_wakes;
static void count_wake(void *ud)
{
    atomic_fetch_add(&g_wakes, 1);
    engine_side_wake(ud);
}
static int side_run(void *ud) { return embedq_run_once(ud); }

/* The embedding queue driven by the engine's thread on the engine's own model: submitted
 * at a generation's first token, its forwards (one input each) take turns with the
 * generation's steps, so it finishes while the generation runs; the vectors equal
 * dec_embed's bit for bit (want), and the generation equals the same generation alone. */
static void check_engine_driven(const struct model *m, struct dec_embedder *de, int n,
                                const int32_t *const *ids, const int *lens, const float *want)
{
    const int d = m->hp.n_embd;
    struct engine *eng = mk_engine(m);
    CHECK(eng != NULL);
    if (!eng)
        return;
    static struct gen alone, beside;
    memset(&alone, 0, sizeof alone);
    memset(&beside, 0, sizeof beside);
    CHECK(generate(eng, &alone) == 120);
    struct embedq *q = NULL;
    struct embed_model em = {.dec = de, .n_embd = d, .max_len = 512};
    struct embedq_config qc = {.max_batch_tokens = 512, .max_seqs = 1, .wake = count_wake,
                               .wake_ud = eng};
    struct cerr e = {0};
    CHECK(embedq_new(&q, &em, &qc, &e) == 0);
    if (!q) {
        engine_free(eng);
        return;
    }
    engine_set_side(eng, side_run, q);
    float *out = calloc((size_t)n * d, sizeof(float));
    struct embed_job j = {.n_seq = n, .ids = ids, .lens = lens, .out = out, .done = emb_done,
                          .ud = &beside};
    beside.q = q, beside.j = &j;
    atomic_store(&g_wakes, 0);
    CHECK(generate(eng, &beside) == 120);
    CHECK_MSG(j.status == 0, "%s", j.error);
    CHECK(!memcmp(out, want, (size_t)n * d * sizeof(float)));
    CHECK(!memcmp(alone.ids, beside.ids, sizeof alone.ids));
    CHECK_EQ_INT(atomic_load(&g_wakes), 1);
    struct embed_stats st;
    embedq_stats(q, &st);
    CHECK_EQ_INT(st.forwards, n);
    /* n forwards, each after one generation step at most: long before the 120th token */
    CHECK_MSG(beside.n_at_emb_done > 0 && beside.n_at_emb_done <= 1 + 2 * n,
              "the embeddings finished at token %d of the generation", beside.n_at_emb_done);
    printf("engine-driven embeddings: %d inputs in %ld forwards, done at generated token %d "
           "of 120\n", n, st.forwards, beside.n_at_emb_done);
    engine_free(eng); /* first: the engine thread drives the queue */
    embedq_free(q);
    free(out);
}

static void check_arch(const char *arch, const char *file)
{
    char path[1024];
    snprintf(path, sizeof path, "%s%s%s", repo_path("tests/data/parity/"), arch, file);
    json_t *g = json_object_get(json_object_get(g_gold, "models"), arch);
    CHECK_MSG(g != NULL, "no golden for %s", arch);
    struct cerr e = {0};
    struct model *m = NULL;
    int rc = g ? model_load(&m, path, g_be, &e) : -1;
    CHECK_MSG(rc == 0, "model_load %s: %s", path, e.msg);
    if (rc)
        return;
    int d = m->hp.n_embd;
    json_t *ids_j = json_object_get(g, "ids");
    int n = (int)json_array_size(ids_j);
    int32_t *ids[4] = {0};
    int lens[4] = {0};
    for (int s = 0; s < n && s < 4; s++) {
        json_t *a = json_array_get(ids_j, (size_t)s);
        lens[s] = (int)json_array_size(a);
        ids[s] = malloc((size_t)lens[s] * sizeof(int32_t));
        for (int i = 0; i < lens[s]; i++)
            ids[s][i] = (int32_t)json_integer_value(json_array_get(a, (size_t)i));
    }
    float *out = calloc((size_t)n * d, sizeof(float));
    float *out2 = calloc((size_t)n * d, sizeof(float));
    static const char *modes[2] = {"last", "mean"};
    for (int k = 0; k < 2; k++) {
        struct dec_embedder *de = NULL;
        int pool = k == 0 ? BERT_POOL_LAST : BERT_POOL_MEAN;
        CHECK(dec_embedder_new(&de, m, pool, 1, 512, &e) == 0);
        if (!de)
            continue;
        CHECK_MSG(dec_embed(de, (const int32_t *const *)ids, lens, n, out, &e) == 0, "%s",
                  e.msg);
        for (int s = 0; s < n; s++) {
            char what[128];
            snprintf(what, sizeof what, "%s%s %s pooling, %d tokens", arch, file, modes[k],
                     lens[s]);
            compare(what, out + (size_t)s * d,
                    json_array_get(json_object_get(g, modes[k]), (size_t)s), d);
        }
        /* each alone: the same bits as packed */
        for (int s = 0; s < n; s++) {
            CHECK(dec_embed(de, (const int32_t *const *)&ids[s], &lens[s], 1,
                            out2 + (size_t)s * d, &e) == 0);
        }
        CHECK_MSG(!memcmp(out, out2, (size_t)n * d * sizeof(float)),
                  "%s: packed inputs differ from inputs alone", arch);
        memset(out2, 0, (size_t)n * d * sizeof(float));
        /* through the scheduler: the same bits */
        struct embedq *q = NULL;
        struct embed_model em = {.dec = de, .n_embd = d, .max_len = 512};
        struct embedq_config qc = {.max_batch_tokens = 512, .max_seqs = 4};
        CHECK(embedq_new(&q, &em, &qc, &e) == 0);
        if (q) {
            struct wait w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
            struct embed_job j = {.n_seq = n, .ids = (const int32_t *const *)ids, .lens = lens,
                                  .out = out2, .done = on_done, .ud = &w};
            CHECK(embedq_submit(q, &j) == 0);
            pthread_mutex_lock(&w.mu);
            while (!w.done)
                pthread_cond_wait(&w.cv, &w.mu);
            pthread_mutex_unlock(&w.mu);
            CHECK_MSG(j.status == 0, "%s", j.error);
            CHECK(!memcmp(out, out2, (size_t)n * d * sizeof(float)));
            embedq_free(q);
        }
        if (k == 0 && !*file) /* driven by the engine, on its model */
            check_engine_driven(m, de, n, (const int32_t *const *)ids, lens, out);
        /* refusals: a bad id, a sequence over the limit */
        int32_t bad[2] = {1, m->hp.n_vocab};
        const int32_t *bp = bad;
        int bl = 2;
        CHECK(dec_embed(de, &bp, &bl, 1, out2, &e) == CERR_INVALID);
        bl = 513;
        CHECK(dec_embed(de, &bp, &bl, 1, out2, &e) == CERR_INVALID);
        dec_embedder_free(de);
    }
    for (int s = 0; s < 4; s++)
        free(ids[s]);
    free(out);
    free(out2);
    model_free(m);
}

static void test_llama(void) { check_arch("llama", ""); check_arch("llama", "/model.gguf"); }
static void test_qwen2(void) { check_arch("qwen2", ""); check_arch("qwen2", "/model.gguf"); }
static void test_gemma3(void) { check_arch("gemma3", ""); check_arch("gemma3", "/model.gguf"); }

int main(void)
{
    struct cerr e = {0};
    json_error_t je;
    g_gold = json_load_file(repo_path("tests/data/embeddings/decoders.json"), 0, &je);
    const char *bn = getenv("CINFER_TEST_BACKEND");
    g_be = be_new(bn && *bn ? bn : "cpu", &(struct be_config){.n_threads = 2}, &e);
    if (!g_be || !g_gold) {
        fprintf(stderr, "setup: %s %s\n", e.msg, je.text);
        return 1;
    }
    RUN(test_llama);
    RUN(test_qwen2);
    RUN(test_gemma3);
    be_free(g_be);
    json_decref(g_gold);
    return harness_done();
}
