/* lora.c — loading LoRA adapters against a model (PEFT and GGUF), stacked sets.
 *
 * A PEFT directory names its tensors after the Hugging Face modules
 * ("base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight", A (r, in), B (out, r));
 * a llama.cpp GGUF LoRA after the GGUF ones ("blk.3.attn_q.weight.lora_a", the same
 * shapes). Both are converted to f32, B transposed, checked against the base model's
 * projection shapes, and kept in f16 unless CINFER_LORA_DTYPE says otherwise (store_dtype).
 * llama's GGUF q/k rows are permuted for interleaved RoPE: a PEFT
 * adapter on a GGUF llama base gets the same permutation of B's rows (and a GGUF adapter
 * on a Hugging Face llama base the inverse), as llama.cpp's converter does.
 * The registry of mounted adapters is in lora_reg.c.
 */
#include "model/lora.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "format/hfconfig.h"
#include "format/safetensors.h"
#include "model/model.h"
#include "util/fs.h"
#include "util/half.h"

static const char *const g_peft_names[LORA_NT] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                  "gate_proj", "up_proj", "down_proj"};
static const char *const g_gguf_names[LORA_NT] = {"attn_q",   "attn_k", "attn_v",  "attn_output",
                                                  "ffn_gate", "ffn_up", "ffn_down"};

const char *lora_target_name(int t)
{
    return t >= 0 && t < LORA_NT ? g_peft_names[t] : "?";
}

/* The base projection a target adapts. */
static const struct be_tensor *base_proj(const struct model *m, int il, int t)
{
    const struct model_layer *l = &m->layers[il];
    const struct be_tensor *w[LORA_NT] = {&l->wq,     &l->wk,   &l->wv,    &l->wo,
                                          &l->w_gate, &l->w_up, &l->w_down};
    return w[t];
}

/* A tensor as read from the file, before conversion. */
struct raw {
    int dtype, n_dims;
    int64_t ne[4];
    const uint8_t *data;
    size_t nbytes;
    char name[200];
};

struct pending { /* per (layer, target): the A and B found so far */
    struct raw a, b;
    int has_a, has_b;
};

struct lctx {
    const struct model *m;
    struct lora_adapter *ad;
    struct pending *pend; /* (n_layer * LORA_NT) */
    int layout_norm;      /* the adapter's q/k rows are in GGUF llama (interleaved) order */
};

