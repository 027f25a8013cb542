/* forward.c — the transformer forward for one flattened step batch.
 *
 * Reads top to bottom as the architecture: embed -> per layer [norm -> q,k,v (+bias)
 * (-> q/k norm) -> rope -> store K/V -> paged attention -> out proj (-> post norm) ->
 * residual -> norm -> gated MLP (-> post norm) -> residual] -> final norm on the rows that
 * want logits -> classifier. Every buffer is sized once in model_ws_new(); nothing is
 * allocated per step.
 */
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

#include "backend/be_sample.h"
#include "model/lora_fwd.h"
#include "backend/kvq.h"
#include "model/kv_center.h"

struct model_ws {
    int max_tok, max_out, max_seq, max_blocks;
    float *x;      /* (max_tok, n_embd) residual stream */
    float *xb;     /* (max_tok, n_embd) normed input of a block */
    float *tmp;    /* (max_tok, n_embd) block output before the residual add */
    float *q;      /* (max_tok, n_head * head_dim) */
    float *k, *v;  /* (max_tok, n_kv_head * head_dim) */
    float *att;    /* (max_tok, n_head * head_dim) */
    float *gate;   /* (max_tok, n_ff) */
    float *up;     /* (max_tok, n_ff) */
    float *xo;     /* (max_out, n_embd) rows that produce logits */
    float *logits; /* (max_out, n_vocab) */
    /* The step's ids, packed into one buffer so a step costs one upload: tokens, pos,
     * seq, slots (n_tok each), out (n_out), tables (n_seq * max_blocks), then the
     * sliding-window layers' own slots and tables (see model_batch) when the step has them.
     * The d_* pointers point into d_ids at this step's offsets. */
    int32_t *d_ids, *h_ids; /* 6 max_tok + max_out + 2 max_seq max_blocks elements */
    int32_t *d_tokens, *d_pos, *d_seq, *d_slots, *d_out, *d_tables;
    int32_t *d_slots_swa, *d_tables_swa;
    int32_t *d_samp; /* the step's model_batch.samp (op sample params), when it has one */
    int swa_split; /* this step uses them */
    int lead_split; /* run n_lead groups apart: -1 when the backend needs it (exact_rows),
                     * 1 always, 0 never (CINFER_LEAD_SPLIT, read at model_ws_new) */
    int exact_rows; /* the fewest be_ops.exact_rows over the model's matrices (0: any) */
    long lead_steps; /* steps run as two groups (model_lead_steps) */
    int32_t *d_argmax; /* (2, max_out): model_forward uses slot 0; queued steps alternate */
    /* queued steps (model_forward_queue): in flight, oldest first (slot, output rows); the
     * last queued step's slot and rows (its ids are the next continuation's tokens) */
    int q_slot[2], q_nout[2], q_n, q_next, prev_slot, prev_nout, prev_ok;
    int32_t *q_host; /* (2, max_out) ids of a backend without fetch ops */
    void *d_cands;     /* (max_out, be_topcand_stride(cand_cap)) bytes, or NULL */
    float **kcenter;   /* [n_layer] key centres of quantized KV (kv_center.h), or NULL */
    int n_layer;
    int cand_cap;
    int last_out;      /* logit rows of the last forward (model_logits_row); 0 = none */
    int x_chain;       /* x is the output of a matmul_fused ADD with chain = 1 (be_mm) */
    int one_per_seq;   /* the rows being run hold one token per sequence (be_attn) */
    int hidden_only;   /* model_forward_hidden: stop at the final norm (no classifier) */
    struct be *be;
    /* LoRA (lora_fwd.h): the step's groups, their row lists (host scratch, and in d_ids),
     * the step's lora_paths, and the range run_layers is running (0 lead / all, 1 rest) */
    struct lora_plan *lp;
    int32_t *h_lrows, *d_lrows;
    unsigned lpaths;
    int lrange;
};

static void ws_release(struct model_ws *ws)
{
    struct be *b = ws->be;
    void *bufs[] = {ws->x,  ws->xb,   ws->tmp,  ws->q,      ws->k,     ws->v,     ws->att,
                    ws->gate, ws->up, ws->xo,   ws->logits, ws->d_ids, ws->d_argmax,
                    ws->d_cands};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i])
            b->ops->free(b, bufs[i]);
    free(ws->h_ids);
    free(ws->q_host);
    free(ws->h_lrows);
    lora_plan_free(ws->lp);
    for (int l = 0; ws->kcenter && l < ws->n_layer; l++)
        if (ws->kcenter[l])
            b->ops->free(b, ws->kcenter[l]);
    free(ws->kcenter);
}

