/* lora_fwd.h — the forward's side of LoRA (internal to src/model): a step's rows grouped by
 * adapter set, and the deltas of one projection through the backend op lora.
 * Engine thread only (with the workspace that owns the plan).
 */
#ifndef CINFER_MODEL_LORA_FWD_H
#define CINFER_MODEL_LORA_FWD_H

#include <stdint.h>

#include "model/model.h"

struct lora_plan;

int lora_plan_new(struct lora_plan **out, int max_tok, int max_seq);
void lora_plan_free(struct lora_plan *p);
/* Groups the step's token rows by set, per range: [0, lead) and [lead, n_tok) when lead >
 * 0, else one range [0, n_tok); row indices are relative to their range. Writes the row
 * lists to h_rows (host, at most n_tok) and returns how many (0: no adapted row). */
int lora_plan_build(struct lora_plan *p, const struct model_batch *bt, int lead, int32_t *h_rows);
/* Where the row lists lie in backend memory (after the step's upload). */
void lora_plan_bind(struct lora_plan *p, const int32_t *d_rows);
/* 1 when range rg has adapted rows. */
int lora_plan_any(const struct lora_plan *p, int rg);
/* y (range rows, M) += the deltas of target t at layer il for the adapted rows of range rg,
 * x (range rows, K) the projection's input. */
void lora_plan_apply(const struct lora_plan *p, const struct model *m, int rg, int il, int t,
                     const float *x, float *y);
/* The same for x = rmsnorm(xr, norm, eps) given the un-normed rows xr, through the op
 * lora_norm (the backend must have it). */
void lora_plan_apply_norm(const struct lora_plan *p, const struct model *m, int rg, int il,
                          int t, const float *xr, const float *norm, float eps, float *y);

#endif