static int to_f32(const struct raw *t, float *dst, struct cerr *e)
{
    int64_t n = t->ne[0] * t->ne[1];
    for (int64_t i = 0; i < n; i++) {
        switch (t->dtype) {
        case DT_F32:
            memcpy(&dst[i], t->data + 4 * i, 4);
            break;
        case DT_F16: {
            uint16_t h;
            memcpy(&h, t->data + 2 * i, 2);
            dst[i] = half_f16_to_f32(h);
            break;
        }
        case DT_BF16: {
            uint16_t h;
            memcpy(&h, t->data + 2 * i, 2);
            dst[i] = half_bf16_to_f32(h);
            break;
        }
        default:
            return cerr_set(e, CERR_UNSUPPORTED,
                            "tensor '%s' has dtype %s (F32, F16 or BF16 "
                            "only)",
                            t->name, dtype_name(t->dtype));
        }
        if (!isfinite(dst[i]))
            return cerr_set(e, CERR_FORMAT, "tensor '%s' holds a non-finite value", t->name);
    }
    return 0;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* The llama permutation of q/k rows (heads of hd rows): HF half-split -> GGUF interleaved
 * (inverse = 0) or back (inverse = 1), applied to the rows of b (rows, r). */
static void permute_rows(float *b, int rows, int r, int n_head, int inverse, float *tmp)
{
    int hd = rows / n_head, half = hd / 2;
    for (int h = 0; h < n_head; h++)
        for (int i = 0; i < half; i++)
            for (int s = 0; s < 2; s++) {
                int hf = h * hd + s * half + i, gg = h * hd + 2 * i + s;
                int dst = inverse ? hf : gg, src = inverse ? gg : hf;
                memcpy(tmp + (size_t)dst * r, b + (size_t)src * r, (size_t)r * 4);
            }
    memcpy(b, tmp, (size_t)rows * r * 4);
}

/* The element type an adapter's f32 tensors are kept in: CINFER_LORA_DTYPE = f16 (default),
 * bf16 or f32. 16-bit memory halves what a step streams per adapter (8 distinct adapters in
 * one batch read 8 of them), as vLLM keeps adapters in the model's 16-bit type; f16's 11-bit
 * significand with the power-of-two range shift of to_half() loses less than bf16's 8.
 * Returns DT_F16 / DT_BF16 / DT_F32, or -1 for a value it does not know. */
static int store_dtype(void)
{
    const char *v = getenv("CINFER_LORA_DTYPE");
    if (!v || !*v || !strcmp(v, "f16"))
        return DT_F16;
    return !strcmp(v, "bf16") ? DT_BF16 : !strcmp(v, "f32") ? DT_F32 : -1;
}

/* The power-of-two exponent k that brings the largest |v| of the n values into [2^14, 2^15)
 * (0 for all zeros or a non-finite value; |k| <= 40): v * 2^k then uses the top of f16's
 * normal range (which ends at 65504), so only values 2^29 times smaller than the largest
 * become f16 subnormals (without the shift a typical adapter's 1e-5 would). Multiplying by
 * 2^k is exact in float. */
static int half_shift(const float *v, size_t n)
{
    float mx = 0;
    for (size_t i = 0; i < n; i++)
        mx = fabsf(v[i]) > mx ? fabsf(v[i]) : mx;
    if (!(mx > 0) || !isfinite(mx))
        return 0;
    int k = 14 - ilogbf(mx);
    return k < -40 ? -40 : k > 40 ? 40 : k;
}

/* Converts n f32 values in place to dt (f16 / bf16; the 16-bit results packed at the start
 * of v), f16 after scaling by 2^k. */
static void to_half(float *v, size_t n, int dt, int k)
{
    uint16_t *h = (uint16_t *)(void *)v;
    const float p2 = ldexpf(1.0f, k); /* |k| <= 40: a normal float, so v * p2 is exact */
    for (size_t i = 0; i < n; i++)
        h[i] = dt == DT_F16 ? half_f32_to_f16(v[i] * p2) : half_f32_to_bf16(v[i]);
}

/* Checks and converts one (layer, target) pair into ad->p. */
static int bind_pair(struct lctx *c, int il, int t, float alpha, int rslora, struct cerr *e)
{
    struct pending *pd = &c->pend[il * LORA_NT + t];
    if (!pd->has_a || !pd->has_b)
        return cerr_set(e, CERR_FORMAT, "tensor '%s' has no matching %s tensor",
                        pd->has_a ? pd->a.name : pd->b.name, pd->has_a ? "B" : "A");
    const struct be_tensor *w = base_proj(c->m, il, t);
    int64_t in = w->ne[0], out = w->ne[1];
    const struct raw *A = &pd->a, *B = &pd->b;
    if (A->n_dims != 2 || B->n_dims != 2)
        return cerr_set(e, CERR_FORMAT, "tensor '%s' is not a matrix",
                        A->n_dims != 2 ? A->name : B->name);
    int64_t r = A->ne[1];
    if (r < 1)
        return cerr_set(e, CERR_FORMAT, "tensor '%s' has rank 0", A->name);
    if (r > LORA_MAX_RANK)
        return cerr_set(e, CERR_LIMIT, "tensor '%s' has rank %lld (at most %d)", A->name,
                        (long long)r, LORA_MAX_RANK);
    if (A->ne[0] != in)
        return cerr_set(e, CERR_FORMAT,
                        "tensor '%s' has shape [%lld, %lld]; the model's %s of layer %d takes "
                        "%lld inputs, so [%lld, %lld] was expected",
                        A->name, (long long)r, (long long)A->ne[0], g_peft_names[t], il,
                        (long long)in, (long long)r, (long long)in);
    if (B->ne[0] != r || B->ne[1] != out)
        return cerr_set(e, CERR_FORMAT,
                        "tensor '%s' has shape [%lld, %lld]; expected [%lld, %lld] (the "
                        "model's %s of layer %d has %lld outputs, the rank is %lld)",
                        B->name, (long long)B->ne[1], (long long)B->ne[0], (long long)out,
                        (long long)r, g_peft_names[t], il, (long long)out, (long long)r);
    size_t na = (size_t)(r * in), nb = (size_t)(r * out);
    float *ha = malloc(na * 4), *hb = malloc(nb * 4), *hbt = malloc(nb * 4);
    int rc = 0;
    if (!ha || !hb || !hbt)
        rc = cerr_set(e, CERR_NOMEM, "out of memory for adapter tensor '%s'", A->name);
    if (!rc)
        rc = to_f32(A, ha, e);
    if (!rc)
        rc = to_f32(B, hb, e);
    /* q/k rows in the base's RoPE layout */
    const struct model_hparams *hp = &c->m->hp;
    int base_norm = c->m->src_kind == 0 && hp->rope_mode == BE_ROPE_NORM;
    if (!rc && (t == LORA_Q || t == LORA_K) && base_norm != c->layout_norm)
        permute_rows(hb, (int)out, (int)r, t == LORA_Q ? hp->n_head : hp->n_kv_head, c->layout_norm,
                     hbt);
    if (!rc)
        for (int64_t i = 0; i < out; i++)
            for (int64_t j = 0; j < r; j++)
                hbt[j * out + i] = hb[i * r + j];
    struct lora_proj *p = &c->ad->p[il * LORA_NT + t];
    struct be *be = c->m->be;
    /* 16-bit files stay 16-bit as they are (the f32 values came from them: converting back
     * is exact); f32 files are kept as store_dtype() says. An f16 copy of A and B is scaled
     * by 2^ka and 2^kb, and the scale by 2^-(ka + kb): the products are the same. */
    int file16 = A->dtype == B->dtype && (A->dtype == DT_F16 || A->dtype == DT_BF16);
    int dt = file16 ? A->dtype : store_dtype(), ka = 0, kb = 0;
    if (!rc && dt < 0)
        rc = cerr_set(e, CERR_INVALID, "CINFER_LORA_DTYPE is '%s' (f16, bf16 or f32)",
                      getenv("CINFER_LORA_DTYPE"));
    if (!rc && dt == DT_F16 && !file16)
        ka = half_shift(ha, na), kb = half_shift(hbt, nb);
    size_t es = dt == DT_F32 ? 4 : 2;
    if (!rc && dt != DT_F32) {
        to_half(ha, na, dt, ka);
        to_half(hbt, nb, dt, kb);
    }
    if (!rc) {
        p->rank = (int)r;
        p->dtype = dt;
        p->scale = ldexpf(rslora ? alpha / sqrtf((float)r) : alpha / (float)r, -(ka + kb));
        p->a = be->ops->alloc(be, na * es);
        p->bt = be->ops->alloc(be, nb * es);
        if (!p->a || !p->bt)
            rc = cerr_set(e, CERR_NOMEM, "out of backend memory for adapter tensor '%s'", A->name);
    }
    if (!rc && !(rc = be->ops->upload(be, p->a, ha, na * es, e)))
        rc = be->ops->upload(be, p->bt, hbt, nb * es, e);
    if (!rc) {
        uint64_t h = c->ad->fingerprint;
        h = fnv(h, &il, sizeof il);
        h = fnv(h, &t, sizeof t);
        h = fnv(h, &dt, sizeof dt);
        h = fnv(h, &p->scale, sizeof p->scale);
        h = fnv(h, ha, na * es);
        c->ad->fingerprint = fnv(h, hbt, nb * es);
        c->ad->bytes += (na + nb) * es;
        c->ad->targets |= 1u << t;
    }
    free(ha);
    free(hb);
    free(hbt);
    return rc;
}

static int finish(struct lctx *c, float alpha, int rslora, struct cerr *e)
{
    int any = 0;
    for (int il = 0; il < c->m->hp.n_layer; il++)
        for (int t = 0; t < LORA_NT; t++) {
            struct pending *pd = &c->pend[il * LORA_NT + t];
            if (!pd->has_a && !pd->has_b)
                continue;
            int rc = bind_pair(c, il, t, alpha, rslora, e);
            if (rc)
                return rc;
            any = 1;
        }
    if (!any)
        return cerr_set(e, CERR_FORMAT,
                        "the adapter holds no LoRA tensor (of "
                        "q/k/v/o/gate/up/down_proj)");
    return 0;
}

static int note(struct lctx *c, int il, int t, int is_b, const struct raw *r, struct cerr *e)
{
    if (il < 0 || il >= c->m->hp.n_layer)
        return cerr_set(e, CERR_FORMAT, "tensor '%s' names layer %d; the model has %d layers",
                        r->name, il, c->m->hp.n_layer);
    struct pending *pd = &c->pend[il * LORA_NT + t];
    if (is_b ? pd->has_b : pd->has_a)
        return cerr_set(e, CERR_FORMAT, "tensor '%s' appears twice", r->name);
    if (is_b)
        pd->b = *r, pd->has_b = 1;
    else
        pd->a = *r, pd->has_a = 1;
    return 0;
}

/* PEFT name -> (layer, target, A/B). 0 ok, -1 not a LoRA tensor name we know. */
static int peft_name(const char *name, int *il, int *t, int *is_b)
{
    const char *p = strstr(name, "layers.");
    if (!p)
        return -1;
    char *end;
    long l = strtol(p + 7, &end, 10);
    if (end == p + 7 || *end != '.' || l < 0 || l > 100000)
        return -1;
    const char *rest = end + 1;
    const char *mods[] = {"self_attn.", "mlp."};
    for (int i = 0; i < 2; i++)
        if (!strncmp(rest, mods[i], strlen(mods[i])))
            rest += strlen(mods[i]);
    for (int k = 0; k < LORA_NT; k++) {
        size_t n = strlen(g_peft_names[k]);
        if (strncmp(rest, g_peft_names[k], n) || rest[n] != '.')
            continue;
        const char *s = rest + n + 1;
        int b;
        if (!strncmp(s, "lora_A.", 7))
            b = 0;
        else if (!strncmp(s, "lora_B.", 7))
            b = 1;
        else
            return -1;
        s += 7;
        if (strcmp(s, "weight") && strcmp(s, "default.weight"))
            return -1;
        *il = (int)l, *t = k, *is_b = b;
        return 0;
    }
    return -1;
}

static struct lora_adapter *adapter_new(const struct model *m, const char *path)
{
    struct lora_adapter *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->p = calloc((size_t)m->hp.n_layer * LORA_NT, sizeof *a->p);
    if (!a->p) {
        free(a);
        return NULL;
    }
    snprintf(a->path, sizeof a->path, "%s", path);
    a->n_layer = m->hp.n_layer;
    a->m = m;
    a->refs = 1;
    a->fingerprint = 1469598103934665603ull;
    return a;
}

static void adapter_free(struct lora_adapter *a)
{
    if (!a)
        return;
    struct be *be = a->m->be;
    for (int i = 0; a->p && i < a->n_layer * LORA_NT; i++) {
        if (a->p[i].a)
            be->ops->free(be, a->p[i].a);
        if (a->p[i].bt)
            be->ops->free(be, a->p[i].bt);
    }
    free(a->p);
    free(a);
}

void lora_ref(struct lora_adapter *a)
{
    if (a)
        __atomic_add_fetch(&a->refs, 1, __ATOMIC_ACQ_REL);
}

void lora_unref(struct lora_adapter *a)
{
    if (a && __atomic_sub_fetch(&a->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        if (a->free_hook)
            a->free_hook(a, a->free_ud);
        else
            adapter_free(a);
    }
}

void lora_destroy(struct lora_adapter *a)
{
    adapter_free(a);
}

/* ---- PEFT --------------------------------------------------------------------------- */

/* Reads the adapter_config.json fields cinfer honours and refuses the ones it cannot. */
static int peft_config(const struct hfcfg *cfg, int *r, double *alpha, int *rslora, struct cerr *e)
{
    const char *s = NULL;
    int64_t iv = 0;
    int rc, b = 0;
    if ((rc = hfcfg_str(cfg, "peft_type", &s, e)) < 0)
        return rc;
    if (rc == 0 && strcmp(s, "LORA"))
        return cerr_set(e, CERR_UNSUPPORTED,
                        "adapter_config.json: peft_type is '%s' (only "
                        "LORA)",
                        s);
    if ((rc = hfcfg_int(cfg, "r", &iv, e)) < 0)
        return rc;
    if (rc == 1)
        return cerr_set(e, CERR_FORMAT, "adapter_config.json: no rank 'r'");
    if (iv < 1)
        return cerr_set(e, CERR_FORMAT, "adapter_config.json: rank r = %lld (must be >= 1)",
                        (long long)iv);
    if (iv > LORA_MAX_RANK)
        return cerr_set(e, CERR_LIMIT, "adapter_config.json: rank r = %lld (at most %d)",
                        (long long)iv, LORA_MAX_RANK);
    *r = (int)iv;
    *alpha = (double)*r; /* PEFT's default lora_alpha is 8 with r 8; absent: scale 1 */
    if ((rc = hfcfg_float(cfg, "lora_alpha", alpha, e)) < 0)
        return rc;
    if (!isfinite(*alpha))
        return cerr_set(e, CERR_FORMAT, "adapter_config.json: lora_alpha is not finite");
    *rslora = 0;
    if ((rc = hfcfg_bool(cfg, "use_rslora", rslora, e)) < 0)
        return rc;
    if ((rc = hfcfg_bool(cfg, "use_dora", &b, e)) < 0)
        return rc;
    if (rc == 0 && b)
        return cerr_set(e, CERR_UNSUPPORTED,
                        "adapter_config.json: DoRA (use_dora) is not "
                        "supported");
    if ((rc = hfcfg_bool(cfg, "fan_in_fan_out", &b, e)) < 0)
        return rc;
    if (rc == 0 && b)
        return cerr_set(e, CERR_UNSUPPORTED,
                        "adapter_config.json: fan_in_fan_out is not "
                        "supported");
    if ((rc = hfcfg_str(cfg, "bias", &s, e)) < 0)
        return rc;
    if (rc == 0 && strcmp(s, "none"))
        return cerr_set(e, CERR_UNSUPPORTED,
                        "adapter_config.json: bias '%s' is not supported "
                        "(only \"none\")",
                        s);
    const char *list[64];
    int n = 0;
    if ((rc = hfcfg_str_list(cfg, "modules_to_save", list, 64, &n, e)) < 0 && rc != CERR_LIMIT)
        return rc;
    if (rc == 0 && n > 0)
        return cerr_set(e, CERR_UNSUPPORTED,
                        "adapter_config.json: modules_to_save ('%s') is "
                        "not supported",
                        list[0]);
    json_t *ap = json_object_get(hfcfg_json(cfg), "alpha_pattern");
    if (json_is_object(ap) && json_object_size(ap) > 0)
        return cerr_set(e, CERR_UNSUPPORTED,
                        "adapter_config.json: alpha_pattern (a lora_alpha "
                        "per module) is not supported");
    rc = hfcfg_str_list(cfg, "target_modules", list, 64, &n, e);
    if (rc == CERR_LIMIT)
        return cerr_set(e, CERR_UNSUPPORTED, "adapter_config.json: more than 64 target_modules");
    if (rc < 0)
        return rc;
    for (int i = 0; rc == 0 && i < n; i++) {
        int ok = 0;
        for (int k = 0; k < LORA_NT; k++)
            ok |= !strcmp(list[i], g_peft_names[k]);
        if (!ok && strchr(list[i], '*') == NULL && list[i][0] != '.' && n > 0 &&
            strcmp(list[i], "all-linear"))
            return cerr_set(e, CERR_UNSUPPORTED,
                            "adapter_config.json: target module '%s' is "
                            "not one of q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, "
                            "down_proj",
                            list[i]);
    }
    return 0;
}

static int load_peft(struct lora_adapter *ad, const struct model *m, const struct hfcfg *cfg,
                     const struct st_model *st, struct cerr *e)
{
    int r = 0, rslora = 0;
    double alpha = 0;
    int rc = peft_config(cfg, &r, &alpha, &rslora, e);
    if (rc)
        return rc;
    ad->format = 0;
    ad->rank = r;
    ad->alpha = (float)alpha;
    ad->rslora = rslora;
    struct lctx c = {.m = m, .ad = ad, .layout_norm = 0};
    c.pend = calloc((size_t)m->hp.n_layer * LORA_NT, sizeof *c.pend);
    if (!c.pend)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    for (int i = 0; !rc && i < st_count(st); i++) {
        const struct st_tensor *t = st_get(st, i);
        int il, tg, is_b;
        if (peft_name(t->name, &il, &tg, &is_b)) {
            rc = cerr_set(e, CERR_UNSUPPORTED,
                          "tensor '%s' is not a LoRA A/B matrix of "
                          "q/k/v/o/gate/up/down_proj",
                          t->name);
            break;
        }
        struct raw rw = {
            .dtype = t->dtype, .n_dims = t->n_dims, .data = t->data, .nbytes = t->nbytes};
        memcpy(rw.ne, t->ne, sizeof rw.ne);
        snprintf(rw.name, sizeof rw.name, "%s", t->name);
        rc = note(&c, il, tg, is_b, &rw, e);
    }
    if (!rc)
        rc = finish(&c, (float)alpha, rslora, e);
    /* a rank the config does not announce is fine only through rank_pattern */
    free(c.pend);
    return rc;
}

int lora_load_peft_mem(struct lora_adapter **out, const struct model *m, const char *config,
                       size_t config_len, const uint8_t *stb, size_t st_len, struct cerr *e)
{
    *out = NULL;
    struct hfcfg *cfg = NULL;
    struct st_model *st = NULL;
    struct lora_adapter *ad = adapter_new(m, "(memory)");
    if (!ad)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    int rc = hfcfg_parse(&cfg, config, config_len, "adapter_config.json", e);
    if (!rc)
        rc = st_open_mem(&st, stb, st_len, "adapter_model.safetensors", e);
    if (!rc)
        rc = load_peft(ad, m, cfg, st, e);
    st_close(st);
    hfcfg_free(cfg);
    if (rc) {
        adapter_free(ad);
        return rc;
    }
    *out = ad;
    return 0;
}

/* ---- GGUF ----------------------------------------------------------------------------- */

static int load_gguf(struct lora_adapter *ad, const struct model *m, const char *path,
                     struct cerr *e)
{
    struct gguf *g = NULL;
    int rc = gguf_open(&g, path, e);
    if (rc)
        return rc;
    struct gguf_str s;
    double alpha = 0;
    if (gguf_get_str(g, "general.type", &s, NULL) != 0 || !gguf_str_eq(s, "adapter"))
        rc = cerr_set(e, CERR_FORMAT,
                      "not a GGUF adapter (general.type is not "
                      "\"adapter\")");
    else if (gguf_get_str(g, "adapter.type", &s, NULL) != 0 || !gguf_str_eq(s, "lora"))
        rc = cerr_set(e, CERR_UNSUPPORTED, "adapter.type is not \"lora\"");
    else if (gguf_get_str(g, "general.architecture", &s, NULL) != 0 ||
             !gguf_str_eq(s, m->arch_name))
        rc = cerr_set(e, CERR_FORMAT,
                      "the adapter's architecture '%.*s' is not the "
                      "model's '%s'",
                      (int)(s.ptr ? s.len : 1), s.ptr ? s.ptr : "?", m->arch_name);
    else if ((rc = gguf_get_float(g, "adapter.lora.alpha", &alpha, e)) < 0)
        ;
    else
        rc = 0;
    struct lctx c = {.m = m, .ad = ad, .layout_norm = m->hp.arch == ARCH_LLAMA};
    c.pend = rc ? NULL : calloc((size_t)m->hp.n_layer * LORA_NT, sizeof *c.pend);
    if (!rc && !c.pend)
        rc = cerr_set(e, CERR_NOMEM, "out of memory");
    int rank0 = 0;
    for (uint64_t i = 0; !rc && i < g->n_tensors; i++) {
        const struct gguf_tensor *t = &g->tensors[i];
        struct raw rw = {
            .dtype = t->dtype, .n_dims = t->n_dims, .data = t->data, .nbytes = t->nbytes};
        memcpy(rw.ne, t->ne, sizeof rw.ne);
        snprintf(rw.name, sizeof rw.name, "%.*s", (int)(t->name.len < 199 ? t->name.len : 199),
                 t->name.ptr);
        int il = -1, tg = -1, is_b = 0, pos = 0;
        char mod[64] = "", ab[8] = "";
        if (sscanf(rw.name, "blk.%d.%63[a-z_].weight.lora_%1[ab]%n", &il, mod, ab, &pos) == 3 &&
            rw.name[pos] == 0)
            for (int k = 0; k < LORA_NT; k++)
                if (!strcmp(mod, g_gguf_names[k]))
                    tg = k;
        if (tg < 0) {
            rc = cerr_set(e, CERR_UNSUPPORTED,
                          "tensor '%s' is not a LoRA A/B matrix of "
                          "attn_q/k/v/output or ffn_gate/up/down",
                          rw.name);
            break;
        }
        is_b = ab[0] == 'b';
        if (!is_b && rank0 == 0)
            rank0 = (int)rw.ne[1];
        rc = note(&c, il, tg, is_b, &rw, e);
    }
    /* llama.cpp: scale = alpha / rank, or 1 when alpha is 0 */
    if (!rc) {
        ad->format = 1;
        ad->rank = rank0;
        ad->alpha = (float)alpha;
        /* alpha 0: per-tensor scale 1 (llama.cpp), i.e. alpha = rank for every tensor; done
         * by scaling after finish() */
        rc = finish(&c, alpha != 0 ? (float)alpha : 1.0f, 0, e);
        if (!rc && alpha == 0)
            for (int i = 0; i < ad->n_layer * LORA_NT; i++)
                ad->p[i].scale = 1.0f;
    }
    if (rc && e && strncmp(e->msg, path, strlen(path)))
        cerr_prefix(e, "%s", path);
    free(c.pend);
    gguf_close(g);
    return rc;
}

/* ---- entry ---------------------------------------------------------------------------- */

int lora_load(struct lora_adapter **out, const struct model *m, const char *path, struct cerr *e)
{
    *out = NULL;
    if (!m->be->ops->lora)
        return cerr_set(e, CERR_UNSUPPORTED, "the %s backend cannot run LoRA adapters yet",
                        m->be->ops->name);
    struct lora_adapter *ad = adapter_new(m, path);
    if (!ad)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    size_t n = strlen(path);
    int rc;
    if (n > 5 && !strcmp(path + n - 5, ".gguf")) {
        rc = load_gguf(ad, m, path, e);
    } else {
        char cp[600], sp[600];
        snprintf(cp, sizeof cp, "%s/adapter_config.json", path);
        snprintf(sp, sizeof sp, "%s/adapter_model.safetensors", path);
        struct hfcfg *cfg = NULL;
        struct st_model *st = NULL;
        if (!fs_is_dir(path))
            rc = cerr_set(e, CERR_IO, "%s: not a PEFT adapter directory or a .gguf file", path);
        else if (!fs_exists(cp))
            rc = cerr_set(e, CERR_FORMAT, "%s: missing adapter_config.json", path);
        else if (!fs_exists(sp))
            rc = cerr_set(e, CERR_FORMAT, "%s: missing adapter_model.safetensors", path);
        else if ((rc = hfcfg_load(&cfg, cp, e)) == 0 && (rc = st_open(&st, sp, e)) == 0)
            rc = load_peft(ad, m, cfg, st, e);
        if (rc && fs_is_dir(path) && strncmp(e ? e->msg : "", path, strlen(path)))
            cerr_prefix(e, "%s", path);
        st_close(st);
        hfcfg_free(cfg);
    }
    if (rc) {
        adapter_free(ad);
        return rc;
    }
    *out = ad;
    return 0;
}

/* ---- sets ----------------------------------------------------------------------------- */

int lora_set_eq(const struct lora_set *x, const struct lora_set *y)
{
    if (x->n != y->n)
        return 0;
    for (int i = 0; i < x->n; i++)
        if (x->a[i] != y->a[i] || x->w[i] != y->w[i])
            return 0;
    return 1;
}

void lora_set_key(const struct lora_set *s, char *buf, size_t cap)
{
    size_t o = 0;
    if (cap)
        buf[0] = 0;
    for (int i = 0; i < s->n && o < cap; i++) {
        int k = snprintf(buf + o, cap - o, "%s%016llx:%.9g", i ? "+" : "",
                         (unsigned long long)s->a[i]->fingerprint, (double)s->w[i]);
        if (k < 0)
            break;
        o += (size_t)k;
    }
}

int lora_set_load(struct lora_set *set, const struct model *m, const char *const *paths, int n,
                  struct cerr *e)
{
    memset(set, 0, sizeof *set);
    if (n > LORA_MAX_STACK)
        return cerr_set(e, CERR_LIMIT, "at most %d adapters may be stacked", LORA_MAX_STACK);
    for (int i = 0; i < n; i++) {
        int rc = lora_load(&set->a[i], m, paths[i], e);
        if (rc) {
            lora_set_unref(set);
            return rc;
        }
        set->w[i] = 1.0f;
        set->n = i + 1;
    }
    return 0;
}

unsigned lora_set_targets(const struct lora_set *s)
{
    unsigned t = 0;
    for (int i = 0; i < s->n; i++)
        t |= s->a[i]->targets;
    return t;
}

void lora_set_ref(struct lora_set *s)
{
    for (int i = 0; i < s->n; i++)
        lora_ref(s->a[i]);
}

void lora_set_unref(struct lora_set *s)
{
    for (int i = 0; i < s->n; i++)
        lora_unref(s->a[i]);
    s->n = 0;
}
