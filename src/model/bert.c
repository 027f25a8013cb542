/* bert.c — the BERT encoder: load a Hugging Face directory, run one non-causal pass,
 * pool and normalize (the contract is in bert.h).
 *
 * Reads top to bottom: config + sentence-transformers files -> tensors -> workspace ->
 * forward (embeddings, post-LN layers) -> pooling. The attention reuses the backend's paged
 * op: each sequence's K/V go to consecutive 16-row blocks of a scratch cache shared by all
 * layers (nothing is kept between calls), and every token gets its sequence's last
 * position, so it attends to the whole sequence.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "format/hfconfig.h"
#include "format/safetensors.h"
#include "model/bert.h"
#include "util/fs.h"
#include "util/half.h"

#define BLK 16 /* rows of a scratch KV block */

struct bert_layer {
    struct be_tensor wq, wk, wv, wo, w_up, w_down;
    float *bq, *bk, *bv, *bo, *b_up, *b_down; /* host/backend f32 (CPU: the same) */
    float *ln1_w, *ln1_b, *ln2_w, *ln2_b;
};

struct bert {
    struct bert_hparams hp;
    struct be *be;
    struct st_model *st;
    struct be_tensor tok_embd, pos_embd; /* (n_vocab | n_pos rows, n_embd) */
    float *type0;                        /* (n_embd) token type 0's embedding */
    float *emb_ln_w, *emb_ln_b;
    struct bert_layer *layers;
    char prefix[16]; /* "" or "bert." */
    void **owned;
    int n_owned, cap_owned;
};

/* ---- config ------------------------------------------------------------------------- */

static int read_json(const char *dir, const char *name, json_t **out)
{
    char p[1024];
    *out = NULL;
    if (fs_join(p, sizeof p, dir, name))
        return -1;
    json_error_t je;
    *out = json_load_file(p, 0, &je);
    return *out ? 0 : -1;
}

int bert_is_encoder(const char *path)
{
    if (!path || !fs_is_dir(path))
        return 0;
    json_t *c;
    if (read_json(path, "config.json", &c))
        return 0;
    const char *mt = json_string_value(json_object_get(c, "model_type"));
    int yes = mt && !strcmp(mt, "bert");
    json_t *ar = json_object_get(c, "architectures");
    size_t i;
    json_t *v;
    json_array_foreach(ar, i, v)
    {
        const char *s = json_string_value(v);
        if (s && !strncmp(s, "Bert", 4))
            yes = 1;
    }
    json_decref(c);
    return yes;
}

static int cfg_int(const struct hfcfg *c, const char *key, int dflt, int lo, int hi, int *out,
                   struct cerr *e)
{
    int64_t v;
    int rc = hfcfg_int(c, key, &v, e);
    if (rc < 0)
        return rc;
    if (rc == 1) {
        if (dflt < 0)
            return cerr_set(e, CERR_FORMAT, "%s: missing '%s'", hfcfg_path(c), key);
        v = dflt;
    }
    if (v < lo || v > hi)
        return cerr_set(e, CERR_FORMAT, "%s: '%s' = %lld is out of range [%d, %d]",
                        hfcfg_path(c), key, (long long)v, lo, hi);
    *out = (int)v;
    return 0;
}

