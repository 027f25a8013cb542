/* gguf.c — GGUF v2/v3 reader: one validating pass over the header, then zero-copy access.
 *
 * Layout (little-endian): "GGUF", u32 version, u64 n_tensors, u64 n_kv, n_kv key/values,
 * n_tensors tensor infos, padding to general.alignment, data section. Every length and
 * count is checked against the bytes that remain BEFORE anything is allocated, so a
 * hostile count cannot make us allocate or loop beyond the file size. Not a writer; v1
 * files (u32 counts) are refused with a hint to re-convert. Assumes a little-endian host.
 */
#include "format/gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/dtype.h"

#define GGUF_MAX_DEPTH 8          /* nesting of arrays of arrays */
#define GGUF_MAX_COUNT (1u << 24) /* kv / tensor entries per file */
#define GGUF_DEFAULT_ALIGN 32

/* ---- cursor over the mapped header ---------------------------------------------- */

struct cur {
    const uint8_t *p;
    size_t size, pos;
    const char *path;
    struct cerr *e;
};

static size_t left(const struct cur *c) { return c->size - c->pos; }

static int trunc_err(struct cur *c, const char *what)
{
    return cerr_set(c->e, CERR_FORMAT, "%s: file truncated reading %s at offset %zu (size %zu)",
                    c->path, what, c->pos, c->size);
}

static int rd_bytes(struct cur *c, void *dst, size_t n, const char *what)
{
    if (left(c) < n) {
        memset(dst, 0, n);
        return trunc_err(c, what);
    }
    memcpy(dst, c->p + c->pos, n);
    c->pos += n;
    return 0;
}

static int rd_u32(struct cur *c, uint32_t *v, const char *what) { return rd_bytes(c, v, 4, what); }
static int rd_u64(struct cur *c, uint64_t *v, const char *what) { return rd_bytes(c, v, 8, what); }

static int rd_str(struct cur *c, struct gguf_str *s, const char *what)
{
    uint64_t n = 0;
    int rc = rd_u64(c, &n, what);
    if (rc)
        return rc;
    if (n > left(c))
        return cerr_set(c->e, CERR_FORMAT,
                        "%s: %s length %llu at offset %zu runs past end of file (size %zu)",
                        c->path, what, (unsigned long long)n, c->pos - 8, c->size);
    s->ptr = (const char *)(c->p + c->pos);
    s->len = n;
    c->pos += (size_t)n;
    return 0;
}

/* ---- value types ------------------------------------------------------------------ */

const char *gguf_type_name(int t)
{
    static const char *names[] = {"u8",  "i8",   "u16",    "i16",   "u32", "i32",  "f32",
                                  "bool", "string", "array", "u64", "i64", "f64"};
    return (t >= 0 && t <= GGUF_FLOAT64) ? names[t] : "?";
}

