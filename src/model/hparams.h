/* hparams.h — reading architecture hyper-parameters from GGUF metadata or a Hugging Face
 * config.json (internal to the model layer). */
#ifndef CINFER_MODEL_HPARAMS_H
#define CINFER_MODEL_HPARAMS_H

#include "format/gguf.h"
#include "format/hfconfig.h"
#include "model/model.h"

/* Fills hp from GGUF metadata (general.architecture + <arch>.* keys). The tensor count
 * based fields (n_vocab when no vocab_size key) are completed by the caller. */
int hparams_from_gguf(struct model_hparams *hp, const struct gguf *g, struct cerr *e);
/* Fills hp from config.json (+ generation_config.json when gen != NULL). */
int hparams_from_hf(struct model_hparams *hp, const struct hfcfg *cfg, const struct hfcfg *gen,
                    struct cerr *e);
/* Checks ranges and relations (heads divide, head_dim even, layers <= MODEL_MAX_LAYERS). */
int hparams_validate(const struct model_hparams *hp, struct cerr *e);
/* Fills inv_freq (rot_dim/2) for global (local = 0) or sliding (local = 1) layers,
 * applying linear or llama3 scaling; freq_factors (may be NULL) divide it (GGUF
 * rope_freqs). */
void hparams_inv_freq(const struct model_hparams *hp, int local, const float *freq_factors,
                      float *inv_freq);

#endif
