/* hparams.c — architecture hyper-parameters from GGUF metadata or HF config.json.
 *
 * Conventions of the two sources differ: GGUF llama q/k weights are permuted for the
 * interleaved RoPE layout (BE_ROPE_NORM) while HF llama uses the half-split (NEOX) one;
 * GGUF gemma norm weights already include the +1 that HF applies at run time.
 */
#include "model/hparams.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

const char *model_arch_name(int arch)
{
    static const char *names[ARCH_COUNT] = {"llama", "qwen2", "qwen3", "gemma3"};
    return (arch >= 0 && arch < ARCH_COUNT) ? names[arch] : "?";
}

static void defaults(struct model_hparams *hp)
{
    memset(hp, 0, sizeof *hp);
    hp->norm_eps = 1e-5f;
    hp->rope_theta = 10000.0f;
    hp->rope_linear = 1.0f;
    hp->embd_scale = 1.0f;
    hp->act = BE_ACT_SILU;
    hp->bos_id = -1;
}

/* Architecture-specific switches shared by both sources. */
static void arch_traits(struct model_hparams *hp)
{
    switch (hp->arch) {
    case ARCH_QWEN2:
        hp->has_qkv_bias = 1;
        break;
    case ARCH_QWEN3:
        hp->has_qk_norm = 1;
        break;
    case ARCH_GEMMA3:
        hp->has_qk_norm = 1;
        hp->has_post_norms = 1;
        hp->act = BE_ACT_GELU_TANH;
        hp->embd_scale = sqrtf((float)hp->n_embd);
        break;
    default:
        break;
    }
}

/* ---------------------------------------------------------------- GGUF ---- */

static int g_int(const struct gguf *g, const char *arch, const char *key, int64_t *v, int req,
                 struct cerr *e)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    int rc = gguf_get_int(g, k, v, e);
    if (rc == GGUF_ABSENT && req)
        return cerr_set(e, CERR_FORMAT, "%s: missing metadata key '%s'", g->path, k);
    return rc;
}

static int g_float(const struct gguf *g, const char *arch, const char *key, double *v,
                   struct cerr *e)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    return gguf_get_float(g, k, v, e);
}

