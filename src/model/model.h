/* model.h — decoder-only transformer architectures: hparams, weights, forward.
 *
 * One parameterised forward covers llama (Llama 2/3, Mistral, SmolLM2, TinyLlama,
 * stories260K), qwen2 (qkv biases), qwen3 (q/k RMSNorm) and gemma3 (interleaved sliding and
 * global layers with their own RoPE bases, pre+post norms, q/k norm, scaled embeddings,
 * GeGLU). Weights come from a GGUF file or a Hugging Face directory (safetensors) and stay
 * in their file dtype (mmap'd on the CPU backend). The model knows nothing of scheduling:
 * the caller hands it a flattened step batch and a view of the KV cache.
 * Lifetimes: struct model is process/engine lifetime; struct model_ws is per engine (sized
 * once for the largest step); model_forward() is called from the engine thread only.
 */
#ifndef CINFER_MODEL_MODEL_H
#define CINFER_MODEL_MODEL_H

#include <stdint.h>

#include "backend/backend.h"
#include "model/lora.h"
#include "util/err.h"

enum model_arch { ARCH_LLAMA = 0, ARCH_QWEN2, ARCH_QWEN3, ARCH_GEMMA3, ARCH_COUNT };

#define MODEL_MAX_LAYERS 256
#define MODEL_MAX_EOS 8

struct model_hparams {
    int arch;
    int n_layer, n_embd, n_head, n_kv_head, head_dim, n_ff, n_vocab;
    int n_ctx_train;
    float norm_eps;
    int rope_mode;          /* enum be_rope_mode */
    int rot_dim;            /* dims rotated per head (= head_dim unless partial rotary) */
    float rope_theta;       /* global layers */
    float rope_theta_local; /* sliding layers (gemma3); = rope_theta otherwise */
    float rope_linear;      /* linear position scaling factor (1 = none) for global layers */
    /* llama3 rope scaling (factor 0 = off) */
    float rope_l3_factor, rope_l3_low, rope_l3_high;
    int rope_l3_orig_ctx;
    int sliding_window;     /* 0 = none */
    uint8_t layer_swa[MODEL_MAX_LAYERS]; /* 1 = sliding-window layer */
    float attn_scale;       /* q.k multiplier */
    float attn_softcap, final_softcap; /* 0 = off */
    float embd_scale;       /* embeddings multiplied by this (gemma: sqrt(n_embd)); 1 = none */
    int act;                /* enum be_act */
    int tied_embd;
    int has_qkv_bias, has_qk_norm, has_post_norms;
    /* special ids known to the model files (tokenizer has the authoritative list) */
    int32_t bos_id;
    int32_t eos_ids[MODEL_MAX_EOS];
    int n_eos;
};

struct model_layer {
    struct be_tensor wq, wk, wv, wo;         /* (q_dim|kv_dim|n_embd rows, in) */
    struct be_tensor w_gate, w_up, w_down;
    float *attn_norm, *ffn_norm;             /* (n_embd) f32 in backend memory */
    float *post_attn_norm, *post_ffn_norm;   /* gemma3, else NULL */
    float *q_norm, *k_norm;                  /* (head_dim) qwen3/gemma3, else NULL */
    float *bq, *bk, *bv;                     /* qwen2, else NULL */
};

struct model {
    struct model_hparams hp;
    struct be *be;
    struct be_tensor tok_embd;  /* (n_vocab rows, n_embd) */
    struct be_tensor output;    /* (n_vocab rows, n_embd); = tok_embd when tied */
    float *output_norm;         /* (n_embd) */
    float *inv_freq_global;     /* (rot_dim/2) backend memory */
    float *inv_freq_local;
    struct model_layer *layers;
    char arch_name[32];
    char path[512];
    void *src;                  /* the opened file(s); owned */
    int src_kind;               /* 0 gguf, 1 safetensors */
    void *owned;                /* backend allocations to free (list) */
};

/* Loads a model from a .gguf file or a Hugging Face model directory onto backend be (which
 * must outlive the model). Validates every tensor's shape against the hparams: a wrong or
 * missing tensor is an error naming it. */
int model_load(struct model **out, const char *path, struct be *be, struct cerr *e);
void model_free(struct model *m);
/* Bytes of weights the model reads per token (for bandwidth ceilings). */
size_t model_weight_bytes(const struct model *m);

