/* embed_dec.c — embeddings from a decoder model (embed.h: struct dec_embedder).
 *
 * Inputs are prefilled (causally, as the model was trained) into a private F32 KV pool that
 * is emptied after every call, with model_forward_hidden: the final-normed hidden states of
 * the rows asked for. Short inputs are packed whole into one forward of up to DEC_STEP tokens
 * and DEC_SEQS sequences (each with its own blocks: a flattened varlen step, no padding);
 * an input longer than DEC_STEP is prefilled alone in DEC_STEP-token chunks. Last-token
 * pooling asks for each input's last row; mean pooling for every row (summed in double).
 * Then L2 normalization when asked. The CPU ops are batch invariant, so an input's vector
 * does not depend on what it was packed with. One thread drives the model (the worker).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/embed.h"
#include "kv/kv_pool.h"

#define DEC_STEP 256 /* tokens of one forward */
#define DEC_SEQS 32  /* inputs of one forward */
#define BS 16        /* KV block size */

struct dec_embedder {
    const struct model *m;
    struct kv_pool *kv;
    struct model_ws *ws;
    int pool, normalize, max_len, width; /* width: block-table entries per sequence */
    struct kv_seq seqs[DEC_SEQS];
    int32_t *tok, *pos, *seqi, *slots, *outi, *tables; /* one step's arrays */
    float *h;    /* (DEC_STEP, n_embd) hidden rows of one forward */
    double *acc; /* (DEC_SEQS, n_embd) pooling accumulators */
};

int dec_embedder_new(struct dec_embedder **out, const struct model *m, int pool, int normalize,
                     int max_len, struct cerr *e)
{
    *out = NULL;
    if (pool != BERT_POOL_MEAN && pool != BERT_POOL_LAST)
        return cerr_set(e, CERR_INVALID, "decoder embeddings pool by the mean or the last token");
    if (max_len < 1)
        return cerr_set(e, CERR_INVALID, "decoder embeddings need a positive input limit");
    struct dec_embedder *d = calloc(1, sizeof *d);
    if (!d)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    const struct model_hparams *hp = &m->hp;
    d->m = m, d->pool = pool, d->normalize = normalize, d->max_len = max_len;
    d->width = (max_len > DEC_STEP ? max_len : DEC_STEP) / BS + 1;
    for (int s = 0; s < DEC_SEQS; s++)
        kv_seq_init(&d->seqs[s]);
    /* a long input alone, or DEC_SEQS packed ones of at most DEC_STEP tokens in all */
    int n_blocks = d->width + DEC_STEP / BS + DEC_SEQS;
    int rc = kv_pool_new(&d->kv, m->be, hp->n_layer, hp->n_kv_head * hp->head_dim, BS, n_blocks,
                         DT_F32, -1, e);
    if (!rc)
        rc = model_ws_new(&d->ws, m, DEC_STEP, DEC_STEP, DEC_SEQS, d->width, e);
    size_t t = DEC_STEP;
    d->tok = malloc(t * 4), d->pos = malloc(t * 4), d->seqi = malloc(t * 4);
    d->slots = malloc(t * 4), d->outi = malloc(t * 4);
    d->tables = malloc((size_t)DEC_SEQS * d->width * 4);
    d->h = malloc(t * hp->n_embd * sizeof *d->h);
    d->acc = malloc((size_t)DEC_SEQS * hp->n_embd * sizeof *d->acc);
    if (!rc && (!d->tok || !d->pos || !d->seqi || !d->slots || !d->outi || !d->tables || !d->h ||
                !d->acc))
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
    for (int s = 0; s < DEC_SEQS; s++)
        if (d->kv)
            kv_seq_release(d->kv, &d->seqs[s]);
    kv_pool_free(d->kv);
    model_ws_free(d->ws);
    free(d->tok), free(d->pos), free(d->seqi), free(d->slots), free(d->outi);
    free(d->tables), free(d->h), free(d->acc);
    free(d);
}

static void release_all(struct dec_embedder *d, int k)
{
    for (int s = 0; s < k; s++)
        kv_seq_release(d->kv, &d->seqs[s]);
}

/* One forward over pieces of k sequences: sequence s (slot s of d->seqs) contributes its
 * positions [off[s], off[s] + cnt[s]) of ids[s]; last[s]: that piece ends the input. Pools
 * the hidden rows into d->acc rows. */
