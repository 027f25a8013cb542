/* kvq_scheme.c — see kvq_scheme.h. */
#include "kv/kvq_scheme.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/dtype.h"
#include "backend/kvq.h"

static const char *const g_values = "off, 8, 4, turbo, turbo:k<bits>v<bits> (keys 2/4/5/8, "
                                    "values 2/3/4/5/8), config or config:PATH";

int kvq_scheme_parse(const char *v, struct kvq_scheme *s, struct cerr *e)
{
    int rot = s->rotate;
    memset(s, 0, sizeof *s);
    s->rotate = rot;
    if (!v || !*v)
        return cerr_set(e, CERR_INVALID, "--kv-quant needs a value: %s", g_values);
    if (!strcmp(v, "off") || !strcmp(v, "f16"))
        return s->mode = KVQ_OFF, 0;
    if (!strcmp(v, "8"))
        return s->mode = KVQ_U8, s->kbits = s->vbits = 8, 0;
    if (!strcmp(v, "4"))
        return s->mode = KVQ_U4, s->kbits = s->vbits = 4, 0;
    if (!strncmp(v, "turbo", 5)) {
        s->mode = KVQ_TURBO, s->kbits = 8, s->vbits = 3;
        if (!v[5])
            return 0;
        int kb = 0, vb = 0, n = 0;
        if (v[5] == ':' && sscanf(v + 6, "k%dv%d%n", &kb, &vb, &n) == 2 && !v[6 + n] &&
            kvq_fmt_affine(kb) >= 0 && kvq_fmt_lm(vb) >= 0) {
            s->kbits = kb, s->vbits = vb;
            return 0;
        }
        return cerr_set(e, CERR_INVALID, "--kv-quant: bad value '%s' (expected %s)", v, g_values);
    }
    if (!strncmp(v, "config", 6) && (!v[6] || v[6] == ':')) {
        s->mode = KVQ_CONFIG;
        if (v[6] == ':') {
            if (!v[7] || strlen(v + 7) >= sizeof s->config)
                return cerr_set(e, CERR_INVALID, "--kv-quant: bad config path in '%s'", v);
            strcpy(s->config, v + 7);
        }
        return 0;
    }
    return cerr_set(e, CERR_INVALID, "--kv-quant: bad value '%s' (expected %s)", v, g_values);
}

int kvq_rotate_parse(const char *v, int *rotate, struct cerr *e)
{
    if (v && !strcmp(v, "on"))
        return *rotate = 1, 0;
    if (v && !strcmp(v, "off"))
        return *rotate = 0, 0;
    return cerr_set(e, CERR_INVALID, "--kv-rotate: bad value '%s' (expected on or off)",
                    v ? v : "");
}

void kvq_scheme_name(const struct kvq_scheme *s, char *out, size_t cap)
{
    switch (s->mode) {
    case KVQ_U8: snprintf(out, cap, "8"); break;
    case KVQ_U4: snprintf(out, cap, "4"); break;
    case KVQ_TURBO: snprintf(out, cap, "turbo:k%dv%d", s->kbits, s->vbits); break;
    case KVQ_CONFIG: snprintf(out, cap, "config"); break;
    default: snprintf(out, cap, "off"); break;
    }
}

/* One uniform scheme (not CONFIG) to a dtype code. */
static int uniform_code(const struct kvq_scheme *s, int hd, int base, int *code, struct cerr *e)
{
    int kf, vf, rk, rv;
    switch (s->mode) {
    case KVQ_OFF: *code = base; return 0;
    case KVQ_U8:
        kf = vf = KVF_A8, rk = rv = s->rotate != 0;
        break;
    case KVQ_U4:
        kf = vf = KVF_A4, rk = rv = s->rotate != 0;
        break;
    case KVQ_TURBO:
        kf = kvq_fmt_affine(s->kbits), vf = kvq_fmt_lm(s->vbits), rk = s->rotate != 0, rv = 1;
        break;
    default: return cerr_set(e, CERR_INVALID, "--kv-quant: config inside a config");
    }
    struct cerr e2 = {0};
    if (kvq_code(kf, vf, rk, rv, hd, code, &e2))
        return cerr_set(e, CERR_INVALID, "--kv-quant: %s", e2.msg);
    return 0;
}

