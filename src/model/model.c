/* model.c — loading a model: open the file(s), read hparams, bind and check every weight
 * tensor, hand weights to the backend, convert the small vectors (norms, biases) to f32.
 *
 * Tensor names are the GGUF (llama.cpp) names; a Hugging Face directory is read through a
 * name map. Every tensor's dtype and shape are checked here so the forward never has to.
 */
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "format/hfconfig.h"
#include "format/safetensors.h"
#include "model/hparams.h"
#include "util/fs.h"
#include "util/half.h"
#include "util/log.h"

struct owned_buf {
    struct owned_buf *next;
    void *p;
};

/* A tensor as found in the source file, before it is handed to the backend. */
struct src_tensor {
    int dtype;
    int n_dims;
    int64_t ne[4];
    const void *data;
    size_t nbytes;
    const char *name;
};

struct loader {
    struct model *m;
    struct gguf_model *g; /* one or more GGUF splits */
    struct st_model *st;
    const char *hf_prefix; /* "model." or "model.language_model." ... */
    char namebuf[256];
};

/* Maps a GGUF tensor name to its Hugging Face name. Returns NULL when there is none. */
static const char *hf_name(struct loader *L, const char *gname)
{
    int il;
    char rest[96];
    const char *p = L->hf_prefix;
    if (!strcmp(gname, "token_embd.weight"))
        snprintf(L->namebuf, sizeof L->namebuf, "%sembed_tokens.weight", p);
    else if (!strcmp(gname, "output_norm.weight"))
        snprintf(L->namebuf, sizeof L->namebuf, "%snorm.weight", p);
    else if (!strcmp(gname, "output.weight"))
        snprintf(L->namebuf, sizeof L->namebuf, "lm_head.weight");
    else if (sscanf(gname, "blk.%d.%95s", &il, rest) == 2) {
        static const struct {
            const char *g, *h;
        } map[] = {
            {"attn_norm.weight", "input_layernorm.weight"},
            {"attn_q.weight", "self_attn.q_proj.weight"},
            {"attn_k.weight", "self_attn.k_proj.weight"},
            {"attn_v.weight", "self_attn.v_proj.weight"},
            {"attn_q.bias", "self_attn.q_proj.bias"},
            {"attn_k.bias", "self_attn.k_proj.bias"},
            {"attn_v.bias", "self_attn.v_proj.bias"},
            {"attn_output.weight", "self_attn.o_proj.weight"},
            {"attn_q_norm.weight", "self_attn.q_norm.weight"},
            {"attn_k_norm.weight", "self_attn.k_norm.weight"},
            {"ffn_gate.weight", "mlp.gate_proj.weight"},
            {"ffn_up.weight", "mlp.up_proj.weight"},
            {"ffn_down.weight", "mlp.down_proj.weight"},
            {"post_attention_norm.weight", "post_attention_layernorm.weight"},
            {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"},
        };
        const char *h = NULL;
        if (!strcmp(rest, "ffn_norm.weight"))
            h = L->m->hp.arch == ARCH_GEMMA3 ? "pre_feedforward_layernorm.weight"
                                             : "post_attention_layernorm.weight";
        for (size_t i = 0; !h && i < sizeof map / sizeof map[0]; i++)
            if (!strcmp(rest, map[i].g))
                h = map[i].h;
        if (!h)
            return NULL;
        snprintf(L->namebuf, sizeof L->namebuf, "%slayers.%d.%s", p, il, h);
    } else
        return NULL;
    return L->namebuf;
}

/* 0 found, 1 absent. */
static int find_tensor(struct loader *L, const char *gname, struct src_tensor *t)
{
    memset(t, 0, sizeof *t);
    if (L->g) {
        const struct gguf_tensor *gt = gguf_model_find_tensor(L->g, gname);
        if (!gt)
            return 1;
        t->dtype = gt->dtype;
        t->n_dims = gt->n_dims;
        memcpy(t->ne, gt->ne, sizeof t->ne);
        t->data = gt->data;
        t->nbytes = gt->nbytes;
        t->name = gt->name.ptr; /* not NUL-terminated; use gname for messages */
        return 0;
    }
    const char *h = hf_name(L, gname);
    const struct st_tensor *s = h ? st_find(L->st, h) : NULL;
    if (!s)
        return 1;
    t->dtype = s->dtype;
    t->n_dims = s->n_dims;
    memcpy(t->ne, s->ne, sizeof t->ne);
    t->data = s->data;
    t->nbytes = s->nbytes;
    t->name = s->name;
    return 0;
}

static void *owned_alloc(struct model *m, size_t bytes)
{
    struct owned_buf *o = calloc(1, sizeof *o);
    if (!o)
        return NULL;
    o->p = m->be->ops->alloc(m->be, bytes);
    if (!o->p) {
        free(o);
        return NULL;
    }
    o->next = m->owned;
    m->owned = o;
    return o->p;
}

/* Binds a matrix weight: (rows, cols) with cols = ne[0]. */
static int bind_matrix(struct loader *L, struct be_tensor *dst, const char *gname, int64_t cols,
                       int64_t rows, int optional, struct cerr *e)
{
    struct src_tensor t;
    if (find_tensor(L, gname, &t)) {
        if (optional)
            return 1;
        return cerr_set(e, CERR_FORMAT, "%s: missing tensor '%s'", L->m->path, gname);
    }
    if (!dtype_is_weight_type(t.dtype))
        return cerr_set(e, CERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s, not supported",
                        L->m->path, gname, dtype_name(t.dtype));
    if (t.ne[0] != cols || t.ne[1] != rows || t.ne[2] != 1 || t.ne[3] != 1)
        return cerr_set(e, CERR_FORMAT,
                        "%s: tensor '%s' has shape [%lld, %lld, %lld], expected [%lld, %lld]",
                        L->m->path, gname, (long long)t.ne[0], (long long)t.ne[1],
                        (long long)t.ne[2], (long long)cols, (long long)rows);
    memset(dst, 0, sizeof *dst);
    dst->dtype = t.dtype;
    dst->ne[0] = cols;
    dst->ne[1] = rows;
    dst->ne[2] = dst->ne[3] = 1;
    dst->data = (void *)t.data;
    dst->nbytes = t.nbytes;
    dst->name = L->g ? NULL : t.name;
    return L->m->be->ops->weight_prepare(L->m->be, dst, e);
}

/* Binds a vector (n) as f32 in backend memory, optionally adding `add` to every element
 * (HF gemma norms store w - 1). Sets *dst = NULL and returns 1 when optional and absent. */
static int bind_vector(struct loader *L, float **dst, const char *gname, int64_t n, float add,
                       int optional, struct cerr *e)
{
    struct src_tensor t;
    *dst = NULL;
    if (find_tensor(L, gname, &t)) {
        if (optional)
            return 1;
        return cerr_set(e, CERR_FORMAT, "%s: missing tensor '%s'", L->m->path, gname);
    }
    if (t.ne[0] != n || t.ne[1] != 1 || t.ne[2] != 1 || t.ne[3] != 1)
        return cerr_set(e, CERR_FORMAT, "%s: tensor '%s' has %lld x %lld elements, expected %lld",
                        L->m->path, gname, (long long)t.ne[0], (long long)t.ne[1], (long long)n);
    float *host = malloc((size_t)n * sizeof(float));
    if (!host)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    const uint8_t *src = t.data;
    for (int64_t i = 0; i < n; i++) {
        float v;
        switch (t.dtype) {
        case DT_F32:
            memcpy(&v, src + 4 * i, 4);
            break;
        case DT_F16: {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            v = half_f16_to_f32(h);
            break;
        }
        case DT_BF16: {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            v = half_bf16_to_f32(h);
            break;
        }
        default:
            free(host);
            return cerr_set(e, CERR_UNSUPPORTED, "%s: vector tensor '%s' has dtype %s",
                            L->m->path, gname, dtype_name(t.dtype));
        }
        host[i] = v + add;
    }
    float *dev = owned_alloc(L->m, (size_t)n * sizeof(float));
    int rc = dev ? L->m->be->ops->upload(L->m->be, dev, host, (size_t)n * sizeof(float), e)
                 : cerr_set(e, CERR_NOMEM, "backend out of memory for '%s'", gname);
    free(host);
    if (rc)
        return rc;
    *dst = dev;
    return 0;
}

static int bind_layer(struct loader *L, int il, struct cerr *e)
{
    struct model *m = L->m;
    const struct model_hparams *hp = &m->hp;
    struct model_layer *ly = &m->layers[il];
    int64_t E = hp->n_embd, qd = (int64_t)hp->n_head * hp->head_dim,
            kvd = (int64_t)hp->n_kv_head * hp->head_dim, F = hp->n_ff;
    float nadd = (hp->arch == ARCH_GEMMA3 && L->st) ? 1.0f : 0.0f;
    char n[96];
    int rc;
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", il, s), n)
    if ((rc = bind_vector(L, &ly->attn_norm, NAME("attn_norm.weight"), E, nadd, 0, e)) ||
        (rc = bind_matrix(L, &ly->wq, NAME("attn_q.weight"), E, qd, 0, e)) ||
        (rc = bind_matrix(L, &ly->wk, NAME("attn_k.weight"), E, kvd, 0, e)) ||
        (rc = bind_matrix(L, &ly->wv, NAME("attn_v.weight"), E, kvd, 0, e)) ||
        (rc = bind_matrix(L, &ly->wo, NAME("attn_output.weight"), qd, E, 0, e)) ||
        (rc = bind_vector(L, &ly->ffn_norm, NAME("ffn_norm.weight"), E, nadd, 0, e)) ||
        (rc = bind_matrix(L, &ly->w_gate, NAME("ffn_gate.weight"), E, F, 0, e)) ||
        (rc = bind_matrix(L, &ly->w_up, NAME("ffn_up.weight"), E, F, 0, e)) ||
        (rc = bind_matrix(L, &ly->w_down, NAME("ffn_down.weight"), F, E, 0, e)))
        return rc;
    if (hp->has_qkv_bias) {
        if ((rc = bind_vector(L, &ly->bq, NAME("attn_q.bias"), qd, 0, 0, e)) ||
            (rc = bind_vector(L, &ly->bk, NAME("attn_k.bias"), kvd, 0, 0, e)) ||
            (rc = bind_vector(L, &ly->bv, NAME("attn_v.bias"), kvd, 0, 0, e)))
            return rc;
    }
    if (hp->has_qk_norm) {
        if ((rc = bind_vector(L, &ly->q_norm, NAME("attn_q_norm.weight"), hp->head_dim, nadd, 0,
                              e)) ||
            (rc = bind_vector(L, &ly->k_norm, NAME("attn_k_norm.weight"), hp->head_dim, nadd, 0,
                              e)))
            return rc;
    }
    if (hp->has_post_norms) {
        if ((rc = bind_vector(L, &ly->post_attn_norm, NAME("post_attention_norm.weight"), E,
                              nadd, 0, e)) ||
            (rc = bind_vector(L, &ly->post_ffn_norm, NAME("post_ffw_norm.weight"), E, nadd, 0,
                              e)))
            return rc;
    }
#undef NAME
    return 0;
}

static int open_source(struct loader *L, const char *path, struct cerr *e)
{
    struct model *m = L->m;
    if (fs_is_dir(path)) {
        char p[1024];
        struct hfcfg *cfg = NULL, *gen = NULL;
        if (fs_join(p, sizeof p, path, "config.json") || !fs_exists(p))
            return cerr_set(e, CERR_IO, "%s: no config.json (expected a Hugging Face model dir)",
                            path);
        int rc = hfcfg_load(&cfg, p, e);
        if (rc)
            return rc;
        if (fs_join(p, sizeof p, path, "generation_config.json") == 0 && fs_exists(p) &&
            hfcfg_load(&gen, p, NULL) != 0)
            log_warn("%s: unreadable generation_config.json, ignored", path);
        rc = hparams_from_hf(&m->hp, cfg, gen, e);
        hfcfg_free(gen);
        hfcfg_free(cfg);
        if (rc)
            return cerr_prefix(e, "%s", path);
        if ((rc = st_open(&L->st, path, e)))
            return rc;
        m->src = L->st;
        m->src_kind = 1;
        static const char *prefixes[] = {"model.", "model.language_model.", "language_model.model."};
        L->hf_prefix = prefixes[0];
        for (size_t i = 0; i < 3; i++) {
            char nm[128];
            snprintf(nm, sizeof nm, "%sembed_tokens.weight", prefixes[i]);
            if (st_find(L->st, nm)) {
                L->hf_prefix = prefixes[i];
                break;
            }
        }
        return 0;
    }
    int rc = gguf_model_open(&L->g, path, e);
    if (rc)
        return rc;
    m->src = L->g;
    m->src_kind = 0;
    return hparams_from_gguf(&m->hp, gguf_model_meta(L->g), e);
}

int model_load(struct model **out, const char *path, struct be *be, struct cerr *e)
{
    *out = NULL;
    struct model *m = calloc(1, sizeof *m);
    if (!m)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    m->be = be;
    snprintf(m->path, sizeof m->path, "%s", path);
    struct loader L = {.m = m};
    int rc = open_source(&L, path, e);
    if (rc)
        goto fail;
    struct model_hparams *hp = &m->hp;
    /* vocab size from the embedding when the metadata has none */
    struct src_tensor te;
    if (find_tensor(&L, "token_embd.weight", &te)) {
        rc = cerr_set(e, CERR_FORMAT, "%s: missing tensor 'token_embd.weight'", path);
        goto fail;
    }
    if (hp->n_vocab <= 0)
        hp->n_vocab = (int)te.ne[1];
    if ((rc = hparams_validate(hp, e))) {
        cerr_prefix(e, "%s", path);
        goto fail;
    }
    snprintf(m->arch_name, sizeof m->arch_name, "%s", model_arch_name(hp->arch));
    if (hp->final_softcap > 0 && !be->ops->softcap) {
        rc = cerr_set(e, CERR_UNSUPPORTED, "%s: the model needs logit soft-capping, which the "
                      "%s backend does not provide", path, be->ops->name);
        goto fail;
    }
    if ((rc = bind_matrix(&L, &m->tok_embd, "token_embd.weight", hp->n_embd, hp->n_vocab, 0, e)))
        goto fail;
    rc = bind_matrix(&L, &m->output, "output.weight", hp->n_embd, hp->n_vocab, 1, e);
    if (rc < 0)
        goto fail;
    if (rc == 1 || hp->tied_embd) {
        m->output = m->tok_embd;
        hp->tied_embd = 1;
    }
    float nadd = (hp->arch == ARCH_GEMMA3 && L.st) ? 1.0f : 0.0f;
    if ((rc = bind_vector(&L, &m->output_norm, "output_norm.weight", hp->n_embd, nadd, 0, e)))
        goto fail;
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) {
        rc = cerr_set(e, CERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int il = 0; il < hp->n_layer; il++)
        if ((rc = bind_layer(&L, il, e)))
            goto fail;

    /* RoPE frequency tables (GGUF llama3 models carry rope_freqs as divisors) */
    int half = hp->rot_dim / 2;
    float *ff = NULL, *tab = malloc((size_t)half * sizeof(float));
    if (!tab) {
        rc = cerr_set(e, CERR_NOMEM, "out of memory");
        goto fail;
    }
    struct src_tensor tf;
    if (find_tensor(&L, "rope_freqs.weight", &tf) == 0) {
        if (tf.dtype != DT_F32 || tf.ne[0] != half) {
            free(tab);
            rc = cerr_set(e, CERR_FORMAT, "%s: rope_freqs.weight must be F32 [%d]", path, half);
            goto fail;
        }
        ff = (float *)tf.data;
    }
    for (int local = 0; local < 2; local++) {
        hparams_inv_freq(hp, local, ff, tab);
        float **dst = local ? &m->inv_freq_local : &m->inv_freq_global;
        *dst = owned_alloc(m, (size_t)half * sizeof(float));
        if (!*dst || (rc = be->ops->upload(be, *dst, tab, (size_t)half * sizeof(float), e))) {
            if (!*dst)
                rc = cerr_set(e, CERR_NOMEM, "backend out of memory");
            free(tab);
            goto fail;
        }
    }
    free(tab);
    *out = m;
    return 0;
fail:
    model_free(m);
    return rc;
}

void model_free(struct model *m)
{
    if (!m)
        return;
    struct owned_buf *o = m->owned;
    while (o) {
        struct owned_buf *n = o->next;
        m->be->ops->free(m->be, o->p);
        free(o);
        o = n;
    }
    free(m->layers);
    if (m->src_kind == 0)
        gguf_model_close(m->src);
    else
        st_close(m->src);
    free(m);
}

size_t model_weight_bytes(const struct model *m)
{
    size_t b = m->output.nbytes; /* the classifier is read every token, tied or not */
    for (int i = 0; i < m->hp.n_layer; i++) {
        const struct model_layer *l = &m->layers[i];
        b += l->wq.nbytes + l->wk.nbytes + l->wv.nbytes + l->wo.nbytes + l->w_gate.nbytes +
             l->w_up.nbytes + l->w_down.nbytes;
    }
    return b;
}