size_t gguf_type_size(int t)
{
    switch (t) {
    case GGUF_UINT8: case GGUF_INT8: case GGUF_BOOL: return 1;
    case GGUF_UINT16: case GGUF_INT16: return 2;
    case GGUF_UINT32: case GGUF_INT32: case GGUF_FLOAT32: return 4;
    case GGUF_UINT64: case GGUF_INT64: case GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

/* Smallest encoding of one value of type t: bounds element counts before looping. */
static size_t min_size(int t)
{
    if (t == GGUF_STRING)
        return 8;
    if (t == GGUF_ARRAY)
        return 12;
    return gguf_type_size(t);
}

static int valid_type(uint32_t t) { return t <= GGUF_FLOAT64; }

/* Reads a scalar of fixed-size type t at q into kv->v. */
static void load_scalar(struct gguf_kv *kv, int t, const uint8_t *q)
{
    uint8_t u8; uint16_t u16; uint32_t u32; uint64_t u64; float f32; double f64;
    switch (t) {
    case GGUF_UINT8: kv->v.u64 = q[0]; break;
    case GGUF_INT8: kv->v.i64 = (int8_t)q[0]; break;
    case GGUF_BOOL: memcpy(&u8, q, 1); kv->v.b = u8 != 0; break;
    case GGUF_UINT16: memcpy(&u16, q, 2); kv->v.u64 = u16; break;
    case GGUF_INT16: memcpy(&u16, q, 2); kv->v.i64 = (int16_t)u16; break;
    case GGUF_UINT32: memcpy(&u32, q, 4); kv->v.u64 = u32; break;
    case GGUF_INT32: memcpy(&u32, q, 4); kv->v.i64 = (int32_t)u32; break;
    case GGUF_FLOAT32: memcpy(&f32, q, 4); kv->v.f64 = f32; break;
    case GGUF_UINT64: memcpy(&u64, q, 8); kv->v.u64 = u64; break;
    case GGUF_INT64: memcpy(&u64, q, 8); kv->v.i64 = (int64_t)u64; break;
    case GGUF_FLOAT64: memcpy(&f64, q, 8); kv->v.f64 = f64; break;
    default: break;
    }
}

/* Validates and skips an array body (element type + count + elements). When offs is
 * non-NULL (string or array elements), *offs receives a malloc'd table of element offsets
 * relative to the first element. */
static int skip_array(struct cur *c, int depth, uint32_t *arr_type, uint64_t *arr_n,
                      size_t *first, uint64_t **offs)
{
    uint32_t t = 0;
    uint64_t n = 0;
    int rc;
    if (depth > GGUF_MAX_DEPTH)
        return cerr_set(c->e, CERR_FORMAT, "%s: arrays nested deeper than %d at offset %zu",
                        c->path, GGUF_MAX_DEPTH, c->pos);
    if ((rc = rd_u32(c, &t, "array type")) || (rc = rd_u64(c, &n, "array length")))
        return rc;
    if (!valid_type(t))
        return cerr_set(c->e, CERR_FORMAT, "%s: array element type %u at offset %zu is not a GGUF type",
                        c->path, t, c->pos - 12);
    size_t ms = min_size((int)t);
    if (n > left(c) / ms)
        return cerr_set(c->e, CERR_FORMAT,
                        "%s: array of %llu %s at offset %zu runs past end of file (size %zu)",
                        c->path, (unsigned long long)n, gguf_type_name((int)t), c->pos - 12, c->size);
    *arr_type = t;
    *arr_n = n;
    *first = c->pos;
    if (t != GGUF_STRING && t != GGUF_ARRAY) {
        c->pos += (size_t)n * ms;
        return 0;
    }
    uint64_t *tab = NULL;
    if (offs) {
        tab = malloc((n ? n : 1) * sizeof *tab);
        if (!tab)
            return cerr_set(c->e, CERR_NOMEM, "%s: out of memory for an array of %llu entries",
                            c->path, (unsigned long long)n);
    }
    for (uint64_t i = 0; i < n; i++) {
        if (tab)
            tab[i] = c->pos - *first;
        if (t == GGUF_STRING) {
            struct gguf_str s;
            rc = rd_str(c, &s, "array string");
        } else {
            uint32_t it = 0;
            uint64_t in = 0;
            size_t ifirst = 0;
            rc = skip_array(c, depth + 1, &it, &in, &ifirst, NULL);
        }
        if (rc) {
            free(tab);
            return rc;
        }
    }
    if (offs)
        *offs = tab;
    return 0;
}

/* ---- hash index (duplicate detection + O(1) lookup) ------------------------------- */

static uint64_t hash_bytes(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)p[i]) * 1099511628211ull;
    return h;
}

static size_t idx_cap_for(uint64_t n)
{
    size_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    return cap;
}

static int str_eq2(struct gguf_str a, const char *p, size_t n)
{
    return a.len == n && memcmp(a.ptr, p, n) == 0;
}

/* Inserts entry i (1-based stored) with name s; returns the index of an existing entry
 * with the same name, or -1 when inserted. */
static int64_t idx_insert(uint32_t *tab, size_t cap, struct gguf_str s, uint32_t i,
                          const struct gguf_str *(*name_of)(const void *, uint32_t), const void *arr)
{
    size_t h = (size_t)hash_bytes(s.ptr, (size_t)s.len) & (cap - 1);
    while (tab[h]) {
        if (str_eq2(*name_of(arr, tab[h] - 1), s.ptr, (size_t)s.len))
            return tab[h] - 1;
        h = (h + 1) & (cap - 1);
    }
    tab[h] = i + 1;
    return -1;
}

static const struct gguf_str *kv_name(const void *arr, uint32_t i)
{
    return &((const struct gguf_kv *)arr)[i].key;
}

static const struct gguf_str *t_name(const void *arr, uint32_t i)
{
    return &((const struct gguf_tensor *)arr)[i].name;
}