int hparams_from_gguf(struct model_hparams *hp, const struct gguf *g, struct cerr *e)
{
    defaults(hp);
    struct gguf_str s;
    int rc = gguf_get_str(g, "general.architecture", &s, e);
    if (rc == GGUF_ABSENT)
        return cerr_set(e, CERR_FORMAT, "%s: missing 'general.architecture'", g->path);
    if (rc < 0)
        return rc;
    char arch[32];
    snprintf(arch, sizeof arch, "%.*s", (int)(s.len < 31 ? s.len : 31), s.ptr);
    if (!strcmp(arch, "llama") || !strcmp(arch, "mistral"))
        hp->arch = ARCH_LLAMA;
    else if (!strcmp(arch, "qwen2"))
        hp->arch = ARCH_QWEN2;
    else if (!strcmp(arch, "qwen3"))
        hp->arch = ARCH_QWEN3;
    else if (!strcmp(arch, "gemma3"))
        hp->arch = ARCH_GEMMA3;
    else
        return cerr_set(e, CERR_UNSUPPORTED,
                        "%s: architecture '%s' is not supported (supported: llama, mistral, "
                        "qwen2, qwen3, gemma3)",
                        g->path, arch);

    int64_t v;
    double f;
    if ((rc = g_int(g, arch, "block_count", &v, 1, e)) < 0 || rc == GGUF_ABSENT)
        return rc < 0 ? rc : CERR_FORMAT;
    hp->n_layer = (int)v;
    if ((rc = g_int(g, arch, "embedding_length", &v, 1, e)) != 0)
        return rc < 0 ? rc : CERR_FORMAT;
    hp->n_embd = (int)v;
    if ((rc = g_int(g, arch, "feed_forward_length", &v, 1, e)) != 0)
        return rc < 0 ? rc : CERR_FORMAT;
    hp->n_ff = (int)v;
    if ((rc = g_int(g, arch, "attention.head_count", &v, 1, e)) != 0)
        return rc < 0 ? rc : CERR_FORMAT;
    hp->n_head = (int)v;
    hp->n_kv_head = hp->n_head;
    if ((rc = g_int(g, arch, "attention.head_count_kv", &v, 0, e)) < 0)
        return rc;
    if (rc == 0)
        hp->n_kv_head = (int)v;
    hp->head_dim = hp->n_head > 0 ? hp->n_embd / hp->n_head : 0;
    if ((rc = g_int(g, arch, "attention.key_length", &v, 0, e)) < 0)
        return rc;
    if (rc == 0)
        hp->head_dim = (int)v;
    hp->rot_dim = hp->head_dim;
    if ((rc = g_int(g, arch, "rope.dimension_count", &v, 0, e)) < 0)
        return rc;
    if (rc == 0)
        hp->rot_dim = (int)v;
    if ((rc = g_int(g, arch, "context_length", &v, 0, e)) < 0)
        return rc;
    hp->n_ctx_train = rc == 0 ? (int)v : 2048;
    if ((rc = g_int(g, arch, "vocab_size", &v, 0, e)) < 0)
        return rc;
    if (rc == 0)
        hp->n_vocab = (int)v;
    if ((rc = g_float(g, arch, "attention.layer_norm_rms_epsilon", &f, e)) < 0)
        return rc;
    if (rc == 0)
        hp->norm_eps = (float)f;
    if ((rc = g_float(g, arch, "rope.freq_base", &f, e)) < 0)
        return rc;
    if (rc == 0)
        hp->rope_theta = (float)f;
    hp->rope_theta_local = hp->rope_theta;
    struct gguf_str st;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    if (gguf_get_str(g, key, &st, NULL) == 0 && gguf_str_eq(st, "linear")) {
        if (g_float(g, arch, "rope.scaling.factor", &f, e) == 0 && f > 0)
            hp->rope_linear = (float)f;
    }
    hp->rope_mode = hp->arch == ARCH_LLAMA ? BE_ROPE_NORM : BE_ROPE_NEOX;

    if (hp->arch == ARCH_GEMMA3) {
        if ((rc = g_int(g, arch, "attention.sliding_window", &v, 0, e)) < 0)
            return rc;
        hp->sliding_window = rc == 0 ? (int)v : 512;
        int64_t pattern = 6;
        if ((rc = g_int(g, arch, "attention.sliding_window_pattern", &v, 0, NULL)) == 0 &&
            v > 0)
            pattern = v;
        for (int i = 0; i < hp->n_layer && i < MODEL_MAX_LAYERS; i++)
            hp->layer_swa[i] = (i + 1) % pattern != 0;
        hp->rope_theta_local = 10000.0f; /* Gemma 3 local layers; not stored in GGUF */
    } else {
        if ((rc = g_int(g, arch, "attention.sliding_window", &v, 0, e)) < 0)
            return rc;
        if (rc == 0 && v > 0) {
            hp->sliding_window = (int)v;
            for (int i = 0; i < hp->n_layer && i < MODEL_MAX_LAYERS; i++)
                hp->layer_swa[i] = 1;
        }
    }
    hp->attn_scale = hp->head_dim > 0 ? 1.0f / sqrtf((float)hp->head_dim) : 1.0f;
    if ((rc = g_float(g, arch, "attn_logit_softcapping", &f, e)) == 0)
        hp->attn_softcap = (float)f;
    if ((rc = g_float(g, arch, "final_logit_softcapping", &f, e)) == 0)
        hp->final_softcap = (float)f;

    if (gguf_get_int(g, "tokenizer.ggml.bos_token_id", &v, NULL) == 0)
        hp->bos_id = (int32_t)v;
    if (gguf_get_int(g, "tokenizer.ggml.eos_token_id", &v, NULL) == 0)
        hp->eos_ids[hp->n_eos++] = (int32_t)v;
    if (gguf_get_int(g, "tokenizer.ggml.eot_token_id", &v, NULL) == 0 &&
        (hp->n_eos == 0 || hp->eos_ids[0] != v))
        hp->eos_ids[hp->n_eos++] = (int32_t)v;
    arch_traits(hp);
    return 0;
}

