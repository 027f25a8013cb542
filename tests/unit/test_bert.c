/* test_bert.c — the BERT encoder and the embedding scheduler against sentence-transformers.
 *
 * tests/data/embeddings/ (scripts/gen_embed_goldens.py) holds sentence-transformers'
 * embeddings of 8 sentences for a tiny random-weight BERT (CLS pooling + Normalize) and for
 * all-MiniLM-L6-v2 (mean pooling + Normalize; its weights come from
 * scripts/fetch_models.sh all-minilm-l6-v2 and that part is skipped without them). Checks:
 * the tokenizer's ids equal the HF tokenizer's; each vector within cosine 0.9999 and max
 * |delta| 1e-4 of the golden; a batch of all sentences = each alone, bit for bit; the
 * scheduler (several jobs, sequences split across forwards) gives the same bits; bad ids,
 * lengths and directories are refused with an error.
 */
#include "harness.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "backend/backend.h"
#include "engine/embed.h"
#include "model/bert.h"
#include "tokenizer/tok.h"

static struct be *g_be;

struct gold {
    json_t *j;
    int n, d;
};

static int load_gold(struct gold *g, const char *path)
{
    json_error_t je;
    g->j = json_load_file(path, 0, &je);
    if (!g->j)
        return -1;
    g->n = (int)json_array_size(json_object_get(g->j, "sentences"));
    g->d = (int)json_array_size(json_array_get(json_object_get(g->j, "embeddings"), 0));
    return 0;
}

static double gold_at(const struct gold *g, int s, int i)
{
    return json_real_value(json_array_get(json_array_get(json_object_get(g->j, "embeddings"),
                                                         (size_t)s),
                                          (size_t)i));
}

struct done_ctx {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int left;
};