/* sentence-transformers: pooling mode, Normalize module, max_seq_length, Matryoshka. */
static int read_st_files(const char *dir, struct bert_hparams *hp, struct cerr *e)
{
    hp->pool = BERT_POOL_MEAN;
    json_t *mods;
    if (!read_json(dir, "modules.json", &mods)) {
        size_t i;
        json_t *v;
        json_array_foreach(mods, i, v)
        {
            const char *ty = json_string_value(json_object_get(v, "type"));
            const char *sub = json_string_value(json_object_get(v, "path"));
            if (ty && strstr(ty, "Normalize"))
                hp->normalize = 1;
            if (ty && strstr(ty, "Pooling") && sub) {
                char pd[1024];
                json_t *pc;
                if (fs_join(pd, sizeof pd, dir, sub) || read_json(pd, "config.json", &pc)) {
                    json_decref(mods);
                    return cerr_set(e, CERR_FORMAT, "%s: cannot read %s/config.json", dir,
                                    sub);
                }
                /* sentence-transformers < 6: one boolean per mode; 6: "pooling_mode" */
                const char *pm = json_string_value(json_object_get(pc, "pooling_mode"));
                if (json_is_true(json_object_get(pc, "pooling_mode_cls_token")) ||
                    (pm && !strcmp(pm, "cls")))
                    hp->pool = BERT_POOL_CLS;
                else if (json_is_true(json_object_get(pc, "pooling_mode_lasttoken")) ||
                         (pm && !strcmp(pm, "lasttoken")))
                    hp->pool = BERT_POOL_LAST;
                else if (json_is_true(json_object_get(pc, "pooling_mode_mean_tokens")) ||
                         (pm && !strcmp(pm, "mean")))
                    hp->pool = BERT_POOL_MEAN;
                else {
                    json_decref(pc);
                    json_decref(mods);
                    return cerr_set(e, CERR_UNSUPPORTED,
                                    "%s/%s: only mean, CLS and last-token pooling are "
                                    "supported",
                                    dir, sub);
                }
                json_decref(pc);
            }
        }
        json_decref(mods);
    }
    json_t *sb;
    hp->max_seq = hp->n_pos;
    if (!read_json(dir, "sentence_bert_config.json", &sb)) {
        json_t *m = json_object_get(sb, "max_seq_length");
        if (json_is_integer(m) && json_integer_value(m) > 0 &&
            json_integer_value(m) < hp->max_seq)
            hp->max_seq = (int)json_integer_value(m);
        json_decref(sb);
    }
    char p[1024];
    char *card = NULL;
    size_t len;
    if (!fs_join(p, sizeof p, dir, "README.md") && fs_read_all(p, &card, &len, NULL) == 0) {
        hp->matryoshka = strstr(card, "MatryoshkaLoss") != NULL;
        free(card);
    }
    return 0;
}

static int read_config(const char *dir, struct bert_hparams *hp, struct cerr *e)
{
    char p[1024];
    struct hfcfg *c;
    if (fs_join(p, sizeof p, dir, "config.json"))
        return cerr_set(e, CERR_INVALID, "%s: path too long", dir);
    int rc = hfcfg_load(&c, p, e);
    if (rc)
        return rc;
    memset(hp, 0, sizeof *hp);
    rc = cfg_int(c, "num_hidden_layers", -1, 1, 256, &hp->n_layer, e);
    if (!rc) rc = cfg_int(c, "hidden_size", -1, 1, 65536, &hp->n_embd, e);
    if (!rc) rc = cfg_int(c, "num_attention_heads", -1, 1, 1024, &hp->n_head, e);
    if (!rc) rc = cfg_int(c, "intermediate_size", -1, 1, 1 << 20, &hp->n_ff, e);
    if (!rc) rc = cfg_int(c, "vocab_size", -1, 1, 1 << 24, &hp->n_vocab, e);
    if (!rc) rc = cfg_int(c, "max_position_embeddings", 512, 1, 1 << 20, &hp->n_pos, e);
    if (!rc) rc = cfg_int(c, "type_vocab_size", 2, 1, 1 << 16, &hp->n_type, e);
    double eps = 1e-12;
    if (!rc && hfcfg_float(c, "layer_norm_eps", &eps, e) < 0)
        rc = e->code;
    hp->eps = (float)eps;
    const char *act = "gelu", *pe = "absolute";
    if (!rc && hfcfg_str(c, "hidden_act", &act, e) < 0)
        rc = e->code;
    if (!rc && hfcfg_str(c, "position_embedding_type", &pe, e) < 0)
        rc = e->code;
    if (!rc) {
        if (!strcmp(act, "gelu"))
            hp->act = BERT_GELU;
        else if (!strcmp(act, "gelu_new") || !strcmp(act, "gelu_pytorch_tanh"))
            hp->act = BERT_GELU_TANH;
        else if (!strcmp(act, "relu"))
            hp->act = BERT_RELU;
        else
            rc = cerr_set(e, CERR_UNSUPPORTED, "%s: hidden_act '%s' is not supported", p, act);
    }
    if (!rc && strcmp(pe, "absolute"))
        rc = cerr_set(e, CERR_UNSUPPORTED, "%s: position_embedding_type '%s' is not supported",
                      p, pe);
    if (!rc && hp->n_embd % hp->n_head)
        rc = cerr_set(e, CERR_FORMAT, "%s: hidden_size %d is not a multiple of %d heads", p,
                      hp->n_embd, hp->n_head);
    hp->head_dim = hp->n_head ? hp->n_embd / hp->n_head : 0;
    if (!rc && hp->head_dim > 256)
        rc = cerr_set(e, CERR_UNSUPPORTED, "%s: head size %d is over 256", p, hp->head_dim);
    hfcfg_free(c);
    return rc ? rc : read_st_files(dir, hp, e);
}

