/* safetensors.c — safetensors reader: mmap each shard, validate its JSON header, index.
 *
 * File: u64 LE header length N, N bytes of JSON {name: {dtype, shape, data_offsets}, ...,
 * "__metadata__": {...}}, then the data section; offsets are relative to its start.
 * A model is one file, a HF dir with model.safetensors, a dir with
 * model.safetensors.index.json (weight_map name -> shard file), or, failing both, every
 * *.safetensors file in the dir. Duplicate tensor names (in or across shards) are errors.
 */
#include "format/safetensors.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/dtype.h"
#include "util/fs.h"

#define ST_MAX_HEADER (100u << 20)
#define ST_MAX_SHARDS 4096

struct st_shard {
    struct fs_map map; /* empty when opened from memory */
    const uint8_t *base;
    size_t size;
    json_t *hdr; /* owns the name and dtype strings */
    char path[1024];
};

struct st_model {
    struct st_shard *shards;
    int n_shards;
    struct st_tensor *t;
    int n, cap;
    int *shard_of; /* shard index of tensor i */
    uint32_t *idx; /* open addressing: tensor index + 1, 0 = empty */
    size_t idx_cap;
};

/* ---- dtypes ----------------------------------------------------------------------- */

static const struct {
    const char *name;
    int dt;
    int size;
} k_dtypes[] = {
    {"F64", DT_F64, 8},  {"F32", DT_F32, 4},   {"F16", DT_F16, 2},      {"BF16", DT_BF16, 2},
    {"I64", DT_I64, 8},  {"I32", DT_I32, 4},   {"I16", DT_I16, 2},      {"I8", DT_I8, 1},
    {"U64", -1, 8},      {"U32", -1, 4},       {"U16", -1, 2},          {"U8", -1, 1},
    {"BOOL", -1, 1},     {"F8_E4M3", -1, 1},   {"F8_E5M2", -1, 1},      {"F8_E8M0", -1, 1},
};

static int find_dtype(const char *s, int *dt, int *size)
{
    for (size_t i = 0; i < sizeof k_dtypes / sizeof k_dtypes[0]; i++)
        if (strcmp(s, k_dtypes[i].name) == 0) {
            *dt = k_dtypes[i].dt;
            *size = k_dtypes[i].size;
            return 1;
        }
    return 0;
}

/* ---- name index -------------------------------------------------------------------- */

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static int64_t idx_find(const struct st_model *m, const char *name)
{
    if (!m->idx || !name)
        return -1;
    size_t h = (size_t)hash_str(name) & (m->idx_cap - 1);
    while (m->idx[h]) {
        if (strcmp(m->t[m->idx[h] - 1].name, name) == 0)
            return m->idx[h] - 1;
        h = (h + 1) & (m->idx_cap - 1);
    }
    return -1;
}

/* Rebuilds the index for n tensors; returns the index of a duplicate name or -1. */
static int64_t idx_build(struct st_model *m, int *dup_other, int *err)
{
    size_t cap = 16;
    while (cap < 2 * (size_t)m->n)
        cap *= 2;
    free(m->idx);
    m->idx = calloc(cap, sizeof *m->idx);
    m->idx_cap = cap;
    *err = !m->idx;
    if (!m->idx)
        return -1;
    for (int i = 0; i < m->n; i++) {
        size_t h = (size_t)hash_str(m->t[i].name) & (cap - 1);
        while (m->idx[h]) {
            if (strcmp(m->t[m->idx[h] - 1].name, m->t[i].name) == 0) {
                *dup_other = (int)m->idx[h] - 1;
                return i;
            }
            h = (h + 1) & (cap - 1);
        }
        m->idx[h] = (uint32_t)i + 1;
    }
    return -1;
}

/* ---- one shard ----------------------------------------------------------------------- */

static int grow(struct st_model *m, int more, const char *path, struct cerr *e)
{
    if (m->n + more <= m->cap)
        return 0;
    int cap = m->cap ? m->cap : 64;
    while (cap < m->n + more)
        cap *= 2;
    struct st_tensor *t = realloc(m->t, (size_t)cap * sizeof *t);
    if (t)
        m->t = t;
    int *so = realloc(m->shard_of, (size_t)cap * sizeof *so);
    if (so)
        m->shard_of = so;
    if (!t || !so)
        return cerr_set(e, CERR_NOMEM, "%s: out of memory for %d tensors", path, cap);
    m->cap = cap;
    return 0;
}