static int64_t idx_lookup(const uint32_t *tab, size_t cap, const char *key,
                          const struct gguf_str *(*name_of)(const void *, uint32_t), const void *arr)
{
    if (!tab || !key)
        return -1;
    size_t n = strlen(key);
    size_t h = (size_t)hash_bytes(key, n) & (cap - 1);
    while (tab[h]) {
        if (str_eq2(*name_of(arr, tab[h] - 1), key, n))
            return tab[h] - 1;
        h = (h + 1) & (cap - 1);
    }
    return -1;
}

/* ---- parse ------------------------------------------------------------------------- */

static int parse_kv(struct gguf *g, struct cur *c)
{
    int rc;
    g->kv = calloc(g->n_kv ? g->n_kv : 1, sizeof *g->kv);
    g->kv_idx_cap = idx_cap_for(g->n_kv);
    g->kv_idx = calloc(g->kv_idx_cap, sizeof *g->kv_idx);
    if (!g->kv || !g->kv_idx)
        return cerr_set(c->e, CERR_NOMEM, "%s: out of memory for %llu metadata entries", g->path,
                        (unsigned long long)g->n_kv);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        struct gguf_kv *kv = &g->kv[i];
        uint32_t t;
        if ((rc = rd_str(c, &kv->key, "metadata key")) || (rc = rd_u32(c, &t, "metadata type")))
            return rc;
        int klen = kv->key.len > 80 ? 80 : (int)kv->key.len;
        if (!valid_type(t))
            return cerr_set(c->e, CERR_FORMAT, "%s: key '%.*s' has unknown value type %u",
                            g->path, klen, kv->key.ptr, t);
        kv->type = (int)t;
        int64_t dup = idx_insert(g->kv_idx, g->kv_idx_cap, kv->key, (uint32_t)i, kv_name, g->kv);
        if (dup >= 0)
            return cerr_set(c->e, CERR_FORMAT, "%s: duplicate metadata key '%.*s'", g->path, klen,
                            kv->key.ptr);
        if (t == GGUF_STRING) {
            if ((rc = rd_str(c, &kv->v.str, "metadata string")))
                return cerr_prefix(c->e, "key '%.*s'", klen, kv->key.ptr), rc;
        } else if (t == GGUF_ARRAY) {
            uint32_t at;
            size_t first;
            uint64_t *offs = NULL;
            rc = skip_array(c, 1, &at, &kv->arr_n, &first, &offs);
            if (rc)
                return cerr_prefix(c->e, "key '%.*s'", klen, kv->key.ptr), rc;
            kv->arr_type = (int)at;
            kv->arr_data = c->p + first;
            kv->arr_offs = offs;
        } else {
            size_t sz = gguf_type_size((int)t);
            if (left(c) < sz)
                return trunc_err(c, "metadata value");
            load_scalar(kv, (int)t, c->p + c->pos);
            c->pos += sz;
        }
    }
    return 0;
}

static int parse_alignment(struct gguf *g, struct cerr *e)
{
    g->alignment = GGUF_DEFAULT_ALIGN;
    const struct gguf_kv *kv = gguf_find(g, "general.alignment");
    if (!kv)
        return 0;
    uint64_t a;
    if (kv->type == GGUF_UINT8 || kv->type == GGUF_UINT16 || kv->type == GGUF_UINT32 ||
        kv->type == GGUF_UINT64)
        a = kv->v.u64;
    else if (kv->type == GGUF_INT8 || kv->type == GGUF_INT16 || kv->type == GGUF_INT32 ||
             kv->type == GGUF_INT64)
        a = kv->v.i64 < 0 ? 0 : (uint64_t)kv->v.i64;
    else
        return cerr_set(e, CERR_FORMAT, "%s: general.alignment has type %s, expected an integer",
                        g->path, gguf_type_name(kv->type));
    if (a == 0 || (a & (a - 1)) || a > (1u << 30))
        return cerr_set(e, CERR_FORMAT,
                        "%s: general.alignment %llu is not a power of two in [1, 2^30]", g->path,
                        (unsigned long long)a);
    g->alignment = (size_t)a;
    return 0;
}

/* Names of GGML type ids that cinfer has no kernels for, for a better message. */
static const char *ggml_other_type(uint32_t t)
{
    static const char *names[] = {
        [4] = "Q4_2 (removed)", [5] = "Q4_3 (removed)", [16] = "IQ2_XXS", [17] = "IQ2_XS",
        [18] = "IQ3_XXS", [19] = "IQ1_S", [20] = "IQ4_NL", [21] = "IQ3_S", [22] = "IQ2_S",
        [23] = "IQ4_XS", [29] = "IQ1_M", [31] = "Q4_0_4_4", [32] = "Q4_0_4_8",
        [33] = "Q4_0_8_8", [34] = "TQ1_0", [35] = "TQ2_0", [36] = "IQ4_NL_4_4",
        [37] = "IQ4_NL_4_8", [38] = "IQ4_NL_8_8", [39] = "MXFP4",
    };
    return (t < sizeof names / sizeof names[0] && names[t]) ? names[t] : NULL;
}