/* ---- tensors ------------------------------------------------------------------------ */

static void *own(struct bert *m, size_t bytes)
{
    if (m->n_owned == m->cap_owned) {
        int nc = m->cap_owned ? 2 * m->cap_owned : 64;
        void **no = realloc(m->owned, (size_t)nc * sizeof *no);
        if (!no)
            return NULL;
        m->owned = no, m->cap_owned = nc;
    }
    void *p = m->be->ops->alloc(m->be, bytes);
    if (p)
        m->owned[m->n_owned++] = p;
    return p;
}

static const struct st_tensor *find(const struct bert *m, const char *name)
{
    char full[256];
    snprintf(full, sizeof full, "%s%s", m->prefix, name);
    return st_find(m->st, full);
}

static int bind_matrix(struct bert *m, struct be_tensor *dst, const char *name, int64_t cols,
                       int64_t rows, struct cerr *e)
{
    const struct st_tensor *s = find(m, name);
    if (!s)
        return cerr_set(e, CERR_FORMAT, "missing tensor '%s%s'", m->prefix, name);
    if (s->dtype != DT_F32 && s->dtype != DT_F16 && s->dtype != DT_BF16)
        return cerr_set(e, CERR_UNSUPPORTED, "tensor '%s' has dtype %s", s->name, s->st_dtype);
    if (s->ne[0] != cols || s->ne[1] != rows || s->ne[2] != 1 || s->ne[3] != 1)
        return cerr_set(e, CERR_FORMAT, "tensor '%s' has shape [%lld, %lld], expected [%lld, %lld]",
                        s->name, (long long)s->ne[1], (long long)s->ne[0], (long long)rows,
                        (long long)cols);
    memset(dst, 0, sizeof *dst);
    dst->dtype = s->dtype;
    dst->ne[0] = cols, dst->ne[1] = rows, dst->ne[2] = dst->ne[3] = 1;
    dst->data = (void *)s->data;
    dst->nbytes = s->nbytes;
    dst->name = s->name;
    return m->be->ops->weight_prepare(m->be, dst, e);
}

/* A vector of n floats (row `row` of a (rows, n) tensor) converted to f32 in backend
 * memory. */
