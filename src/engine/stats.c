/* stats.c — the engine's published counters (engine_get_stats reads them under the lock)
 * and the block-pool invariant check over every live sequence; both on the engine thread.
 */
#include <pthread.h>
#include <string.h>

#include "engine/engine_int.h"
#include "kv/kv_pool.h"
#include "util/err.h"
#include "util/log.h"

void eng_publish_stats(struct engine *g, long gen_delta)
{
    pthread_mutex_lock(&g->mu);
    g->st.running = g->n_run;
    g->st.waiting = g->wait.n;
    g->st.preempted = g->preempted;
    g->st.steps = g->steps;
    g->st.gen_tokens += gen_delta + g->spec_gen;
    g->spec_gen = 0;
    eng_spec_stats(g);
    g->st.blocks_total = g->kv->n_blocks;
    g->st.blocks_free = kv_pool_available(g->kv);
    if (g->kv_swa) {
        g->st.swa_blocks_total = g->kv_swa->n_blocks;
        g->st.swa_blocks_free = kv_pool_available(g->kv_swa);
        int held = 0;
        for (int i = 0; i < g->n_run; i++)
            held = kv_seq_live_blocks(&g->run[i]->seq_swa) > held
                       ? kv_seq_live_blocks(&g->run[i]->seq_swa)
                       : held;
        if (held > g->st.swa_max_held)
            g->st.swa_max_held = held;
    }
    const struct kv_cache_stats *cs = &g->kv->cs;
    g->st.cache_entries = cs->entries;
    g->st.cache_full_blocks = cs->full_entries;
    g->st.cache_lru_blocks = cs->lru;
    g->st.cache_hits = cs->hits;
    g->st.cache_misses = cs->misses;
    g->st.cache_hit_tokens = cs->hit_tokens;
    g->st.cache_evictions = cs->evictions;
    g->st.cache_cow = cs->cow_copies;
    g->st.kv_projected_bytes = g->projected;
    g->st.invariant_failures = g->invariant_failures;
    g->st.cand_rows = g->cand_rows;
    g->st.cand_full_rows = g->full_rows;
    g->st.burst_steps = g->burst_steps;
    memcpy(g->st.last_invariant_error, g->invariant_error, sizeof g->st.last_invariant_error);
    pthread_mutex_unlock(&g->mu);
}

/* The block-pool invariant checker over every live sequence (running ones hold blocks;
 * waiting ones hold none). */
void eng_check_pool(struct engine *g)
{
    int n = 0;
    for (int i = 0; i < g->n_run; i++)
        g->check_seqs[n++] = &g->run[i]->seq;
    struct cerr e = {0};
    for (int i = 0; i < g->n_run; i++)
        g->check_seqs_swa[i] = &g->run[i]->seq_swa;
    if (kv_pool_check(g->kv, g->check_seqs, n, &e) ||
        (g->kv_swa && kv_pool_check(g->kv_swa, g->check_seqs_swa, n, &e))) {
        g->invariant_failures++;
        memcpy(g->invariant_error, e.msg, sizeof g->invariant_error - 1);
        log_error("engine: KV pool invariant broken: %s", e.msg);
    }
}
