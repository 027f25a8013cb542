/* eng_coll.h — what the engine tests share: a collector of one request's events (ids,
 * logprobs, text and the final event's counters) that a test waits on, and waits on the
 * engine going idle. Header-only (static inline): each test program includes what it uses. */
#ifndef CINFER_TESTS_ENG_COLL_H
#define CINFER_TESTS_ENG_COLL_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "util/clock.h"

enum { ENG_COLL_MAX = 1024 };

struct eng_coll {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t ids[ENG_COLL_MAX];
    float lp[ENG_COLL_MAX];       /* the sampled token's logprob (0 without logprobs) */
    int32_t top_id0[ENG_COLL_MAX]; /* the best alternative (-1 without top logprobs) */
    float top_lp0[ENG_COLL_MAX];
    int32_t top_last[ENG_COLL_MAX]; /* the last of the top logprobs (-1 without) */
    int n, done, err, finish, n_cached, n_prompt;
    int drafted, accepted, calls; /* speculation counters of the final event */
    char text[4096];
    size_t tlen;
    struct engine *eng; /* when set: max_running samples its stats at every event */
    int max_running;
};

static inline void eng_coll_init(struct eng_coll *c)
{
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
}

/* The engine_req callback: ud is a struct eng_coll. */
static inline void eng_coll_cb(void *ud, const struct engine_event *ev)
{
    struct eng_coll *c = ud;
    pthread_mutex_lock(&c->mu);
    if (ev->type == ENGINE_EV_DELTA && c->n < ENG_COLL_MAX) {
        const struct sampler_logprob *lp = ev->lp;
        c->ids[c->n] = ev->token;
        c->lp[c->n] = lp ? lp->logprob : 0;
        c->top_id0[c->n] = lp && lp->n_top > 0 ? lp->top_id[0] : -1;
        c->top_lp0[c->n] = lp && lp->n_top > 0 ? lp->top_lp[0] : 0;
        c->top_last[c->n] = lp && lp->n_top > 0 ? lp->top_id[lp->n_top - 1] : -1;
        c->n++;
    }
    if (ev->len && c->tlen + ev->len < sizeof c->text) {
        memcpy(c->text + c->tlen, ev->text, ev->len);
        c->tlen += ev->len;
    }
    if (c->eng) {
        struct engine_stats st;
        engine_get_stats(c->eng, &st);
        if (st.running > c->max_running)
            c->max_running = st.running;
    }
    if (ev->type != ENGINE_EV_DELTA) {
        c->done = 1;
        c->err = ev->type == ENGINE_EV_ERROR;
        c->finish = ev->finish;
        c->n_cached = ev->n_cached;
        c->n_prompt = ev->n_prompt;
        c->drafted = ev->spec_drafted;
        c->accepted = ev->spec_accepted;
        c->calls = ev->spec_calls;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
}

static inline void eng_coll_wait(struct eng_coll *c)
{
    pthread_mutex_lock(&c->mu);
    while (!c->done)
        pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
}

/* The tokens collected so far. */
static inline int eng_coll_count(struct eng_coll *c)
{
    pthread_mutex_lock(&c->mu);
    int n = c->n;
    pthread_mutex_unlock(&c->mu);
    return n;
}

/* Waits until the engine has nothing in flight and its stats are published (bounded: 120 s). */
static inline void eng_wait_idle(struct engine *e)
{
    for (double t0 = clock_now_s(); clock_now_s() - t0 < 120;) {
        struct engine_stats st;
        engine_get_stats(e, &st);
        if (st.running == 0 && st.waiting == 0 && st.finished + st.failed == st.submitted)
            return;
        usleep(500);
    }
}

/* The engine's invariant-check failures once it is idle (the last one printed). */
static inline long eng_invariant_failures(struct engine *e)
{
    eng_wait_idle(e);
    struct engine_stats st;
    engine_get_stats(e, &st);
    if (st.invariant_failures)
        fprintf(stderr, "invariant: %s\n", st.last_invariant_error);
    return st.invariant_failures;
}

#endif