static int bind_vector(struct bert *m, float **dst, const char *name, int64_t n, int64_t row,
                       struct cerr *e)
{
    const struct st_tensor *s = find(m, name);
    if (!s)
        return cerr_set(e, CERR_FORMAT, "missing tensor '%s%s'", m->prefix, name);
    if (s->ne[0] != n || s->ne[2] != 1 || s->ne[3] != 1 || row >= s->ne[1])
        return cerr_set(e, CERR_FORMAT, "tensor '%s' has %lld x %lld elements, expected %lld",
                        s->name, (long long)s->ne[1], (long long)s->ne[0], (long long)n);
    float *v = own(m, (size_t)n * sizeof(float));
    if (!v)
        return cerr_set(e, CERR_NOMEM, "out of memory for '%s'", s->name);
    float *host = malloc((size_t)n * sizeof(float));
    if (!host)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *p = s->data;
        int64_t k = row * n + i;
        uint16_t h;
        switch (s->dtype) {
        case DT_F32:
            memcpy(&host[i], p + 4 * k, 4);
            break;
        case DT_F16:
            memcpy(&h, p + 2 * k, 2);
            host[i] = half_f16_to_f32(h);
            break;
        case DT_BF16:
            memcpy(&h, p + 2 * k, 2);
            host[i] = half_bf16_to_f32(h);
            break;
        default:
            free(host);
            return cerr_set(e, CERR_UNSUPPORTED, "tensor '%s' has dtype %s", s->name,
                            s->st_dtype);
        }
    }
    int rc = m->be->ops->upload(m->be, v, host, (size_t)n * sizeof(float), e);
    free(host);
    *dst = v;
    return rc;
}

static int bind_layer(struct bert *m, int il, struct cerr *e)
{
    const struct bert_hparams *hp = &m->hp;
    struct bert_layer *L = &m->layers[il];
    int64_t d = hp->n_embd, f = hp->n_ff;
    char n[128];
    int rc = 0;
#define NM(s) (snprintf(n, sizeof n, "encoder.layer.%d.%s", il, s), n)
    if (!rc) rc = bind_matrix(m, &L->wq, NM("attention.self.query.weight"), d, d, e);
    if (!rc) rc = bind_matrix(m, &L->wk, NM("attention.self.key.weight"), d, d, e);
    if (!rc) rc = bind_matrix(m, &L->wv, NM("attention.self.value.weight"), d, d, e);
    if (!rc) rc = bind_matrix(m, &L->wo, NM("attention.output.dense.weight"), d, d, e);
    if (!rc) rc = bind_matrix(m, &L->w_up, NM("intermediate.dense.weight"), d, f, e);
    if (!rc) rc = bind_matrix(m, &L->w_down, NM("output.dense.weight"), f, d, e);
    if (!rc) rc = bind_vector(m, &L->bq, NM("attention.self.query.bias"), d, 0, e);
    if (!rc) rc = bind_vector(m, &L->bk, NM("attention.self.key.bias"), d, 0, e);
    if (!rc) rc = bind_vector(m, &L->bv, NM("attention.self.value.bias"), d, 0, e);
    if (!rc) rc = bind_vector(m, &L->bo, NM("attention.output.dense.bias"), d, 0, e);
    if (!rc) rc = bind_vector(m, &L->b_up, NM("intermediate.dense.bias"), f, 0, e);
    if (!rc) rc = bind_vector(m, &L->b_down, NM("output.dense.bias"), d, 0, e);
    if (!rc) rc = bind_vector(m, &L->ln1_w, NM("attention.output.LayerNorm.weight"), d, 0, e);
    if (!rc) rc = bind_vector(m, &L->ln1_b, NM("attention.output.LayerNorm.bias"), d, 0, e);
    if (!rc) rc = bind_vector(m, &L->ln2_w, NM("output.LayerNorm.weight"), d, 0, e);
    if (!rc) rc = bind_vector(m, &L->ln2_b, NM("output.LayerNorm.bias"), d, 0, e);
#undef NM
    return rc;
}