int model_ws_new(struct model_ws **out, const struct model *m, int max_tok, int max_out,
                 int max_seq, int max_blocks, struct cerr *e)
{
    *out = NULL;
    if (max_tok <= 0 || max_out <= 0 || max_seq <= 0 || max_blocks <= 0 || max_out > max_tok)
        return cerr_set(e, CERR_INVALID, "invalid workspace sizes");
    struct model_ws *ws = calloc(1, sizeof *ws);
    if (!ws)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    const struct model_hparams *hp = &m->hp;
    struct be *b = m->be;
    ws->be = b;
    ws->max_tok = max_tok;
    ws->max_out = max_out;
    ws->max_seq = max_seq;
    ws->max_blocks = max_blocks;
    const char *ls = getenv("CINFER_LEAD_SPLIT");
    ws->lead_split = ls && (!strcmp(ls, "0") || !strcmp(ls, "1")) ? atoi(ls) : -1;
    if (b->ops->exact_rows) { /* the fewest over every matrix type the model holds */
        ws->exact_rows = b->ops->exact_rows(b, m->output.dtype);
        for (int il = 0; il < m->hp.n_layer; il++) {
            const struct model_layer *ly = &m->layers[il];
            const struct be_tensor *t[] = {&ly->wq, &ly->wk,     &ly->wv,   &ly->wo,
                                           &ly->w_gate, &ly->w_up, &ly->w_down};
            for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
                int x = b->ops->exact_rows(b, t[i]->dtype);
                ws->exact_rows = x < ws->exact_rows ? x : ws->exact_rows;
            }
        }
    }
    size_t T = (size_t)max_tok, E = (size_t)hp->n_embd;
    size_t QD = (size_t)hp->n_head * hp->head_dim, KVD = (size_t)hp->n_kv_head * hp->head_dim;
    size_t F = (size_t)hp->n_ff, V = (size_t)hp->n_vocab;
    size_t ids_cap = 7 * T + (size_t)max_out + 2 * (size_t)max_seq * max_blocks +
                     (size_t)model_samp_words_max(m, max_out);
    int ok = (ws->x = b->ops->alloc(b, T * E * 4)) && (ws->xb = b->ops->alloc(b, T * E * 4)) &&
             (ws->tmp = b->ops->alloc(b, T * E * 4)) && (ws->q = b->ops->alloc(b, T * QD * 4)) &&
             (ws->k = b->ops->alloc(b, T * KVD * 4)) && (ws->v = b->ops->alloc(b, T * KVD * 4)) &&
             (ws->att = b->ops->alloc(b, T * QD * 4)) &&
             (ws->gate = b->ops->alloc(b, T * F * 4)) && (ws->up = b->ops->alloc(b, T * F * 4)) &&
             (ws->xo = b->ops->alloc(b, (size_t)max_out * E * 4)) &&
             (ws->logits = b->ops->alloc(b, (size_t)max_out * V * 4)) &&
             (ws->d_ids = b->ops->alloc(b, ids_cap * 4)) &&
             (ws->h_ids = malloc(ids_cap * 4)) &&
             (ws->d_argmax = b->ops->alloc(b, 2 * (size_t)max_out * 4)) &&
             (ws->q_host = malloc(2 * (size_t)max_out * 4)) &&
             (ws->h_lrows = malloc(T * 4)) && lora_plan_new(&ws->lp, max_tok, max_seq) == 0;
    ws->n_layer = hp->n_layer;
    ok = ok && (ws->kcenter = calloc((size_t)hp->n_layer, sizeof *ws->kcenter));
    for (int il = 0; ok && il < hp->n_layer; il++)
        ws->kcenter[il] = model_kv_center_new(m, il);
    if (!ok) {
        ws_release(ws);
        free(ws);
        return cerr_set(e, CERR_NOMEM, "out of memory for a %d-token step workspace", max_tok);
    }
    *out = ws;
    return 0;
}

int model_ws_reserve_cands(struct model_ws *ws, int cap, struct cerr *e)
{
    if (cap < 1 || cap > BE_TOPCAND_CAP_MAX)
        return cerr_set(e, CERR_INVALID, "candidate cap %d is outside [1, %d]", cap,
                        BE_TOPCAND_CAP_MAX);
    if (cap <= ws->cand_cap)
        return 0;
    struct be *b = ws->be;
    void *p = b->ops->alloc(b, (size_t)ws->max_out * be_topcand_stride(cap));
    if (!p)
        return cerr_set(e, CERR_NOMEM, "out of memory for %d sampling candidates per row", cap);
    if (ws->d_cands)
        b->ops->free(b, ws->d_cands);
    ws->d_cands = p;
    ws->cand_cap = cap;
    return 0;
}

void model_ws_free(struct model_ws *ws)
{
    if (!ws)
        return;
    ws_release(ws);
    free(ws);
}

/* The first group's tokens when the step runs as two groups (model_batch.n_lead), else 0:
 * worth a second pass over the weights only where it changes bits (the step is larger than
 * the backend's exact rows and the lead group is not). */
static int step_lead(const struct model_ws *ws, const struct model_batch *bt)
{
    const int x = ws->exact_rows, n = bt->n_tok;
    const int want = ws->lead_split >= 0 ? ws->lead_split
                                         : x > 0 && n > x && bt->n_lead <= x;
    return want && bt->n_lead > 0 && bt->n_lead < n ? bt->n_lead : 0;
}