static int parse_tensor_info(struct gguf *g, struct cur *c, uint64_t i)
{
    struct gguf_tensor *t = &g->tensors[i];
    uint32_t nd = 0, ty = 0;
    int rc;
    if ((rc = rd_str(c, &t->name, "tensor name")))
        return rc;
    int nl = t->name.len > 80 ? 80 : (int)t->name.len;
    if ((rc = rd_u32(c, &nd, "tensor n_dims")))
        return rc;
    if (nd > 4)
        return cerr_set(c->e, CERR_FORMAT, "%s: tensor '%.*s' has %u dims (at most 4)", g->path,
                        nl, t->name.ptr, nd);
    t->n_dims = (int)nd;
    int64_t nel = 1;
    for (int d = 0; d < 4; d++) {
        uint64_t v = 1;
        if ((uint32_t)d < nd && (rc = rd_u64(c, &v, "tensor dims")))
            return rc;
        if (v < 1 || v > (uint64_t)INT64_MAX)
            return cerr_set(c->e, CERR_FORMAT, "%s: tensor '%.*s' dim %d is %llu (must be >= 1)",
                            g->path, nl, t->name.ptr, d, (unsigned long long)v);
        t->ne[d] = (int64_t)v;
        if (__builtin_mul_overflow(nel, t->ne[d], &nel))
            return cerr_set(c->e, CERR_FORMAT, "%s: tensor '%.*s' element count overflows",
                            g->path, nl, t->name.ptr);
    }
    if ((rc = rd_u32(c, &ty, "tensor type")) || (rc = rd_u64(c, &t->offset, "tensor offset")))
        return rc;
    if (dtype_block_elems((int)ty) == 0) {
        const char *o = ggml_other_type(ty);
        if (o)
            return cerr_set(c->e, CERR_UNSUPPORTED,
                            "%s: tensor '%.*s' has GGML type %s (id %u), which cinfer does not support",
                            g->path, nl, t->name.ptr, o, ty);
        return cerr_set(c->e, CERR_FORMAT, "%s: tensor '%.*s' has unknown GGML type id %u",
                        g->path, nl, t->name.ptr, ty);
    }
    t->dtype = (int)ty;
    size_t row = dtype_row_bytes(t->dtype, t->ne[0]);
    if (row == 0)
        return cerr_set(c->e, CERR_FORMAT,
                        "%s: tensor '%.*s' ne[0] = %lld is not a multiple of the %s block size %d",
                        g->path, nl, t->name.ptr, (long long)t->ne[0], dtype_name(t->dtype),
                        dtype_block_elems(t->dtype));
    int64_t rows = nel / t->ne[0];
    size_t nb;
    if (__builtin_mul_overflow(row, (size_t)rows, &nb))
        return cerr_set(c->e, CERR_FORMAT, "%s: tensor '%.*s' byte size overflows", g->path, nl,
                        t->name.ptr);
    t->nbytes = nb;
    int64_t dup = idx_insert(g->t_idx, g->t_idx_cap, t->name, (uint32_t)i, t_name, g->tensors);
    if (dup >= 0)
        return cerr_set(c->e, CERR_FORMAT, "%s: duplicate tensor name '%.*s'", g->path, nl,
                        t->name.ptr);
    return 0;
}

