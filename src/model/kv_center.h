/* kv_center.h — the key centre subtracted before quantized keys are stored (kv_center.c). */
#ifndef CINFER_MODEL_KV_CENTER_H
#define CINFER_MODEL_KV_CENTER_H

#include "model/model.h"

/* Layer il's key centre as a (n_kv_head * head_dim) row in backend memory (free with the
 * backend's free), or NULL when the layer has none (no key bias, a softcap, or nothing that
 * stays constant). */
float *model_kv_center_new(const struct model *m, int il);


#endif
