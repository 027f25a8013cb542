/* side.c — side work on the engine thread (engine.h: engine_set_side).
 *
 * Work that must run on the thread owning the engine's model and backend but is not a
 * generation request: today the forwards of decoder embeddings (engine/embed.h, driven
 * mode). engine_main runs it once between steps after an announcement; when it reports
 * more queued it is announced again, so the next turn comes after one generation step.
 */
#include "engine/engine_int.h"

void engine_set_side(struct engine *g, int (*fn)(void *ud), void *ud)
{
    pthread_mutex_lock(&g->mu);
    g->side_fn = fn;
    g->side_ud = ud;
    pthread_mutex_unlock(&g->mu);
}

void engine_side_wake(struct engine *g)
{
    pthread_mutex_lock(&g->mu);
    g->side_due = 1;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

void eng_side_run(struct engine *g)
{
    pthread_mutex_lock(&g->mu);
    int (*fn)(void *) = g->side_fn;
    void *ud = g->side_ud;
    pthread_mutex_unlock(&g->mu);
    if (fn && fn(ud))
        engine_side_wake(g);
}