static int step(struct dec_embedder *d, int k, const int32_t *const *ids, const int *off,
                const int *cnt, const int *last, struct cerr *e)
{
    const int E = d->m->hp.n_embd;
    int n = 0, n_out = 0;
    memset(d->tables, 0, (size_t)k * d->width * sizeof *d->tables);
    for (int s = 0; s < k; s++) {
        int rc = kv_seq_reserve(d->kv, &d->seqs[s], off[s] + cnt[s], e);
        if (rc)
            return rc;
        for (int j = 0; j < d->seqs[s].n_blocks; j++)
            d->tables[s * d->width + j] = d->seqs[s].blocks[j];
        for (int p = off[s]; p < off[s] + cnt[s]; p++, n++) {
            d->tok[n] = ids[s][p];
            d->pos[n] = p;
            d->seqi[n] = s;
            d->slots[n] = kv_seq_slot(d->kv, &d->seqs[s], p);
            if (d->pool == BERT_POOL_MEAN || (last[s] && p == off[s] + cnt[s] - 1))
                d->outi[n_out++] = n;
        }
    }
    struct model_kv_view view = kv_pool_view(d->kv);
    struct model_batch b = {.n_tok = n, .tokens = d->tok, .pos = d->pos, .seq = d->seqi,
                            .slots = d->slots, .n_seq = k, .max_blocks = d->width,
                            .block_tables = d->tables, .n_out = n_out, .out_idx = d->outi};
    int rc = model_forward_hidden(d->m, d->ws, &view, &b, d->h, e);
    if (rc)
        return rc;
    for (int r = 0; r < n_out; r++) { /* rows are in sequence order */
        int s = d->seqi[d->outi[r]];
        double *a = d->acc + (size_t)s * E;
        const float *h = d->h + (size_t)r * E;
        if (d->pool == BERT_POOL_MEAN)
            for (int i = 0; i < E; i++)
                a[i] += h[i];
        else
            for (int i = 0; i < E; i++)
                a[i] = h[i];
    }
    return 0;
}

/* Pooled accumulator row s of an input of n tokens -> o (n_embd), normalized if asked. */
static void finish_row(const struct dec_embedder *d, int s, int n, float *o)
{
    const int E = d->m->hp.n_embd;
    const double *a = d->acc + (size_t)s * E;
    double ss = 0;
    for (int i = 0; i < E; i++) {
        o[i] = (float)(d->pool == BERT_POOL_MEAN ? a[i] / n : a[i]);
        ss += (double)o[i] * o[i];
    }
    if (d->normalize && ss > 0) {
        float inv = (float)(1.0 / sqrt(ss));
        for (int i = 0; i < E; i++)
            o[i] *= inv;
    }
}

int dec_embed(struct dec_embedder *d, const int32_t *const *ids, const int *lens, int n_seq,
              float *out, struct cerr *e)
{
    const int E = d->m->hp.n_embd;
    for (int s = 0; s < n_seq; s++) {
        if (lens[s] < 1 || lens[s] > d->max_len)
            return cerr_set(e, CERR_INVALID, "input of %d tokens (1 to %d)", lens[s], d->max_len);
        for (int i = 0; i < lens[s]; i++)
            if (ids[s][i] < 0 || ids[s][i] >= d->m->hp.n_vocab)
                return cerr_set(e, CERR_INVALID, "token id %d is out of range", ids[s][i]);
    }
    int off[DEC_SEQS], cnt[DEC_SEQS], last[DEC_SEQS];
    for (int s0 = 0; s0 < n_seq;) {
        int rc = 0;
        if (lens[s0] > DEC_STEP) { /* alone, in chunks */
            memset(d->acc, 0, (size_t)E * sizeof *d->acc);
            for (int o = 0; !rc && o < lens[s0]; o += DEC_STEP) {
                off[0] = o;
                cnt[0] = lens[s0] - o < DEC_STEP ? lens[s0] - o : DEC_STEP;
                last[0] = o + cnt[0] == lens[s0];
                rc = step(d, 1, ids + s0, off, cnt, last, e);
            }
            if (!rc)
                finish_row(d, 0, lens[s0], out + (size_t)s0 * E);
            release_all(d, 1);
            if (rc)
                return rc;
            s0++;
            continue;
        }
        /* pack whole short inputs */
        int k = 0, t = 0;
        while (s0 + k < n_seq && k < DEC_SEQS && lens[s0 + k] <= DEC_STEP &&
               t + lens[s0 + k] <= DEC_STEP) {
            off[k] = 0, cnt[k] = lens[s0 + k], last[k] = 1;
            t += lens[s0 + k++];
        }
        memset(d->acc, 0, (size_t)k * E * sizeof *d->acc);
        rc = step(d, k, ids + s0, off, cnt, last, e);
        for (int s = 0; !rc && s < k; s++)
            finish_row(d, s, lens[s0 + s], out + (size_t)(s0 + s) * E);
        release_all(d, k);
        if (rc)
            return rc;
        s0 += k;
    }
    return 0;
}
