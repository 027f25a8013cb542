/* safetensors.h — safetensors reader (mmap, zero-copy), single file or sharded HF dir.
 *
 * st_open() maps each shard and validates its JSON header up front: dtype, shape (<= 4
 * dims; rank 0 = one element), data_offsets inside the data section, byte size matching
 * the shape. Tensor data points into the mapping and lives until st_close(); it is NOT
 * guaranteed to be aligned for its dtype (that depends on the writer's header padding),
 * so read elements with memcpy or copy the tensor. Read-only after open: safe to share
 * between threads.
 */
#ifndef CINFER_FORMAT_SAFETENSORS_H
#define CINFER_FORMAT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

struct st_tensor {
    const char *name;
    int dtype; /* DT_F32/DT_F16/DT_BF16/DT_I8.../DT_I64/DT_F64 from backend/dtype.h;
                * -1 for a dtype cinfer has no id for (U8, BOOL, F8...) */
    int n_dims;
    int64_t ne[4]; /* ne[0] innermost = the LAST dim of the file's shape; unused dims 1 */
    const uint8_t *data;
    size_t nbytes;
    const char *st_dtype; /* the file's dtype string ("BF16", "F8_E4M3", ...) */
};

struct st_model; /* opaque: one or more mapped shard files */

/* path = a .safetensors file, or a HF model dir holding model.safetensors or
 * model.safetensors.index.json + shards. On success *out is owned by the caller. */
int st_open(struct st_model **out, const char *path, struct cerr *e);
/* Single file from memory (fuzzing, tests); data must outlive the result. */
int st_open_mem(struct st_model **out, const uint8_t *data, size_t size, const char *label,
                struct cerr *e);
void st_close(struct st_model *m);
int st_count(const struct st_model *m);
/* Tensor i (0 <= i < st_count), NULL when out of range. */
const struct st_tensor *st_get(const struct st_model *m, int i);
/* Tensor by exact name, NULL if absent. */
const struct st_tensor *st_find(const struct st_model *m, const char *name);

#endif
