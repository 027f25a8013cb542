/* test_safetensors.c — safetensors reader: files built in memory (dtypes, shape order,
 * rank 0, __metadata__), a table of corruptions and a truncation sweep that must each be
 * refused, and on-disk layouts in a temp dir: single file, HF dir with model.safetensors,
 * sharded dir with model.safetensors.index.json, and a dir of loose shards.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/dtype.h"
#include "format/safetensors.h"
#include "harness.h"

struct buf {
    uint8_t *p;
    size_t n;
};

/* Header JSON (padded with spaces to a multiple of 8) + data bytes. */
static struct buf make_st(const char *hdr, const void *data, size_t dn)
{
    size_t hl = strlen(hdr), pad = (8 - hl % 8) % 8;
    struct buf b;
    b.n = 8 + hl + pad + dn;
    b.p = malloc(b.n);
    uint64_t L = hl + pad;
    memcpy(b.p, &L, 8);
    memcpy(b.p + 8, hdr, hl);
    memset(b.p + 8 + hl, ' ', pad);
    if (dn)
        memcpy(b.p + 8 + hl + pad, data, dn);
    return b;
}

static const char *k_hdr =
    "{\"__metadata__\": {\"format\": \"pt\"},"
    " \"a.weight\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 24]},"
    " \"b.bias\": {\"dtype\": \"BF16\", \"shape\": [4], \"data_offsets\": [24, 32]},"
    " \"step\": {\"dtype\": \"I64\", \"shape\": [], \"data_offsets\": [32, 40]},"
    " \"mask\": {\"dtype\": \"BOOL\", \"shape\": [1, 2, 2, 2], \"data_offsets\": [40, 48]},"
    " \"empty\": {\"dtype\": \"F16\", \"shape\": [0, 5], \"data_offsets\": [48, 48]}}";

static struct buf make_valid(void)
{
    uint8_t data[48];
    for (int i = 0; i < 48; i++)
        data[i] = (uint8_t)i;
    float f[6] = {1, 2, 3, 4, 5, 6};
    memcpy(data, f, sizeof f);
    return make_st(k_hdr, data, sizeof data);
}

