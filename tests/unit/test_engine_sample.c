/* test_engine_sample.c — the engine's sampling from backend candidates (op topcand) on
 * stories260K and the CPU backend.
 *
 * Contracts checked: a seeded top_p request gives the same ids with the candidate path and
 * with CINFER_HOST_SAMPLE=1 (the whole row on the host), and the candidate path really ran;
 * with a tiny candidate cap (CINFER_SAMPLE_CAP) rows fall back to fetching their logits and
 * the ids still match; the seeded request gives the same ids alone and batched with greedy,
 * penalised and logprob requests; greedy logprobs match the host path within 1e-5.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "engine/engine.h"
#include "eng_coll.h"
#include "harness.h"
#include "model/model.h"
#include "tokenizer/tok.h"
#include "util/clock.h"

static struct be *g_be;
static struct model *g_m;
static struct tok *g_tk;

/* An engine made under the given environment (read at creation): host_sample sets
 * CINFER_HOST_SAMPLE=1, cap > 0 sets CINFER_SAMPLE_CAP. */
static struct engine *mk_engine(int max_seqs, int host_sample, int cap)
{
    if (host_sample)
        setenv("CINFER_HOST_SAMPLE", "1", 1);
    char cv[16];
    snprintf(cv, sizeof cv, "%d", cap);
    if (cap > 0)
        setenv("CINFER_SAMPLE_CAP", cv, 1);
    struct engine_config c;
    engine_config_default(&c, g_m);
    c.n_ctx = 512;
    c.max_seqs = max_seqs;
    c.max_step_tokens = 64;
    c.n_blocks = 256;
    c.kv_dtype = DT_F32;
    c.prompt_cache_blocks = -1;
    struct engine *e = NULL;
    struct cerr err = {0};
    if (engine_new(&e, g_m, g_tk, &c, &err))
        fprintf(stderr, "engine_new: %s\n", err.msg);
    unsetenv("CINFER_HOST_SAMPLE");
    unsetenv("CINFER_SAMPLE_CAP");
    return e;
}

enum kind { K_TOP_P, K_GREEDY, K_PENALTY, K_GREEDY_LP, K_MIN_P_LP };

static int submit(struct engine *e, const char *text, enum kind k, uint64_t seed, int max_tok,
                  struct eng_coll *c)
{
    int32_t *ids = NULL;
    int n = 0;
    if (tok_encode(g_tk, text, strlen(text), TOK_ADD_SPECIAL, &ids, &n, NULL))
        return -1;
    struct engine_req q = {.ids = ids, .n_ids = n, .max_tokens = max_tok, .cb = eng_coll_cb,
                           .ud = c, .ignore_eos = 1};
    sampler_params_default(&q.sp);
    q.sp.seed = seed;
    switch (k) {
    case K_TOP_P: q.sp.temperature = 0.9f, q.sp.top_p = 0.9f; break;
    case K_GREEDY: q.sp.temperature = 0; break;
    case K_PENALTY: q.sp.temperature = 0.8f, q.sp.top_k = 20, q.sp.repetition_penalty = 1.2f; break;
    case K_GREEDY_LP: q.sp.temperature = 0, q.sp.top_logprobs = 3; break;
    case K_MIN_P_LP: q.sp.temperature = 1.0f, q.sp.min_p = 0.05f, q.sp.top_logprobs = 2; break;
    }
    uint64_t id;
    struct cerr err = {0};
    int rc = engine_submit(e, &q, &id, &err);
    if (rc)
        fprintf(stderr, "submit: %s\n", err.msg);
    free(ids);
    return rc;
}

static const char *const PROMPT = "Once upon a time, there was a little girl named";

/* One request alone on a fresh engine; returns its stats in *st. */
static void run_one(int host_sample, int cap, enum kind k, struct eng_coll *c, struct engine_stats *st)
{
    struct engine *e = mk_engine(1, host_sample, cap);
    eng_coll_init(c);
    CHECK(e && submit(e, PROMPT, k, 42, 60, c) == 0);
    if (!e)
        return;
    eng_coll_wait(c);
    /* the stats of the last step are published after it (bounded wait: 120 s) */
    for (double t0 = clock_now_s(); clock_now_s() - t0 < 120;) {
        engine_get_stats(e, st);
        if (st->finished == 1)
            break;
        usleep(500);
    }
    engine_free(e);
}