int bert_load(struct bert **out, const char *path, struct be *be, struct cerr *e)
{
    *out = NULL;
    if (be->ops->mem_info)
        return cerr_set(e, CERR_UNSUPPORTED,
                        "%s: BERT encoders run on the CPU backend only (use --backend cpu)",
                        path);
    struct bert *m = calloc(1, sizeof *m);
    if (!m)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    m->be = be;
    int rc = read_config(path, &m->hp, e);
    if (!rc)
        rc = st_open(&m->st, path, e);
    if (!rc && !st_find(m->st, "embeddings.word_embeddings.weight") &&
        st_find(m->st, "bert.embeddings.word_embeddings.weight"))
        strcpy(m->prefix, "bert.");
    const struct bert_hparams *hp = &m->hp;
    if (!rc)
        rc = bind_matrix(m, &m->tok_embd, "embeddings.word_embeddings.weight", hp->n_embd,
                         hp->n_vocab, e);
    if (!rc)
        rc = bind_matrix(m, &m->pos_embd, "embeddings.position_embeddings.weight", hp->n_embd,
                         hp->n_pos, e);
    if (!rc)
        rc = bind_vector(m, &m->type0, "embeddings.token_type_embeddings.weight", hp->n_embd, 0,
                         e);
    if (!rc)
        rc = bind_vector(m, &m->emb_ln_w, "embeddings.LayerNorm.weight", hp->n_embd, 0, e);
    if (!rc)
        rc = bind_vector(m, &m->emb_ln_b, "embeddings.LayerNorm.bias", hp->n_embd, 0, e);
    if (!rc && !(m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers)))
        rc = cerr_set(e, CERR_NOMEM, "out of memory");
    for (int il = 0; !rc && il < hp->n_layer; il++)
        rc = bind_layer(m, il, e);
    if (rc) {
        if (e->msg[0] && !strstr(e->msg, path))
            cerr_prefix(e, "%s", path);
        bert_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

void bert_free(struct bert *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->n_owned; i++)
        m->be->ops->free(m->be, m->owned[i]);
    free(m->owned);
    free(m->layers);
    st_close(m->st);
    free(m);
}

const struct bert_hparams *bert_hparams(const struct bert *m) { return &m->hp; }

/* ---- workspace ---------------------------------------------------------------------- */

struct bert_ws {
    int max_tok, max_seq, max_blocks;
    float *x;    /* (max_tok, n_embd) residual stream */
    float *q, *k, *v, *att, *tmp; /* (max_tok, n_embd) */
    float *up;   /* (max_tok, n_ff) */
    void *kc, *vc; /* (max_blocks, BLK, n_embd) scratch K/V, reused by every layer */
    int32_t *ids, *pos_ids, *apos, *seq, *slots, *tables; /* host = backend memory (CPU) */
};

void bert_ws_free(struct bert_ws *ws)
{
    if (!ws)
        return;
    free(ws->x), free(ws->q), free(ws->k), free(ws->v), free(ws->att), free(ws->tmp);
    free(ws->up), free(ws->kc), free(ws->vc);
    free(ws->ids), free(ws->pos_ids), free(ws->apos), free(ws->seq), free(ws->slots);
    free(ws->tables);
    free(ws);
}

int bert_ws_new(struct bert_ws **out, const struct bert *m, int max_tok, int max_seq,
                struct cerr *e)
{
    *out = NULL;
    if (max_tok <= 0 || max_seq <= 0 || max_seq > max_tok)
        return cerr_set(e, CERR_INVALID, "invalid encoder workspace sizes");
    struct bert_ws *ws = calloc(1, sizeof *ws);
    if (!ws)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    size_t d = (size_t)m->hp.n_embd, t = (size_t)max_tok;
    ws->max_tok = max_tok, ws->max_seq = max_seq;
    ws->max_blocks = max_tok / BLK + max_seq;
    /* 64-byte aligned like backend buffers (the CPU backend's memory is host memory) */
#define AL(n) aligned_alloc(64, ((n) + 63) / 64 * 64)
    ws->x = AL(t * d * 4), ws->q = AL(t * d * 4), ws->k = AL(t * d * 4);
    ws->v = AL(t * d * 4), ws->att = AL(t * d * 4), ws->tmp = AL(t * d * 4);
    ws->up = AL(t * (size_t)m->hp.n_ff * 4);
    ws->kc = AL((size_t)ws->max_blocks * BLK * d * 4);
    ws->vc = AL((size_t)ws->max_blocks * BLK * d * 4);
    ws->ids = AL(t * 4), ws->pos_ids = AL(t * 4), ws->apos = AL(t * 4);
    ws->seq = AL(t * 4), ws->slots = AL(t * 4);
    ws->tables = AL((size_t)ws->max_blocks * (size_t)max_seq * 4);
#undef AL
    if (!ws->x || !ws->q || !ws->k || !ws->v || !ws->att || !ws->tmp || !ws->up || !ws->kc ||
        !ws->vc || !ws->ids || !ws->pos_ids || !ws->apos || !ws->seq || !ws->slots ||
        !ws->tables) {
        bert_ws_free(ws);
        return cerr_set(e, CERR_NOMEM, "out of memory for the encoder workspace");
    }
    *out = ws;
    return 0;
}