static void test_valid(void)
{
    struct buf b = make_valid();
    struct st_model *m = NULL;
    struct cerr e = {0};
    int rc = st_open_mem(&m, b.p, b.n, "x.safetensors", &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    if (rc) {
        free(b.p);
        return;
    }
    CHECK_EQ_INT(st_count(m), 5);
    const struct st_tensor *t = st_find(m, "a.weight");
    CHECK(t != NULL);
    if (t) {
        CHECK_EQ_INT(t->dtype, DT_F32);
        CHECK_EQ_INT(t->n_dims, 2);
        CHECK_EQ_INT(t->ne[0], 3); /* last file dim is innermost */
        CHECK_EQ_INT(t->ne[1], 2);
        CHECK_EQ_INT(t->ne[2], 1);
        CHECK_EQ_INT(t->nbytes, 24);
        float f5;
        memcpy(&f5, t->data + 5 * 4, 4);
        CHECK_NEAR(f5, 6, 0);
        CHECK_STR(t->st_dtype, "F32");
    }
    t = st_find(m, "b.bias");
    if (t) {
        CHECK_EQ_INT(t->dtype, DT_BF16);
        CHECK_EQ_INT(t->ne[0], 4);
        CHECK_EQ_INT(t->data[0], 24);
    }
    t = st_find(m, "step");
    CHECK(t != NULL);
    if (t) {
        CHECK_EQ_INT(t->n_dims, 0);
        CHECK_EQ_INT(t->ne[0], 1);
        CHECK_EQ_INT(t->nbytes, 8);
        CHECK_EQ_INT(t->dtype, DT_I64);
    }
    t = st_find(m, "mask");
    if (t) {
        CHECK_EQ_INT(t->dtype, -1);
        CHECK_STR(t->st_dtype, "BOOL");
        CHECK_EQ_INT(t->n_dims, 4);
        CHECK_EQ_INT(t->ne[3], 1);
    }
    t = st_find(m, "empty");
    if (t) {
        CHECK_EQ_INT(t->nbytes, 0);
        CHECK_EQ_INT(t->ne[1], 0);
    }
    CHECK(st_find(m, "__metadata__") == NULL);
    CHECK(st_find(m, "nope") == NULL);
    CHECK(st_get(m, 5) == NULL);
    CHECK(st_get(m, -1) == NULL);
    int seen = 0;
    for (int i = 0; i < st_count(m); i++)
        seen += st_find(m, st_get(m, i)->name) == st_get(m, i);
    CHECK_EQ_INT(seen, 5);
    st_close(m);
    free(b.p);
}

static void expect_fail_buf(const uint8_t *p, size_t n, const char *what, const char *needle)
{
    struct st_model *m = NULL;
    struct cerr e = {0};
    uint8_t *copy = malloc(n ? n : 1); /* exact size: ASan catches overreads */
    if (n)
        memcpy(copy, p, n);
    int rc = st_open_mem(&m, copy, n, "x.safetensors", &e);
    CHECK_MSG(rc < 0, "%s: accepted", what);
    CHECK(m == NULL);
    if (rc < 0) {
        CHECK_MSG(strstr(e.msg, "x.safetensors") != NULL, "%s: no file in: %s", what, e.msg);
        if (needle)
            CHECK_MSG(strstr(e.msg, needle) != NULL, "%s: '%s' not in: %s", what, needle, e.msg);
    }
    st_close(m);
    free(copy);
}

static void expect_fail_hdr(const char *hdr, size_t dn, const char *what, const char *needle)
{
    uint8_t data[64] = {0};
    struct buf b = make_st(hdr, data, dn);
    expect_fail_buf(b.p, b.n, what, needle);
    free(b.p);
}

#define T1(dt, shape, offs) \
    "{\"t\": {\"dtype\": " dt ", \"shape\": " shape ", \"data_offsets\": " offs "}}"

static void test_corruptions(void)
{
    expect_fail_hdr(T1("\"F32\"", "[2]", "[0, 8]"), 4, "data past end", "outside");
    expect_fail_hdr(T1("\"F32\"", "[2]", "[0, 4]"), 8, "size mismatch", "needs 8");
    expect_fail_hdr(T1("\"F32\"", "[2]", "[8, 0]"), 8, "end < begin", "outside");
    expect_fail_hdr(T1("\"F32\"", "[2]", "[-8, 0]"), 8, "negative begin", "outside");
    expect_fail_hdr(T1("\"F32\"", "[2]", "[0, 8, 9]"), 8, "3 offsets", "data_offsets");
    expect_fail_hdr(T1("\"F32\"", "[2]", "[0, \"8\"]"), 8, "string offset", "data_offsets");
    expect_fail_hdr("{\"t\": {\"dtype\": \"F32\", \"shape\": [2]}}", 8, "no offsets",
                    "data_offsets");
    expect_fail_hdr(T1("\"Q4\"", "[2]", "[0, 8]"), 8, "bad dtype", "unsupported dtype");
    expect_fail_hdr(T1("7", "[2]", "[0, 8]"), 8, "dtype not string", "dtype");
    expect_fail_hdr(T1("\"F32\"", "[1,1,1,1,2]", "[0, 8]"), 8, "5 dims", "dims");
    expect_fail_hdr(T1("\"F32\"", "[-2]", "[0, 8]"), 8, "negative dim", "shape[0]");
    expect_fail_hdr(T1("\"F32\"", "[2.5]", "[0, 8]"), 8, "real dim", "shape[0]");
    expect_fail_hdr(T1("\"F32\"", "2", "[0, 8]"), 8, "shape not array", "shape");
    expect_fail_hdr(T1("\"U8\"", "[4294967296, 4294967296, 4294967296]", "[0, 8]"), 8,
                    "shape overflow", "overflow");
    expect_fail_hdr(T1("\"F64\"", "[2305843009213693952, 4]", "[0, 8]"), 8, "bytes overflow",
                    "t");
    expect_fail_hdr("{\"t\": 5}", 0, "entry not object", "not an object");
    expect_fail_hdr("{\"__metadata__\": [1]}", 0, "metadata not object", "__metadata__");
    expect_fail_hdr("{\"t\": {}, \"t\": {}}", 0, "duplicate key", NULL);
    expect_fail_hdr("[1, 2]", 0, "array root", NULL);
    expect_fail_hdr("{\"t\": ", 0, "bad json", "JSON");
    expect_fail_hdr("", 0, "empty header", NULL);

    uint8_t small[4] = {1, 0, 0, 0};
    expect_fail_buf(small, sizeof small, "4 bytes", "only 4 bytes");
    expect_fail_buf(NULL, 0, "null", NULL);
    struct buf b = make_valid();
    uint64_t big = 1ull << 63;
    memcpy(b.p, &big, 8);
    expect_fail_buf(b.p, b.n, "huge header length", "header length");
    big = b.n - 7;
    memcpy(b.p, &big, 8);
    expect_fail_buf(b.p, b.n, "header length = size - 7", "header length");
    free(b.p);
}

static void test_truncation_every_byte(void)
{
    struct buf b = make_valid();
    for (size_t n = 0; n < b.n; n++) {
        struct st_model *m = NULL;
        struct cerr e = {0};
        uint8_t *copy = malloc(n ? n : 1);
        memcpy(copy, b.p, n);
        int rc = st_open_mem(&m, copy, n, "x.safetensors", &e);
        CHECK_MSG(rc < 0, "prefix of %zu bytes accepted", n);
        st_close(m);
        free(copy);
    }
    free(b.p);
}

/* ---- on-disk layouts ---------------------------------------------------------------- */

static void write_file(const char *dir, const char *name, const void *p, size_t n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f) {
        fwrite(p, 1, n, f);
        fclose(f);
    }
}

