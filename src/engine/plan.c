/* plan.c — see plan.h. */
#include "engine/plan.h"

#include <stdio.h>
#include <string.h>

#include "backend/kvq.h"
#include "kv/kv_pool.h"

size_t engine_kv_token_bytes(const struct model *m, const struct engine_config *c)
{
    int kvd = m->hp.n_kv_head * m->hp.head_dim;
    if (!c->kv_layer_dtype)
        return kv_bytes_per_token(m->hp.n_layer, kvd, c->kv_dtype);
    size_t n = 0;
    for (int l = 0; l < m->hp.n_layer; l++)
        n += kvq_token_bytes(c->kv_layer_dtype[l], kvd);
    return n;
}

size_t plan_ram_bytes(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return 0;
    char line[256];
    size_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemTotal: %zu kB", &kb) == 1)
            break;
    fclose(f);
    return kb * 1024;
}

#define MIN_CONTEXT 256

int mem_plan_make(struct mem_plan *p, const struct model *m, struct engine_config *c,
                  size_t budget, size_t cache_bytes, struct cerr *e)
{
    memset(p, 0, sizeof *p);
    const struct model_hparams *h = &m->hp;
    p->budget_given = budget > 0;
    size_t dfree = 0, dtot = 0;
    if (m->be->ops->mem_info && m->be->ops->mem_info(m->be, &dfree, &dtot, NULL) == 0 && dtot) {
        p->on_device = 1;
        p->device_total = dtot;
    }
    if (!budget)
        budget = p->on_device ? dtot / 4 * 3 : plan_ram_bytes() / 4 * 3;
    p->budget_bytes = budget;
    p->weights_bytes = model_weight_bytes(m);
    size_t T = (size_t)c->max_step_tokens, S = (size_t)c->max_seqs;
    size_t E = (size_t)h->n_embd, QD = (size_t)h->n_head * h->head_dim,
           KVD = (size_t)h->n_kv_head * h->head_dim, F = (size_t)h->n_ff, V = (size_t)h->n_vocab;
    p->transient_bytes = T * (3 * E + 2 * QD + 2 * KVD + 2 * F + 5) * 4 + 2 * S * V * 4 +
                         S * E * 4;
    p->kv_per_token = engine_kv_token_bytes(m, c);
    size_t fixed = p->weights_bytes + p->transient_bytes;
    size_t min_kv = (size_t)MIN_CONTEXT * p->kv_per_token;
    if (budget < fixed + min_kv)
        return cerr_set(e, CERR_LIMIT,
                        "no context fits the memory budget: budget %.2f GB = weights %.2f GB + "
                        "prefill transient %.2f GB + KV %.1f KB per token leaves room for %zu "
                        "tokens (at least %d needed) — raise --memory-budget, or lower "
                        "--max-batch-tokens / --batch",
                        budget / 1e9, p->weights_bytes / 1e9, p->transient_bytes / 1e9,
                        p->kv_per_token / 1024.0,
                        budget > fixed ? (budget - fixed) / p->kv_per_token : (size_t)0,
                        MIN_CONTEXT);
    p->usable_bytes = budget - fixed;
    size_t fit = p->usable_bytes / p->kv_per_token;
    int bs = c->block_size;
    long ctx = c->n_ctx;
    if ((size_t)ctx > fit)
        ctx = (long)fit;
    ctx = ctx / bs * bs;
    p->max_safe_context = (int)ctx;
    c->n_ctx = (int)ctx;
    size_t cache_tok = cache_bytes / p->kv_per_token;
    size_t pool_tok = S * (size_t)ctx + cache_tok;
    if (pool_tok > fit)
        pool_tok = fit;
    if (pool_tok < (size_t)ctx)
        pool_tok = (size_t)ctx;
    if (pool_tok / bs > 0x7fffffff / 2)
        pool_tok = (size_t)0x7fffffff / 2 * bs;
    c->n_blocks = (int)(pool_tok / bs);
    p->n_blocks = c->n_blocks;
    p->cache_bytes = cache_bytes;
    p->cache_blocks = cache_bytes ? (int)(cache_tok / bs < (size_t)c->n_blocks ? cache_tok / bs
                                                                               : (size_t)c->n_blocks)
                                  : -1;
    c->prompt_cache_blocks = p->cache_blocks;
    return 0;
}