static int upload_batch(struct model_ws *ws, const struct model_batch *bt, struct cerr *e)
{
    struct be *b = ws->be;
    size_t n = (size_t)bt->n_tok, nt = (size_t)bt->n_seq * bt->max_blocks, o = 0;
    int32_t *h = ws->h_ids, *d = ws->d_ids;
    ws->swa_split = bt->slots_swa && bt->block_tables_swa;
#define PACK(dst, src, cnt)                                                                    \
    do {                                                                                       \
        memcpy(h + o, (src), (cnt) * 4);                                                       \
        ws->dst = d + o;                                                                       \
        o += (cnt);                                                                            \
    } while (0)
    if (bt->tokens) /* NULL: a queued continuation, its tokens are already on the device */
        PACK(d_tokens, bt->tokens, n);
    PACK(d_pos, bt->pos, n);
    PACK(d_seq, bt->seq, n);
    PACK(d_slots, bt->slots, n);
    PACK(d_out, bt->out_idx, (size_t)bt->n_out);
    PACK(d_tables, bt->block_tables, nt);
    if (ws->swa_split) {
        PACK(d_slots_swa, bt->slots_swa, n);
        PACK(d_tables_swa, bt->block_tables_swa, nt);
    }
    ws->lpaths = bt->lora_paths;
    int nl = lora_plan_build(ws->lp, bt, step_lead(ws, bt), ws->h_lrows);
    if (nl)
        PACK(d_lrows, ws->h_lrows, (size_t)nl);
    lora_plan_bind(ws->lp, nl ? ws->d_lrows : NULL);
    size_t late = 0; /* last: the late words (samp_fill) are uploaded after the layers */
    if (bt->samp) {
        late = bt->samp_fill ? (size_t)(bt->samp_words - bt->samp_late) : 0;
        PACK(d_samp, bt->samp, (size_t)bt->samp_words - late);
    }
#undef PACK
    return b->ops->upload(b, d, h, o * 4, e);
}

/* y_i = rmsnorm(x) W_i^T for the weights sharing the normed x (norm and projections fused
 * when the backend can; else xb holds the normed rows). rope (only with matmul_fused): the
 * rope + K/V store of q, k, v fused in too. */
static void project(const struct model *m, struct model_ws *ws, int n, const float *norm,
                    int n_w, const struct be_tensor *const *w, float *const *y,
                    const struct be_rope_kv *rope)
{
    const struct be_ops *op = m->be->ops;
    int chain = ws->x_chain;
    ws->x_chain = 0;
    if (op->matmul_fused) {
        struct be_mm f = {.mode = BE_MM_PLAIN, .n = n, .x = ws->x, .norm = norm,
                          .eps = m->hp.norm_eps, .n_w = n_w, .rope = rope, .chain = chain};
        for (int i = 0; i < n_w; i++)
            f.w[i] = w[i], f.y[i] = y[i];
        op->matmul_fused(m->be, &f);
        return;
    }
    op->rmsnorm(m->be, ws->xb, ws->x, norm, n, m->hp.n_embd, m->hp.norm_eps);
    for (int i = 0; i < n_w; i++)
        op->matmul(m->be, y[i], ws->xb, n, w[i]);
}

/* x += post_norm(a W^T): the residual add, fused into the projection when possible.
 * next_norm: non-NULL when the next op is a matmul_fused that norms x with it (be_mm.chain). */
static void out_proj(const struct model *m, struct model_ws *ws, int n, const float *a,
                     const struct be_tensor *w, const float *post_norm, const float *next_norm,
                     int il, int lt)
{
    const int chain = next_norm != NULL;
    const struct model_hparams *hp = &m->hp;
    const struct be_ops *op = m->be->ops;
    struct be *b = m->be;
    const int lora = (ws->lpaths >> lt) & 1; /* the adapter path: unfused, delta before the
                                              * post norm (as PEFT adds it to the projection) */
    ws->x_chain = 0;
    if (op->matmul_fused && !post_norm) {
        /* an adapter's delta goes straight into the residual, after the fused add (then the
         * add gathers nothing for the next norm: the delta comes after it) */
        struct be_mm f = {.mode = BE_MM_ADD, .n = n, .x = a, .n_w = 1, .w = {w}, .y = {ws->x},
                          .chain = chain && !lora, .next_norm = lora ? NULL : next_norm};
        op->matmul_fused(b, &f);
        ws->x_chain = chain && !lora;
        if (lora)
            lora_plan_apply(ws->lp, m, ws->lrange, il, lt, a, ws->x);
        return;
    }
    op->matmul(b, ws->tmp, a, n, w); /* (n, n_embd) */
    if (lora)
        lora_plan_apply(ws->lp, m, ws->lrange, il, lt, a, ws->tmp);
    if (post_norm)
        op->rmsnorm(b, ws->tmp, ws->tmp, post_norm, n, hp->n_embd, hp->norm_eps);
    op->add(b, ws->x, ws->x, ws->tmp, (int64_t)n * hp->n_embd);
}

