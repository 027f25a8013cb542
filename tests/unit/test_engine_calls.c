/* test_engine_calls.c — engine_post / engine_call (engine/eng_calls.c) on stories260K.
 *
 * Contracts checked: a call runs on the engine thread (the thread that runs the requests'
 * callbacks), both when the engine is idle (the call wakes it) and while a request decodes;
 * engine_call returns after its fn ran; posts run in FIFO order, before a later call; a post
 * made on the engine thread itself runs; what is posted right before engine_free still runs.
 * (A LoRA mount while serving runs through engine_call, an adapter's last free through
 * engine_post: a device backend's stream belongs to the engine thread.)
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "engine/engine.h"
#include "harness.h"
#include "engine/sampler.h"
#include "model/model.h"
#include "tokenizer/tok.h"

static struct model *g_m;
static struct tok *g_tk;

struct rec {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t cb_thread; /* where the request's callbacks ran */
    int have_cb, done, n_tok;
    struct engine *eng;
    int order[16], n; /* which fns ran, in order */
    pthread_t fn_thread[16];
};

static void cb(void *ud, const struct engine_event *ev)
{
    struct rec *r = ud;
    pthread_mutex_lock(&r->mu);
    r->cb_thread = pthread_self();
    r->have_cb = 1;
    r->n_tok += ev->type == ENGINE_EV_DELTA;
    if (ev->type != ENGINE_EV_DELTA)
        r->done = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

struct arg {
    struct rec *r;
    int tag;
};

static void fn(void *ud)
{
    struct arg *a = ud;
    pthread_mutex_lock(&a->r->mu);
    if (a->r->n < 16) {
        a->r->fn_thread[a->r->n] = pthread_self();
        a->r->order[a->r->n++] = a->tag;
    }
    pthread_mutex_unlock(&a->r->mu);
}

static struct arg g_inner = {NULL, 99};
static void fn_posting(void *ud) /* on the engine thread: posts another one from there */
{
    fn(ud);
    struct arg *a = ud;
    g_inner.r = a->r;
    CHECK_EQ_INT(engine_post(a->r->eng, fn, &g_inner), 0);
}

static struct engine *mk(void)
{
    struct engine_config c;
    engine_config_default(&c, g_m);
    c.n_ctx = 256;
    c.max_seqs = 2;
    c.block_size = 16;
    c.n_blocks = 64;
    c.kv_dtype = DT_F32;
    struct engine *e = NULL;
    struct cerr err = {0};
    if (engine_new(&e, g_m, g_tk, &c, &err))
        fprintf(stderr, "engine_new: %s\n", err.msg);
    return e;
}

static void test_calls(void)
{
    struct rec r;
    memset(&r, 0, sizeof r);
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    struct engine *e = mk();
    if (!e)
        return;
    r.eng = e;
    /* idle engine: the call wakes it */
    struct arg a0 = {&r, 0};
    CHECK_EQ_INT(engine_call(e, fn, &a0), 0);
    CHECK_EQ_INT(r.n, 1);
    /* posts in order, then a call: all ran, FIFO, when the call returns */
    struct arg a1 = {&r, 1}, a2 = {&r, 2}, a3 = {&r, 3}, a4 = {&r, 4};
    CHECK_EQ_INT(engine_post(e, fn, &a1), 0);
    CHECK_EQ_INT(engine_post(e, fn, &a2), 0);
    CHECK_EQ_INT(engine_post(e, fn_posting, &a3), 0);
    CHECK_EQ_INT(engine_call(e, fn, &a4), 0);
    pthread_mutex_lock(&r.mu);
    CHECK(r.n >= 5 && r.order[1] == 1 && r.order[2] == 2 && r.order[3] == 3);
    CHECK((r.order[4] == 4) || (r.order[4] == 99 && r.n == 6 && r.order[5] == 4));
    pthread_mutex_unlock(&r.mu);
    /* a request decoding: a call from here still runs, on the engine thread */
    int32_t *ids = NULL, n = 0;
    CHECK(tok_encode(g_tk, "Once upon a time", 16, TOK_ADD_SPECIAL, &ids, &n, NULL) == 0);
    struct engine_req q = {.ids = ids, .n_ids = n, .max_tokens = 120, .cb = cb, .ud = &r,
                           .ignore_eos = 1};
    sampler_params_default(&q.sp);
    q.sp.temperature = 0;
    q.sp.top_logprobs = -1;
    uint64_t id;
    struct cerr err = {0};
    CHECK_EQ_INT(engine_submit(e, &q, &id, &err), 0);
    pthread_mutex_lock(&r.mu);
    while (!r.have_cb)
        pthread_cond_wait(&r.cv, &r.mu);
    pthread_mutex_unlock(&r.mu);
    struct arg a5 = {&r, 5};
    CHECK_EQ_INT(engine_call(e, fn, &a5), 0);
    pthread_mutex_lock(&r.mu);
    while (!r.done)
        pthread_cond_wait(&r.cv, &r.mu);
    pthread_mutex_unlock(&r.mu);
    CHECK_EQ_INT(r.n_tok, 120); /* the request was not disturbed */
    /* by now the post made on the engine thread (99), queued before a5, ran too */
    CHECK(r.n == 7 && r.order[6] == 5 && (r.order[4] == 99 || r.order[5] == 99));
    for (int i = 0; i < r.n; i++) {
        CHECK(pthread_equal(r.fn_thread[i], r.cb_thread));
        CHECK(!pthread_equal(r.fn_thread[i], pthread_self()));
    }
    /* posted right before engine_free: still runs */
    struct arg a6 = {&r, 6};
    CHECK_EQ_INT(engine_post(e, fn, &a6), 0);
    engine_free(e);
    CHECK(r.n == 8 && r.order[7] == 6);
    free(ids);
    pthread_mutex_destroy(&r.mu);
    pthread_cond_destroy(&r.cv);
}

int main(void)
{
    const char *path = fixture_path("stories260K/stories260K.gguf");
    struct cerr e = {0};
    struct be_config bc = {.n_threads = 1};
    struct be *be = be_new("cpu", &bc, &e);
    if (!be || model_load(&g_m, path, be, &e) || tok_load(&g_tk, path, &e)) {
        fprintf(stderr, "setup: %s\n", e.msg);
        return 1;
    }
    RUN(test_calls);
    tok_free(g_tk);
    model_free(g_m);
    be_free(be);
    return harness_done();
}