static void on_done(struct embed_job *j, void *ud)
{
    (void)j;
    struct done_ctx *c = ud;
    pthread_mutex_lock(&c->mu);
    c->left--;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* The whole check for one model directory against its golden file. */
static void check_model(const char *dir, const char *golden)
{
    struct gold g;
    CHECK_MSG(load_gold(&g, golden) == 0, "cannot read %s", golden);
    if (!g.j)
        return;
    struct cerr e = {0};
    struct bert *m = NULL;
    struct tok *tk = NULL;
    CHECK_MSG(bert_is_encoder(dir), "%s is not seen as a BERT encoder", dir);
    int rc = bert_load(&m, dir, g_be, &e);
    CHECK_MSG(rc == 0, "bert_load %s: %s", dir, e.msg);
    rc = rc ? rc : tok_load(&tk, dir, &e);
    CHECK_MSG(rc == 0, "tok_load %s: %s", dir, e.msg);
    if (rc) {
        bert_free(m);
        json_decref(g.j);
        return;
    }
    const struct bert_hparams *hp = bert_hparams(m);
    CHECK_EQ_INT(hp->n_embd, g.d);
    int n = g.n, d = hp->n_embd;
    int32_t *ids[16] = {0};
    int lens[16] = {0}, total = 0;
    json_t *sents = json_object_get(g.j, "sentences"), *gids = json_object_get(g.j, "ids");
    for (int s = 0; s < n && s < 16; s++) {
        const char *txt = json_string_value(json_array_get(sents, (size_t)s));
        CHECK(tok_encode(tk, txt, strlen(txt), TOK_ADD_SPECIAL, &ids[s], &lens[s], &e) == 0);
        json_t *want = json_array_get(gids, (size_t)s);
        int same = lens[s] == (int)json_array_size(want);
        for (int i = 0; same && i < lens[s]; i++)
            same = ids[s][i] == json_integer_value(json_array_get(want, (size_t)i));
        CHECK_MSG(same, "sentence %d: token ids differ from the HF tokenizer's", s);
        total += lens[s];
    }
    struct bert_ws *ws = NULL;
    CHECK(bert_ws_new(&ws, m, total, n, &e) == 0);
    float *alone = calloc((size_t)n * d, sizeof(float));
    float *batch = calloc((size_t)n * d, sizeof(float));
    double worst_cos = 1, worst_abs = 0;
    for (int s = 0; s < n; s++) {
        CHECK(bert_embed(m, ws, (const int32_t *const *)&ids[s], &lens[s], 1,
                         alone + (size_t)s * d, &e) == 0);
        double dot = 0, na = 0, nb = 0, mx = 0;
        for (int i = 0; i < d; i++) {
            double a = alone[(size_t)s * d + i], b = gold_at(&g, s, i);
            dot += a * b, na += a * a, nb += b * b;
            mx = fabs(a - b) > mx ? fabs(a - b) : mx;
        }
        double cs = dot / sqrt(na * nb);
        worst_cos = cs < worst_cos ? cs : worst_cos;
        worst_abs = mx > worst_abs ? mx : worst_abs;
    }
    printf("  %s: worst cosine %.8f, worst max |delta| %.3g over %d sentences\n", dir,
           worst_cos, worst_abs, n);
    CHECK_MSG(worst_cos >= 0.9999, "cosine %.8f < 0.9999", worst_cos);
    CHECK_MSG(worst_abs <= 1e-4, "max |delta| %.3g > 1e-4", worst_abs);
    /* one batch of all sentences = each alone, bit for bit */
    CHECK(bert_embed(m, ws, (const int32_t *const *)ids, lens, n, batch, &e) == 0);
    CHECK_MSG(!memcmp(batch, alone, (size_t)n * d * sizeof(float)),
              "batched vectors differ from the vectors computed alone");
    /* the scheduler: 3 jobs, forwards of at most 2 sequences */
    struct embedq *q = NULL;
    struct embedq_config qc = {.max_batch_tokens = hp->max_seq, .max_seqs = 2};
    struct embed_model em = {.bert = m, .n_embd = hp->n_embd, .max_len = hp->max_seq};
    CHECK(embedq_new(&q, &em, &qc, &e) == 0);
    if (q) {
        struct done_ctx dc = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 3};
        struct embed_job jobs[3];
        float *outs = calloc((size_t)n * d, sizeof(float));
        int cut[4] = {0, 1, n / 2, n};
        for (int k = 0; k < 3; k++) {
            jobs[k] = (struct embed_job){.n_seq = cut[k + 1] - cut[k],
                                         .ids = (const int32_t *const *)ids + cut[k],
                                         .lens = lens + cut[k], .out = outs + (size_t)cut[k] * d,
                                         .done = on_done, .ud = &dc};
            CHECK(embedq_submit(q, &jobs[k]) == 0);
        }
        pthread_mutex_lock(&dc.mu);
        while (dc.left > 0)
            pthread_cond_wait(&dc.cv, &dc.mu);
        pthread_mutex_unlock(&dc.mu);
        for (int k = 0; k < 3; k++)
            CHECK_MSG(jobs[k].status == 0, "job %d: %s", k, jobs[k].error);
        CHECK_MSG(!memcmp(outs, alone, (size_t)n * d * sizeof(float)),
                  "scheduled vectors differ from the vectors computed alone");
        struct embed_stats st;
        embedq_stats(q, &st);
        CHECK_EQ_INT((int)st.seqs, n);
        CHECK(st.max_seqs_in_forward <= 2 && st.forwards >= (n + 1) / 2);
        embedq_free(q);
        free(outs);
    }
    /* cancel: a job of n inputs, one per forward, cancelled at once; done runs exactly once,
     * and every input is either computed or counted as cancelled (how many of each depends
     * on timing) */
    struct embedq_config q1 = {.max_batch_tokens = hp->max_seq, .max_seqs = 1};
    CHECK(embedq_new(&q, &em, &q1, &e) == 0);
    if (q) {
        struct done_ctx dc = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 1};
        float *outs = calloc((size_t)n * d, sizeof(float));
        struct embed_job j = {.n_seq = n, .ids = (const int32_t *const *)ids, .lens = lens,
                              .out = outs, .done = on_done, .ud = &dc};
        CHECK(embedq_submit(q, &j) == 0);
        embedq_cancel(q, &j);
        embedq_cancel(q, &j); /* a second cancel is a no-op */
        pthread_mutex_lock(&dc.mu);
        while (dc.left > 0)
            pthread_cond_wait(&dc.cv, &dc.mu);
        pthread_mutex_unlock(&dc.mu);
        struct embed_stats st;
        embedq_stats(q, &st);
        embedq_free(q); /* joins the worker: no late done */
        CHECK_EQ_INT(dc.left, 0);
        CHECK_EQ_INT((int)(st.seqs + st.cancelled_seqs), n);
        CHECK(j.cancelled ? j.status == CERR_IO : j.status == 0 && st.cancelled_seqs == 0);
        free(outs);
    }
    /* refusals */
    int32_t bad[3] = {ids[0][0], hp->n_vocab, ids[0][0]};
    const int32_t *bp = bad;
    int bl = 3;
    CHECK(bert_embed(m, ws, &bp, &bl, 1, batch, &e) == CERR_INVALID);
    bl = hp->max_seq + 1;
    CHECK(bert_embed(m, ws, &bp, &bl, 1, batch, &e) == CERR_INVALID);
    free(alone);
    free(batch);
    for (int s = 0; s < 16; s++)
        free(ids[s]);
    bert_ws_free(ws);
    tok_free(tk);
    bert_free(m);
    json_decref(g.j);
}

static void test_tinybert(void)
{
    check_model(repo_path("tests/data/embeddings/tinybert"),
                repo_path("tests/data/embeddings/tinybert/golden.json"));
}

static int g_minilm_ran;
static void test_minilm(void)
{
    const char *env = getenv("CINFER_MODELS");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/all-MiniLM-L6-v2", env ? env : repo_path("models"));
    if (!bert_is_encoder(dir)) {
        printf("  skipped: %s is absent (scripts/fetch_models.sh all-minilm-l6-v2)\n", dir);
        return;
    }
    g_minilm_ran = 1;
    check_model(dir, repo_path("tests/data/embeddings/minilm.json"));
}

static void test_refusals(void)
{
    struct cerr e = {0};
    struct bert *m = NULL;
    /* a decoder directory is not an encoder */
    CHECK(!bert_is_encoder(repo_path("tests/data/parity/llama")));
    CHECK(bert_load(&m, repo_path("tests/data/parity/llama"), g_be, &e) != 0 && !m);
    CHECK(bert_load(&m, repo_path("tests/data/embeddings/none"), g_be, &e) != 0 && !m);
}

int main(void)
{
    struct cerr e = {0};
    g_be = be_new("cpu", &(struct be_config){.n_threads = 2}, &e);
    if (!g_be) {
        fprintf(stderr, "be_new: %s\n", e.msg);
        return 1;
    }
    RUN(test_tinybert);
    RUN(test_minilm);
    RUN(test_refusals);
    be_free(g_be);
    if (!g_minilm_ran)
        printf("note: the all-MiniLM-L6-v2 goldens were not checked (model absent)\n");
    return harness_done();
}