static int cmp_off(const void *a, const void *b)
{
    const struct gguf_tensor *x = *(const struct gguf_tensor *const *)a;
    const struct gguf_tensor *y = *(const struct gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Places every tensor in the data section: aligned, inside the file, no overlap. */
static int place_tensors(struct gguf *g, size_t data_start, struct cerr *e)
{
    if (g->n_tensors == 0)
        return 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        struct gguf_tensor *t = &g->tensors[i];
        int nl = t->name.len > 80 ? 80 : (int)t->name.len;
        if (t->offset % g->alignment)
            return cerr_set(e, CERR_FORMAT,
                            "%s: tensor '%.*s' offset %llu is not a multiple of the alignment %zu",
                            g->path, nl, t->name.ptr, (unsigned long long)t->offset, g->alignment);
        uint64_t end;
        if (data_start > g->size || t->offset > g->size - data_start ||
            __builtin_add_overflow(t->offset, (uint64_t)t->nbytes, &end) ||
            end > g->size - data_start)
            return cerr_set(e, CERR_FORMAT,
                            "%s: tensor '%.*s' data range [%llu, %llu) exceeds file size %zu",
                            g->path, nl, t->name.ptr,
                            (unsigned long long)(data_start + t->offset),
                            (unsigned long long)(data_start + t->offset + t->nbytes), g->size);
        t->data = g->base + data_start + t->offset;
    }
    const struct gguf_tensor **order = malloc(g->n_tensors * sizeof *order);
    if (!order)
        return cerr_set(e, CERR_NOMEM, "%s: out of memory", g->path);
    for (uint64_t i = 0; i < g->n_tensors; i++)
        order[i] = &g->tensors[i];
    qsort(order, g->n_tensors, sizeof *order, cmp_off);
    int rc = 0;
    for (uint64_t i = 1; i < g->n_tensors && !rc; i++) {
        const struct gguf_tensor *a = order[i - 1], *b = order[i];
        if (a->offset + a->nbytes > b->offset)
            rc = cerr_set(e, CERR_FORMAT, "%s: tensors '%.*s' and '%.*s' overlap in the data section",
                          g->path, a->name.len > 80 ? 80 : (int)a->name.len, a->name.ptr,
                          b->name.len > 80 ? 80 : (int)b->name.len, b->name.ptr);
    }
    free(order);
    return rc;
}

static int parse(struct gguf *g, struct cerr *e)
{
    struct cur c = {g->base, g->size, 0, g->path, e};
    uint8_t magic[4];
    uint32_t ver = 0;
    int rc;
    if (g->size < 4)
        return cerr_set(e, CERR_FORMAT, "%s: not a GGUF file (only %zu bytes)", g->path, g->size);
    rd_bytes(&c, magic, 4, "magic");
    if (memcmp(magic, "GGUF", 4) != 0)
        return cerr_set(e, CERR_FORMAT, "%s: not a GGUF file (bad magic %02x %02x %02x %02x)",
                        g->path, magic[0], magic[1], magic[2], magic[3]);
    if ((rc = rd_u32(&c, &ver, "version")))
        return rc;
    if (ver == 1)
        return cerr_set(e, CERR_UNSUPPORTED,
                        "%s: GGUF version 1 is not supported; re-convert the model with a current llama.cpp",
                        g->path);
    if (ver == 0x02000000u || ver == 0x03000000u)
        return cerr_set(e, CERR_UNSUPPORTED, "%s: big-endian GGUF files are not supported", g->path);
    if (ver != 2 && ver != 3)
        return cerr_set(e, CERR_UNSUPPORTED, "%s: GGUF version %u is not supported (2 or 3)",
                        g->path, ver);
    g->version = ver;
    if ((rc = rd_u64(&c, &g->n_tensors, "tensor count")) || (rc = rd_u64(&c, &g->n_kv, "kv count")))
        return rc;
    /* Each kv takes >= 13 bytes (key length, type, 1-byte value), each tensor >= 24. */
    if (g->n_kv > left(&c) / 13 || g->n_kv > GGUF_MAX_COUNT)
        return cerr_set(e, CERR_FORMAT, "%s: metadata count %llu is impossible for a file of %zu bytes",
                        g->path, (unsigned long long)g->n_kv, g->size);
    if (g->n_tensors > left(&c) / 24 || g->n_tensors > GGUF_MAX_COUNT)
        return cerr_set(e, CERR_FORMAT, "%s: tensor count %llu is impossible for a file of %zu bytes",
                        g->path, (unsigned long long)g->n_tensors, g->size);
    if ((rc = parse_kv(g, &c)) || (rc = parse_alignment(g, e)))
        return rc;
    g->tensors = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *g->tensors);
    g->t_idx_cap = idx_cap_for(g->n_tensors);
    g->t_idx = calloc(g->t_idx_cap, sizeof *g->t_idx);
    if (!g->tensors || !g->t_idx)
        return cerr_set(e, CERR_NOMEM, "%s: out of memory for %llu tensors", g->path,
                        (unsigned long long)g->n_tensors);
    if (g->n_tensors > left(&c) / 24)
        return cerr_set(e, CERR_FORMAT, "%s: tensor count %llu is impossible for a file of %zu bytes",
                        g->path, (unsigned long long)g->n_tensors, g->size);
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if ((rc = parse_tensor_info(g, &c, i)))
            return rc;
    size_t data_start = c.pos + (g->alignment - c.pos % g->alignment) % g->alignment;
    g->data_offset = data_start;
    return place_tensors(g, data_start, e);
}

