/* test_engine.c — the engine (scheduler, paged KV, prefix cache, admission) on stories260K.
 *
 * Every engine here runs the block-pool invariant checker after each step, and every test
 * ends by asserting it never failed. Contracts checked:
 * - batch invariance: 16 concurrent greedy requests (mixed lengths, joining at different
 *   steps) give bit-identical tokens to each one run alone;
 * - cache transparency: a request whose prefix comes from the cache equals the cold run,
 *   and reports cached tokens; a finished conversation's next turn reuses it, including
 *   its partial last block (copy-on-write); two agents sharing a system prompt both hit;
 * - LRU eviction under a small cache cap; preemption under a tiny pool completes every
 *   request correctly; the KV budget queues joiners and refuses a request too big alone.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "engine/engine.h"
#include "kv/kv_pool.h"
#include "eng_coll.h"
#include "harness.h"
#include "model/model.h"
#include "tokenizer/tok.h"
#include "util/clock.h"

static struct be *g_be;
static struct model *g_m;
static struct tok *g_tk;

static struct engine *mk_engine(int max_seqs, int n_blocks, int cache_blocks, size_t budget)
{
    struct engine_config c;
    engine_config_default(&c, g_m);
    c.n_ctx = n_blocks * 16 < 512 ? n_blocks * 16 : 512;
    c.max_seqs = max_seqs;
    c.max_step_tokens = 64; /* small: prompts are chunked, decodes interleave with prefill */
    c.block_size = 16;
    c.n_blocks = n_blocks;
    c.kv_dtype = DT_F32;
    c.prompt_cache_blocks = cache_blocks;
    c.kv_budget_bytes = budget;
    c.check_invariants = 1;
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

