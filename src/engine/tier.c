/* tier.c — the engine side of the SSD tier (engine_int.h, kv/ssd.h): opening it under a
 * namespace that covers the weights' content and the tokenizer, the idle-time work (the
 * debounced write-behind snapshot, idle demotion, flush requests) and shutdown.
 *
 * A model whose sliding-window layers have their own pool (g->kv_swa, Gemma 3) gets a second
 * tier for that pool (g->ssd_swa): its own namespace (the root + "sliding-window layers")
 * and geometry in the same directory; the sweeps, flushes and counters cover both, and
 * kv_cache_lookup_swa restores from both.
 *
 * Idle gating: the writer thread writes only while the engine is idle (kv_ssd_set_busy),
 * and the sweeps here run only while no request runs or waits, in slices of a few blocks,
 * so a request that arrives waits at most one slice. A flush request is also answered
 * between steps, so that it completes under load.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine_int.h"
#include "kv/ssd.h"
#include "util/clock.h"
#include "util/log.h"

enum { SLICE = 32 };            /* blocks per sweep slice */
static const double DEBOUNCE_S = 1.0; /* write-behind: after requests settle this long */

int eng_tier_open(struct engine *g, struct cerr *e)
{
    const struct engine_config *c = &g->c;
    if (!c->ssd_dir)
        return 0;
    /* namespace: the RAM root (architecture, shapes, KV dtype, block size, adapters) plus the
     * weights' content, the tokenizer and the file format */
    uint8_t buf[KV_KEY_BYTES * 3 + 16];
    memcpy(buf, g->root, KV_KEY_BYTES);
    int rc = kv_ssd_fingerprint(g->m->path, buf + KV_KEY_BYTES, e);
    if (rc)
        return rc;
    memset(buf + 2 * KV_KEY_BYTES, 0, KV_KEY_BYTES);
    if (g->tk) {
        int nv = tok_vocab_size(g->tk);
        size_t cap = 1 << 16, len = 0;
        char *t = malloc(cap);
        for (int32_t id = 0; t && id < nv; id++) {
            const char *pc = tok_piece(g->tk, id);
            size_t pl = pc ? strlen(pc) + 1 : 1;
            if (len + pl + 8 > cap) {
                char *nt = realloc(t, cap *= 2);
                if (!nt) {
                    free(t);
                    t = NULL;
                    break;
                }
                t = nt;
            }
            memcpy(t + len, pc ? pc : "", pl);
            len += pl;
            t[len++] = (char)tok_is_special(g->tk, id);
        }
        if (!t)
            return cerr_set(e, CERR_NOMEM, "out of memory");
        kv_key_root(buf + 2 * KV_KEY_BYTES, t, len);
        free(t);
    }
    memcpy(buf + 3 * KV_KEY_BYTES, "cinfer-ssd-v1\0\0\0", 16);
    kv_key_root(g->root, buf, sizeof buf);

    struct kv_pool *p = g->kv;
    size_t pay = kv_pool_block_payload(p);
    size_t pay_swa = g->kv_swa ? kv_pool_block_payload(g->kv_swa) : 0;
    /* the byte cap is shared by the two pools' namespaces in proportion to a block's bytes */
    double share = (double)pay / (double)(pay + pay_swa);
    struct kv_ssd_config sc = {.dir = c->ssd_dir,
                               .max_bytes = (size_t)((double)c->ssd_max_bytes * share),
                               .verify = c->ssd_verify,
                               .spill_queue_bytes = c->ssd_spill_queue_bytes,
                               .n_layer = p->n_layer, .kv_dim = p->kv_dim,
                               .block_size = p->block_size, .kv_dtype = p->kv_dtype,
                               .payload_bytes = pay};
    rc = kv_ssd_open(&g->ssd, &sc, g->root, e);
    if (!rc && (rc = kv_pool_attach_ssd(p, g->ssd, e))) {
        kv_ssd_close(g->ssd, 0);
        g->ssd = NULL;
    }
    if (rc || !g->kv_swa)
        return rc;
    struct kv_pool *ps = g->kv_swa;
    uint8_t nb[KV_KEY_BYTES + 24], root_swa[KV_KEY_BYTES];
    memcpy(nb, g->root, KV_KEY_BYTES);
    memcpy(nb + KV_KEY_BYTES, "sliding-window layers\0\0\0", 24);
    kv_key_root(root_swa, nb, sizeof nb);
    sc.max_bytes = c->ssd_max_bytes - sc.max_bytes;
    sc.n_layer = ps->n_layer, sc.kv_dim = ps->kv_dim, sc.block_size = ps->block_size;
    sc.kv_dtype = ps->kv_dtype, sc.payload_bytes = pay_swa;
    rc = kv_ssd_open(&g->ssd_swa, &sc, root_swa, e);
    if (!rc && (rc = kv_pool_attach_ssd(ps, g->ssd_swa, e))) {
        kv_ssd_close(g->ssd_swa, 0);
        g->ssd_swa = NULL;
    }
    if (rc) {
        kv_pool_attach_ssd(p, NULL, NULL);
        kv_ssd_close(g->ssd, 0);
        g->ssd = NULL;
    }
    return rc;
}