/* ---- public ------------------------------------------------------------------------ */

static int open_common(struct gguf **out, struct gguf *g, struct cerr *e)
{
    int rc = parse(g, e);
    if (rc) {
        gguf_close(g);
        return rc;
    }
    *out = g;
    return 0;
}

static void set_path(struct gguf *g, const char *path)
{
    snprintf(g->path, sizeof g->path, "%s", path ? path : "(memory)");
}

int gguf_open(struct gguf **out, const char *path, struct cerr *e)
{
    *out = NULL;
    struct gguf *g = calloc(1, sizeof *g);
    if (!g)
        return cerr_set(e, CERR_NOMEM, "%s: out of memory", path);
    set_path(g, path);
    int rc = fs_map(&g->map, path, e);
    if (rc) {
        free(g);
        return rc;
    }
    g->base = g->map.data;
    g->size = g->map.size;
    return open_common(out, g, e);
}

int gguf_open_mem(struct gguf **out, const uint8_t *data, size_t size, const char *label,
                  struct cerr *e)
{
    *out = NULL;
    struct gguf *g = calloc(1, sizeof *g);
    if (!g)
        return cerr_set(e, CERR_NOMEM, "%s: out of memory", label ? label : "(memory)");
    set_path(g, label);
    g->base = data;
    g->size = data ? size : 0;
    return open_common(out, g, e);
}

void gguf_close(struct gguf *g)
{
    if (!g)
        return;
    if (g->kv)
        for (uint64_t i = 0; i < g->n_kv; i++)
            free((void *)g->kv[i].arr_offs);
    free(g->kv);
    free(g->tensors);
    free(g->kv_idx);
    free(g->t_idx);
    fs_unmap(&g->map);
    free(g);
}

const struct gguf_kv *gguf_find(const struct gguf *g, const char *key)
{
    int64_t i = idx_lookup(g->kv_idx, g->kv_idx_cap, key, kv_name, g->kv);
    return i < 0 ? NULL : &g->kv[i];
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf *g, const char *name)
{
    int64_t i = idx_lookup(g->t_idx, g->t_idx_cap, name, t_name, g->tensors);
    return i < 0 ? NULL : &g->tensors[i];
}

int gguf_str_eq(struct gguf_str s, const char *c)
{
    return c && str_eq2(s, c, strlen(c));
}

static int is_uint(int t)
{
    return t == GGUF_UINT8 || t == GGUF_UINT16 || t == GGUF_UINT32 || t == GGUF_UINT64;
}

static int is_sint(int t)
{
    return t == GGUF_INT8 || t == GGUF_INT16 || t == GGUF_INT32 || t == GGUF_INT64;
}

static int type_err(const struct gguf *g, const char *key, const struct gguf_kv *kv,
                    const char *want, struct cerr *e)
{
    return cerr_set(e, CERR_FORMAT, "%s: key '%s' has type %s, expected %s", g->path, key,
                    gguf_type_name(kv->type), want);
}

int gguf_get_int(const struct gguf *g, const char *key, int64_t *out, struct cerr *e)
{
    const struct gguf_kv *kv = gguf_find(g, key);
    if (!kv)
        return GGUF_ABSENT;
    if (is_sint(kv->type)) {
        *out = kv->v.i64;
        return 0;
    }
    if (is_uint(kv->type)) {
        if (kv->v.u64 > (uint64_t)INT64_MAX)
            return cerr_set(e, CERR_FORMAT, "%s: key '%s' value %llu does not fit in int64",
                            g->path, key, (unsigned long long)kv->v.u64);
        *out = (int64_t)kv->v.u64;
        return 0;
    }
    return type_err(g, key, kv, "an integer", e);
}

int gguf_get_float(const struct gguf *g, const char *key, double *out, struct cerr *e)
{
    const struct gguf_kv *kv = gguf_find(g, key);
    if (!kv)
        return GGUF_ABSENT;
    if (kv->type == GGUF_FLOAT32 || kv->type == GGUF_FLOAT64)
        *out = kv->v.f64;
    else if (is_sint(kv->type))
        *out = (double)kv->v.i64;
    else if (is_uint(kv->type))
        *out = (double)kv->v.u64;
    else
        return type_err(g, key, kv, "a number", e);
    return 0;
}

