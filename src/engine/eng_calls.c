/* eng_calls.c — work another thread hands to the engine thread (engine_post, engine_call):
 * a device backend's stream, its recorded op list and its frees belong to the engine
 * thread, so mounting or freeing a LoRA adapter while serving runs there, between steps.
 * The queue is FIFO under g->mu; the engine thread runs what it finds after taking its
 * inputs, outside the lock. engine_free runs what is left once the thread has stopped.
 */
#include <stdlib.h>

#include "engine/engine_int.h"

struct eng_call {
    struct eng_call *next;
    void (*fn)(void *ud);
    void *ud;
    int sync, done;     /* engine_call: the caller waits on cv (with g->mu) for done */
    pthread_cond_t cv;
};

static void push(struct engine *g, struct eng_call *c)
{
    c->next = NULL;
    if (g->calls_tail)
        g->calls_tail->next = c;
    else
        g->calls = c;
    g->calls_tail = c;
    pthread_cond_signal(&g->cv);
}

int engine_post(struct engine *g, void (*fn)(void *ud), void *ud)
{
    struct eng_call *c = calloc(1, sizeof *c);
    if (!c)
        return -1;
    c->fn = fn, c->ud = ud;
    pthread_mutex_lock(&g->mu);
    push(g, c);
    pthread_mutex_unlock(&g->mu);
    return 0;
}

int engine_call(struct engine *g, void (*fn)(void *ud), void *ud)
{
    struct eng_call c = {.fn = fn, .ud = ud, .sync = 1};
    if (pthread_cond_init(&c.cv, NULL))
        return -1;
    pthread_mutex_lock(&g->mu);
    push(g, &c);
    while (!c.done)
        pthread_cond_wait(&c.cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
    pthread_cond_destroy(&c.cv);
    return 0;
}

void eng_calls_run(struct engine *g)
{
    pthread_mutex_lock(&g->mu);
    struct eng_call *c = g->calls;
    g->calls = g->calls_tail = NULL;
    pthread_mutex_unlock(&g->mu);
    while (c) {
        struct eng_call *next = c->next;
        c->fn(c->ud);
        if (c->sync) { /* c lives on the caller's stack until it sees done */
            pthread_mutex_lock(&g->mu);
            c->done = 1;
            pthread_cond_signal(&c->cv);
            pthread_mutex_unlock(&g->mu);
        } else {
            free(c);
        }
        c = next;
    }
}