/* The KV cache as the forward sees it: per layer, a pool of blocks laid out
 * (n_blocks, block_size, n_kv_head, head_dim) in kv_dtype (struct be_attn). */
struct model_kv_view {
    void **k, **v; /* [n_layer] backend pointers */
    int kv_dtype;
    int block_size;
    const int *layer_dtype; /* [n_layer] each layer's KV dtype (a kvq code: backend/kvq.h),
                             * or NULL: kv_dtype everywhere */
};

/* One step: n_tok tokens from n_seq sequences, flattened (DESIGN.md §5). Host arrays; the
 * forward uploads them. Sequence s owns block_tables[s*max_blocks ...]; slots[t] is the
 * cache row (block * block_size + offset) where token t's K/V go. Logits are produced for
 * the n_out tokens listed in out_idx (e.g. the last prompt token of each sequence). */
struct model_batch {
    int n_tok;
    const int32_t *tokens, *pos, *seq, *slots; /* (n_tok) */
    int n_seq, max_blocks;
    const int32_t *block_tables; /* (n_seq, max_blocks) */
    int n_out;
    const int32_t *out_idx; /* (n_out) */
    /* 0, or the first n_lead tokens run as a step of their own and the rest as another, so
     * their results do not depend on what else the step holds, on a backend that picks its
     * kernels by row count (be_ops.exact_rows; one more pass over the weights; not done
     * where it changes nothing; CINFER_LEAD_SPLIT=1 always, =0 never): the engine puts
     * its decode rows there. No sequence may have tokens on both sides. */
    int n_lead;
    /* Sliding-window layers may keep their K/V in a separate block space (the caller frees
     * their blocks older than the window): their own slots and tables, same shapes. NULL =
     * they use slots/block_tables like every other layer. */
    const int32_t *slots_swa;        /* (n_tok) */
    const int32_t *block_tables_swa; /* (n_seq, max_blocks) */
    /* Non-NULL (host, n_out) and model_can_argmax(): the step writes each output row's
     * argmax id here (computed by the backend) and downloads no logits (logits may be NULL). */
    int32_t *argmax;
    /* Non-NULL (host, n_out * be_topcand_stride(cand_cap) bytes) and model_can_topcand():
     * the step writes each output row's sampling candidates here (the backend op topcand
     * with cand_span and cand_cap <= the workspace's, see model_ws_reserve_cands) and
     * downloads no logits; takes precedence over argmax. The step's device logits stay
     * readable with model_logits_row until the next forward. */
    void *cands;
    int cand_cap;
    float cand_span;
    /* Non-NULL (host, samp_words 32-bit words: n_out struct be_sample_row, then the aux words
     * their offsets name; at most model_samp_words_max) and model_can_sample(): the backend
     * op sample decides each output row's id (written to argmax, host, n_out; -1 for a row
     * with skip set). With cands also set, the candidates of every row follow (those of a
     * skipped row are its own; those of a sampled row are of its processed logits). The op
     * processes a sampled row's device logits in place (model_logits_row then reads them
     * processed; a skipped row's stay as they were). In a queued continuation
     * (tokens NULL) a row with use_prev continues its history with its previous id. */
    const int32_t *samp;
    int samp_words;
    /* With samp and samp_fill: words [samp_late, samp_words) of samp (the rows' grammar
     * masks) are not read when the step starts; samp_fill(samp_ctx) writes them after the
     * step's layers are queued and before the op sample runs, so the host computes them
     * while a device backend runs the forward. Not for model_forward_queue. */
    int samp_late;
    void (*samp_fill)(void *ctx);
    void *samp_ctx;
    /* LoRA adapters (model/lora.h). lora: NULL, or (n_seq) each sequence's stacked set (NULL
     * or n == 0: none); the rows of each distinct set get its deltas, grouped (the backend
     * op lora). lora_paths: the projections (1 << enum lora_target) that run the adapter
     * path for every row of the step, adapted or not (lora_reg_paths: the union of what was
     * ever mounted), so a row's bits never depend on which sets its step holds. */
    const struct lora_set *const *lora;
    unsigned lora_paths;
};

/* Per-engine workspace: activation buffers for steps of up to max_tok tokens, max_out
 * logit rows, and at most max_seq sequences of max_blocks blocks. */