static void attention_block(const struct model *m, struct model_ws *ws,
                            const struct model_kv_view *kv, const struct model_batch *bt, int il)
{
    const struct model_hparams *hp = &m->hp;
    const struct model_layer *ly = &m->layers[il];
    const struct be_ops *op = m->be->ops;
    struct be *b = m->be;
    int n = bt->n_tok;
    int qd = hp->n_head * hp->head_dim, kvd = hp->n_kv_head * hp->head_dim;

    const struct be_tensor *wqkv[3] = {&ly->wq, &ly->wk, &ly->wv};
    float *const yqkv[3] = {ws->q, ws->k, ws->v}; /* (n, qd), (n, kvd), (n, kvd) */
    int swa = hp->layer_swa[il];
    const float *inv_freq = swa ? m->inv_freq_local : m->inv_freq_global;
    int split = swa && ws->swa_split;
    int kv_dt = kv->layer_dtype ? kv->layer_dtype[il] : kv->kv_dtype;
    const int32_t *slots = split ? ws->d_slots_swa : ws->d_slots;
    struct be_rope_kv r = {.q = ws->q, .k = ws->k, .v = ws->v, .pos = ws->d_pos,
                           .slots = slots, .n_tok = n, .n_head = hp->n_head,
                           .n_kv_head = hp->n_kv_head, .head_dim = hp->head_dim,
                           .rot_dim = hp->rot_dim, .mode = hp->rope_mode,
                           .inv_freq = inv_freq, .mscale = 1.0f, .k_cache = kv->k[il],
                           .v_cache = kv->v[il], .kv_dtype = kv_dt};
    /* rope and the K/V store ride on the q/k/v projection unless biases or per-head norms
     * come between them */
    const unsigned lq = ws->lpaths & ((1u << LORA_Q) | (1u << LORA_K) | (1u << LORA_V));
    const int qkv = kvq_is(kv_dt); /* quantized keys are centred before the store (below) */
    int fuse_rope = op->matmul_fused && !ly->bq && !ly->q_norm && !lq && !qkv;
    project(m, ws, n, ly->attn_norm, 3, wqkv, yqkv, fuse_rope ? &r : NULL);
    if (lq && lora_plan_any(ws->lp, ws->lrange)) { /* + the adapters' deltas of q, k, v */
        if (op->matmul_fused && op->lora_norm) /* the fused projection kept no normed x */
            for (int t = LORA_Q; t <= LORA_V; t++)
                lora_plan_apply_norm(ws->lp, m, ws->lrange, il, t, ws->x, ly->attn_norm,
                                     hp->norm_eps, yqkv[t]);
        else {
            if (op->matmul_fused)
                op->rmsnorm(b, ws->xb, ws->x, ly->attn_norm, n, hp->n_embd, hp->norm_eps);
            for (int t = LORA_Q; t <= LORA_V; t++)
                lora_plan_apply(ws->lp, m, ws->lrange, il, t, ws->xb, yqkv[t]);
        }
    }
    if (ly->bq) {
        op->add_row(b, ws->q, ly->bq, n, qd);
        op->add_row(b, ws->k, ly->bk, n, kvd);
        op->add_row(b, ws->v, ly->bv, n, kvd);
    }
    if (ly->q_norm) { /* per head, over head_dim */
        op->rmsnorm(b, ws->q, ws->q, ly->q_norm, n * hp->n_head, hp->head_dim, hp->norm_eps);
        op->rmsnorm(b, ws->k, ws->k, ly->k_norm, n * hp->n_kv_head, hp->head_dim, hp->norm_eps);
    }
    if (fuse_rope) {
        /* done by the projection */
    } else if (op->rope_kv_store && !(qkv && ws->kcenter[il])) { /* (quantized: uncentred) */
        op->rope_kv_store(b, &r);
    } else {
        op->rope(b, ws->q, ws->d_pos, n, hp->n_head, hp->head_dim, hp->rot_dim, hp->rope_mode,
                 inv_freq, 1.0f);
        op->rope(b, ws->k, ws->d_pos, n, hp->n_kv_head, hp->head_dim, hp->rot_dim,
                 hp->rope_mode, inv_freq, 1.0f);
        if (qkv && ws->kcenter[il]) /* quantized keys: centred (kv_center.c) */
            op->add_row(b, ws->k, ws->kcenter[il], n, kvd);

        op->kv_store(b, kv->k[il], kv->v[il], kv_dt, ws->k, ws->v, slots, n, kvd);
    }
    struct be_attn a = {
        .n_tok = n,
        .n_head = hp->n_head,
        .n_kv_head = hp->n_kv_head,
        .head_dim = hp->head_dim,
        .scale = hp->attn_scale,
        .softcap = hp->attn_softcap,
        .window = swa ? hp->sliding_window : 0,
        .pos = ws->d_pos,
        .seq = ws->d_seq,
        .block_tables = split ? ws->d_tables_swa : ws->d_tables,
        .max_blocks = bt->max_blocks,
        .block_size = kv->block_size,
        .kv_dtype = kv_dt,
        .k_cache = kv->k[il],
        .v_cache = kv->v[il],
        .one_per_seq = ws->one_per_seq,
    };
    op->attention(b, ws->att, ws->q, &a);           /* (n, qd) */
    /* mlp_block next: its fused gate/up norms x, unless adapters take gate/up unfused */
    const unsigned lgu = (1u << LORA_GATE) | (1u << LORA_UP);
    out_proj(m, ws, n, ws->att, &ly->wo, ly->post_attn_norm,
             ws->lpaths & lgu ? NULL : ly->ffn_norm, il, LORA_O);
}

