/* kvq_scheme.h — the KV quantization scheme a server runs with: parsing --kv-quant /
 * --kv-rotate, resolving a scheme to one KV dtype per layer (backend/kvq.h) for a model
 * (uniform 8 / 4 bits, TurboQuant, or per-layer from kv_config.json), and the prefix-cache
 * namespace part that keeps schemes apart (docs/kv-quant.md). Pure; any thread.
 */
#ifndef CINFER_KV_KVQ_SCHEME_H
#define CINFER_KV_KVQ_SCHEME_H

#include <stddef.h>

#include "model/model.h"
#include "util/err.h"

enum kvq_mode { KVQ_OFF = 0, KVQ_U8, KVQ_U4, KVQ_TURBO, KVQ_CONFIG };

struct kvq_scheme {
    int mode;       /* enum kvq_mode */
    int kbits, vbits; /* TURBO: keys affine at kbits in {2,4,5,8}, values Lloyd-Max at vbits in
                       * {2,3,4,5,8} */
    int rotate;     /* --kv-rotate: -1 = the mode's default (on at 4 bits), 0, 1 */
    char config[512]; /* CONFIG: the kv_config.json path ("" = beside the model) */
};

/* Parses a --kv-quant value: off | 8 | 4 | turbo | turbo:k<b>v<b> | config | config:PATH.
 * Errors (CERR_INVALID) name the flag and the accepted values. */
int kvq_scheme_parse(const char *v, struct kvq_scheme *s, struct cerr *e);
/* Parses a --kv-rotate value: on | off. */
int kvq_rotate_parse(const char *v, int *rotate, struct cerr *e);
/* The --l2 preset when no kv_config.json is found: the first and last layer f16, k8v4
 * elsewhere. */
#define KVQ_PRESET_DEFAULT "k8v4"

/* What a resolved scheme does to a model (for /stats, the ready card and warnings). */
struct kvq_layers_info {
    int n_quant;       /* layers whose K or V is quantized */
    int n_plain;       /* layers kept at the base dtype */
    int swa_plain;     /* sliding-window layers kept plain by turbo */
    int kbits, vbits;  /* the scheme's bits (16 = f16) */
    int rotate_k, rotate_v;
    size_t bytes_per_token; /* all layers, K and V */
    char source[1100]; /* CONFIG: the file read, or "preset" */
};

/* Resolves s for a model: ldt[n_layer] gets each layer's KV dtype (base = DT_F16 or
 * DT_F32 for plain layers), *code the pool's scheme code (a uniform scheme's own code, a
 * config's first quantized layer's, or base). `4` keeps 8-bit keys in layer 0 (when the
 * model has more than one layer): the boundary layer whose keys carry most of the 4-bit
 * error. model_path locates kv_config.json (its directory). Errors name the flag or the file
 * and what is wrong in it. */
int kvq_scheme_layers(const struct kvq_scheme *s, const struct model_hparams *hp,
                      const char *model_path, int base, int *ldt, int *code,
                      struct kvq_layers_info *info, struct cerr *e);
/* A scheme name for /stats.kv_quant.mode and the ready card: "off", "8", "4",
 * "turbo:k8v3", "config". */
void kvq_scheme_name(const struct kvq_scheme *s, char *out, size_t cap);

/* Appends "|kvq=<hash>" of the per-layer dtypes to a namespace string when any layer is
 * quantized or differs from base (plain f16 / f32 namespaces stay as they were). Returns the
 * characters appended (none when cap is too small). */
int kvq_ns_append(char *dst, size_t cap, const int *ldt, int n_layer, int base);

#endif