/* Parses one tensor entry of shard s; data is the data section of dsz bytes. */
static int parse_entry(struct st_tensor *t, const char *name, json_t *v, const uint8_t *data,
                       size_t dsz, const char *path, struct cerr *e)
{
    memset(t, 0, sizeof *t);
    t->name = name;
    if (!json_is_object(v))
        return cerr_set(e, CERR_FORMAT, "%s: tensor '%s': header entry is not an object", path, name);
    json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
           *jo = json_object_get(v, "data_offsets");
    if (!json_is_string(jd))
        return cerr_set(e, CERR_FORMAT, "%s: tensor '%s': missing \"dtype\" string", path, name);
    int esize = 0;
    if (!find_dtype(json_string_value(jd), &t->dtype, &esize))
        return cerr_set(e, CERR_UNSUPPORTED, "%s: tensor '%s': unsupported dtype \"%.32s\"", path,
                        name, json_string_value(jd));
    t->st_dtype = json_string_value(jd);
    if (!json_is_array(js))
        return cerr_set(e, CERR_FORMAT, "%s: tensor '%s': missing \"shape\" array", path, name);
    size_t nd = json_array_size(js);
    if (nd > 4)
        return cerr_set(e, CERR_UNSUPPORTED, "%s: tensor '%s' has %zu dims (at most 4)", path,
                        name, nd);
    t->n_dims = (int)nd;
    for (int d = 0; d < 4; d++)
        t->ne[d] = 1;
    uint64_t nel = 1;
    for (size_t i = 0; i < nd; i++) {
        json_t *x = json_array_get(js, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0)
            return cerr_set(e, CERR_FORMAT, "%s: tensor '%s': shape[%zu] is not a non-negative integer",
                            path, name, i);
        int64_t dim = (int64_t)json_integer_value(x);
        t->ne[nd - 1 - i] = dim; /* last file dim is innermost */
        if (__builtin_mul_overflow(nel, (uint64_t)dim, &nel))
            return cerr_set(e, CERR_FORMAT, "%s: tensor '%s': element count overflows", path, name);
    }
    uint64_t nb;
    if (__builtin_mul_overflow(nel, (uint64_t)esize, &nb))
        return cerr_set(e, CERR_FORMAT, "%s: tensor '%s': byte size overflows", path, name);
    json_t *jb = json_array_get(jo, 0), *je = json_array_get(jo, 1);
    if (!json_is_array(jo) || json_array_size(jo) != 2 || !json_is_integer(jb) ||
        !json_is_integer(je))
        return cerr_set(e, CERR_FORMAT, "%s: tensor '%s': \"data_offsets\" must be [begin, end]",
                        path, name);
    json_int_t b = json_integer_value(jb), en = json_integer_value(je);
    if (b < 0 || en < b || (uint64_t)en > dsz)
        return cerr_set(e, CERR_FORMAT,
                        "%s: tensor '%s': data_offsets [%lld, %lld) outside the data section of %zu bytes",
                        path, name, (long long)b, (long long)en, dsz);
    if ((uint64_t)(en - b) != nb)
        return cerr_set(e, CERR_FORMAT,
                        "%s: tensor '%s': data_offsets span %lld bytes but shape x %s needs %llu",
                        path, name, (long long)(en - b), t->st_dtype, (unsigned long long)nb);
    t->data = data + b;
    t->nbytes = (size_t)nb;
    return 0;
}

