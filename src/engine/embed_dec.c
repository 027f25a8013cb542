/* embed_dec.c — embeddings from a decoder model (embed.h: struct dec_embedder).
 *
 * Each input is prefilled alone, in chunks, into a private KV cache (struct gen, F32 KV,
 * released after the input), with model_forward_hidden: the final-normed hidden states of
 * the rows it asks for. Last-token pooling asks for the last row of the last chunk; mean
 * pooling for every row (summed in double). Then L2 normalization when asked. The caller
 * owns the model and runs this on one thread (the embedding worker).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/embed.h"
#include "engine/gen.h"

struct dec_embedder {
    const struct model *m;
    struct gen *g;
    int pool, normalize, max_len;
    float *h;    /* (chunk, n_embd) hidden rows of one forward */
    double *acc; /* (n_embd) mean accumulator */
};

#define DEC_CHUNK 64

int dec_embedder_new(struct dec_embedder **out, const struct model *m, int pool, int normalize,
                     int max_len, struct cerr *e)
{
    *out = NULL;
    if (pool != BERT_POOL_MEAN && pool != BERT_POOL_LAST)
        return cerr_set(e, CERR_INVALID, "decoder embeddings pool by the mean or the last token");
    struct dec_embedder *d = calloc(1, sizeof *d);
    if (!d)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    d->m = m, d->pool = pool, d->normalize = normalize, d->max_len = max_len;
    int rc = gen_new(&d->g, m, max_len, DEC_CHUNK, DT_F32, e);
    d->h = malloc((size_t)DEC_CHUNK * m->hp.n_embd * sizeof *d->h);
    d->acc = malloc((size_t)m->hp.n_embd * sizeof *d->acc);
    if (!rc && (!d->h || !d->acc))
        rc = cerr_set(e, CERR_NOMEM, "out of memory");
    if (rc) {
        dec_embedder_free(d);
        return rc;
    }
    *out = d;
    return 0;
}

void dec_embedder_free(struct dec_embedder *d)
{
    if (!d)
        return;
    gen_free(d->g);
    free(d->h);
    free(d->acc);
    free(d);
}

/* One input into o (n_embd). */
static int embed_one(struct dec_embedder *d, const int32_t *ids, int n, float *o,
                     struct cerr *e)
{
    struct gen *g = d->g;
    const int E = d->m->hp.n_embd;
    if (n < 1 || n > d->max_len)
        return cerr_set(e, CERR_INVALID, "input of %d tokens (1 to %d)", n, d->max_len);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= d->m->hp.n_vocab)
            return cerr_set(e, CERR_INVALID, "token id %d is out of range", ids[i]);
    gen_reset(g);
    int rc = kv_seq_reserve(g->kv, &g->seq, n, e);
    if (rc)
        return rc;
    struct model_kv_view view = kv_pool_view(g->kv);
    for (int i = 0; i < E; i++)
        d->acc[i] = 0;
    for (int off = 0; off < n; off += g->chunk) {
        int c = n - off < g->chunk ? n - off : g->chunk;
        for (int i = 0; i < c; i++) {
            g->pos[i] = off + i;
            g->slots[i] = kv_seq_slot(g->kv, &g->seq, off + i);
        }
        int last = off + c == n;
        int n_out = d->pool == BERT_POOL_MEAN ? c : last;
        struct model_batch b = {.n_tok = c, .tokens = ids + off, .pos = g->pos, .seq = g->seqv,
                                .slots = g->slots, .n_seq = 1, .max_blocks = g->seq.n_blocks,
                                .block_tables = g->seq.blocks, .n_out = n_out,
                                .out_idx = d->pool == BERT_POOL_MEAN ? g->idx : g->idx + (c - 1)};
        if ((rc = model_forward_hidden(d->m, g->ws, &view, &b, d->h, e)))
            return rc;
        if (d->pool == BERT_POOL_MEAN)
            for (int r = 0; r < c; r++)
                for (int i = 0; i < E; i++)
                    d->acc[i] += d->h[(size_t)r * E + i];
        else if (last)
            for (int i = 0; i < E; i++)
                d->acc[i] = d->h[i];
    }
    double ss = 0;
    for (int i = 0; i < E; i++) {
        o[i] = (float)(d->pool == BERT_POOL_MEAN ? d->acc[i] / n : d->acc[i]);
        ss += (double)o[i] * o[i];
    }
    if (d->normalize && ss > 0) {
        float inv = (float)(1.0 / sqrt(ss));
        for (int i = 0; i < E; i++)
            o[i] *= inv;
    }
    gen_reset(g);
    return 0;
}

int dec_embed(struct dec_embedder *d, const int32_t *const *ids, const int *lens, int n_seq,
              float *out, struct cerr *e)
{
    for (int s = 0; s < n_seq; s++) {
        int rc = embed_one(d, ids[s], lens[s], out + (size_t)s * d->m->hp.n_embd, e);
        if (rc)
            return rc;
    }
    return 0;
}
