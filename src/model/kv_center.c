/* kv_center.c — the key centre of quantized KV (docs/kv-quant.md, "Key centring").
 *
 * Attention is invariant to subtracting one fixed vector c from every (post-RoPE) key of a
 * head: q.(k - c) = q.k - q.c is the same for every position a query attends, and the
 * softmax drops it — exact for any c. Models with a key bias (Qwen2) carry large, nearly
 * constant key channels that dominate a quantization group's range; subtracting them
 * before the keys are quantized keeps the small channels' resolution. c is the layer's key
 * bias b_k on the channels where it stays put after RoPE: those RoPE leaves alone (past
 * rot_dim) and those whose rotation angle stays under 1 radian over the trained context; 0
 * elsewhere (a rotating bias is not removed by a constant). Not applied with an attention
 * softcap (it is not shift-invariant).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "model/kv_center.h"

float *model_kv_center_new(const struct model *m, int il)
{
    const struct model_hparams *hp = &m->hp;
    const struct model_layer *ly = &m->layers[il];
    if (!ly->bk || hp->attn_softcap > 0)
        return NULL;
    struct be *b = m->be;
    int hd = hp->head_dim, kvd = hp->n_kv_head * hd, half = hp->rot_dim / 2;
    float *bk = malloc((size_t)kvd * sizeof(float)), *fr = malloc((size_t)(half + 1) * sizeof(float));
    float *c = calloc((size_t)kvd, sizeof(float));
    float *dev = NULL;
    const float *inv = hp->layer_swa[il] ? m->inv_freq_local : m->inv_freq_global;
    double ctx = hp->n_ctx_train > 0 ? hp->n_ctx_train : 32768;
    if (bk && fr && c && !b->ops->download(b, bk, ly->bk, (size_t)kvd * sizeof(float), NULL) &&
        (!half || !b->ops->download(b, fr, inv, (size_t)half * sizeof(float), NULL))) {
        int any = 0;
        for (int h = 0; h < hp->n_kv_head; h++)
            for (int i = 0; i < hd; i++) {
                int pair = i >= hp->rot_dim ? -1
                           : hp->rope_mode == BE_ROPE_NEOX ? i % half : i / 2;
                if (pair < 0 || (double)fr[pair] * ctx <= 1.0) {
                    c[h * hd + i] = -bk[h * hd + i];
                    any |= c[h * hd + i] != 0.0f;
                }
            }
        if (any && (dev = b->ops->alloc(b, (size_t)kvd * sizeof(float))) &&
            b->ops->upload(b, dev, c, (size_t)kvd * sizeof(float), NULL)) {
            b->ops->free(b, dev);
            dev = NULL;
        }
    }
    free(bk);
    free(fr);
    free(c);
    return dev;
}