static void mlp_block(const struct model *m, struct model_ws *ws, int n, int il)
{
    const struct model_hparams *hp = &m->hp;
    const struct model_layer *ly = &m->layers[il];
    const struct be_ops *op = m->be->ops;
    struct be *b = m->be;
    int chain = ws->x_chain;
    ws->x_chain = 0;
    const unsigned lg = ws->lpaths & ((1u << LORA_GATE) | (1u << LORA_UP));
    if (op->matmul_fused && !lg) { /* gate = act(xn Wg^T) * (xn Wu^T), xn = rmsnorm(x) */
        struct be_mm f = {.mode = BE_MM_GLU, .act = hp->act, .n = n, .x = ws->x,
                          .norm = ly->ffn_norm, .eps = hp->norm_eps, .n_w = 2,
                          .w = {&ly->w_gate, &ly->w_up}, .y = {ws->gate}, .chain = chain};
        op->matmul_fused(b, &f);
    } else {
        int normed = 0; /* the deltas ran with the norm on the fly */
        if (op->matmul_fused) { /* adapters on gate/up: the two projections fused, unactivated */
            const struct be_tensor *wgu[2] = {&ly->w_gate, &ly->w_up};
            float *const ygu[2] = {ws->gate, ws->up};
            ws->x_chain = chain;
            project(m, ws, n, ly->ffn_norm, 2, wgu, ygu, NULL);
            if (lora_plan_any(ws->lp, ws->lrange) && op->lora_norm) { /* normed on the fly */
                lora_plan_apply_norm(ws->lp, m, ws->lrange, il, LORA_GATE, ws->x, ly->ffn_norm,
                                     hp->norm_eps, ws->gate);
                lora_plan_apply_norm(ws->lp, m, ws->lrange, il, LORA_UP, ws->x, ly->ffn_norm,
                                     hp->norm_eps, ws->up);
                normed = 1;
            } else if (lora_plan_any(ws->lp, ws->lrange)) /* the adapters read the normed x */
                op->rmsnorm(b, ws->xb, ws->x, ly->ffn_norm, n, hp->n_embd, hp->norm_eps);
        } else {
            op->rmsnorm(b, ws->xb, ws->x, ly->ffn_norm, n, hp->n_embd, hp->norm_eps);
            op->matmul(b, ws->gate, ws->xb, n, &ly->w_gate); /* (n, n_ff) */
            op->matmul(b, ws->up, ws->xb, n, &ly->w_up);     /* (n, n_ff) */
        }
        if (lg && !normed) { /* + the adapters' deltas of gate and up */
            lora_plan_apply(ws->lp, m, ws->lrange, il, LORA_GATE, ws->xb, ws->gate);
            lora_plan_apply(ws->lp, m, ws->lrange, il, LORA_UP, ws->xb, ws->up);
        }
        op->act_mul(b, ws->gate, ws->gate, ws->up, (int64_t)n * hp->n_ff, hp->act);
    }
    /* the next layer's attention block norms x first */
    out_proj(m, ws, n, ws->gate, &ly->w_down, ly->post_ffn_norm,
             il + 1 < m->hp.n_layer ? m->layers[il + 1].attn_norm : NULL, il, LORA_DOWN);
}

/* The checks every step passes; tokens may be NULL (a queued continuation, checked by
 * model_forward_queue). */
static int check_batch(const struct model *m, const struct model_ws *ws,
                       const struct model_batch *bt, struct cerr *e)
{
    const struct model_hparams *hp = &m->hp;
    if (bt->n_tok <= 0 || bt->n_tok > ws->max_tok || bt->n_out < 0 || bt->n_out > ws->max_out ||
        bt->n_seq <= 0 || bt->n_seq > ws->max_seq || bt->max_blocks <= 0 ||
        bt->max_blocks > ws->max_blocks)
        return cerr_set(e, CERR_INVALID,
                        "step batch (%d tokens, %d outputs, %d sequences) exceeds the workspace "
                        "(%d, %d, %d)",
                        bt->n_tok, bt->n_out, bt->n_seq, ws->max_tok, ws->max_out, ws->max_seq);
    for (int i = 0; bt->tokens && i < bt->n_tok; i++)
        if (bt->tokens[i] < 0 || bt->tokens[i] >= hp->n_vocab)
            return cerr_set(e, CERR_INVALID, "token id %d is outside the vocabulary (0..%d)",
                            bt->tokens[i], hp->n_vocab - 1);
    for (int i = 0; i < bt->n_out; i++)
        if (bt->out_idx[i] < 0 || bt->out_idx[i] >= bt->n_tok)
            return cerr_set(e, CERR_INVALID, "output row %d is outside the batch", bt->out_idx[i]);
    if (bt->n_lead < 0 || bt->n_lead > bt->n_tok)
        return cerr_set(e, CERR_INVALID, "n_lead %d is outside the batch", bt->n_lead);
    for (int i = 0; i < bt->n_tok; i++)
        if (bt->seq[i] < 0 || bt->seq[i] >= bt->n_seq)
            return cerr_set(e, CERR_INVALID, "token %d names sequence %d of %d", i, bt->seq[i],
                            bt->n_seq);
    if (bt->n_lead > 0 && bt->n_lead < bt->n_tok) { /* no sequence on both sides */
        int lo = bt->n_seq, hi = -1;
        for (int i = 0; i < bt->n_lead; i++)
            lo = bt->seq[i] < lo ? bt->seq[i] : lo, hi = bt->seq[i] > hi ? bt->seq[i] : hi;
        for (int i = bt->n_lead; i < bt->n_tok; i++)
            for (int j = 0; bt->seq[i] >= lo && bt->seq[i] <= hi && j < bt->n_lead; j++)
                if (bt->seq[j] == bt->seq[i])
                    return cerr_set(e, CERR_INVALID,
                                    "sequence %d has tokens on both sides of n_lead %d",
                                    bt->seq[i], bt->n_lead);
    }
    if (bt->samp && (!m->be->ops->sample || bt->samp_words < bt->n_out * BE_SAMPLE_ROW_WORDS ||
                     bt->samp_words > model_samp_words_max(m, bt->n_out) ||
                     (bt->samp_fill && (bt->samp_late < bt->n_out * BE_SAMPLE_ROW_WORDS ||
                                        bt->samp_late > bt->samp_words))))
        return cerr_set(e, CERR_INVALID, "step sampling parameters of %d words for %d rows "
                        "(the backend %s the op sample)", bt->samp_words, bt->n_out,
                        m->be->ops->sample ? "has" : "lacks");
    for (int i = 0; bt->lora && i < bt->n_seq; i++)
        for (int k = 0; bt->lora[i] && k < bt->lora[i]->n; k++)
            if ((bt->lora[i]->a[k]->targets & ~bt->lora_paths) || !m->be->ops->lora ||
                bt->lora[i]->a[k]->m != m || k >= BE_LORA_MAX_TERMS)
                return cerr_set(e, CERR_INVALID, "sequence %d's adapter set does not fit the "
                                "step (its projections are not in lora_paths, another model's "
                                "adapter, or a backend without the op lora)", i);
    if (bt->cands && (!m->be->ops->topcand || bt->cand_cap < 1 || bt->cand_cap > ws->cand_cap))
        return cerr_set(e, CERR_INVALID,
                        "step asks for %d candidates per row; the workspace holds %d",
                        bt->cand_cap, ws->cand_cap);
    return 0;
}