int gguf_get_bool(const struct gguf *g, const char *key, int *out, struct cerr *e)
{
    const struct gguf_kv *kv = gguf_find(g, key);
    if (!kv)
        return GGUF_ABSENT;
    if (kv->type != GGUF_BOOL)
        return type_err(g, key, kv, "bool", e);
    *out = kv->v.b;
    return 0;
}

int gguf_get_str(const struct gguf *g, const char *key, struct gguf_str *out, struct cerr *e)
{
    const struct gguf_kv *kv = gguf_find(g, key);
    if (!kv)
        return GGUF_ABSENT;
    if (kv->type != GGUF_STRING)
        return type_err(g, key, kv, "string", e);
    *out = kv->v.str;
    return 0;
}

int gguf_get_arr(const struct gguf *g, const char *key, const struct gguf_kv **out,
                 struct cerr *e)
{
    const struct gguf_kv *kv = gguf_find(g, key);
    if (!kv)
        return GGUF_ABSENT;
    if (kv->type != GGUF_ARRAY)
        return type_err(g, key, kv, "array", e);
    *out = kv;
    return 0;
}

struct gguf_str gguf_arr_str(const struct gguf_kv *kv, uint64_t i)
{
    struct gguf_str s = {"", 0};
    if (kv->type != GGUF_ARRAY || kv->arr_type != GGUF_STRING || i >= kv->arr_n || !kv->arr_offs)
        return s;
    const uint8_t *q = kv->arr_data + kv->arr_offs[i];
    memcpy(&s.len, q, 8);
    s.ptr = (const char *)q + 8;
    return s;
}

double gguf_arr_num(const struct gguf_kv *kv, uint64_t i)
{
    if (kv->type != GGUF_ARRAY || i >= kv->arr_n)
        return 0;
    size_t sz = gguf_type_size(kv->arr_type);
    if (!sz)
        return 0;
    struct gguf_kv tmp;
    memset(&tmp, 0, sizeof tmp);
    load_scalar(&tmp, kv->arr_type, kv->arr_data + i * sz);
    switch (kv->arr_type) {
    case GGUF_UINT8: case GGUF_UINT16: case GGUF_UINT32: case GGUF_UINT64:
        return (double)tmp.v.u64;
    case GGUF_INT8: case GGUF_INT16: case GGUF_INT32: case GGUF_INT64:
        return (double)tmp.v.i64;
    case GGUF_BOOL:
        return tmp.v.b;
    default:
        return tmp.v.f64;
    }
}

/* ---- split models ------------------------------------------------------------------ */

#define GGUF_MAX_SPLITS 9999

int gguf_split_path(char *out, size_t cap, const char *path, int no, int count)
{
    /* suffix: "-NNNNN-of-NNNNN.gguf" = 20 characters */
    size_t l = strlen(path);
    if (l < 20 || strcmp(path + l - 5, ".gguf") != 0 || path[l - 20] != '-' ||
        memcmp(path + l - 14, "-of-", 4) != 0)
        return CERR_INVALID;
    for (size_t i = 0; i < 5; i++)
        if (path[l - 19 + i] < '0' || path[l - 19 + i] > '9' || path[l - 10 + i] < '0' ||
            path[l - 10 + i] > '9')
            return CERR_INVALID;
    int n = snprintf(out, cap, "%.*s-%05d-of-%05d.gguf", (int)(l - 20), path, no + 1, count);
    return (n < 0 || (size_t)n >= cap) ? CERR_LIMIT : 0;
}

/* split.no / split.count of g: (0, 1) when absent. */
static int split_info(const struct gguf *g, int64_t *no, int64_t *count, struct cerr *e)
{
    *no = 0;
    *count = 1;
    int rc = gguf_get_int(g, "split.count", count, e);
    if (rc < 0)
        return rc;
    rc = gguf_get_int(g, "split.no", no, e);
    if (rc < 0)
        return rc;
    if (*count < 1 || *count > GGUF_MAX_SPLITS || *no < 0 || *no >= *count)
        return cerr_set(e, CERR_FORMAT, "%s: split.no %lld / split.count %lld out of range",
                        g->path, (long long)*no, (long long)*count);
    return 0;
}