/* A kv_config.json value: "off"/"f16", "8", "4", "turbo", "turbo:kXvY", or "kXvY" (turbo). */
static int value_scheme(const char *v, int rotate, struct kvq_scheme *out, struct cerr *e)
{
    char buf[64];
    if (v[0] == 'k' && strlen(v) < 32) {
        snprintf(buf, sizeof buf, "turbo:%s", v);
        v = buf;
    }
    out->rotate = rotate;
    if (kvq_scheme_parse(v, out, e))
        return CERR_INVALID;
    if (out->mode == KVQ_CONFIG)
        return cerr_set(e, CERR_INVALID, "'config' is not a layer scheme");
    return 0;
}

/* "k<fmt>v<fmt>" with format names (kvq_fmt_name: f16, a2, a4, a5, a8, lm2 ... lm8), e.g.
 * "ka8va4": 1 and the formats, else 0. */
static int explicit_fmts(const char *v, int *kf, int *vf)
{
    if (v[0] != 'k')
        return 0;
    const char *vv = strchr(v + 1, 'v');
    for (int a = KVF_F16; vv && a < KVF_N; a++) {
        size_t la = strlen(kvq_fmt_name(a));
        if ((size_t)(vv - v - 1) != la || strncmp(v + 1, kvq_fmt_name(a), la))
            continue;
        for (int b = KVF_F16; b < KVF_N; b++)
            if (!strcmp(vv + 1, kvq_fmt_name(b)))
                return *kf = a, *vf = b, 1;
    }
    return 0;
}

/* A kv_config.json value (value_scheme's, or explicit formats) to the layer's dtype. */
static int layer_code(const char *v, int rotate, int hd, int base, int *code, struct cerr *e)
{
    int kf, vf;
    if (explicit_fmts(v, &kf, &vf)) {
        struct cerr e2 = {0};
        if (kvq_code(kf, vf, rotate != 0, rotate != 0, hd, code, &e2))
            return cerr_set(e, CERR_INVALID, "%s", e2.msg);
        return 0;
    }
    struct kvq_scheme ls;
    int rc = value_scheme(v, rotate, &ls, e);
    return rc ? rc : uniform_code(&ls, hd, base, code, e);
}

/* kv_config.json: {"default": SCHEME, "rotate": bool, "layers": {"<i>": SCHEME, ...}} with
 * negative indices counted from the last layer. */
static int read_config(const struct kvq_scheme *s, const struct model_hparams *hp,
                       const char *model_path, int base, int *ldt, struct kvq_layers_info *info,
                       struct cerr *e)
{
    char path[1024];
    if (s->config[0])
        snprintf(path, sizeof path, "%s", s->config);
    else {
        const char *sl = model_path ? strrchr(model_path, '/') : NULL;
        if (sl)
            snprintf(path, sizeof path, "%.*s/kv_config.json", (int)(sl - model_path), model_path);
        else
            snprintf(path, sizeof path, "kv_config.json");
    }
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    const char *def = KVQ_PRESET_DEFAULT;
    int rotate = s->rotate;
    struct kvq_scheme ls;
    int rc = 0;
    if (!root) {
        /* no file beside the model: the preset (boundary layers f16); a named file must exist */
        if (s->config[0])
            return cerr_set(e, CERR_INVALID, "--kv-quant config: cannot read %s: %s", path,
                            je.text);
        snprintf(info->source, sizeof info->source, "preset (no %.1000s)", path);
        for (int l = 0; l < hp->n_layer; l++) {
            int plain = l == 0 || l == hp->n_layer - 1;
            if (plain)
                ldt[l] = base;
            else if ((rc = value_scheme(def, rotate, &ls, e)) ||
                     (rc = uniform_code(&ls, hp->head_dim, base, &ldt[l], e)))
                return rc;
        }
        return 0;
    }
    snprintf(info->source, sizeof info->source, "%s", path);
    json_t *jd = json_object_get(root, "default"), *jr = json_object_get(root, "rotate"),
           *jl = json_object_get(root, "layers");
    if (!json_is_object(root) || (jd && !json_is_string(jd)) || (jr && !json_is_boolean(jr)) ||
        (jl && !json_is_object(jl))) {
        json_decref(root);
        return cerr_set(e, CERR_INVALID,
                        "%s: expected {\"default\": scheme, \"rotate\": bool, \"layers\": "
                        "{\"<layer>\": scheme}}",
                        path);
    }
    if (jd)
        def = json_string_value(jd);
    if (jr && rotate < 0)
        rotate = json_is_true(jr);
    struct cerr e2 = {0};
    for (int l = 0; l < hp->n_layer && !rc; l++)
        if ((rc = layer_code(def, rotate, hp->head_dim, base, &ldt[l], &e2)))
            cerr_set(e, CERR_INVALID, "%s: \"default\": %s", path, e2.msg);
    const char *k;
    json_t *v;
    json_object_foreach(jl, k, v)
    {
        if (rc)
            break;
        char *end;
        long i = strtol(k, &end, 10);
        if (*end || end == k || i >= hp->n_layer || i < -hp->n_layer || !json_is_string(v)) {
            rc = cerr_set(e, CERR_INVALID,
                          "%s: layer \"%s\": expected an index in [-%d, %d) and a scheme", path,
                          k, hp->n_layer, hp->n_layer);
            break;
        }
        int l = (int)(i < 0 ? hp->n_layer + i : i);
        if ((rc = layer_code(json_string_value(v), rotate, hp->head_dim, base, &ldt[l], &e2)))
            cerr_set(e, CERR_INVALID, "%s: layer \"%s\": %s", path, k, e2.msg);
    }
    json_decref(root);
    return rc;
}