/* ------------------------------------------------------------------ HF ---- */

static int h_int(const struct hfcfg *c, const char *key, int *out, int req, struct cerr *e)
{
    int64_t v;
    int rc = hfcfg_int(c, key, &v, e);
    if (rc == 1 && req)
        return cerr_set(e, CERR_FORMAT, "config.json: missing '%s'", key);
    if (rc == 0)
        *out = (int)v;
    return rc < 0 ? rc : 0;
}

static int h_float(const struct hfcfg *c, const char *key, float *out, struct cerr *e)
{
    double v;
    int rc = hfcfg_float(c, key, &v, e);
    if (rc == 0)
        *out = (float)v;
    return rc < 0 ? rc : 0;
}

int hparams_from_hf(struct model_hparams *hp, const struct hfcfg *cfg, const struct hfcfg *gen,
                    struct cerr *e)
{
    defaults(hp);
    const char *mt = NULL;
    if (hfcfg_str(cfg, "model_type", &mt, e) != 0 || !mt)
        return cerr_set(e, CERR_FORMAT, "config.json: missing 'model_type'");
    if (!strcmp(mt, "llama") || !strcmp(mt, "mistral"))
        hp->arch = ARCH_LLAMA;
    else if (!strcmp(mt, "qwen2"))
        hp->arch = ARCH_QWEN2;
    else if (!strcmp(mt, "qwen3"))
        hp->arch = ARCH_QWEN3;
    else if (!strcmp(mt, "gemma3_text"))
        hp->arch = ARCH_GEMMA3;
    else
        return cerr_set(e, CERR_UNSUPPORTED,
                        "config.json: model_type '%s' is not supported (supported: llama, "
                        "mistral, qwen2, qwen3, gemma3_text)",
                        mt);
    int rc;
    if ((rc = h_int(cfg, "hidden_size", &hp->n_embd, 1, e)) ||
        (rc = h_int(cfg, "intermediate_size", &hp->n_ff, 1, e)) ||
        (rc = h_int(cfg, "num_hidden_layers", &hp->n_layer, 1, e)) ||
        (rc = h_int(cfg, "num_attention_heads", &hp->n_head, 1, e)) ||
        (rc = h_int(cfg, "vocab_size", &hp->n_vocab, 1, e)))
        return rc;
    hp->n_kv_head = hp->n_head;
    if ((rc = h_int(cfg, "num_key_value_heads", &hp->n_kv_head, 0, e)))
        return rc;
    hp->head_dim = hp->n_head > 0 ? hp->n_embd / hp->n_head : 0;
    if ((rc = h_int(cfg, "head_dim", &hp->head_dim, 0, e)))
        return rc;
    hp->rot_dim = hp->head_dim;
    hp->n_ctx_train = 2048;
    if ((rc = h_int(cfg, "max_position_embeddings", &hp->n_ctx_train, 0, e)) ||
        (rc = h_float(cfg, "rms_norm_eps", &hp->norm_eps, e)) ||
        (rc = h_float(cfg, "rope_theta", &hp->rope_theta, e)))
        return rc;
    hp->rope_theta_local = hp->rope_theta;
    hp->rope_mode = BE_ROPE_NEOX;
    int tie = hp->arch == ARCH_GEMMA3;
    if (hfcfg_bool(cfg, "tie_word_embeddings", &tie, e) < 0)
        return e ? e->code : CERR_FORMAT;
    hp->tied_embd = tie;