static int model_index(struct gguf_model *m, struct cerr *e)
{
    uint64_t n = 0;
    for (int i = 0; i < m->n_splits; i++)
        n += m->splits[i]->n_tensors;
    m->n_tensors = n;
    m->tensors = calloc(n ? n : 1, sizeof *m->tensors);
    m->t_idx_cap = idx_cap_for(n);
    m->t_idx = calloc(m->t_idx_cap, sizeof *m->t_idx);
    if (!m->tensors || !m->t_idx)
        return cerr_set(e, CERR_NOMEM, "%s: out of memory", m->splits[0]->path);
    uint64_t k = 0;
    for (int i = 0; i < m->n_splits; i++)
        for (uint64_t j = 0; j < m->splits[i]->n_tensors; j++) {
            const struct gguf_tensor *t = &m->splits[i]->tensors[j];
            size_t h = (size_t)hash_bytes(t->name.ptr, (size_t)t->name.len) & (m->t_idx_cap - 1);
            while (m->t_idx[h]) {
                if (str_eq2(m->tensors[m->t_idx[h] - 1]->name, t->name.ptr, (size_t)t->name.len))
                    return cerr_set(e, CERR_FORMAT, "%s: tensor '%.*s' also appears in another split",
                                    m->splits[i]->path, t->name.len > 80 ? 80 : (int)t->name.len,
                                    t->name.ptr);
                h = (h + 1) & (m->t_idx_cap - 1);
            }
            m->tensors[k] = t;
            m->t_idx[h] = (uint32_t)k + 1;
            k++;
        }
    int64_t total;
    int rc = gguf_get_int(m->splits[0], "split.tensors.count", &total, e);
    if (rc < 0)
        return rc;
    if (rc == 0 && m->n_splits > 1 && (uint64_t)total != n)
        return cerr_set(e, CERR_FORMAT, "%s: split.tensors.count is %lld but the %d splits hold %llu tensors",
                        m->splits[0]->path, (long long)total, m->n_splits, (unsigned long long)n);
    return 0;
}

int gguf_model_open(struct gguf_model **out, const char *path, struct cerr *e)
{
    *out = NULL;
    struct gguf_model *m = calloc(1, sizeof *m);
    struct gguf *first = NULL;
    if (!m)
        return cerr_set(e, CERR_NOMEM, "%s: out of memory", path);
    int rc = gguf_open(&first, path, e);
    int64_t no = 0, count = 1;
    if (!rc)
        rc = split_info(first, &no, &count, e);
    if (!rc) {
        m->splits = calloc((size_t)count, sizeof *m->splits);
        if (!m->splits)
            rc = cerr_set(e, CERR_NOMEM, "%s: out of memory", path);
    }
    if (rc) {
        gguf_close(first);
        free(m);
        return rc;
    }
    m->n_splits = (int)count;
    m->splits[no] = first;
    char sp[sizeof first->path];
    for (int i = 0; i < m->n_splits && !rc; i++) {
        if (m->splits[i])
            continue;
        if (gguf_split_path(sp, sizeof sp, path, i, (int)count)) {
            rc = cerr_set(e, CERR_FORMAT,
                          "%s: split %lld of %lld, but the name has no -NNNNN-of-NNNNN.gguf suffix to find the others",
                          path, (long long)no + 1, (long long)count);
            break;
        }
        if ((rc = gguf_open(&m->splits[i], sp, e)))
            break;
        int64_t sno, scount;
        if ((rc = split_info(m->splits[i], &sno, &scount, e)))
            break;
        if (sno != i || scount != count)
            rc = cerr_set(e, CERR_FORMAT, "%s: split.no %lld / split.count %lld, expected %d / %lld",
                          sp, (long long)sno, (long long)scount, i, (long long)count);
    }
    if (!rc)
        rc = model_index(m, e);
    if (rc) {
        gguf_model_close(m);
        return rc;
    }
    *out = m;
    return 0;
}

void gguf_model_close(struct gguf_model *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->n_splits; i++)
        gguf_close(m->splits ? m->splits[i] : NULL);
    free(m->splits);
    free(m->tensors);
    free(m->t_idx);
    free(m);
}

const struct gguf *gguf_model_meta(const struct gguf_model *m) { return m->splits[0]; }

const struct gguf_tensor *gguf_model_find_tensor(const struct gguf_model *m, const char *name)
{
    if (!m->t_idx || !name)
        return NULL;
    size_t n = strlen(name);
    size_t h = (size_t)hash_bytes(name, n) & (m->t_idx_cap - 1);
    while (m->t_idx[h]) {
        const struct gguf_tensor *t = m->tensors[m->t_idx[h] - 1];
        if (str_eq2(t->name, name, n))
            return t;
        h = (h + 1) & (m->t_idx_cap - 1);
    }
    return NULL;
}