int kvq_scheme_layers(const struct kvq_scheme *s, const struct model_hparams *hp,
                      const char *model_path, int base, int *ldt, int *code,
                      struct kvq_layers_info *info, struct cerr *e)
{
    memset(info, 0, sizeof *info);
    int rc = 0, main_code = base; /* the scheme's own code (not a boundary layer's) */
    if (s->mode == KVQ_CONFIG) {
        rc = read_config(s, hp, model_path, base, ldt, info, e);
    } else {
        int c;
        if ((rc = uniform_code(s, hp->head_dim, base, &c, e)))
            return rc;
        for (int l = 0; l < hp->n_layer; l++) {
            /* turbo keeps sliding-window layers plain (as the reference does) */
            int keep = s->mode == KVQ_TURBO && hp->sliding_window > 0 && hp->layer_swa[l];
            ldt[l] = keep ? base : c;
            info->swa_plain += keep;
        }
        main_code = c;
        /* 4 bits: layer 0 keeps 8-bit keys. Its keys carry most of the 4-bit error
         * (Qwen2.5-Coder-0.5B, 512 tokens of prose: +52% perplexity uniform, +12% with
         * layer 0's keys at 8 bits, for 1.5% more bytes; docs/kv-quant.md) */
        if (s->mode == KVQ_U4 && hp->n_layer > 1 && kvq_is(ldt[0]) &&
            (rc = kvq_code(KVF_A8, kvq_fmt_of(c, 1), kvq_rot_of(c, 0), kvq_rot_of(c, 1),
                           hp->head_dim, &ldt[0], e)))
            return rc;
    }
    if (rc)
        return rc;
    *code = base;
    int kvd = hp->n_kv_head * hp->head_dim;
    info->kbits = info->vbits = base == DT_F16 ? 16 : 32;
    for (int l = 0; l < hp->n_layer; l++) {
        info->bytes_per_token += kvq_token_bytes(ldt[l], kvd);
        if (kvq_is(ldt[l])) {
            if (!info->n_quant) {
                *code = ldt[l];
                info->kbits = kvq_fmt_bits(kvq_fmt_of(ldt[l], 0));
                info->vbits = kvq_fmt_bits(kvq_fmt_of(ldt[l], 1));
                info->rotate_k = kvq_rot_of(ldt[l], 0);
                info->rotate_v = kvq_rot_of(ldt[l], 1);
            }
            info->n_quant++;
        } else {
            info->n_plain++;
        }
    }
    if (kvq_is(main_code) && info->n_quant) { /* report the scheme, not its boundary layer */
        *code = main_code;
        info->kbits = kvq_fmt_bits(kvq_fmt_of(main_code, 0));
        info->vbits = kvq_fmt_bits(kvq_fmt_of(main_code, 1));
        info->rotate_k = kvq_rot_of(main_code, 0);
        info->rotate_v = kvq_rot_of(main_code, 1);
    }
    return 0;
}

int kvq_ns_append(char *dst, size_t cap, const int *ldt, int n_layer, int base)
{
    int differs = 0;
    uint64_t h = 1469598103934665603ull;
    for (int l = 0; l < n_layer; l++) {
        differs |= ldt[l] != base;
        for (int b = 0; b < 4; b++)
            h = (h ^ (uint8_t)((unsigned)ldt[l] >> (8 * b))) * 1099511628211ull;
    }
    if (!differs)
        return 0;
    int n = snprintf(dst, cap, "|kvq=%08x/%016llx", (unsigned)base, (unsigned long long)h);
    return n > 0 && (size_t)n < cap ? n : 0;
}