    const char *rt = NULL;
    if (hfcfg_str(cfg, "rope_scaling.rope_type", &rt, NULL) != 0)
        hfcfg_str(cfg, "rope_scaling.type", &rt, NULL);
    if (rt && !strcmp(rt, "llama3")) {
        hp->rope_l3_factor = 8.0f;
        hp->rope_l3_low = 1.0f;
        hp->rope_l3_high = 4.0f;
        hp->rope_l3_orig_ctx = 8192;
        if ((rc = h_float(cfg, "rope_scaling.factor", &hp->rope_l3_factor, e)) ||
            (rc = h_float(cfg, "rope_scaling.low_freq_factor", &hp->rope_l3_low, e)) ||
            (rc = h_float(cfg, "rope_scaling.high_freq_factor", &hp->rope_l3_high, e)) ||
            (rc = h_int(cfg, "rope_scaling.original_max_position_embeddings",
                        &hp->rope_l3_orig_ctx, 0, e)))
            return rc;
    } else if (rt && !strcmp(rt, "linear")) {
        if ((rc = h_float(cfg, "rope_scaling.factor", &hp->rope_linear, e)))
            return rc;
    } else if (rt && strcmp(rt, "default") != 0) {
        return cerr_set(e, CERR_UNSUPPORTED, "config.json: rope_scaling type '%s' is not supported",
                        rt);
    }
    int attn_bias = 0;
    hfcfg_bool(cfg, "attention_bias", &attn_bias, NULL);

    if (hp->arch == ARCH_GEMMA3) {
        hp->sliding_window = 512;
        hp->rope_theta_local = 10000.0f;
        if ((rc = h_int(cfg, "sliding_window", &hp->sliding_window, 0, e)) ||
            (rc = h_float(cfg, "rope_local_base_freq", &hp->rope_theta_local, e)))
            return rc;
        const char *types[MODEL_MAX_LAYERS];
        int nt = 0;
        if (hfcfg_str_list(cfg, "layer_types", types, MODEL_MAX_LAYERS, &nt, NULL) == 0 &&
            nt > 0) {
            if (nt != hp->n_layer)
                return cerr_set(e, CERR_FORMAT,
                                "config.json: layer_types has %d entries for %d layers", nt,
                                hp->n_layer);
            for (int i = 0; i < nt; i++)
                hp->layer_swa[i] = strcmp(types[i], "sliding_attention") == 0;
        } else {
            int pattern = 6;
            if ((rc = h_int(cfg, "sliding_window_pattern", &pattern, 0, e)))
                return rc;
            if (pattern <= 0)
                pattern = 6;
            for (int i = 0; i < hp->n_layer && i < MODEL_MAX_LAYERS; i++)
                hp->layer_swa[i] = (i + 1) % pattern != 0;
        }
        float qpas = (float)hp->head_dim;
        if ((rc = h_float(cfg, "query_pre_attn_scalar", &qpas, e)))
            return rc;
        hp->attn_scale = 1.0f / sqrtf(qpas);
        if ((rc = h_float(cfg, "final_logit_softcapping", &hp->final_softcap, e)) ||
            (rc = h_float(cfg, "attn_logit_softcapping", &hp->attn_softcap, e)))
            return rc;
    } else {
        hp->attn_scale = hp->head_dim > 0 ? 1.0f / sqrtf((float)hp->head_dim) : 1.0f;
        int use_sw = hp->arch == ARCH_LLAMA; /* mistral: window when set; qwen2: opt-in */
        hfcfg_bool(cfg, "use_sliding_window", &use_sw, NULL);
        int sw = 0;
        if (use_sw && h_int(cfg, "sliding_window", &sw, 0, NULL) == 0 && sw > 0) {
            hp->sliding_window = sw;
            for (int i = 0; i < hp->n_layer && i < MODEL_MAX_LAYERS; i++)
                hp->layer_swa[i] = 1;
        }
    }
    if (attn_bias && hp->arch == ARCH_LLAMA)
        hp->has_qkv_bias = 1;

