/* test_engine_devsample.c — the engine deciding rows with the backend's op sample
 * (CINFER_DEVICE_SAMPLE=1) on stories260K and the CPU backend, with decode bursts forced
 * (CINFER_ENGINE_OVERLAP=1), against the host sampler (CINFER_DEVICE_SAMPLE=0).
 *
 * Contracts checked: temperature-only, greedy + logit_bias and penalised (three windows)
 * requests give the same ids through the op (in bursts: queued steps whose history continues
 * on the device) as through the host sampler; sampled rows now run in bursts (burst_steps
 * > 0) where the host path runs none; a batch mixing these with greedy, top_p (candidates)
 * and top_k + penalty (a fetched row) requests gives every request its ids alone.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "engine/engine.h"
#include "engine/grammar/gram.h"
#include "eng_coll.h"
#include "harness.h"
#include "model/model.h"
#include "tokenizer/tok.h"

static struct be *g_be;
static struct model *g_m;
static struct tok *g_tk;

/* An engine with bursts forced and the op sample on (dev) or off. */
static struct engine *mk_engine(int max_seqs, int dev)
{
    setenv("CINFER_ENGINE_OVERLAP", "1", 1);
    setenv("CINFER_DEVICE_SAMPLE", dev ? "1" : "0", 1);
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
    unsetenv("CINFER_ENGINE_OVERLAP");
    unsetenv("CINFER_DEVICE_SAMPLE");
    return e;
}

enum kind { K_TEMP, K_GREEDY_BIAS, K_PENALTY, K_GREEDY, K_TOP_P, K_TOPK_PEN, N_KINDS };

static struct sampler_bias g_bias[40];
static struct gram *g_gram; /* set: the requests submit() makes are constrained by it */