/* 1 when the n tokens' sequences seq[0..n) are all different (a decode step; only checked
 * for steps of at most 64 tokens, 0 above: the hint be_attn.one_per_seq). */
static int one_per_seq(const int32_t *seq, int n)
{
    if (n > 64)
        return 0;
    for (int i = 1; i < n; i++)
        for (int j = 0; j < i; j++)
            if (seq[i] == seq[j])
                return 0;
    return 1;
}

/* The embedding and every layer for the step's tokens [r0, r0 + nr): ws and bt seen from
 * row r0 (a group of whole sequences: nothing of another group is read). */
static void run_layers(const struct model *m, struct model_ws *ws,
                       const struct model_kv_view *kv, const struct model_batch *bt,
                       const int32_t *d_tokens, int r0, int nr)
{
    const struct model_hparams *hp = &m->hp;
    const struct be_ops *op = m->be->ops;
    struct be *b = m->be;
    struct model_ws g = *ws;
    struct model_batch gb = *bt;
    if (r0) {
        size_t E = (size_t)hp->n_embd * r0, QD = (size_t)hp->n_head * hp->head_dim * r0;
        size_t KVD = (size_t)hp->n_kv_head * hp->head_dim * r0, F = (size_t)hp->n_ff * r0;
        g.x += E, g.xb += E, g.tmp += E, g.q += QD, g.att += QD, g.k += KVD, g.v += KVD;
        g.gate += F, g.up += F;
        g.d_pos += r0, g.d_seq += r0, g.d_slots += r0;
        if (g.swa_split)
            g.d_slots_swa += r0;
    }
    gb.n_tok = nr;
    g.x_chain = 0;
    g.one_per_seq = one_per_seq(bt->seq + r0, nr);
    g.lrange = r0 ? 1 : 0;
    op->get_rows(b, g.x, &m->tok_embd, d_tokens + r0, nr); /* (nr, n_embd) */
    if (hp->embd_scale != 1.0f)
        op->scale(b, g.x, g.x, hp->embd_scale, (int64_t)nr * hp->n_embd);
    for (int il = 0; il < hp->n_layer; il++) {
        attention_block(m, &g, kv, &gb, il);
        mlp_block(m, &g, nr, il);
    }
}

/* Final norm and logits of output rows [o0, o0 + no) (ws->d_out entries, ws->xo and
 * ws->logits rows from o0). */
static void run_logits(const struct model *m, struct model_ws *ws, int n, int o0, int no)
{
    const struct model_hparams *hp = &m->hp;
    const struct be_ops *op = m->be->ops;
    struct be *b = m->be;
    /* gather the rows that want logits: view the residual stream as an F32 table */
    struct be_tensor xs = {.dtype = DT_F32, .ne = {hp->n_embd, n, 1, 1}, .data = ws->x};
    xs.nbytes = (size_t)n * hp->n_embd * 4;
    float *xo = ws->xo + (size_t)o0 * hp->n_embd, *lg = ws->logits + (size_t)o0 * hp->n_vocab;
    op->get_rows(b, xo, &xs, ws->d_out + o0, no); /* (no, n_embd) */
    op->rmsnorm(b, xo, xo, m->output_norm, no, hp->n_embd, hp->norm_eps);
    if (ws->hidden_only) /* embeddings: the normed hidden states are the output */
        return;
    op->matmul(b, lg, xo, no, &m->output); /* (no, n_vocab) */
    if (hp->final_softcap > 0) /* model_load checked that the backend has it */
        op->softcap(b, lg, lg, hp->final_softcap, (int64_t)no * hp->n_vocab);
}

