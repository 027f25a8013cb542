/* bert.h — BERT-family encoders (all-MiniLM-L6-v2, bge-small, ...) for sentence embeddings.
 *
 * Loads a Hugging Face model directory (config.json with model_type "bert" + safetensors)
 * and the sentence-transformers files beside it (modules.json, 1_Pooling/config.json,
 * sentence_bert_config.json) that say how token states become one vector: mean or CLS
 * pooling, then L2 normalization when modules.json lists a Normalize module. The forward
 * is one non-causal pass over a flattened batch of sequences (no padding, no KV kept):
 * word + position + token-type (0) embeddings -> LayerNorm -> per layer [q,k,v (+bias) ->
 * attention over the whole sequence -> out proj -> residual -> LayerNorm -> up + GELU ->
 * down -> residual -> LayerNorm] -> pooling -> normalize.
 * The matmuls, gathers, adds and the attention run through the backend ops (the attention
 * as the paged op with every token at its sequence's last position, which makes it
 * non-causal); LayerNorm, GELU (erf) and pooling are host loops, so the encoder needs a
 * backend whose activations live in host memory (the CPU backend).
 * Lifetimes: struct bert is process lifetime (weights mmap'd); struct bert_ws is per caller
 * thread, sized once; bert_embed allocates nothing.
 */
#ifndef CINFER_MODEL_BERT_H
#define CINFER_MODEL_BERT_H

#include <stdint.h>

#include "backend/backend.h"
#include "util/err.h"

enum bert_pool { BERT_POOL_MEAN = 0, BERT_POOL_CLS = 1, BERT_POOL_LAST = 2 };
enum bert_act { BERT_GELU = 0, BERT_GELU_TANH = 1, BERT_RELU = 2 };

struct bert_hparams {
    int n_layer, n_embd, n_head, head_dim, n_ff, n_vocab, n_pos, n_type;
    float eps;
    int act;       /* enum bert_act (config.json hidden_act) */
    int pool;      /* enum bert_pool (1_Pooling/config.json; mean without one) */
    int normalize; /* modules.json lists sentence_transformers.models.Normalize */
    int max_seq;   /* sentence_bert_config.json max_seq_length, else n_pos */
    int matryoshka; /* the model card says it was trained for truncation (MatryoshkaLoss) */
};

struct bert;

/* 1 when path is a directory whose config.json names a BERT encoder (model_type "bert" or
 * an architecture Bert*), else 0. Never fails loudly: any read error is 0. */
int bert_is_encoder(const char *path);

/* Loads the encoder in directory path onto be (which must outlive it). Every tensor is
 * checked against config.json; a missing or misshapen one is an error naming it. Refuses a
 * backend whose memory is not host memory (CERR_UNSUPPORTED). */
int bert_load(struct bert **out, const char *path, struct be *be, struct cerr *e);
void bert_free(struct bert *m);
const struct bert_hparams *bert_hparams(const struct bert *m);

/* Workspace for batches of up to max_tok tokens in up to max_seq sequences. */
struct bert_ws;
int bert_ws_new(struct bert_ws **out, const struct bert *m, int max_tok, int max_seq,
                struct cerr *e);
void bert_ws_free(struct bert_ws *ws);

/* Embeds n_seq sequences: sequence s is ids[s][0 .. lens[s]) (the tokenizer's ids with its
 * [CLS]/[SEP]; 1 <= lens[s] <= max_seq; sum of lens <= the workspace's max_tok). Writes
 * the pooled (and, per the model, normalized) vectors to out (host, n_seq * n_embd). A
 * sequence's vector does not depend on the others in the batch (the CPU ops are batch
 * invariant). One thread at a time per workspace. Returns 0, or CERR_INVALID for ids out
 * of range or sizes over the workspace. */
int bert_embed(const struct bert *m, struct bert_ws *ws, const int32_t *const *ids,
               const int *lens, int n_seq, float *out, struct cerr *e);

#endif