static int submit(struct engine *e, const char *text, enum kind k, uint64_t seed, int max_tok,
                  struct eng_coll *c)
{
    int32_t *ids = NULL;
    int n = 0;
    if (tok_encode(g_tk, text, strlen(text), TOK_ADD_SPECIAL, &ids, &n, NULL))
        return -1;
    struct engine_req q = {.ids = ids, .n_ids = n, .max_tokens = max_tok, .cb = eng_coll_cb,
                           .ud = c, .ignore_eos = !g_gram, .grammar = g_gram};
    sampler_params_default(&q.sp); /* temperature 0.7: what every SDK sends */
    q.sp.seed = seed;
    switch (k) {
    case K_TEMP: break;
    case K_GREEDY_BIAS:
        q.sp.temperature = 0;
        q.sp.logit_bias = g_bias, q.sp.n_logit_bias = 40;
        break;
    case K_PENALTY:
        q.sp.temperature = 0.8f, q.sp.repetition_penalty = 1.3f;
        q.sp.presence_penalty = 0.5f, q.sp.presence_context_size = 64;
        q.sp.frequency_penalty = 0.4f, q.sp.frequency_context_size = 0;
        break;
    case K_GREEDY: q.sp.temperature = 0; break;
    case K_TOP_P: q.sp.temperature = 0.9f, q.sp.top_p = 0.9f; break;
    case K_TOPK_PEN: /* neither the op's nor the candidates': fetches its row */
        q.sp.temperature = 0.8f, q.sp.top_k = 20, q.sp.repetition_penalty = 1.2f;
        break;
    default: break;
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

/* One request alone on a fresh engine; *bursts: the engine's burst steps. */
static void run_one(int dev, enum kind k, struct eng_coll *c, long *bursts)
{
    struct engine *e = mk_engine(1, dev);
    eng_coll_init(c);
    CHECK(e && submit(e, PROMPT, k, 42, 60, c) == 0);
    if (!e)
        return;
    eng_coll_wait(c);
    struct engine_stats st;
    for (int i = 0; i < 20000; i++) { /* the stats of the last step are published after it */
        engine_get_stats(e, &st);
        if (st.finished == 1)
            break;
        usleep(500);
    }
    *bursts = st.burst_steps;
    engine_free(e);
}

static void test_alone_same_ids(void)
{
    for (int k = 0; k < K_TOP_P; k++) {
        struct eng_coll dev, host;
        long bd = 0, bh = 0;
        run_one(1, (enum kind)k, &dev, &bd);
        run_one(0, (enum kind)k, &host, &bh);
        CHECK_MSG(!dev.err && !host.err && dev.n == 60 && host.n == 60, "kind %d: %d / %d ids",
                  k, dev.n, host.n);
        CHECK_MSG(memcmp(dev.ids, host.ids, sizeof dev.ids) == 0, "kind %d: the op's ids differ "
                  "from the host sampler's", k);
        CHECK_MSG(bd > 0, "kind %d: no burst with the op sample", k);
        if (k != K_GREEDY) /* only plain greedy rows burst without the op */
            CHECK_MSG(bh == 0, "kind %d: %ld burst steps on the host path", k, bh);
    }
}

static void test_batched_same_ids(void)
{
    struct eng_coll alone[N_KINDS], mix[N_KINDS];
    long b = 0;
    for (int k = 0; k < N_KINDS; k++)
        run_one(0, (enum kind)k, &alone[k], &b);
    /* all kinds (op rows beside candidate and fetched rows in one step); only the op's
     * kinds (bursts); the op's kinds beside a row that fetches its logits (no candidates) */
    for (int round = 0; round < 3; round++) {
        int use[N_KINDS];
        for (int k = 0; k < N_KINDS; k++)
            use[k] = round == 0 || k < K_TOP_P || (round == 2 && k == K_TOPK_PEN);
        struct engine *e = mk_engine(N_KINDS, 1);
        CHECK(e != NULL);
        if (!e)
            return;
        for (int k = 0; k < N_KINDS; k++) {
            eng_coll_init(&mix[k]);
            if (use[k])
                CHECK(submit(e, PROMPT, (enum kind)k, 42, 60, &mix[k]) == 0);
        }
        for (int k = 0; k < N_KINDS; k++)
            if (use[k])
                eng_coll_wait(&mix[k]);
        engine_free(e);
        for (int k = 0; k < N_KINDS; k++)
            CHECK_MSG(!use[k] || (mix[k].n == 60 &&
                                  memcmp(alone[k].ids, mix[k].ids, sizeof mix[k].ids) == 0),
                      "round %d kind %d: batched ids differ from alone", round, k);
    }
}

/* Grammar rows decided by the op with their bitset (be_sample_row.mask_off, filled while
 * the forward runs) against the host sampler masking the fetched row: the same ids, alone
 * and batched with plain rows, and no row fetched its logits on the device path. */
static void test_grammar_same_ids(void)
{
    static const char *const RE[] = {
        "(Once|The|A) [a-z]{2,9}( [a-z]{1,9}){4,30}\\.",
        "\\{\"name\": \"[A-Z][a-z]{1,12}\", \"age\": [1-9][0-9]?, \"tags\": \\[(\"[a-z ]{1,20}\"(, "
        "\"[a-z ]{1,20}\"){0,3})?\\]\\}"};
    static const enum kind KINDS[] = {K_GREEDY, K_TEMP, K_PENALTY, K_GREEDY_BIAS};
    for (int gi = 0; gi < 2; gi++) {
        struct cerr err = {0};
        CHECK(gram_from_regex(&g_gram, RE[gi], strlen(RE[gi]), &err) == 0);
        if (!g_gram) {
            fprintf(stderr, "regex: %s\n", err.msg);
            return;
        }
        struct eng_coll host[4], dev[4], mix[4];
        for (int k = 0; k < 4; k++) {
            long b = 0;
            run_one(0, KINDS[k], &host[k], &b);
            run_one(1, KINDS[k], &dev[k], &b);
            CHECK_MSG(!dev[k].err && !host[k].err && dev[k].n > 3 && dev[k].n == host[k].n &&
                          memcmp(dev[k].ids, host[k].ids, sizeof dev[k].ids) == 0,
                      "grammar %d kind %d: device %d ids, host %d ids, or they differ", gi, k,
                      dev[k].n, host[k].n);
        }
        /* batched: the four grammar rows beside two plain rows, on the op */
        struct engine *e = mk_engine(6, 1);
        CHECK(e != NULL);
        if (!e)
            return;
        struct eng_coll plain[2];
        for (int k = 0; k < 4; k++) {
            eng_coll_init(&mix[k]);
            CHECK(submit(e, PROMPT, KINDS[k], 42, 60, &mix[k]) == 0);
        }
        struct gram *keep = g_gram;
        g_gram = NULL;
        for (int k = 0; k < 2; k++) {
            eng_coll_init(&plain[k]);
            CHECK(submit(e, PROMPT, k ? K_TEMP : K_PENALTY, 7, 60, &plain[k]) == 0);
        }
        g_gram = keep;
        for (int k = 0; k < 4; k++)
            eng_coll_wait(&mix[k]);
        for (int k = 0; k < 2; k++)
            eng_coll_wait(&plain[k]);
        struct engine_stats st;
        engine_get_stats(e, &st);
        engine_free(e);
        CHECK_MSG(st.cand_full_rows == 0, "grammar %d: %ld rows fetched their logits", gi,
                  st.cand_full_rows);
        for (int k = 0; k < 4; k++)
            CHECK_MSG(mix[k].n == host[k].n &&
                          memcmp(mix[k].ids, host[k].ids, sizeof mix[k].ids) == 0,
                      "grammar %d kind %d: batched ids differ from alone", gi, k);
        gram_unref(g_gram);
        g_gram = NULL;
    }
}

int main(void)
{
    const char *fx = getenv("CINFER_FIXTURES");
    char path[1024];
    snprintf(path, sizeof path, "%s/stories260K/stories260K.gguf", fx ? fx : "../shared/fixtures");
    struct cerr e = {0};
    struct be_config bc = {.n_threads = 2};
    unsetenv("CINFER_HOST_ARGMAX");
    unsetenv("CINFER_HOST_SAMPLE");
    g_be = be_new("cpu", &bc, &e);
    if (!g_be || model_load(&g_m, path, g_be, &e) || tok_load(&g_tk, path, &e)) {
        fprintf(stderr, "setup: %s\n", e.msg);
        return 1;
    }
    for (int i = 0; i < 40; i++) /* push some ids up, ban one */
        g_bias[i].id = (int32_t)((i * 37 + 11) % 500), g_bias[i].bias = (float)(i % 7) - 2.5f;
    g_bias[3].bias = -INFINITY;
    RUN(test_alone_same_ids);
    RUN(test_batched_same_ids);
    RUN(test_grammar_same_ids);
    tok_free(g_tk);
    model_free(g_m);
    be_free(g_be);
    return harness_done();
}