/* The pools with a tier: [0] the global layers', [1] the sliding-window layers' (or NULL). */
static int tiers(struct engine *g, struct kv_pool *pools[2], struct kv_ssd *ssds[2])
{
    pools[0] = g->kv, ssds[0] = g->ssd;
    pools[1] = g->ssd_swa ? g->kv_swa : NULL, ssds[1] = g->ssd_swa;
    return g->ssd_swa ? 2 : 1;
}

static void set_busy(struct engine *g, int busy)
{
    kv_ssd_set_busy(g->ssd, busy);
    if (g->ssd_swa)
        kv_ssd_set_busy(g->ssd_swa, busy);
}

/* Queues every cached block not on disk yet; waits for room when the spill queue is full. */
static void snapshot_all(struct engine *g)
{
    double t_end = clock_now_s() + (g->c.ssd_close_timeout_s > 0 ? g->c.ssd_close_timeout_s : 30);
    struct kv_pool *pools[2];
    struct kv_ssd *ssds[2];
    for (int i = 0, n = tiers(g, pools, ssds); i < n; i++)
        while (kv_tier_snapshot(pools[i], INT_MAX, 1) > 0 && clock_now_s() < t_end)
            kv_ssd_drain(ssds[i], 1.0);
}

static void publish_cache(struct engine *g)
{
    pthread_mutex_lock(&g->mu);
    g->st.cache_entries = g->kv->cs.entries;
    g->st.cache_lru_blocks = g->kv->cs.lru;
    g->st.cache_evictions = g->kv->cs.evictions;
    g->st.blocks_free = kv_pool_available(g->kv);
    if (g->kv_swa)
        g->st.swa_blocks_free = kv_pool_available(g->kv_swa);
    pthread_mutex_unlock(&g->mu);
}

/* Answers pending flush requests (engine thread, mu not held). */
static void serve_flush(struct engine *g)
{
    pthread_mutex_lock(&g->mu);
    long want = g->flush_req;
    int due = want != g->flush_done, demote = g->demote_req > g->flush_done;
    pthread_mutex_unlock(&g->mu);
    if (!due)
        return;
    snapshot_all(g);
    long n = 0;
    if (demote) { /* every unused block: queued above, now freed (idle 0 s = all of them) */
        struct kv_pool *pools[2];
        struct kv_ssd *ssds[2];
        for (int i = 0, k = tiers(g, pools, ssds); i < k; i++)
            n += kv_tier_demote(pools[i], clock_now_s(), 0.0, INT_MAX);
        publish_cache(g);
    }
    pthread_mutex_lock(&g->mu);
    if (demote)
        g->demoted = n;
    g->flush_done = want;
    pthread_cond_broadcast(&g->flush_cv);
    pthread_mutex_unlock(&g->mu);
}

double eng_tier_idle(struct engine *g)
{
    serve_flush(g);
    set_busy(g, 0);
    double now = clock_now_s(), wait = -1;
    if (g->t_settled == 0)
        g->t_settled = now;
    struct kv_pool *pools[2];
    struct kv_ssd *ssds[2];
    int n = tiers(g, pools, ssds);
    for (int i = 0; i < n; i++) {
        struct kv_pool *p = pools[i];
        if (g->c.ssd_writebehind && p->dirty > 0) {
            double due = g->t_settled + DEBOUNCE_S - now;
            if (due > 0)
                wait = wait < 0 || due < wait ? due : wait;
            else if (kv_tier_snapshot(p, SLICE, 0) > 0)
                wait = 0.01; /* more to do (or the queue is full: let the writer catch up) */
        }
        if (g->c.ssd_demote_idle_s > 0) {
            double t = kv_tier_next_demote(p, now, g->c.ssd_demote_idle_s);
            if (t == 0) {
                if (kv_tier_demote(p, now, g->c.ssd_demote_idle_s, SLICE) > 0)
                    publish_cache(g);
                t = kv_tier_next_demote(p, now, g->c.ssd_demote_idle_s);
                if (t == 0)
                    t = 0.01;
            }
            if (t >= 0 && (wait < 0 || t < wait))
                wait = t;
        }
    }
    return wait;
}

/* --generation-checkpoint N: every running request whose registered blocks not yet on disk
 * hold N positions or more gets them queued as urgent writes (written while steps run), so
 * a crash or restart loses at most about N + one block of its KV. */
static void checkpoint(struct engine *g)
{
    int n = g->c.ssd_gen_checkpoint;
    if (n <= 0)
        return;
    for (int i = 0; i < g->n_run; i++) {
        kv_tier_checkpoint(g->kv, &g->run[i]->seq, n);
        if (g->ssd_swa)
            kv_tier_checkpoint(g->kv_swa, &g->run[i]->seq_swa, n);
    }
}