/* Validates the header of shard si and appends its tensors to m. */
static int parse_shard(struct st_model *m, int si, struct cerr *e)
{
    struct st_shard *s = &m->shards[si];
    const char *path = s->path;
    if (s->size < 8)
        return cerr_set(e, CERR_FORMAT, "%s: not a safetensors file (only %zu bytes)", path, s->size);
    uint64_t hl;
    memcpy(&hl, s->base, 8);
    if (hl > s->size - 8 || hl > ST_MAX_HEADER)
        return cerr_set(e, CERR_FORMAT,
                        "%s: header length %llu exceeds the file size %zu (or the %u-byte limit): not a safetensors file?",
                        path, (unsigned long long)hl, s->size, ST_MAX_HEADER);
    if (hl < 2 || s->base[8] != '{')
        return cerr_set(e, CERR_FORMAT, "%s: header does not start with a JSON object", path);
    json_error_t je;
    s->hdr = json_loadb((const char *)s->base + 8, (size_t)hl, JSON_REJECT_DUPLICATES, &je);
    if (!s->hdr)
        return cerr_set(e, CERR_FORMAT, "%s: bad JSON header at column %d: %s", path, je.column,
                        je.text);
    if (!json_is_object(s->hdr))
        return cerr_set(e, CERR_FORMAT, "%s: header is not a JSON object", path);
    const uint8_t *data = s->base + 8 + hl;
    size_t dsz = s->size - 8 - (size_t)hl;
    size_t count = json_object_size(s->hdr);
    if (count > (size_t)(INT32_MAX / 4) - (size_t)m->n)
        return cerr_set(e, CERR_LIMIT, "%s: too many tensors", path);
    int rc = grow(m, (int)count, path, e);
    if (rc)
        return rc;
    const char *key;
    json_t *v;
    json_object_foreach(s->hdr, key, v)
    {
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(v))
                return cerr_set(e, CERR_FORMAT, "%s: \"__metadata__\" is not an object", path);
            continue;
        }
        if ((rc = parse_entry(&m->t[m->n], key, v, data, dsz, path, e)))
            return rc;
        m->shard_of[m->n] = si;
        m->n++;
    }
    return 0;
}

/* ---- open -------------------------------------------------------------------------- */

static int add_shard(struct st_model *m, const char *path, struct cerr *e)
{
    if (m->n_shards >= ST_MAX_SHARDS)
        return cerr_set(e, CERR_LIMIT, "%s: more than %d shards", path, ST_MAX_SHARDS);
    struct st_shard *ns = realloc(m->shards, (size_t)(m->n_shards + 1) * sizeof *ns);
    if (!ns)
        return cerr_set(e, CERR_NOMEM, "%s: out of memory", path);
    m->shards = ns;
    struct st_shard *s = &m->shards[m->n_shards];
    memset(s, 0, sizeof *s);
    snprintf(s->path, sizeof s->path, "%s", path);
    int rc = fs_map(&s->map, path, e);
    if (rc)
        return rc;
    s->base = s->map.data;
    s->size = s->map.size;
    m->n_shards++;
    return parse_shard(m, m->n_shards - 1, e);
}

static int finish(struct st_model *m, struct cerr *e)
{
    int other = -1, oom = 0;
    int64_t dup = idx_build(m, &other, &oom);
    if (oom)
        return cerr_set(e, CERR_NOMEM, "out of memory indexing %d tensors", m->n);
    if (dup >= 0)
        return cerr_set(e, CERR_FORMAT, "%s: tensor '%s' also appears in %s",
                        m->shards[m->shard_of[dup]].path, m->t[dup].name,
                        m->shards[m->shard_of[other]].path);
    return 0;
}