static void write_st(const char *dir, const char *name, const char *hdr, const void *d, size_t dn)
{
    struct buf b = make_st(hdr, d, dn);
    write_file(dir, name, b.p, b.n);
    free(b.p);
}

static void rm_dir(const char *dir)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK_EQ_INT(system(cmd), 0);
}

static void test_sharded_dir(void)
{
    char dir[] = "/tmp/cinfer_st_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    float d1[4] = {1, 2, 3, 4}, d2[2] = {7, 8};
    write_st(dir, "model-00001-of-00002.safetensors",
             "{\"w1\": {\"dtype\": \"F32\", \"shape\": [2, 2], \"data_offsets\": [0, 16]}}", d1, 16);
    write_st(dir, "model-00002-of-00002.safetensors",
             "{\"w2\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
             " \"w3\": {\"dtype\": \"F16\", \"shape\": [0], \"data_offsets\": [8, 8]}}",
             d2, 8);
    const char *index = "{\"metadata\": {\"total_size\": 24}, \"weight_map\": {"
                        "\"w1\": \"model-00001-of-00002.safetensors\","
                        "\"w2\": \"model-00002-of-00002.safetensors\","
                        "\"w3\": \"model-00002-of-00002.safetensors\"}}";
    write_file(dir, "model.safetensors.index.json", index, strlen(index));

    struct st_model *m = NULL;
    struct cerr e = {0};
    int rc = st_open(&m, dir, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    if (m) {
        CHECK_EQ_INT(st_count(m), 3);
        const struct st_tensor *t = st_find(m, "w2");
        CHECK(t != NULL);
        if (t) {
            float v;
            memcpy(&v, t->data + 4, 4);
            CHECK_NEAR(v, 8, 0);
        }
        t = st_find(m, "w1");
        if (t)
            CHECK_EQ_INT(t->ne[1], 2);
        st_close(m);
    }

    /* a tensor mapped to the wrong shard */
    const char *bad = "{\"weight_map\": {\"w1\": \"model-00002-of-00002.safetensors\"}}";
    write_file(dir, "model.safetensors.index.json", bad, strlen(bad));
    CHECK(st_open(&m, dir, &e) < 0);
    CHECK(strstr(e.msg, "w1") && strstr(e.msg, "index.json"));
    /* a missing shard file */
    bad = "{\"weight_map\": {\"w1\": \"model-00009-of-00009.safetensors\"}}";
    write_file(dir, "model.safetensors.index.json", bad, strlen(bad));
    CHECK(st_open(&m, dir, &e) < 0);
    CHECK(strstr(e.msg, "model-00009-of-00009.safetensors") != NULL);
    /* a path outside the dir */
    bad = "{\"weight_map\": {\"w1\": \"../etc/passwd\"}}";
    write_file(dir, "model.safetensors.index.json", bad, strlen(bad));
    CHECK(st_open(&m, dir, &e) < 0);
    bad = "{\"weight_map\": {}}";
    write_file(dir, "model.safetensors.index.json", bad, strlen(bad));
    CHECK(st_open(&m, dir, &e) < 0);
    bad = "{\"weight_map\": ";
    write_file(dir, "model.safetensors.index.json", bad, strlen(bad));
    CHECK(st_open(&m, dir, &e) < 0);

    /* no index: every *.safetensors file in the dir */
    char p[1100];
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    unlink(p);
    rc = st_open(&m, dir, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    if (m) {
        CHECK_EQ_INT(st_count(m), 3);
        st_close(m);
    }
    /* a duplicate across loose shards */
    write_st(dir, "extra.safetensors",
             "{\"w2\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", d2, 8);
    CHECK(st_open(&m, dir, &e) < 0);
    CHECK(strstr(e.msg, "w2") != NULL);

    /* model.safetensors wins; the single-file path works too */
    write_st(dir, "model.safetensors",
             "{\"only\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", d1, 4);
    rc = st_open(&m, dir, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    if (m) {
        CHECK_EQ_INT(st_count(m), 1);
        CHECK(st_find(m, "only") != NULL);
        st_close(m);
    }
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    rc = st_open(&m, p, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    st_close(m);
    rm_dir(dir);

    CHECK_EQ_INT(st_open(&m, "/nonexistent/model.safetensors", &e), CERR_IO);
    CHECK(strstr(e.msg, "/nonexistent/model.safetensors") != NULL);
    char empty[] = "/tmp/cinfer_st_XXXXXX";
    CHECK(mkdtemp(empty) != NULL);
    CHECK(st_open(&m, empty, &e) < 0);
    CHECK(strstr(e.msg, "no model.safetensors") != NULL);
    rm_dir(empty);
}

/* A file written by the safetensors package (tests/data/format/gen.py). */
static void test_reference_writer(void)
{
    struct st_model *m = NULL;
    struct cerr e = {0};
    int rc = st_open(&m, repo_path("tests/data/format/ref.safetensors"), &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    if (!m)
        return;
    CHECK_EQ_INT(st_count(m), 6);
    const struct st_tensor *t = st_find(m, "f32");
    CHECK(t && t->dtype == DT_F32 && t->ne[0] == 3 && t->ne[1] == 2 && t->n_dims == 2);
    if (t) {
        float f;
        memcpy(&f, t->data + 4 * 4, 4);
        CHECK_NEAR(f, 4, 0);
    }
    t = st_find(m, "i64");
    CHECK(t && t->dtype == DT_I64 && t->n_dims == 0 && t->nbytes == 8);
    if (t) {
        int64_t v;
        memcpy(&v, t->data, 8);
        CHECK_EQ_INT(v, 7);
    }
    t = st_find(m, "u8");
    CHECK(t && t->dtype == -1 && t->ne[0] == 5 && t->data[4] == 4);
    t = st_find(m, "b");
    CHECK(t && t->dtype == -1 && t->nbytes == 2 && t->data[0] == 1);
    t = st_find(m, "f64");
    CHECK(t && t->dtype == DT_F64 && t->n_dims == 4 && t->ne[0] == 2 && t->ne[2] == 2);
    t = st_find(m, "f16");
    CHECK(t && t->dtype == DT_F16 && t->ne[0] == 4);
    st_close(m);
}

int main(void)
{
    RUN(test_valid);
    RUN(test_corruptions);
    RUN(test_truncation_every_byte);
    RUN(test_sharded_dir);
    RUN(test_reference_writer);
    return harness_done();
}