/* Queues the layers and, when the step has output rows, their final norm and logits
 * (ws->logits), reading the step's token ids from d_tokens. A step whose first n_lead
 * tokens are rows of their own (model_batch.n_lead) runs them and the rest as two groups,
 * each as if it were a step alone, where the backend's kernels depend on the row count
 * (be_ops.exact_rows, the fewest over the model's matrices); it costs one more pass
 * over the weights. */
static void run_step(const struct model *m, struct model_ws *ws, const struct model_kv_view *kv,
                     const struct model_batch *bt, const int32_t *d_tokens)
{
    const int x = ws->exact_rows, n = bt->n_tok;
    int lead = step_lead(ws, bt);
    if (lead) {
        ws->lead_steps++;
        run_layers(m, ws, kv, bt, d_tokens, 0, lead);
        run_layers(m, ws, kv, bt, d_tokens, lead, n - lead);
    } else {
        run_layers(m, ws, kv, bt, d_tokens, 0, n);
    }
    if (bt->n_out == 0)
        return;
    int ol = 0; /* the lead group's outputs come first (out_idx ascends) */
    while (lead && ol < bt->n_out && bt->out_idx[ol] < lead)
        ol++;
    if (ol > 0 && ol < bt->n_out && (ws->lead_split == 1 || (x > 0 && bt->n_out > x))) {
        run_logits(m, ws, n, 0, ol);
        run_logits(m, ws, n, ol, bt->n_out - ol);
    } else {
        run_logits(m, ws, n, 0, bt->n_out);
    }
}

int model_forward(const struct model *m, struct model_ws *ws, const struct model_kv_view *kv,
                  const struct model_batch *bt, float *logits, struct cerr *e)
{
    const struct model_hparams *hp = &m->hp;
    int rc = bt->tokens ? check_batch(m, ws, bt, e)
                        : cerr_set(e, CERR_INVALID, "a step without token ids");
    if (rc)
        return rc;
    ws->last_out = 0;
    ws->prev_ok = 0; /* it writes argmax slot 0: no continuation of a queued step after it */
    if ((rc = upload_batch(ws, bt, e)))
        return rc;
    const struct be_ops *op = m->be->ops;
    struct be *b = m->be;
    run_step(m, ws, kv, bt, ws->d_tokens);
    if (bt->n_out == 0)
        return op->sync(b, e);
    if (bt->samp) { /* ids decided on the backend; then the candidates of skipped rows */
        if (!bt->argmax)
            return cerr_set(e, CERR_INVALID, "a sampled step needs its argmax (ids) buffer");
        if (bt->samp_fill) { /* the grammar masks, computed while the layers run */
            bt->samp_fill(bt->samp_ctx);
            if ((rc = op->upload(b, ws->d_samp + bt->samp_late, bt->samp + bt->samp_late,
                                 (size_t)(bt->samp_words - bt->samp_late) * 4, e)))
                return rc;
        }
        op->sample(b, ws->d_argmax, ws->logits, bt->n_out, hp->n_vocab, ws->d_samp, NULL);
        if (bt->cands)
            op->topcand(b, ws->d_cands, ws->logits, bt->n_out, hp->n_vocab, bt->cand_span,
                        bt->cand_cap);
        if ((rc = op->sync(b, e)) ||
            (rc = op->download(b, bt->argmax, ws->d_argmax, (size_t)bt->n_out * 4, e)) ||
            (bt->cands &&
             (rc = op->download(b, bt->cands, ws->d_cands,
                                (size_t)bt->n_out * be_topcand_stride(bt->cand_cap), e))))
            return rc;
    } else if (bt->cands) { /* (n_out, stride) bytes: headers and ranked candidates */
        op->topcand(b, ws->d_cands, ws->logits, bt->n_out, hp->n_vocab, bt->cand_span,
                    bt->cand_cap);
        if ((rc = op->sync(b, e)) ||
            (rc = op->download(b, bt->cands, ws->d_cands,
                               (size_t)bt->n_out * be_topcand_stride(bt->cand_cap), e)))
            return rc;
    } else if (bt->argmax && op->argmax) {
        op->argmax(b, ws->d_argmax, ws->logits, bt->n_out, hp->n_vocab);
        if ((rc = op->sync(b, e)) ||
            (rc = op->download(b, bt->argmax, ws->d_argmax, (size_t)bt->n_out * 4, e)))
            return rc;
    } else {
        if ((rc = op->sync(b, e)) ||
            (rc = op->download(b, logits, ws->logits, (size_t)bt->n_out * hp->n_vocab * 4, e)))
            return rc;
    }
    ws->last_out = bt->n_out;
    return 0;
}