/* ---- forward ------------------------------------------------------------------------ */

/* y (rows, dim) = (x - mean) / sqrt(var + eps) * w + b, row by row (two passes, double
 * accumulators: the reference computes in float32, this stays within its rounding). */
static void layernorm(float *y, const float *x, const float *w, const float *b, int rows,
                      int dim, float eps)
{
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * dim;
        float *yr = y + (size_t)r * dim;
        double s = 0, ss = 0;
        for (int i = 0; i < dim; i++)
            s += xr[i];
        double mean = s / dim;
        for (int i = 0; i < dim; i++)
            ss += (xr[i] - mean) * (xr[i] - mean);
        float inv = (float)(1.0 / sqrt(ss / dim + (double)eps));
        for (int i = 0; i < dim; i++)
            yr[i] = (float)(xr[i] - mean) * inv * w[i] + b[i];
    }
}

static void activation(float *x, size_t n, int act)
{
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        if (act == BERT_GELU)
            x[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
        else if (act == BERT_GELU_TANH)
            x[i] = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
        else
            x[i] = v > 0 ? v : 0;
    }
}

int bert_embed(const struct bert *m, struct bert_ws *ws, const int32_t *const *ids,
               const int *lens, int n_seq, float *out, struct cerr *e)
{
    const struct bert_hparams *hp = &m->hp;
    const struct be_ops *op = m->be->ops;
    struct be *b = m->be;
    int d = hp->n_embd;
    if (n_seq <= 0 || n_seq > ws->max_seq)
        return cerr_set(e, CERR_INVALID, "%d sequences, the workspace holds %d", n_seq,
                        ws->max_seq);
    /* flatten: token ids, positions, sequence index, scratch K/V slots, block tables */
    int n = 0, blk = 0;
    for (int s = 0; s < n_seq; s++) {
        if (lens[s] < 1 || lens[s] > hp->max_seq || lens[s] > hp->n_pos)
            return cerr_set(e, CERR_INVALID, "sequence of %d tokens (1 to %d)", lens[s],
                            hp->max_seq);
        if (n + lens[s] > ws->max_tok)
            return cerr_set(e, CERR_INVALID, "batch over %d tokens", ws->max_tok);
        int nb = (lens[s] + BLK - 1) / BLK;
        for (int j = 0; j < nb; j++)
            ws->tables[s * ws->max_blocks + j] = blk + j;
        for (int p = 0; p < lens[s]; p++, n++) {
            if (ids[s][p] < 0 || ids[s][p] >= hp->n_vocab)
                return cerr_set(e, CERR_INVALID, "token id %d is out of range [0, %d)",
                                ids[s][p], hp->n_vocab);
            ws->ids[n] = ids[s][p];
            ws->pos_ids[n] = p;
            ws->apos[n] = lens[s] - 1; /* non-causal: every token sees the whole sequence */
            ws->seq[n] = s;
            ws->slots[n] = (blk + p / BLK) * BLK + p % BLK;
        }
        blk += nb;
    }
    /* embeddings: word + position + token type 0, then LayerNorm */
    op->get_rows(b, ws->x, &m->tok_embd, ws->ids, n);      /* (n, d) */
    op->get_rows(b, ws->tmp, &m->pos_embd, ws->pos_ids, n); /* (n, d) */
    op->add(b, ws->x, ws->x, ws->tmp, (int64_t)n * d);
    op->add_row(b, ws->x, m->type0, n, d);
    layernorm(ws->x, ws->x, m->emb_ln_w, m->emb_ln_b, n, d, hp->eps);
    struct be_attn at = {.n_tok = n, .n_head = hp->n_head, .n_kv_head = hp->n_head,
                         .head_dim = hp->head_dim, .scale = 1.0f / sqrtf((float)hp->head_dim),
                         .pos = ws->apos, .seq = ws->seq, .block_tables = ws->tables,
                         .max_blocks = ws->max_blocks, .block_size = BLK, .kv_dtype = DT_F32,
                         .k_cache = ws->kc, .v_cache = ws->vc};
    for (int il = 0; il < hp->n_layer; il++) {
        const struct bert_layer *L = &m->layers[il];
        /* self-attention (post-LN): x = LN(x + W_o attn(x) + b_o) */
        op->matmul(b, ws->q, ws->x, n, &L->wq); /* (n, d) */
        op->matmul(b, ws->k, ws->x, n, &L->wk);
        op->matmul(b, ws->v, ws->x, n, &L->wv);
        op->add_row(b, ws->q, L->bq, n, d);
        op->add_row(b, ws->k, L->bk, n, d);
        op->add_row(b, ws->v, L->bv, n, d);
        op->kv_store(b, ws->kc, ws->vc, DT_F32, ws->k, ws->v, ws->slots, n, d);
        op->attention(b, ws->att, ws->q, &at); /* (n, d) */
        op->matmul(b, ws->tmp, ws->att, n, &L->wo);
        op->add_row(b, ws->tmp, L->bo, n, d);
        op->add(b, ws->x, ws->x, ws->tmp, (int64_t)n * d);
        layernorm(ws->x, ws->x, L->ln1_w, L->ln1_b, n, d, hp->eps);
        /* feed-forward: x = LN(x + W_down act(W_up x + b_up) + b_down) */
        op->matmul(b, ws->up, ws->x, n, &L->w_up); /* (n, n_ff) */
        op->add_row(b, ws->up, L->b_up, n, hp->n_ff);
        activation(ws->up, (size_t)n * (size_t)hp->n_ff, hp->act);
        op->matmul(b, ws->tmp, ws->up, n, &L->w_down); /* (n, d) */
        op->add_row(b, ws->tmp, L->b_down, n, d);
        op->add(b, ws->x, ws->x, ws->tmp, (int64_t)n * d);
        layernorm(ws->x, ws->x, L->ln2_w, L->ln2_b, n, d, hp->eps);
    }
    int rc = op->sync(b, e);
    if (rc)
        return rc;
    /* pooling over each sequence's rows, then L2 normalization */
    for (int s = 0, t0 = 0; s < n_seq; t0 += lens[s], s++) {
        float *o = out + (size_t)s * d;
        if (hp->pool == BERT_POOL_CLS || hp->pool == BERT_POOL_LAST) {
            int t = hp->pool == BERT_POOL_CLS ? t0 : t0 + lens[s] - 1;
            memcpy(o, ws->x + (size_t)t * d, (size_t)d * sizeof(float));
        } else {
            for (int i = 0; i < d; i++) {
                double acc = 0;
                for (int t = t0; t < t0 + lens[s]; t++)
                    acc += ws->x[(size_t)t * d + i];
                o[i] = (float)(acc / lens[s]);
            }
        }
        if (hp->normalize) {
            double ss = 0;
            for (int i = 0; i < d; i++)
                ss += (double)o[i] * o[i];
            float inv = ss > 0 ? (float)(1.0 / fmax(sqrt(ss), 1e-12)) : 0.0f;
            for (int i = 0; i < d; i++)
                o[i] *= inv;
        }
    }
    return 0;
}
