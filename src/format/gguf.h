/* gguf.h — GGUF v2/v3 reader (mmap, zero-copy).
 *
 * gguf_open() maps the file and validates the whole header up front: every key/value,
 * every string and array length, every tensor's dims, type, offset and byte range must lie
 * inside the file, so later accessors never read out of bounds. A malformed or hostile
 * file yields an error naming the file and what is wrong. Strings point into the mapping
 * and are NOT NUL-terminated (use .len). The mapping lives until gguf_close().
 * Read-only after open: safe to share between threads.
 */
#ifndef CINFER_FORMAT_GGUF_H
#define CINFER_FORMAT_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"
#include "util/fs.h"

enum gguf_type {
    GGUF_UINT8 = 0,
    GGUF_INT8 = 1,
    GGUF_UINT16 = 2,
    GGUF_INT16 = 3,
    GGUF_UINT32 = 4,
    GGUF_INT32 = 5,
    GGUF_FLOAT32 = 6,
    GGUF_BOOL = 7,
    GGUF_STRING = 8,
    GGUF_ARRAY = 9,
    GGUF_UINT64 = 10,
    GGUF_INT64 = 11,
    GGUF_FLOAT64 = 12,
};

/* Returned by the gguf_get_* accessors when the key is not present. */
#define GGUF_ABSENT 1

struct gguf_str {
    const char *ptr; /* into the mapping; not NUL-terminated */
    uint64_t len;
};

struct gguf_kv {
    struct gguf_str key;
    int type; /* enum gguf_type */
    union {
        uint64_t u64;  /* UINT8..UINT64 */
        int64_t i64;   /* INT8..INT64 */
        double f64;    /* FLOAT32, FLOAT64 */
        int b;         /* BOOL */
        struct gguf_str str;
    } v;
    /* type == GGUF_ARRAY: */
    int arr_type;
    uint64_t arr_n;
    const uint8_t *arr_data;   /* first element in the mapping */
    const uint64_t *arr_offs;  /* string arrays: byte offset of element i from arr_data;
                                * arrays of arrays: offset of inner array i's header
                                * (u32 type, u64 count); NULL for numeric arrays */
};

struct gguf_tensor {
    struct gguf_str name;
    int n_dims;
    int64_t ne[4]; /* ne[0] innermost; unused dims are 1 */
    int dtype;     /* enum dtype (GGML type id), validated known */
    uint64_t offset;
    const uint8_t *data; /* inside the mapping, aligned */
    size_t nbytes;
};

struct gguf {
    struct fs_map map;   /* empty when opened from memory */
    const uint8_t *base;
    size_t size;
    uint32_t version;
    uint64_t n_kv, n_tensors;
    struct gguf_kv *kv;
    struct gguf_tensor *tensors;
    size_t alignment;
    char path[512];
    size_t data_offset;   /* start of the data section in the file (aligned) */
    /* private: open-addressing indexes (entry index + 1; 0 = empty) for the find calls */
    uint32_t *kv_idx, *t_idx;
    size_t kv_idx_cap, t_idx_cap;
};

/* Opens and validates path. On success *out owns the mapping. */
int gguf_open(struct gguf **out, const char *path, struct cerr *e);
/* Same over a caller-owned buffer (fuzzing, tests); data must outlive the result. */
int gguf_open_mem(struct gguf **out, const uint8_t *data, size_t size, const char *label,
                  struct cerr *e);
void gguf_close(struct gguf *g);

/* Key lookup by exact name; NULL if absent. */
const struct gguf_kv *gguf_find(const struct gguf *g, const char *key);
/* Typed accessors: 0 found (value converted), GGUF_ABSENT, or CERR_FORMAT when the value
 * has an incompatible type (message names the key and the types). */
int gguf_get_int(const struct gguf *g, const char *key, int64_t *out, struct cerr *e);
int gguf_get_float(const struct gguf *g, const char *key, double *out, struct cerr *e);
int gguf_get_bool(const struct gguf *g, const char *key, int *out, struct cerr *e);
int gguf_get_str(const struct gguf *g, const char *key, struct gguf_str *out, struct cerr *e);
/* Array accessor: on success *kv is the array entry (arr_type, arr_n). */
int gguf_get_arr(const struct gguf *g, const char *key, const struct gguf_kv **kv,
                 struct cerr *e);
/* Element i of an array kv (i < arr_n, checked by the caller). */
struct gguf_str gguf_arr_str(const struct gguf_kv *kv, uint64_t i);
double gguf_arr_num(const struct gguf_kv *kv, uint64_t i); /* any numeric/bool type */

const struct gguf_tensor *gguf_find_tensor(const struct gguf *g, const char *name);
/* 1 if s equals the NUL-terminated c. */
int gguf_str_eq(struct gguf_str s, const char *c);
/* "u32", "string", "array", ...; "?" for an unknown id. */
const char *gguf_type_name(int type);
/* Bytes of one value of a fixed-size type; 0 for string, array and unknown ids. */
size_t gguf_type_size(int type);

/* ---- split models ------------------------------------------------------------------
 * A model may be stored as N files named PREFIX-00001-of-0000N.gguf ... (llama.cpp's
 * gguf-split): each file carries split.no (0-based), split.count and its own tensors;
 * split 0 carries the model metadata (and split.tensors.count, the total). A plain file
 * is a model with one split. */
struct gguf_model {
    int n_splits;
    struct gguf **splits;    /* splits[0] holds the model metadata */
    uint64_t n_tensors;      /* over all splits */
    const struct gguf_tensor **tensors; /* split order, then file order */
    uint32_t *t_idx;         /* private: index into tensors (+1; 0 = empty) */
    size_t t_idx_cap;
};

/* Opens path and, when it is one split of a set (split.count > 1), every split of that
 * set (path may name any of them; the rest are found by the -NNNNN-of-NNNNN.gguf name).
 * Checks split.no/split.count of each file, that tensor names are unique across splits,
 * and split.tensors.count when present. On success *out owns every mapping. */
int gguf_model_open(struct gguf_model **out, const char *path, struct cerr *e);
void gguf_model_close(struct gguf_model *m);
/* The metadata file (split 0). */
const struct gguf *gguf_model_meta(const struct gguf_model *m);
/* Tensor by name over all splits; NULL if absent. */
const struct gguf_tensor *gguf_model_find_tensor(const struct gguf_model *m, const char *name);
/* Fills out (cap bytes) with the file name of split `no` (0-based) of `count` for a
 * path of any split in the set; CERR_INVALID when path has no -NNNNN-of-NNNNN.gguf
 * suffix, CERR_LIMIT when out is too small. */
int gguf_split_path(char *out, size_t cap, const char *path, int no, int count);

#endif
