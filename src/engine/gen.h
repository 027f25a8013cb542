/* gen.h — single-sequence generation on top of the model and KV pool: prefill a prompt in
 * chunks, then decode one token per step. Used by `cinfer run` and the tests; the batching
 * scheduler (engine issue 5) replaces it for the server. Engine-thread only.
 */
#ifndef CINFER_ENGINE_GEN_H
#define CINFER_ENGINE_GEN_H

#include <stdint.h>

#include "kv/kv_pool.h"
#include "model/model.h"

struct gen {
    const struct model *m;
    struct kv_pool *kv;
    struct kv_seq seq;
    struct model_ws *ws;
    int n_ctx;      /* positions this session may hold */
    int chunk;      /* max tokens per prefill step */
    int n_past;     /* positions already in the cache */
    float *logits;  /* (n_vocab) logits after the last fed token */
    /* step scratch (chunk entries) */
    int32_t *pos, *seqv, *slots, *idx;
    /* LoRA: the set every step runs (NULL = none; borrowed, must outlive the feeds) and the
     * step's lora_paths (model_batch); set both before gen_feed */
    const struct lora_set *lora;
    unsigned lora_paths;
};

/* n_ctx: context length; chunk: prefill tokens per forward (<= n_ctx). */
int gen_new(struct gen **out, const struct model *m, int n_ctx, int chunk, int kv_dtype,
            struct cerr *e);
/* The same with a KV dtype per layer (layer_dtype[n_layer], NULL = kv_dtype everywhere; a
 * dtype may be a quantized scheme code, backend/kvq.h); kv_dtype names the pool's scheme. */
int gen_new_layers(struct gen **out, const struct model *m, int n_ctx, int chunk, int kv_dtype,
                   const int *layer_dtype, struct cerr *e);
void gen_free(struct gen *g);
/* Feeds ids (all of them go to the cache); afterwards g->logits holds the logits after
 * the last id. When all_logits is non-NULL it receives (n, n_vocab) logits, one row per id. */
int gen_feed(struct gen *g, const int32_t *ids, int n, float *all_logits, struct cerr *e);
/* Forgets the sequence (positions restart at 0). */
void gen_reset(struct gen *g);

#endif