void eng_tier_busy(struct engine *g)
{
    serve_flush(g);
    set_busy(g, 1);
    checkpoint(g);
    g->t_settled = 0;
}

void eng_tier_quit(struct engine *g)
{
    if (!g->ssd)
        return;
    set_busy(g, 0);
    snapshot_all(g);
    pthread_mutex_lock(&g->mu);
    g->flush_done = g->flush_req;
    pthread_cond_broadcast(&g->flush_cv);
    pthread_mutex_unlock(&g->mu);
}

void eng_tier_close(struct engine *g)
{
    if (!g->ssd)
        return;
    double to = g->c.ssd_close_timeout_s > 0 ? g->c.ssd_close_timeout_s : 30;
    kv_pool_attach_ssd(g->kv, NULL, NULL);
    kv_ssd_close(g->ssd, to);
    g->ssd = NULL;
    if (g->ssd_swa) {
        kv_pool_attach_ssd(g->kv_swa, NULL, NULL);
        kv_ssd_close(g->ssd_swa, to);
        g->ssd_swa = NULL;
    }
}

int engine_ssd_stats(struct engine *g, struct kv_ssd_stats *out)
{
    if (!g->ssd)
        return -1;
    kv_ssd_stats(g->ssd, out);
    if (g->ssd_swa) { /* one tier to the reader: the sliding layers' files counted in */
        struct kv_ssd_stats w;
        kv_ssd_stats(g->ssd_swa, &w);
        out->entries += w.entries, out->bytes += w.bytes, out->max_bytes += w.max_bytes;
        out->spilled_blocks += w.spilled_blocks, out->writes += w.writes;
        out->write_errors += w.write_errors, out->pending_spills += w.pending_spills;
        out->pending_spill_bytes += w.pending_spill_bytes;
        out->dropped_spills += w.dropped_spills, out->quarantined += w.quarantined;
        out->evictions += w.evictions, out->demoted_blocks += w.demoted_blocks;
        out->entries_at_start += w.entries_at_start, out->restored_blocks += w.restored_blocks;
        out->checkpoint_blocks += w.checkpoint_blocks;
        if (w.last_flush_ms > out->last_flush_ms)
            out->last_flush_ms = w.last_flush_ms;
        /* hits, misses and restored_tokens: the global layers' (a position restored once) */
    }
    return 0;
}

static int flush_or_demote(struct engine *g, double timeout_s, int demote, long *blocks)
{
    if (!g->ssd)
        return -1;
    double t0 = clock_now_s();
    struct kv_ssd_stats before, after;
    engine_ssd_stats(g, &before);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double end = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + timeout_s;
    ts.tv_sec = (time_t)end;
    ts.tv_nsec = (long)((end - (double)ts.tv_sec) * 1e9);
    pthread_mutex_lock(&g->mu);
    long want = ++g->flush_req;
    if (demote)
        g->demote_req = want;
    pthread_cond_signal(&g->cv);
    int timed_out = 0;
    while (g->flush_done < want && !g->quit && !timed_out)
        timed_out = pthread_cond_timedwait(&g->flush_cv, &g->mu, &ts) == ETIMEDOUT;
    int served = g->flush_done >= want;
    if (served && demote && blocks)
        *blocks = g->demoted;
    pthread_mutex_unlock(&g->mu);
    if (!served)
        return 1;
    double left = timeout_s - (clock_now_s() - t0);
    int rc = kv_ssd_drain(g->ssd, left > 0.1 ? left : 0.1);
    if (g->ssd_swa) {
        left = timeout_s - (clock_now_s() - t0);
        rc |= kv_ssd_drain(g->ssd_swa, left > 0.1 ? left : 0.1);
    }
    engine_ssd_stats(g, &after);
    return rc || after.write_errors > before.write_errors;
}

void eng_tier_wait(struct engine *g)
{
    pthread_mutex_unlock(&g->mu);
    double w = eng_tier_idle(g);
    pthread_mutex_lock(&g->mu);
    if (g->quit || g->in.n || g->n_cancel || g->n_run || g->wait.n || g->calls || w == 0)
        return;
    if (g->flush_req != g->flush_done)
        return;
    if (w < 0) {
        pthread_cond_wait(&g->cv, &g->mu);
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double end = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + w;
    ts.tv_sec = (time_t)end;
    ts.tv_nsec = (long)((end - (double)ts.tv_sec) * 1e9);
    pthread_cond_timedwait(&g->cv, &g->mu, &ts);
}

int engine_ssd_flush(struct engine *g, double timeout_s)
{
    return flush_or_demote(g, timeout_s, 0, NULL);
}

int engine_ssd_demote(struct engine *g, double timeout_s, long *blocks)
{
    *blocks = 0;
    return flush_or_demote(g, timeout_s, 1, blocks);
}