struct model_ws;
int model_ws_new(struct model_ws **out, const struct model *m, int max_tok, int max_out,
                 int max_seq, int max_blocks, struct cerr *e);
void model_ws_free(struct model_ws *ws);
/* Sizes the workspace's device buffer for model_batch.cands of up to cap candidates per row
 * (1 <= cap <= BE_TOPCAND_CAP_MAX); call once after model_ws_new (a later larger cap
 * reallocates). Returns 0, CERR_INVALID or CERR_NOMEM. */
int model_ws_reserve_cands(struct model_ws *ws, int cap, struct cerr *e);

/* Runs the forward for one step and writes logits (n_out, n_vocab) to host memory.
 * Returns 0, or an error when the batch exceeds the workspace or the backend failed. */
int model_forward(const struct model *m, struct model_ws *ws, const struct model_kv_view *kv,
                  const struct model_batch *b, float *logits, struct cerr *e);

/* The same step, stopping at the final norm: writes each output row's final-normed hidden
 * state (n_out, n_embd) to host memory and computes no logits (embeddings: the caller
 * pools them). b->argmax, cands and samp are not used. Engine-thread rule as model_forward
 * (one thread per model and workspace). Returns 0 or a CERR_*. */
int model_forward_hidden(const struct model *m, struct model_ws *ws,
                         const struct model_kv_view *kv, const struct model_batch *b,
                         float *hidden, struct cerr *e);

/* Overlapped steps. model_forward_queue queues a step whose output rows are all decided
 * on the backend (its argmax, or its op sample when b->samp is set; b->argmax is not used,
 * b->cands must be NULL) and
 * returns without waiting for it; model_forward_wait waits for the oldest queued step and
 * writes its n_out ids to argmax. At most two steps are queued at once, so the host builds
 * and queues step t + 1 while the device runs step t. b->tokens may be NULL: token i of the
 * step is then output row i of the previous queued step (n_tok must equal its n_out), read
 * on the device, so a decode continues before its last token reached the host. The results
 * are those of model_forward with the same tokens. A model_forward in between ends such
 * continuations (the next queued step needs tokens); queued steps still wait in order.
 * model_can_argmax() (model_can_sample() with b->samp) must hold. Engine thread only. Returns 0 or a CERR_*; a failed call
 * queues nothing. model_queued: steps queued and not yet waited for. */
int model_forward_queue(const struct model *m, struct model_ws *ws,
                        const struct model_kv_view *kv, const struct model_batch *b,
                        struct cerr *e);
int model_forward_wait(const struct model *m, struct model_ws *ws, int32_t *argmax,
                       struct cerr *e);
int model_queued(const struct model_ws *ws);
/* 1 when a queued step runs while the host goes on (the backend has fetch_start); else
 * model_forward_queue computes the step before it returns. */
int model_queue_async(const struct model *m);
/* Steps of ws run as two groups so far (model_batch.n_lead). */
long model_lead_steps(const struct model_ws *ws);
/* The most rows of a step whose rows get the bits of a one-row step on ws's backend (the
 * fewest be_ops.exact_rows over the model's matrices), or 0: any step (batch-invariant
 * kernels). A lead group (model_batch.n_lead) larger than this gets other bits. */
int model_exact_rows(const struct model_ws *ws);

/* 1 when the backend computes argmax ids itself (model_batch.argmax is honoured). */
int model_can_argmax(const struct model *m);
/* 1 when the backend computes sampling candidates (model_batch.cands is honoured). */
int model_can_topcand(const struct model *m);
/* 1 when the backend samples rows itself (model_batch.samp is honoured). */
int model_can_sample(const struct model *m);
/* The most words of model_batch.samp for a step of n_out output rows: their rows and aux
 * words, and a vocabulary bitset for up to BE_SAMPLE_MASK_ROWS of them (grammar masks). */
int model_samp_words_max(const struct model *m, int n_out);
/* Copies output row `row` (0 <= row < n_out) of the last successful model_forward's logits
 * (n_vocab floats) to host dst: the device logits stay intact until the next forward, so a
 * step that downloaded only argmax ids or candidates can still fetch a row it needs whole.
 * Engine thread only. Returns 0, CERR_INVALID (no such row) or the backend's error. */
int model_logits_row(const struct model *m, struct model_ws *ws, int row, float *dst,
                     struct cerr *e);

const char *model_arch_name(int arch);

#endif