static void test_host_sample_same_ids(void)
{
    struct eng_coll a, b, t;
    struct engine_stats sa, sb, stiny;
    run_one(0, 0, K_TOP_P, &a, &sa);
    run_one(1, 0, K_TOP_P, &b, &sb);
    run_one(0, 4, K_TOP_P, &t, &stiny);
    printf("top_p 0.9 seed 42: candidates %ld rows (%ld fetched logits); host %ld/%ld; cap 4: "
           "%ld/%ld\n", sa.cand_rows, sa.cand_full_rows, sb.cand_rows, sb.cand_full_rows,
           stiny.cand_rows, stiny.cand_full_rows);
    CHECK(a.n == 60 && b.n == 60 && t.n == 60 && !a.err && !b.err && !t.err);
    CHECK(memcmp(a.ids, b.ids, sizeof a.ids) == 0);
    CHECK(memcmp(a.ids, t.ids, sizeof a.ids) == 0);
    CHECK(sa.cand_rows > 0);                           /* the new path ran */
    CHECK(sb.cand_rows == 0 && sb.cand_full_rows == 0); /* and was off */
    CHECK(stiny.cand_full_rows > 0);                    /* the cap-4 rows overflowed */
}

static void test_logprobs_match_host(void)
{
    struct eng_coll a, b;
    struct engine_stats sa, sb;
    for (int k = K_GREEDY_LP; k <= K_MIN_P_LP; k++) {
        run_one(0, 0, (enum kind)k, &a, &sa);
        run_one(1, 0, (enum kind)k, &b, &sb);
        CHECK(a.n == 60 && b.n == 60);
        CHECK(sa.cand_rows > 0);
        CHECK(memcmp(a.ids, b.ids, sizeof a.ids) == 0);
        for (int i = 0; i < a.n && i < b.n; i++) {
            CHECK_NEAR(a.lp[i], b.lp[i], 1e-5);
            CHECK_EQ_INT(a.top_id0[i], b.top_id0[i]);
            CHECK_NEAR(a.top_lp0[i], b.top_lp0[i], 1e-5);
        }
    }
}

/* The seeded request alone and batched with greedy, penalised and logprob requests. */
static void test_batched_same_ids(void)
{
    struct eng_coll alone, mix[5];
    struct engine_stats st;
    run_one(0, 0, K_TOP_P, &alone, &st);
    struct engine *e = mk_engine(5, 0, 0);
    CHECK(e != NULL);
    if (!e)
        return;
    static const char *const other[4] = {"The cat sat", "Tom and Sue went to the park",
                                         "One day", "Lily had a red ball"};
    for (int i = 0; i < 5; i++)
        eng_coll_init(&mix[i]);
    for (int i = 0; i < 4; i++)
        CHECK(submit(e, other[i], (enum kind)(1 + i % 4), 7 + i, 50 + 3 * i, &mix[i]) == 0);
    /* the others started first (a step ran): the seeded one joins a running batch unless
     * they are already done; the ids must match either way (bounded wait: 120 s) */
    for (double t0 = clock_now_s(); clock_now_s() - t0 < 120; usleep(200)) {
        engine_get_stats(e, &st);
        if (st.steps >= 1)
            break;
    }
    CHECK(submit(e, PROMPT, K_TOP_P, 42, 60, &mix[4]) == 0);
    for (int i = 0; i < 5; i++)
        eng_coll_wait(&mix[i]);
    engine_get_stats(e, &st);
    engine_free(e);
    CHECK(mix[4].n == 60);
    CHECK(memcmp(alone.ids, mix[4].ids, sizeof alone.ids) == 0);
    CHECK(st.cand_rows > 0 && st.cand_full_rows > 0); /* the penalised rows fetched theirs */
}

int main(void)
{
    const char *fx = getenv("CINFER_FIXTURES");
    char path[1024];
    snprintf(path, sizeof path, "%s/stories260K/stories260K.gguf", fx ? fx : "tests/data/fixtures");
    struct cerr e = {0};
    struct be_config bc = {.n_threads = 2};
    unsetenv("CINFER_HOST_ARGMAX");
    g_be = be_new("cpu", &bc, &e);
    if (!g_be || model_load(&g_m, path, g_be, &e) || tok_load(&g_tk, path, &e)) {
        fprintf(stderr, "setup: %s\n", e.msg);
        return 1;
    }
    RUN(test_host_sample_same_ids);
    RUN(test_logprobs_match_host);
    RUN(test_batched_same_ids);
    tok_free(g_tk);
    model_free(g_m);
    be_free(g_be);
    return harness_done();
}
