/* sampler.h — turns a row of logits into a token id.
 *
 * Per-request state: a seeded RNG and scratch sized for the vocabulary at creation (no
 * allocation per token). Order (DESIGN.md §5): top_p -> min_p -> top_k -> temperature ->
 * draw; temperature 0 is argmax (ties break to the lowest id). The full sampler with
 * penalties, logit_bias and XTC grows here with the server issue.
 */
#ifndef CINFER_ENGINE_SAMPLER_H
#define CINFER_ENGINE_SAMPLER_H

#include <stdint.h>

#include "util/err.h"

struct sampler_params {
    float temperature; /* 0 = greedy */
    float top_p;       /* 1 = off */
    int top_k;         /* 0 = off */
    float min_p;       /* 0 = off */
    uint64_t seed;
};

void sampler_params_default(struct sampler_params *p);

struct sampler;
int sampler_new(struct sampler **out, const struct sampler_params *p, int n_vocab,
                struct cerr *e);
void sampler_free(struct sampler *s);
/* Samples from logits (n_vocab floats; left unmodified). */
int32_t sampler_sample(struct sampler *s, const float *logits);
/* Index of the largest value (lowest index on ties). */
int32_t sampler_argmax(const float *logits, int n);

#endif
