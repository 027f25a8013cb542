/* plan.h — the memory plan: from a memory budget to the max safe context and the KV pool.
 *
 * budget (--memory-budget, decimal GB; default 75% of RAM, or of device memory on a GPU)
 *   = weights + a prefill transient (activations of one step of max_step_tokens, logits)
 *   + KV. KV bytes per token come from the model's layers and the KV dtype. The max safe
 * context is what one sequence can hold in what is left, capped by the model's (or --ctx)
 * context; the pool holds max_seqs such contexts plus the prompt cache (--prompt-cache,
 * binary GiB), within what is left. A budget that leaves no useful context is an error that
 * gives the numbers, before anything is allocated.
 */
#ifndef CINFER_ENGINE_PLAN_H
#define CINFER_ENGINE_PLAN_H

#include <stddef.h>

#include "engine/engine.h"

struct mem_plan {
    size_t budget_bytes, weights_bytes, transient_bytes, usable_bytes, kv_per_token;
    int budget_given;      /* --memory-budget was set (else the default fraction) */
    int on_device;         /* the budget is device memory (else host RAM) */
    size_t device_total;   /* the device's memory, when on_device */
    int max_safe_context;
    int n_blocks;          /* KV pool */
    int cache_blocks;      /* prompt-cache cap in blocks; -1 = disabled */
    size_t cache_bytes;
};

/* KV bytes one position takes across the model's layers under c's KV dtype(s)
 * (kv_layer_dtype when set: kv quantization). */
size_t engine_kv_token_bytes(const struct model *m, const struct engine_config *c);

/* Bytes of physical memory (MemTotal), 0 when unknown. */
size_t plan_ram_bytes(void);

/* c: the engine configuration with n_ctx = the wanted context, max_seqs, max_step_tokens,
 * block_size and kv_dtype set. budget 0 = 75% of the memory the model lives in: the
 * device's when its backend reports it (be_ops.mem_info), else RAM. cache_bytes: the prompt
 * cache cap (0 disables). Fills p and, on success, c->n_ctx, c->n_blocks and
 * c->prompt_cache_blocks. */
int mem_plan_make(struct mem_plan *p, const struct model *m, struct engine_config *c,
                  size_t budget, size_t cache_bytes, struct cerr *e);

#endif