    int64_t ids[MODEL_MAX_EOS];
    int n = 0;
    const struct hfcfg *srcs[2] = {gen, cfg};
    for (int s = 0; s < 2; s++) {
        if (!srcs[s])
            continue;
        if (hp->bos_id < 0 && hfcfg_int(srcs[s], "bos_token_id", &ids[0], NULL) == 0)
            hp->bos_id = (int32_t)ids[0];
        if (hp->n_eos == 0 &&
            hfcfg_int_list(srcs[s], "eos_token_id", ids, MODEL_MAX_EOS, &n, NULL) == 0)
            for (int i = 0; i < n; i++)
                hp->eos_ids[hp->n_eos++] = (int32_t)ids[i];
    }
    arch_traits(hp);
    return 0;
}

int hparams_validate(const struct model_hparams *hp, struct cerr *e)
{
    if (hp->n_layer <= 0 || hp->n_layer > MODEL_MAX_LAYERS)
        return cerr_set(e, CERR_FORMAT, "layer count %d is out of range (1..%d)", hp->n_layer,
                        MODEL_MAX_LAYERS);
    if (hp->n_embd <= 0 || hp->n_head <= 0 || hp->n_kv_head <= 0 || hp->n_ff <= 0 ||
        hp->n_vocab <= 0 || hp->head_dim <= 0)
        return cerr_set(e, CERR_FORMAT,
                        "invalid dimensions (embd %d, heads %d/%d, head_dim %d, ff %d, vocab %d)",
                        hp->n_embd, hp->n_head, hp->n_kv_head, hp->head_dim, hp->n_ff,
                        hp->n_vocab);
    if (hp->n_head % hp->n_kv_head)
        return cerr_set(e, CERR_FORMAT, "%d query heads are not a multiple of %d KV heads",
                        hp->n_head, hp->n_kv_head);
    if (hp->head_dim % 2 || hp->rot_dim % 2 || hp->rot_dim > hp->head_dim || hp->rot_dim <= 0)
        return cerr_set(e, CERR_FORMAT, "invalid head_dim %d / rotary dims %d", hp->head_dim,
                        hp->rot_dim);
    if (hp->head_dim > 1024 || hp->n_head > 1024 || hp->n_embd > 1 << 16 || hp->n_ff > 1 << 20)
        return cerr_set(e, CERR_LIMIT, "dimensions too large (embd %d, heads %d, head_dim %d)",
                        hp->n_embd, hp->n_head, hp->head_dim);
    if (!(hp->norm_eps > 0) || !(hp->rope_theta > 0))
        return cerr_set(e, CERR_FORMAT, "invalid norm epsilon or rope base");
    return 0;
}

void hparams_inv_freq(const struct model_hparams *hp, int local, const float *freq_factors,
                      float *inv_freq)
{
    int half = hp->rot_dim / 2;
    double base = local ? hp->rope_theta_local : hp->rope_theta;
    for (int i = 0; i < half; i++) {
        /* as the PyTorch reference: 1 / base^(2i/d) in float32 */
        float f = (float)(1.0 / pow(base, (double)(2 * i) / (double)hp->rot_dim));
        if (!local) {
            if (hp->rope_l3_factor > 0) {
                double lo_wl = hp->rope_l3_orig_ctx / hp->rope_l3_low;
                double hi_wl = hp->rope_l3_orig_ctx / hp->rope_l3_high;
                double wl = 2.0 * M_PI / f;
                if (wl > lo_wl) {
                    f = f / hp->rope_l3_factor;
                } else if (wl >= hi_wl) {
                    double smooth = (hp->rope_l3_orig_ctx / wl - hp->rope_l3_low) /
                                    (hp->rope_l3_high - hp->rope_l3_low);
                    f = (float)((1 - smooth) * f / hp->rope_l3_factor + smooth * f);
                }
            }
            if (hp->rope_linear != 1.0f)
                f /= hp->rope_linear;
            if (freq_factors)
                f /= freq_factors[i];
        }
        inv_freq[i] = f;
    }
}