/* One request alone on a fresh engine without cache: the reference. */
static int run_alone(const int32_t *ids, int n, int max_tokens, int32_t *out)
{
    struct engine *e = mk_engine(1, 64, -1, 0);
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

static const char *const PROMPTS[16] = {
    "Once upon a time",
    "Lily and Ben were friends. One day they went to the park to play",
    "The cat",
    "Tom had a big red ball. He liked to throw it high in the sky. One day the ball",
    "Sue",
    "The sun was shining and the birds were singing. Anna wanted to go outside",
    "One day, a little dog named Spot",
    "Mom said",
    "There was a big tree in the garden. Every day a bird sat on it and sang a song. The",
    "Max was sad because",
    "A girl",
    "The boy saw a fish in the water. He wanted to catch it, so he",
    "Once there was a happy frog",
    "It was a cold day",
    "Timmy liked to draw pictures of cars, trucks and planes. His favorite color was",
    "Sara",
};

static void test_batch_invariance(void)
{
    int32_t *ids[16];
    int n[16], max_tok[16], n_ref[16];
    static int32_t ref[16][1024];
    for (int i = 0; i < 16; i++) {
        n[i] = encode(PROMPTS[i], &ids[i]);
        max_tok[i] = 20 + 7 * i;
        n_ref[i] = run_alone(ids[i], n[i], max_tok[i], ref[i]);
        CHECK(n_ref[i] == max_tok[i]);
    }
    /* Every attempt must be identical to the solo runs. Whether 6 requests overlapped is a
     * matter of scheduling (under heavy load the engine can finish the early requests
     * before the submitting thread wakes up), so that condition gets up to 5 attempts. */
    int maxrun = 0;
    for (int attempt = 0; attempt < 5 && maxrun < 6; attempt++) {
        struct engine *e = mk_engine(16, 512, -1, 0);
        CHECK(e != NULL);
        static struct eng_coll c[16];
        for (int i = 0; i < 16; i++) {
            eng_coll_init(&c[i]);
            c[i].eng = e;
        }
        /* join at different steps: a first wave, then one more each time the previous one
         * has produced a few tokens */
        for (int i = 0; i < 4; i++)
            CHECK(submit(e, ids[i], n[i], max_tok[i], &c[i]) == 0);
        for (int i = 4; i < 16; i++) {
            while (eng_coll_count(&c[i - 1]) < (i % 5) && !c[i - 1].done)
                usleep(200);
            CHECK(submit(e, ids[i], n[i], max_tok[i], &c[i]) == 0);
        }
        int same = 0;
        maxrun = 0;
        for (int i = 0; i < 16; i++) {
            eng_coll_wait(&c[i]);
            same += c[i].n == n_ref[i] && !memcmp(c[i].ids, ref[i], (size_t)c[i].n * 4);
            if (c[i].max_running > maxrun)
                maxrun = c[i].max_running;
        }
        printf("batch invariance: %d/16 identical, up to %d running together (attempt %d)\n",
               same, maxrun, attempt + 1);
        CHECK(same == 16);
        CHECK(eng_invariant_failures(e) == 0);
        engine_free(e);
    }
    CHECK(maxrun >= 6);
    for (int i = 0; i < 16; i++)
        free(ids[i]);
}

/* Greedy ids of prompt i (max_tokens mt; stop: the stop string "." too) on a fresh engine;
 * *bursts = its overlapped steps, *finish its finish reason. */
static int run_one(int i, int mt, int stop, int32_t *out, long *bursts, int *finish)
{
    int32_t *ids;
    int n = encode(PROMPTS[i], &ids);
    struct engine *e = mk_engine(1, 64, -1, 0);
    struct eng_coll c;
    eng_coll_init(&c);
    static const char *const dot[1] = {"."};
    struct engine_req q = {.ids = ids, .n_ids = n, .max_tokens = mt, .cb = eng_coll_cb, .ud = &c,
                           .ignore_eos = 1, .stops = stop ? dot : NULL, .n_stops = stop};
    sampler_params_default(&q.sp);
    q.sp.temperature = 0;
    q.sp.top_logprobs = -1;
    uint64_t id;
    struct cerr err = {0};
    int got = -1;
    if (e && !engine_submit(e, &q, &id, &err)) {
        eng_coll_wait(&c);
        memcpy(out, c.ids, (size_t)c.n * sizeof *out);
        got = c.n;
        *finish = c.finish;
        CHECK(eng_invariant_failures(e) == 0);
        struct engine_stats st;
        engine_get_stats(e, &st);
        *bursts = st.burst_steps;
    }
    engine_free(e);
    free(ids);
    return got;
}

/* Decode bursts (the next step queued before this one's ids are read, engine.c run_burst)
 * give the ids of plain steps (CINFER_ENGINE_OVERLAP=0): to max_tokens, and to a stop
 * string (an end only the host sees: the step queued past it is dropped). */
static void test_overlap_same_ids(void)
{
    static int32_t on[1024], off[1024];
    long b_on = 0, b_off = 0, total_on = 0;
    int same = 0, cases = 0, stopped = 0, fin = -1;
    for (int i = 0; i < 16; i += 3)
        for (int stop = 0; stop < 2; stop++) {
            int mt = stop ? 300 : 17 + i;
            setenv("CINFER_ENGINE_OVERLAP", "0", 1);
            int n_off = run_one(i, mt, stop, off, &b_off, &fin);
            setenv("CINFER_ENGINE_OVERLAP", "1", 1); /* the CPU backend would not burst */
            int n_on = run_one(i, mt, stop, on, &b_on, &fin);
            unsetenv("CINFER_ENGINE_OVERLAP");
            stopped += fin == ENGINE_FINISH_STOP;
            CHECK_EQ_INT(b_off, 0);
            total_on += b_on;
            cases++;
            same += n_on == n_off && n_on > 0 && !memcmp(on, off, (size_t)n_on * 4);
            if (!stop)
                CHECK_EQ_INT(n_on, mt);
        }
    printf("overlap: %d/%d cases identical (%d ended at a stop string), %ld overlapped steps\n",
           same, cases, stopped, total_on);
    CHECK_EQ_INT(same, cases);
    CHECK(stopped >= 3);
    CHECK(total_on > 100);
}

static void test_prefix_cache(void)
{
    const char *sys = "Once upon a time there was a little girl named Lily. She loved to play "
                      "outside in the park with her friends and her dog.";
    char a[512], b[512];
    snprintf(a, sizeof a, "%s One day Lily", sys);
    snprintf(b, sizeof b, "%s The dog was", sys);
    int32_t *ia, *ib, *is;
    int na = encode(a, &ia), nb = encode(b, &ib), ns = encode(sys, &is);
    static int32_t ref_a[1024], ref_b[1024];
    int nra = run_alone(ia, na, 30, ref_a), nrb = run_alone(ib, nb, 30, ref_b);
    struct engine *e = mk_engine(8, 256, 256, 0);
    CHECK(e != NULL);
    struct eng_coll ca, cb, ca2;
    eng_coll_init(&ca);
    eng_coll_init(&cb);
    eng_coll_init(&ca2);
    /* agent 1, cold */
    CHECK(submit(e, ia, na, 30, &ca) == 0);
    eng_coll_wait(&ca);
    CHECK(ca.n_cached == 0);
    CHECK(ca.n == nra && !memcmp(ca.ids, ref_a, (size_t)nra * 4));
    /* agent 2 shares the system prompt: full blocks of it come from the cache */
    CHECK(submit(e, ib, nb, 30, &cb) == 0);
    eng_coll_wait(&cb);
    printf("shared system prompt: %d prompt tokens in common, %d cached\n", ns - 0, cb.n_cached);
    CHECK(cb.n_cached >= (ns / 16) * 16 - 16 && cb.n_cached > 0);
    CHECK(cb.n == nrb && !memcmp(cb.ids, ref_b, (size_t)nrb * 4));
    /* agent 1 again: every full block of its prompt (but the last token) is cached */
    CHECK(submit(e, ia, na, 30, &ca2) == 0);
    eng_coll_wait(&ca2);
    printf("same prompt again: %d of %d prompt tokens cached\n", ca2.n_cached, na);
    CHECK_EQ_INT(ca2.n_cached, ((na - 1) / 16) * 16);
    CHECK(ca2.n == nra && !memcmp(ca2.ids, ref_a, (size_t)nra * 4));
    /* next turn: prompt + reply + more text reuses the finished conversation */
    int32_t turn2[1024];
    int nt = 0;
    memcpy(turn2, ia, (size_t)na * 4);
    nt = na;
    memcpy(turn2 + nt, ref_a, (size_t)nra * 4);
    nt += nra;
    int32_t *more;
    int nm = encode(" Then she went home.", &more);
    memcpy(turn2 + nt, more + 1, (size_t)(nm - 1) * 4); /* without its BOS */
    nt += nm - 1;
    static int32_t ref_t2[1024];
    int nr2 = run_alone(turn2, nt, 20, ref_t2);
    struct eng_coll ct;
    eng_coll_init(&ct);
    CHECK(submit(e, turn2, nt, 20, &ct) == 0);
    eng_coll_wait(&ct);
    printf("next turn: %d of %d prompt tokens cached (previous turn had %d computed)\n",
           ct.n_cached, nt, na + nra - 1);
    CHECK(ct.n_cached >= na + nra - 1); /* incl. the partial last block (copy-on-write) */
    CHECK(ct.n == nr2 && !memcmp(ct.ids, ref_t2, (size_t)nr2 * 4));
    struct engine_stats st;
    eng_wait_idle(e);
    engine_get_stats(e, &st);
    CHECK(st.cache_hits >= 3 && st.cache_cow >= 1);
    CHECK(eng_invariant_failures(e) == 0);
    engine_free(e);
    free(ia);
    free(ib);
    free(is);
    free(more);
}

static void test_lru_eviction(void)
{
    struct engine *e = mk_engine(4, 128, 4, 0);
    CHECK(e != NULL);
    for (int i = 0; i < 8; i++) {
        int32_t *ids;
        int n = encode(PROMPTS[(i * 3) % 16], &ids);
        struct eng_coll c;
        eng_coll_init(&c);
        CHECK(submit(e, ids, n, 40, &c) == 0);
        eng_coll_wait(&c);
        free(ids);
    }
    struct engine_stats st;
    eng_wait_idle(e);
    engine_get_stats(e, &st);
    printf("LRU: %d cached blocks kept, %ld evicted\n", st.cache_lru_blocks, st.cache_evictions);
    CHECK(st.cache_lru_blocks <= 4);
    CHECK(st.cache_evictions > 0);
    CHECK(st.blocks_free == st.blocks_total);
    CHECK(eng_invariant_failures(e) == 0);
    engine_free(e);
}

static void test_preemption(void)
{
    /* 12 blocks of 16 = 192 positions for 4 requests that each need up to ~110 */
    int32_t *ids[4];
    int n[4];
    static int32_t ref[4][1024];
    int nref[4];
    for (int i = 0; i < 4; i++) {
        n[i] = encode(PROMPTS[i * 4 + 1], &ids[i]);
        nref[i] = run_alone(ids[i], n[i], 90, ref[i]);
    }
    struct engine *e = mk_engine(4, 12, 12, 0);
    CHECK(e != NULL);
    struct eng_coll c[4];
    for (int i = 0; i < 4; i++) {
        eng_coll_init(&c[i]);
        CHECK(submit(e, ids[i], n[i], 90, &c[i]) == 0);
    }
    int same = 0;
    for (int i = 0; i < 4; i++) {
        eng_coll_wait(&c[i]);
        same += !c[i].err && c[i].n == nref[i] && !memcmp(c[i].ids, ref[i], (size_t)nref[i] * 4);
    }
    struct engine_stats st;
    eng_wait_idle(e);
    engine_get_stats(e, &st);
    printf("preemption: %d/4 correct, %ld preemptions\n", same, st.preempted);
    CHECK(same == 4);
    CHECK(st.preempted > 0);
    CHECK(eng_invariant_failures(e) == 0);
    engine_free(e);
    for (int i = 0; i < 4; i++)
        free(ids[i]);
}

static void test_kv_budget(void)
{
    int32_t *ids;
    int n = encode(PROMPTS[0], &ids);
    size_t per_tok = 0;
    {
        struct engine *probe = mk_engine(1, 64, -1, 0);
        per_tok = engine_kv_bytes_per_token(probe);
        engine_free(probe);
    }
    /* room for one request of n + 40 positions, not two */
    size_t budget = (size_t)(n + 40) * per_tok * 3 / 2;
    struct engine *e = mk_engine(4, 128, -1, budget);
    CHECK(e != NULL);
    struct eng_coll c[3];
    for (int i = 0; i < 3; i++) {
        eng_coll_init(&c[i]);
        c[i].eng = e;
        CHECK(submit(e, ids, n, 40, &c[i]) == 0);
    }
    int ok = 0, maxrun = 0;
    for (int i = 0; i < 3; i++) {
        eng_coll_wait(&c[i]);
        ok += !c[i].err && c[i].n == 40;
        maxrun = c[i].max_running > maxrun ? c[i].max_running : maxrun;
    }
    CHECK(ok == 3);
    CHECK(maxrun == 1);
    /* a request larger than the budget alone is refused at submit */
    struct engine_req q = {.ids = ids, .n_ids = n, .max_tokens = 400, .cb = eng_coll_cb, .ud = &c[0]};
    sampler_params_default(&q.sp);
    uint64_t id;
    struct cerr err = {0};
    CHECK(engine_submit(e, &q, &id, &err) == CERR_INVALID);
    CHECK(strstr(err.msg, "KV budget") != NULL);
    CHECK(eng_invariant_failures(e) == 0);
    engine_free(e);
    free(ids);
}

/* Gemma 3 (random weights, window 8, 5 sliding + 1 global layers): the sliding layers get
 * their own pool and drop blocks the window no longer reaches; outputs equal the one-pool
 * run bit for bit, alone, batched and from the prefix cache. */
static struct engine *mk_gemma(const struct model *m, int split, int cache_blocks)
{
    struct engine_config c;
    engine_config_default(&c, m);
    c.n_ctx = 256;
    c.max_seqs = 8;
    c.max_step_tokens = 32;
    c.block_size = 16;
    c.n_blocks = 256;
    c.kv_dtype = DT_F32;
    c.prompt_cache_blocks = cache_blocks;
    c.check_invariants = 1;
    c.no_swa_pool = !split;
    struct engine *e = NULL;
    struct cerr err = {0};
    if (engine_new(&e, m, NULL, &c, &err))
        fprintf(stderr, "engine_new: %s\n", err.msg);
    return e;
}

static void test_sliding_window_pool(void)
{
    const char *src = getenv("CINFER_SRC");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/parity/gemma3", src ? src : ".");
    struct model *m = NULL;
    struct cerr err = {0};
    if (model_load(&m, path, g_be, &err)) {
        fprintf(stderr, "gemma3: %s\n", err.msg);
        CHECK(0);
        return;
    }
    CHECK(m->hp.sliding_window == 8);
    enum { NP = 4, NGEN = 100 };
    static int32_t prompt[NP][48], ref[NP][1024];
    int nref[NP];
    for (int i = 0; i < NP; i++)
        for (int j = 0; j < 48; j++) /* a shared 32-token prefix, then each its own */
            prompt[i][j] = j < 32 ? (j * 7 + 3) % 270 + 1 : (j * 13 + i * 31) % 270 + 1;
    for (int i = 0; i < NP; i++) { /* the reference: one pool, no cache, alone */
        struct engine *e = mk_gemma(m, 0, -1);
        struct eng_coll c;
        eng_coll_init(&c);
        CHECK(e && submit(e, prompt[i], 40 + 2 * i, NGEN, &c) == 0);
        eng_coll_wait(&c);
        memcpy(ref[i], c.ids, (size_t)c.n * 4);
        nref[i] = c.n;
        engine_free(e);
    }
    struct engine *e = mk_gemma(m, 1, 256);
    CHECK(e != NULL);
    struct eng_coll c[NP];
    for (int i = 0; i < NP; i++) {
        eng_coll_init(&c[i]);
        CHECK(submit(e, prompt[i], 40 + 2 * i, NGEN, &c[i]) == 0);
    }
    int same = 0;
    for (int i = 0; i < NP; i++) {
        eng_coll_wait(&c[i]);
        same += c[i].n == nref[i] && !memcmp(c[i].ids, ref[i], (size_t)nref[i] * 4);
    }
    /* again, one at a time: the shared prefix (and more) now comes from the cache */
    int same2 = 0, cached = 0;
    for (int i = 0; i < NP; i++) {
        struct eng_coll d;
        eng_coll_init(&d);
        CHECK(submit(e, prompt[i], 40 + 2 * i, NGEN, &d) == 0);
        eng_coll_wait(&d);
        same2 += d.n == nref[i] && !memcmp(d.ids, ref[i], (size_t)nref[i] * 4);
        cached += d.n_cached > 0;
    }
    eng_wait_idle(e);
    struct engine_stats st;
    engine_get_stats(e, &st);
    int full = (40 + 2 * NP + NGEN + 15) / 16;
    printf("sliding window: %d/%d batched and %d/%d cached runs identical (%d cached), sliding "
           "layers held at most %d blocks per sequence (the global layers %d), pool %d\n",
           same, NP, same2, NP, cached, st.swa_max_held, full, st.swa_blocks_total);
    CHECK(same == NP && same2 == NP && cached == NP);
    CHECK(st.swa_blocks_total > 0 && st.swa_max_held <= 5 && st.swa_max_held < full);
    CHECK(st.swa_blocks_free == st.swa_blocks_total);
    CHECK(eng_invariant_failures(e) == 0);
    engine_free(e);
    model_free(m);
}

/* The sliding pool lost the window's blocks (evicted) while the global blocks are still
 * cached: the lookup must not hit without them. */
static void test_swa_lookup_needs_window(void)
{
    struct kv_pool *pg = NULL, *ps = NULL;
    CHECK(kv_pool_new(&pg, g_be, 1, 8, 16, 16, DT_F32, 16, NULL) == 0);
    CHECK(kv_pool_new(&ps, g_be, 1, 8, 16, 8, DT_F32, 8, NULL) == 0);
    uint8_t root[KV_KEY_BYTES];
    kv_key_root(root, "test", 4);
    int32_t ids[80];
    for (int i = 0; i < 80; i++)
        ids[i] = i * 3 + 1;
    struct kv_seq a, b;
    kv_seq_init(&a);
    kv_seq_init(&b);
    CHECK(kv_seq_reserve(pg, &a, 64, NULL) == 0 && kv_seq_reserve(ps, &b, 64, NULL) == 0);
    kv_cache_commit(pg, &a, root, ids, 64);
    kv_cache_commit(ps, &b, root, ids, 64);
    kv_seq_drop_before(ps, &b, 64 - 8 + 1); /* blocks 0..2 go to the sliding LRU */
    kv_seq_release(pg, &a);
    kv_seq_release(ps, &b);
    /* both intact: a 64-token hit (the whole full blocks below 80 - 1) */
    struct kv_seq g1, s1;
    kv_seq_init(&g1);
    kv_seq_init(&s1);
    CHECK_EQ_INT(kv_cache_lookup_swa(pg, &g1, ps, &s1, root, ids, 80, 8, NULL), 64);
    CHECK(s1.blocks[0] == -1 && s1.blocks[3] >= 0); /* only the window's block is taken */
    kv_seq_release(pg, &g1);
    kv_seq_release(ps, &s1);
    /* fill the sliding pool: every cached sliding block is evicted */
    struct kv_seq hog;
    kv_seq_init(&hog);
    CHECK(kv_seq_reserve(ps, &hog, 8 * 16, NULL) == 0);
    kv_seq_release(ps, &hog);
    struct kv_seq g2, s2;
    kv_seq_init(&g2);
    kv_seq_init(&s2);
    int hit = kv_cache_lookup_swa(pg, &g2, ps, &s2, root, ids, 80, 8, NULL);
    printf("sliding lookup: 64 with the window's blocks, %d after they were evicted\n", hit);
    CHECK_EQ_INT(hit, 0);
    CHECK(g2.n_blocks == 0 && s2.n_blocks == 0);
    const struct kv_seq *none[1] = {NULL};
    CHECK(kv_pool_check(pg, none, 0, NULL) == 0 && kv_pool_check(ps, none, 0, NULL) == 0);
    kv_seq_release(pg, &g2);
    kv_seq_release(ps, &s2);
    kv_pool_free(pg);
    kv_pool_free(ps);
}

/* The scheduling tests again with decode bursts forced (the CPU backend computes a queued
 * step at once, so the engine would not burst here by itself): batching, the prefix cache
 * (a burst's dropped step past a finished sequence's end), preemption and the budget. */
static void test_with_bursts(void)
{
    setenv("CINFER_ENGINE_OVERLAP", "1", 1);
    test_batch_invariance();
    test_prefix_cache();
    test_preemption();
    test_kv_budget();
    unsetenv("CINFER_ENGINE_OVERLAP");
}

int main(void)
{
    const char *fx = getenv("CINFER_FIXTURES");
    char path[1024];
    snprintf(path, sizeof path, "%s/stories260K/stories260K.gguf", fx ? fx : "tests/data/fixtures");
    struct cerr e = {0};
    struct be_config bc = {.n_threads = 2};
    g_be = be_new("cpu", &bc, &e);
    if (!g_be || model_load(&g_m, path, g_be, &e) || tok_load(&g_tk, path, &e)) {
        fprintf(stderr, "setup: %s\n", e.msg);
        return 1;
    }
    RUN(test_batch_invariance);
    RUN(test_overlap_same_ids);
    RUN(test_with_bursts);
    RUN(test_prefix_cache);
    RUN(test_lru_eviction);
    RUN(test_preemption);
    RUN(test_kv_budget);
    RUN(test_sliding_window_pool);
    RUN(test_swa_lookup_needs_window);
    tok_free(g_tk);
    model_free(g_m);
    be_free(g_be);
    return harness_done();
}