int model_forward_queue(const struct model *m, struct model_ws *ws,
                        const struct model_kv_view *kv, const struct model_batch *bt,
                        struct cerr *e)
{
    const struct be_ops *op = m->be->ops;
    struct be *b = m->be;
    int rc = check_batch(m, ws, bt, e);
    if (rc)
        return rc;
    if ((bt->samp ? !op->sample : !op->argmax) || bt->cands || bt->n_out < 1 || bt->samp_fill)
        return cerr_set(e, CERR_INVALID,
                        "a queued step needs output rows decided on the backend (argmax, sample; "
                        "no late sampling words)");
    if (ws->q_n == 2)
        return cerr_set(e, CERR_INVALID, "two steps are already queued: wait for one first");
    if (!bt->tokens && (!ws->prev_ok || bt->n_tok != ws->prev_nout))
        return cerr_set(e, CERR_INVALID,
                        "a continuation needs the previous queued step's %d output rows as its "
                        "tokens (%d given)",
                        ws->prev_ok ? ws->prev_nout : 0, bt->n_tok);
    ws->last_out = 0;
    if ((rc = upload_batch(ws, bt, e)))
        return rc;
    const int slot = ws->q_next;
    int32_t *am = ws->d_argmax + (size_t)slot * ws->max_out;
    run_step(m, ws, kv, bt,
             bt->tokens ? ws->d_tokens : ws->d_argmax + (size_t)ws->prev_slot * ws->max_out);
    if (bt->samp)
        op->sample(b, am, ws->logits, bt->n_out, m->hp.n_vocab, ws->d_samp,
                   bt->tokens ? NULL : ws->d_argmax + (size_t)ws->prev_slot * ws->max_out);
    else
        op->argmax(b, am, ws->logits, bt->n_out, m->hp.n_vocab);
    size_t nb = (size_t)bt->n_out * 4;
    if (op->fetch_start && op->fetch_wait)
        rc = op->fetch_start(b, slot, am, nb, e);
    else if (!(rc = op->sync(b, e))) /* a synchronous backend: the ids now */
        rc = op->download(b, ws->q_host + (size_t)slot * ws->max_out, am, nb, e);
    if (rc) {
        ws->prev_ok = 0;
        return rc;
    }
    ws->q_slot[ws->q_n] = slot, ws->q_nout[ws->q_n] = bt->n_out, ws->q_n++;
    ws->q_next = slot ^ 1;
    ws->prev_slot = slot, ws->prev_nout = bt->n_out, ws->prev_ok = 1;
    return 0;
}

int model_forward_wait(const struct model *m, struct model_ws *ws, int32_t *argmax,
                       struct cerr *e)
{
    const struct be_ops *op = m->be->ops;
    if (ws->q_n == 0)
        return cerr_set(e, CERR_INVALID, "no queued step to wait for");
    const int slot = ws->q_slot[0], nout = ws->q_nout[0];
    ws->q_slot[0] = ws->q_slot[1], ws->q_nout[0] = ws->q_nout[1], ws->q_n--;
    if (op->fetch_start && op->fetch_wait) {
        int rc = op->fetch_wait(m->be, slot, argmax, (size_t)nout * 4, e);
        if (rc)
            ws->prev_ok = 0;
        return rc;
    }
    memcpy(argmax, ws->q_host + (size_t)slot * ws->max_out, (size_t)nout * 4);
    return 0;
}

int model_queued(const struct model_ws *ws) { return ws->q_n; }

long model_lead_steps(const struct model_ws *ws) { return ws->lead_steps; }

int model_exact_rows(const struct model_ws *ws) { return ws->exact_rows; }

int model_queue_async(const struct model *m)
{
    return m->be->ops->fetch_start && m->be->ops->fetch_wait;
}

int model_logits_row(const struct model *m, struct model_ws *ws, int row, float *dst,
                     struct cerr *e)
{
    if (row < 0 || row >= ws->last_out)
        return cerr_set(e, CERR_INVALID, "logit row %d is not in the last step (%d rows)", row,
                        ws->last_out);
    size_t V = (size_t)m->hp.n_vocab;
    return m->be->ops->download(m->be, dst, ws->logits + (size_t)row * V, V * 4, e);
}

int model_can_argmax(const struct model *m) { return m->be->ops->argmax != NULL; }

int model_can_topcand(const struct model *m) { return m->be->ops->topcand != NULL; }

int model_can_sample(const struct model *m) { return m->be->ops->sample != NULL; }

int model_samp_words_max(const struct model *m, int n_out)
{
    int masks = n_out < BE_SAMPLE_MASK_ROWS ? n_out : BE_SAMPLE_MASK_ROWS;
    return n_out * (BE_SAMPLE_ROW_WORDS + BE_SAMPLE_AUX_PER_ROW) +
           masks * ((m->hp.n_vocab + 31) / 32);
}

int model_forward_hidden(const struct model *m, struct model_ws *ws,
                         const struct model_kv_view *kv, const struct model_batch *bt,
                         float *hidden, struct cerr *e)
{
    int rc = bt->tokens ? check_batch(m, ws, bt, e)
                        : cerr_set(e, CERR_INVALID, "a step without token ids");
    if (rc || (rc = upload_batch(ws, bt, e)))
        return rc;
    ws->last_out = 0;
    ws->prev_ok = 0;
    ws->hidden_only = 1;
    run_step(m, ws, kv, bt, ws->d_tokens);
    ws->hidden_only = 0;
    struct be *b = m->be;
    if ((rc = b->ops->sync(b, e)) || bt->n_out == 0)
        return rc;
    return b->ops->download(b, hidden, ws->xo, (size_t)bt->n_out * m->hp.n_embd * 4, e);
}
