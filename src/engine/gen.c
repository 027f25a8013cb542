/* gen.c — see gen.h. */
#include "engine/gen.h"

#include <stdlib.h>
#include <string.h>

int gen_new(struct gen **out, const struct model *m, int n_ctx, int chunk, int kv_dtype,
            struct cerr *e)
{
    return gen_new_layers(out, m, n_ctx, chunk, kv_dtype, NULL, e);
}

int gen_new_layers(struct gen **out, const struct model *m, int n_ctx, int chunk, int kv_dtype,
                   const int *layer_dtype, struct cerr *e)
{
    *out = NULL;
    if (n_ctx <= 0 || chunk <= 0)
        return cerr_set(e, CERR_INVALID, "context and chunk sizes must be positive");
    if (chunk > n_ctx)
        chunk = n_ctx;
    struct gen *g = calloc(1, sizeof *g);
    if (!g)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    g->m = m;
    g->n_ctx = n_ctx;
    g->chunk = chunk;
    kv_seq_init(&g->seq);
    const int bs = 16;
    int max_blocks = (n_ctx + bs - 1) / bs;
    int rc = kv_pool_new_layers(&g->kv, m->be, m->hp.n_layer, m->hp.n_kv_head * m->hp.head_dim,
                                bs, max_blocks, kv_dtype, layer_dtype, -1, e);
    if (!rc)
        rc = model_ws_new(&g->ws, m, chunk, chunk, 1, max_blocks, e);
    g->logits = malloc((size_t)chunk * m->hp.n_vocab * sizeof(float));
    g->pos = malloc((size_t)chunk * sizeof(int32_t));
    g->seqv = calloc((size_t)chunk, sizeof(int32_t));
    g->slots = malloc((size_t)chunk * sizeof(int32_t));
    g->idx = malloc((size_t)chunk * sizeof(int32_t));
    for (int i = 0; g->idx && i < chunk; i++)
        g->idx[i] = i;
    if (!rc && (!g->logits || !g->pos || !g->seqv || !g->slots || !g->idx))
        rc = cerr_set(e, CERR_NOMEM, "out of memory");
    if (rc) {
        gen_free(g);
        return rc;
    }
    *out = g;
    return 0;
}

void gen_free(struct gen *g)
{
    if (!g)
        return;
    if (g->kv)
        kv_seq_release(g->kv, &g->seq);
    kv_pool_free(g->kv);
    model_ws_free(g->ws);
    free(g->logits);
    free(g->pos);
    free(g->seqv);
    free(g->slots);
    free(g->idx);
    free(g);
}

void gen_reset(struct gen *g)
{
    kv_seq_release(g->kv, &g->seq);
    g->n_past = 0;
}

int gen_feed(struct gen *g, const int32_t *ids, int n, float *all_logits, struct cerr *e)
{
    if (n <= 0)
        return cerr_set(e, CERR_INVALID, "nothing to feed");
    if (g->n_past + n > g->n_ctx)
        return cerr_set(e, CERR_LIMIT, "context is full: %d + %d tokens exceed %d", g->n_past, n,
                        g->n_ctx);
    int rc = kv_seq_reserve(g->kv, &g->seq, g->n_past + n, e);
    if (rc)
        return rc;
    int V = g->m->hp.n_vocab;
    struct model_kv_view view = kv_pool_view(g->kv);
    for (int off = 0; off < n; off += g->chunk) {
        int c = n - off < g->chunk ? n - off : g->chunk;
        for (int i = 0; i < c; i++) {
            g->pos[i] = g->n_past + i;
            g->slots[i] = kv_seq_slot(g->kv, &g->seq, g->n_past + i);
        }
        /* logits for every token when all are wanted, else only for the very last one */
        int n_out = all_logits ? c : (off + c == n ? 1 : 0);
        const int32_t *out_idx = all_logits ? g->idx : g->idx + (c - 1);
        struct model_batch b = {
            .n_tok = c,
            .tokens = ids + off,
            .pos = g->pos,
            .seq = g->seqv,
            .slots = g->slots,
            .n_seq = 1,
            .max_blocks = g->seq.n_blocks,
            .block_tables = g->seq.blocks,
            .n_out = n_out,
            .out_idx = out_idx,
            .lora = g->lora ? &g->lora : NULL,
            .lora_paths = g->lora_paths,
        };
        rc = model_forward(g->m, g->ws, &view, &b, g->logits, e);
        if (rc)
            return rc;
        if (all_logits)
            memcpy(all_logits + (size_t)off * V, g->logits, (size_t)c * V * sizeof(float));
        g->n_past += c;
    }
    if (all_logits)
        memcpy(g->logits, all_logits + (size_t)(n - 1) * V, (size_t)V * sizeof(float));
    return 0;
}
