/* lora_eng.c — the engine's side of LoRA adapters: a request's set (referenced for its
 * whole life, so an unmount never pulls weights from under a running request), its
 * prefix-cache root (the engine's root hashed with the set's content fingerprints and
 * weights: the same prompt under two sets never shares KV), and the per-step list of sets
 * the forward groups rows by.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_int.h"
#include "model/lora.h"

int eng_lora_submit(struct engine *g, struct ereq *r, const struct engine_req *q, struct cerr *e)
{
    memcpy(r->root, g->root, KV_KEY_BYTES);
    if (!q->lora || q->lora->n == 0)
        return 0;
    if (!g->c.lora)
        return cerr_set(e, CERR_INVALID, "this engine serves no adapters");
    if (q->lora->n > LORA_MAX_STACK)
        return cerr_set(e, CERR_INVALID, "at most %d adapters may be stacked", LORA_MAX_STACK);
    for (int i = 0; i < q->lora->n; i++)
        if (q->lora->a[i]->m != g->m)
            return cerr_set(e, CERR_INVALID, "adapter %s was loaded for another model",
                            q->lora->a[i]->path);
    r->lora = *q->lora;
    lora_set_ref(&r->lora);
    lora_reg_count(g->c.lora, &r->lora, 1);
    char buf[KV_KEY_BYTES + 16 + LORA_MAX_STACK * 48];
    memcpy(buf, g->root, KV_KEY_BYTES);
    int n = snprintf(buf + KV_KEY_BYTES, sizeof buf - KV_KEY_BYTES, "|adapters=");
    lora_set_key(&r->lora, buf + KV_KEY_BYTES + n, sizeof buf - KV_KEY_BYTES - (size_t)n);
    kv_key_root(r->root, buf, KV_KEY_BYTES + strlen(buf + KV_KEY_BYTES));
    return 0;
}

void eng_lora_admitted(struct engine *g, struct ereq *r)
{
    if (g->c.lora && r->lora.n && !r->lora_run) {
        lora_reg_admit(g->c.lora, &r->lora, 1);
        r->lora_run = 1;
    }
}

void eng_lora_preempted(struct engine *g, struct ereq *r)
{
    if (g->c.lora && r->lora_run) {
        lora_reg_admit(g->c.lora, &r->lora, -1);
        r->lora_run = 0;
    }
}

void eng_lora_release(struct engine *g, struct ereq *r)
{
    if (r->lora.n == 0)
        return;
    eng_lora_preempted(g, r); /* running -> gone */
    if (g->c.lora)
        lora_reg_count(g->c.lora, &r->lora, -1);
    lora_set_unref(&r->lora);
}

void eng_lora_batch(struct engine *g, int n_rows, struct model_batch *b)
{
    if (!g->c.lora)
        return;
    b->lora_paths = lora_reg_paths(g->c.lora);
    int any = 0;
    for (int s = 0; s < n_rows; s++) {
        const struct ereq *r = g->rows[s].r;
        g->lsets[s] = r->lora.n ? &r->lora : NULL;
        any |= r->lora.n > 0;
    }
    b->lora = any ? g->lsets : NULL;
}