/* Opens every shard named by the index's weight_map and checks each mapping. */
static int open_index(struct st_model *m, const char *dir, const char *index_path, struct cerr *e)
{
    char *text = NULL;
    size_t len = 0;
    int rc = fs_read_all(index_path, &text, &len, e);
    if (rc)
        return rc;
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    free(text);
    if (!root)
        return cerr_set(e, CERR_FORMAT, "%s: invalid JSON at line %d: %s", index_path, je.line,
                        je.text);
    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm) || json_object_size(wm) == 0) {
        json_decref(root);
        return cerr_set(e, CERR_FORMAT, "%s: missing or empty \"weight_map\" object", index_path);
    }
    const char *name;
    json_t *v;
    char path[1024];
    rc = 0;
    /* pass 1: open each distinct shard once, in first-mention order */
    json_object_foreach(wm, name, v)
    {
        const char *f = json_string_value(v);
        if (!f || !*f || strchr(f, '/') || strcmp(f, "..") == 0) {
            rc = cerr_set(e, CERR_FORMAT, "%s: weight_map[\"%s\"] is not a shard file name",
                          index_path, name);
            break;
        }
        if (fs_join(path, sizeof path, dir, f)) {
            rc = cerr_set(e, CERR_LIMIT, "%s: shard path too long", index_path);
            break;
        }
        int seen = 0;
        for (int i = 0; i < m->n_shards && !seen; i++)
            seen = strcmp(m->shards[i].path, path) == 0;
        if (!seen && (rc = add_shard(m, path, e)))
            break;
    }
    if (!rc)
        rc = finish(m, e);
    /* pass 2: every mapped tensor is in the shard the index names */
    if (!rc) {
        json_object_foreach(wm, name, v)
        {
            int64_t i = idx_find(m, name);
            fs_join(path, sizeof path, dir, json_string_value(v));
            if (i < 0 || strcmp(m->shards[m->shard_of[i]].path, path) != 0) {
                rc = cerr_set(e, CERR_FORMAT, "%s: tensor '%s' is mapped to %s but not found there",
                              index_path, name, json_string_value(v));
                break;
            }
        }
    }
    json_decref(root);
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* No model.safetensors and no index: every *.safetensors file in dir, sorted. */
static int open_dir_scan(struct st_model *m, const char *dir, struct cerr *e)
{
    DIR *d = opendir(dir);
    if (!d)
        return cerr_set(e, CERR_IO, "%s: cannot open directory", dir);
    char **names = NULL;
    int n = 0, rc = 0;
    struct dirent *de;
    while ((de = readdir(d)) && !rc) {
        size_t l = strlen(de->d_name);
        if (l <= 12 || strcmp(de->d_name + l - 12, ".safetensors") != 0)
            continue;
        char **nn = realloc(names, (size_t)(n + 1) * sizeof *nn);
        char *dup = strdup(de->d_name);
        if (nn)
            names = nn;
        if (!nn || !dup) {
            free(dup);
            rc = cerr_set(e, CERR_NOMEM, "%s: out of memory", dir);
            break;
        }
        names[n++] = dup;
    }
    closedir(d);
    if (!rc && n == 0)
        rc = cerr_set(e, CERR_IO,
                      "%s: no model.safetensors, model.safetensors.index.json or *.safetensors file",
                      dir);
    if (!rc)
        qsort(names, (size_t)n, sizeof *names, cmp_str);
    char path[1024];
    for (int i = 0; i < n && !rc; i++) {
        if (fs_join(path, sizeof path, dir, names[i]))
            rc = cerr_set(e, CERR_LIMIT, "%s: path too long", dir);
        else
            rc = add_shard(m, path, e);
    }
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return rc ? rc : finish(m, e);
}

int st_open(struct st_model **out, const char *path, struct cerr *e)
{
    *out = NULL;
    struct st_model *m = calloc(1, sizeof *m);
    if (!m)
        return cerr_set(e, CERR_NOMEM, "%s: out of memory", path);
    int rc;
    if (fs_is_dir(path)) {
        char p1[1024], p2[1024];
        if (fs_join(p1, sizeof p1, path, "model.safetensors") ||
            fs_join(p2, sizeof p2, path, "model.safetensors.index.json"))
            rc = cerr_set(e, CERR_LIMIT, "%s: path too long", path);
        else if (fs_exists(p1)) {
            rc = add_shard(m, p1, e);
            if (!rc)
                rc = finish(m, e);
        } else if (fs_exists(p2))
            rc = open_index(m, path, p2, e);
        else
            rc = open_dir_scan(m, path, e);
    } else {
        rc = add_shard(m, path, e);
        if (!rc)
            rc = finish(m, e);
    }
    if (rc) {
        st_close(m);
        return rc;
    }
    *out = m;
    return 0;
}

int st_open_mem(struct st_model **out, const uint8_t *data, size_t size, const char *label,
                struct cerr *e)
{
    *out = NULL;
    if (!label)
        label = "(memory)";
    struct st_model *m = calloc(1, sizeof *m);
    if (!m || !(m->shards = calloc(1, sizeof *m->shards))) {
        free(m);
        return cerr_set(e, CERR_NOMEM, "%s: out of memory", label);
    }
    m->n_shards = 1;
    snprintf(m->shards[0].path, sizeof m->shards[0].path, "%s", label);
    m->shards[0].base = data;
    m->shards[0].size = data ? size : 0;
    int rc = parse_shard(m, 0, e);
    if (!rc)
        rc = finish(m, e);
    if (rc) {
        st_close(m);
        return rc;
    }
    *out = m;
    return 0;
}

void st_close(struct st_model *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->n_shards; i++) {
        json_decref(m->shards[i].hdr);
        fs_unmap(&m->shards[i].map);
    }
    free(m->shards);
    free(m->t);
    free(m->shard_of);
    free(m->idx);
    free(m);
}

int st_count(const struct st_model *m) { return m ? m->n : 0; }

const struct st_tensor *st_get(const struct st_model *m, int i)
{
    return (m && i >= 0 && i < m->n) ? &m->t[i] : NULL;
}

const struct st_tensor *st_find(const struct st_model *m, const char *name)
{
    int64_t i = m ? idx_find(m, name) : -1;
    return i < 0 ? NULL : &m->t[i];
}
