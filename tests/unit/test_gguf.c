/* test_gguf.c — GGUF reader: real fixtures, hand-built files covering every value type
 * (v2 and v3, custom alignment, nested arrays), and a table of corruptions that must each
 * be refused with an error (never a crash; run under ASan in CI). Includes truncation of
 * a small valid file at every byte offset.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/dtype.h"
#include "format/gguf.h"
#include "harness.h"
#include "server/commands.h"

/* ---- in-memory GGUF builder -------------------------------------------------------- */

struct buf {
    uint8_t *p;
    size_t n, cap;
};

static void put(struct buf *b, const void *src, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void put_u8(struct buf *b, uint8_t v) { put(b, &v, 1); }
static void put_u16(struct buf *b, uint16_t v) { put(b, &v, 2); }
static void put_u32(struct buf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(struct buf *b, uint64_t v) { put(b, &v, 8); }
static void put_f32(struct buf *b, float v) { put(b, &v, 4); }
static void put_f64(struct buf *b, double v) { put(b, &v, 8); }
static void put_str(struct buf *b, const char *s)
{
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}
static void put_key(struct buf *b, const char *k, uint32_t type)
{
    put_str(b, k);
    put_u32(b, type);
}
static void pad_to(struct buf *b, size_t align)
{
    while (b->n % align)
        put_u8(b, 0);
}
static void header(struct buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    put(b, "GGUF", 4);
    put_u32(b, version);
    put_u64(b, n_tensors);
    put_u64(b, n_kv);
}
static void tensor_info(struct buf *b, const char *name, int n_dims, const int64_t *ne,
                        uint32_t type, uint64_t off)
{
    put_str(b, name);
    put_u32(b, (uint32_t)n_dims);
    for (int i = 0; i < n_dims; i++)
        put_u64(b, (uint64_t)ne[i]);
    put_u32(b, type);
    put_u64(b, off);
}

/* Positions inside the small file, recorded so corruptions can hit exact fields. */
struct small_pos {
    size_t n_tensors, n_kv, str_len, arr_n, arr_type, t_ndims, t_dim0, t_type, t_off, t2_off;
};

/* A small valid v3 file: 3 kv (string, u32, string array), 2 F32 tensors. */
static struct buf build_small(struct small_pos *pos)
{
    struct buf b = {0};
    struct small_pos tmp;
    if (!pos)
        pos = &tmp;
    put(&b, "GGUF", 4);
    put_u32(&b, 3);
    pos->n_tensors = b.n;
    put_u64(&b, 2);
    pos->n_kv = b.n;
    put_u64(&b, 3);
    put_key(&b, "general.architecture", GGUF_STRING);
    pos->str_len = b.n;
    put_str(&b, "llama");
    put_key(&b, "llama.block_count", GGUF_UINT32);
    put_u32(&b, 2);
    put_key(&b, "tokenizer.ggml.tokens", GGUF_ARRAY);
    pos->arr_type = b.n;
    put_u32(&b, GGUF_STRING);
    pos->arr_n = b.n;
    put_u64(&b, 3);
    put_str(&b, "<s>");
    put_str(&b, "hello");
    put_str(&b, "");
    int64_t ne[2] = {8, 2};
    put_str(&b, "a.weight");
    pos->t_ndims = b.n;
    put_u32(&b, 2);
    pos->t_dim0 = b.n;
    put_u64(&b, 8);
    put_u64(&b, 2);
    pos->t_type = b.n;
    put_u32(&b, DT_F32);
    pos->t_off = b.n;
    put_u64(&b, 0);
    pos->t2_off = b.n + 8 + 8 + 4 + 8 + 4;
    tensor_info(&b, "b.weight", 1, ne, DT_F32, 64);
    pad_to(&b, 32);
    for (int i = 0; i < 16 + 8; i++)
        put_f32(&b, (float)i);
    pad_to(&b, 32);
    return b;
}

static int open_buf(struct gguf **g, const struct buf *b, struct cerr *e)
{
    return gguf_open_mem(g, b->p, b->n, "test.gguf", e);
}

/* ---- real fixtures ------------------------------------------------------------------ */

static void test_stories260k(void)
{
    struct gguf *g = NULL;
    struct cerr e = {0};
    int rc = gguf_open(&g, fixture_path("stories260K/stories260K.gguf"), &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    if (rc)
        return;
    CHECK_EQ_INT(g->version, 3);
    CHECK_EQ_INT(g->alignment, 32);
    struct gguf_str s;
    CHECK_EQ_INT(gguf_get_str(g, "general.architecture", &s, &e), 0);
    CHECK(gguf_str_eq(s, "llama"));
    int64_t v = 0;
    CHECK_EQ_INT(gguf_get_int(g, "llama.block_count", &v, &e), 0);
    CHECK_EQ_INT(v, 5);
    CHECK_EQ_INT(gguf_get_int(g, "llama.embedding_length", &v, &e), 0);
    CHECK_EQ_INT(v, 64);
    CHECK_EQ_INT(gguf_get_int(g, "llama.attention.head_count_kv", &v, &e), 0);
    CHECK_EQ_INT(v, 4);
    double eps = 0;
    CHECK_EQ_INT(gguf_get_float(g, "llama.attention.layer_norm_rms_epsilon", &eps, &e), 0);
    CHECK(eps > 0 && eps < 1e-3);
    CHECK_EQ_INT(gguf_get_int(g, "no.such.key", &v, &e), GGUF_ABSENT);
    /* wrong type: a string read as int */
    CHECK_EQ_INT(gguf_get_int(g, "general.architecture", &v, &e), CERR_FORMAT);
    CHECK(strstr(e.msg, "general.architecture") != NULL);
    CHECK(strstr(e.msg, "stories260K.gguf") != NULL);

    const struct gguf_kv *tok = NULL;
    CHECK_EQ_INT(gguf_get_arr(g, "tokenizer.ggml.tokens", &tok, &e), 0);
    if (tok) {
        CHECK_EQ_INT(tok->arr_type, GGUF_STRING);
        CHECK_EQ_INT(tok->arr_n, 512);
        CHECK(gguf_str_eq(gguf_arr_str(tok, 0), "<unk>"));
        CHECK(gguf_str_eq(gguf_arr_str(tok, 1), "<s>"));
        CHECK(gguf_str_eq(gguf_arr_str(tok, 3), "<0x00>"));
        CHECK(gguf_str_eq(gguf_arr_str(tok, 403), "\xe2\x96\x81Once"));
        CHECK_EQ_INT(gguf_arr_str(tok, 512).len, 0); /* out of range: empty */
    }
    const struct gguf_kv *sc = NULL;
    CHECK_EQ_INT(gguf_get_arr(g, "tokenizer.ggml.scores", &sc, &e), 0);
    if (sc) {
        CHECK_EQ_INT(sc->arr_type, GGUF_FLOAT32);
        CHECK_EQ_INT(sc->arr_n, 512);
    }

    CHECK_EQ_INT(g->n_tensors, 48);
    const struct gguf_tensor *t = gguf_find_tensor(g, "token_embd.weight");
    CHECK(t != NULL);
    if (t) {
        CHECK_EQ_INT(t->dtype, DT_F32);
        CHECK_EQ_INT(t->n_dims, 2);
        CHECK_EQ_INT(t->ne[0], 64);
        CHECK_EQ_INT(t->ne[1], 512);
        CHECK_EQ_INT(t->nbytes, 64 * 512 * 4);
        CHECK(((uintptr_t)t->data % 32) == 0);
        CHECK(t->data >= g->base && t->data + t->nbytes <= g->base + g->size);
    }
    t = gguf_find_tensor(g, "blk.4.ffn_down.weight");
    CHECK(t != NULL);
    if (t) {
        CHECK_EQ_INT(t->ne[0], 172);
        CHECK_EQ_INT(t->ne[1], 64);
    }
    CHECK(gguf_find_tensor(g, "blk.5.ffn_down.weight") == NULL);
    gguf_close(g);
}

static void test_vocab_ggufs(void)
{
    static const struct {
        const char *file, *arch, *last;
        uint64_t n_tokens, n_merges;
    } cases[] = {
        {"llamacpp-vocab/ggml-vocab-gpt-2.gguf", "gpt2", "<|endoftext|>", 50257, 50000},
        {"llamacpp-vocab/ggml-vocab-llama-spm.gguf", "llama", NULL, 32000, 0},
        {"llamacpp-vocab/ggml-vocab-phi-3.gguf", "phi3", "[PAD32063]", 32064, 0},
        {"llamacpp-vocab/ggml-vocab-bert-bge.gguf", "bert", NULL, 30522, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct gguf *g = NULL;
        struct cerr e = {0};
        int rc = gguf_open(&g, fixture_path(cases[i].file), &e);
        CHECK_MSG(rc == 0, "%s", e.msg);
        if (rc)
            continue;
        struct gguf_str s;
        CHECK_EQ_INT(gguf_get_str(g, "general.architecture", &s, &e), 0);
        CHECK(gguf_str_eq(s, cases[i].arch));
        CHECK_EQ_INT(g->n_tensors, 0);
        const struct gguf_kv *tok = NULL;
        CHECK_EQ_INT(gguf_get_arr(g, "tokenizer.ggml.tokens", &tok, &e), 0);
        if (tok) {
            CHECK_EQ_INT(tok->arr_n, cases[i].n_tokens);
            if (cases[i].last)
                CHECK(gguf_str_eq(gguf_arr_str(tok, tok->arr_n - 1), cases[i].last));
        }
        const struct gguf_kv *m = NULL;
        rc = gguf_get_arr(g, "tokenizer.ggml.merges", &m, &e);
        CHECK_EQ_INT(rc, cases[i].n_merges ? 0 : GGUF_ABSENT);
        if (m && rc == 0)
            CHECK_EQ_INT(m->arr_n, cases[i].n_merges);
        gguf_close(g);
    }
}

static void test_missing_file(void)
{
    struct gguf *g = NULL;
    struct cerr e = {0};
    CHECK_EQ_INT(gguf_open(&g, "/nonexistent/x.gguf", &e), CERR_IO);
    CHECK(strstr(e.msg, "/nonexistent/x.gguf") != NULL);
    CHECK(g == NULL);
}

/* ---- hand-built files ---------------------------------------------------------------- */

/* Every value type, nested arrays, a custom alignment, one tensor of each of a few types. */
static struct buf build_all_types(uint32_t version, uint32_t align)
{
    struct buf b = {0};
    header(&b, version, 3, 18);
    put_key(&b, "u8", GGUF_UINT8);
    put_u8(&b, 200);
    put_key(&b, "i8", GGUF_INT8);
    put_u8(&b, (uint8_t)-5);
    put_key(&b, "u16", GGUF_UINT16);
    put_u16(&b, 60000);
    put_key(&b, "i16", GGUF_INT16);
    put_u16(&b, (uint16_t)-3000);
    put_key(&b, "u32", GGUF_UINT32);
    put_u32(&b, 4000000000u);
    put_key(&b, "i32", GGUF_INT32);
    put_u32(&b, (uint32_t)-70000);
    put_key(&b, "f32", GGUF_FLOAT32);
    put_f32(&b, 1.5f);
    put_key(&b, "bool", GGUF_BOOL);
    put_u8(&b, 1);
    put_key(&b, "str", GGUF_STRING);
    put_str(&b, "h\xc3\xa9llo");
    put_key(&b, "u64", GGUF_UINT64);
    put_u64(&b, 0xFFFFFFFFFFFFFFFFull);
    put_key(&b, "i64", GGUF_INT64);
    put_u64(&b, (uint64_t)-9000000000ll);
    put_key(&b, "f64", GGUF_FLOAT64);
    put_f64(&b, -2.25);
    put_key(&b, "arr.i32", GGUF_ARRAY);
    put_u32(&b, GGUF_INT32);
    put_u64(&b, 3);
    put_u32(&b, (uint32_t)-1);
    put_u32(&b, 7);
    put_u32(&b, 100000);
    put_key(&b, "arr.str", GGUF_ARRAY);
    put_u32(&b, GGUF_STRING);
    put_u64(&b, 2);
    put_str(&b, "ab");
    put_str(&b, "cde");
    put_key(&b, "arr.nested", GGUF_ARRAY); /* [[1,2],[],["x"]] */
    put_u32(&b, GGUF_ARRAY);
    put_u64(&b, 3);
    put_u32(&b, GGUF_UINT8);
    put_u64(&b, 2);
    put_u8(&b, 1);
    put_u8(&b, 2);
    put_u32(&b, GGUF_FLOAT64);
    put_u64(&b, 0);
    put_u32(&b, GGUF_STRING);
    put_u64(&b, 1);
    put_str(&b, "x");
    put_key(&b, "arr.empty", GGUF_ARRAY);
    put_u32(&b, GGUF_STRING);
    put_u64(&b, 0);
    put_key(&b, "arr.bool", GGUF_ARRAY);
    put_u32(&b, GGUF_BOOL);
    put_u64(&b, 2);
    put_u8(&b, 0);
    put_u8(&b, 1);
    put_key(&b, "general.alignment", GGUF_UINT32);
    put_u32(&b, align);
    int64_t ne_f16[2] = {4, 3};   /* 24 bytes */
    int64_t ne_q8[1] = {64};      /* 2 blocks of 34 bytes */
    int64_t ne_f32[4] = {2, 1, 1, 2};
    size_t a = align;
    size_t o1 = (24 + a - 1) / a * a, o2 = o1 + (68 + a - 1) / a * a;
    tensor_info(&b, "t.f16", 2, ne_f16, DT_F16, 0);
    tensor_info(&b, "t.q8", 1, ne_q8, DT_Q8_0, o1);
    tensor_info(&b, "t.f32", 4, ne_f32, DT_F32, o2);
    pad_to(&b, a);
    size_t data = b.n;
    while (b.n < data + o2 + 16)
        put_u8(&b, (uint8_t)(b.n & 0xff));
    return b;
}

static void check_all_types(uint32_t version, uint32_t align)
{
    struct buf b = build_all_types(version, align);
    struct gguf *g = NULL;
    struct cerr e = {0};
    int rc = open_buf(&g, &b, &e);
    CHECK_MSG(rc == 0, "v%u align %u: %s", version, align, e.msg);
    if (rc) {
        free(b.p);
        return;
    }
    CHECK_EQ_INT(g->version, version);
    CHECK_EQ_INT(g->alignment, align);
    CHECK_EQ_INT(g->data_offset % align, 0);
    int64_t v = 0;
    double f = 0;
    int bo = 0;
    CHECK_EQ_INT(gguf_get_int(g, "u8", &v, &e), 0);
    CHECK_EQ_INT(v, 200);
    CHECK_EQ_INT(gguf_get_int(g, "i8", &v, &e), 0);
    CHECK_EQ_INT(v, -5);
    CHECK_EQ_INT(gguf_get_int(g, "u16", &v, &e), 0);
    CHECK_EQ_INT(v, 60000);
    CHECK_EQ_INT(gguf_get_int(g, "i16", &v, &e), 0);
    CHECK_EQ_INT(v, -3000);
    CHECK_EQ_INT(gguf_get_int(g, "u32", &v, &e), 0);
    CHECK_EQ_INT(v, 4000000000ll);
    CHECK_EQ_INT(gguf_get_int(g, "i32", &v, &e), 0);
    CHECK_EQ_INT(v, -70000);
    CHECK_EQ_INT(gguf_get_int(g, "i64", &v, &e), 0);
    CHECK_EQ_INT(v, -9000000000ll);
    CHECK_EQ_INT(gguf_get_int(g, "u64", &v, &e), CERR_FORMAT); /* does not fit int64 */
    CHECK_EQ_INT(gguf_find(g, "u64")->v.u64, 0xFFFFFFFFFFFFFFFFull);
    CHECK_EQ_INT(gguf_get_float(g, "f32", &f, &e), 0);
    CHECK_NEAR(f, 1.5, 0);
    CHECK_EQ_INT(gguf_get_float(g, "f64", &f, &e), 0);
    CHECK_NEAR(f, -2.25, 0);
    CHECK_EQ_INT(gguf_get_float(g, "i32", &f, &e), 0); /* ints convert to float */
    CHECK_NEAR(f, -70000, 0);
    CHECK_EQ_INT(gguf_get_int(g, "f32", &v, &e), CERR_FORMAT);
    CHECK_EQ_INT(gguf_get_bool(g, "bool", &bo, &e), 0);
    CHECK_EQ_INT(bo, 1);
    CHECK_EQ_INT(gguf_get_bool(g, "u8", &bo, &e), CERR_FORMAT);
    struct gguf_str s;
    CHECK_EQ_INT(gguf_get_str(g, "str", &s, &e), 0);
    CHECK(gguf_str_eq(s, "h\xc3\xa9llo"));
    CHECK(!gguf_str_eq(s, "h\xc3\xa9ll"));
    CHECK_EQ_INT(gguf_get_str(g, "u8", &s, &e), CERR_FORMAT);
    const struct gguf_kv *kv = NULL;
    CHECK_EQ_INT(gguf_get_arr(g, "str", &kv, &e), CERR_FORMAT);
    CHECK_EQ_INT(gguf_get_arr(g, "arr.i32", &kv, &e), 0);
    if (kv) {
        CHECK_EQ_INT(kv->arr_n, 3);
        CHECK_NEAR(gguf_arr_num(kv, 0), -1, 0);
        CHECK_NEAR(gguf_arr_num(kv, 2), 100000, 0);
        CHECK_NEAR(gguf_arr_num(kv, 3), 0, 0); /* out of range */
    }
    CHECK_EQ_INT(gguf_get_arr(g, "arr.str", &kv, &e), 0);
    if (kv) {
        CHECK(gguf_str_eq(gguf_arr_str(kv, 0), "ab"));
        CHECK(gguf_str_eq(gguf_arr_str(kv, 1), "cde"));
    }
    CHECK_EQ_INT(gguf_get_arr(g, "arr.nested", &kv, &e), 0);
    if (kv) {
        CHECK_EQ_INT(kv->arr_type, GGUF_ARRAY);
        CHECK_EQ_INT(kv->arr_n, 3);
        CHECK(kv->arr_offs != NULL);
        if (kv->arr_offs) {
            uint32_t t2;
            memcpy(&t2, kv->arr_data + kv->arr_offs[2], 4);
            CHECK_EQ_INT(t2, GGUF_STRING);
            CHECK_EQ_INT(kv->arr_offs[1], 12 + 2);
        }
        CHECK_EQ_INT(gguf_arr_str(kv, 0).len, 0); /* not a string array */
    }
    CHECK_EQ_INT(gguf_get_arr(g, "arr.empty", &kv, &e), 0);
    if (kv)
        CHECK_EQ_INT(kv->arr_n, 0);
    CHECK_EQ_INT(gguf_get_arr(g, "arr.bool", &kv, &e), 0);
    if (kv)
        CHECK_NEAR(gguf_arr_num(kv, 1), 1, 0);

    const struct gguf_tensor *t = gguf_find_tensor(g, "t.q8");
    CHECK(t != NULL);
    if (t) {
        CHECK_EQ_INT(t->dtype, DT_Q8_0);
        CHECK_EQ_INT(t->nbytes, 68);
        CHECK_EQ_INT((size_t)(t->data - g->base) % align, 0);
    }
    t = gguf_find_tensor(g, "t.f32");
    if (t) {
        CHECK_EQ_INT(t->n_dims, 4);
        CHECK_EQ_INT(t->ne[3], 2);
        CHECK_EQ_INT(t->nbytes, 16);
    }
    t = gguf_find_tensor(g, "t.f16");
    if (t)
        CHECK_EQ_INT(t->nbytes, 24);
    gguf_close(g);
    free(b.p);
}

static void test_all_types(void)
{
    check_all_types(3, 32);
    check_all_types(2, 32);
    check_all_types(3, 64);
    check_all_types(3, 1);
    check_all_types(2, 4096);
}

static void test_default_alignment_and_empty(void)
{
    /* No kv, no tensors: the smallest valid file. */
    struct buf b = {0};
    header(&b, 3, 0, 0);
    struct gguf *g = NULL;
    struct cerr e = {0};
    CHECK_EQ_INT(open_buf(&g, &b, &e), 0);
    if (g) {
        CHECK_EQ_INT(g->alignment, 32);
        CHECK(gguf_find(g, "x") == NULL);
        CHECK(gguf_find_tensor(g, "x") == NULL);
        gguf_close(g);
    }
    free(b.p);
    struct buf s = build_small(NULL);
    CHECK_EQ_INT(open_buf(&g, &s, &e), 0);
    if (g) {
        const struct gguf_tensor *t = gguf_find_tensor(g, "b.weight");
        CHECK(t && t->offset == 64 && t->nbytes == 32);
        gguf_close(g);
    }
    free(s.p);
}

/* ---- corruptions ----------------------------------------------------------------------- */

static void expect_fail(struct buf *b, const char *what, const char *needle)
{
    struct gguf *g = NULL;
    struct cerr e = {0};
    int rc = open_buf(&g, b, &e);
    CHECK_MSG(rc < 0, "%s: expected an error, got rc=%d", what, rc);
    CHECK(g == NULL);
    if (rc < 0) {
        CHECK_MSG(strstr(e.msg, "test.gguf") != NULL, "%s: message lacks file: %s", what, e.msg);
        if (needle)
            CHECK_MSG(strstr(e.msg, needle) != NULL, "%s: '%s' not in: %s", what, needle, e.msg);
    }
    if (g)
        gguf_close(g);
}

static void poke_u32(struct buf *b, size_t at, uint32_t v) { memcpy(b->p + at, &v, 4); }
static void poke_u64(struct buf *b, size_t at, uint64_t v) { memcpy(b->p + at, &v, 8); }

static void test_truncation_every_byte(void)
{
    struct buf b = build_small(NULL);
    /* the file ends exactly where b.weight's data ends: every shorter prefix must fail */
    for (size_t n = 0; n < b.n; n++) {
        struct gguf *g = NULL;
        struct cerr e = {0};
        uint8_t *copy = malloc(n ? n : 1); /* exact-size copy so ASan sees overreads */
        memcpy(copy, b.p, n);
        int rc = gguf_open_mem(&g, copy, n, "test.gguf", &e);
        CHECK_MSG(rc < 0, "prefix of %zu bytes accepted", n);
        CHECK_MSG(rc == 0 || strlen(e.msg) > 0, "prefix %zu: empty message", n);
        if (rc == 0)
            gguf_close(g);
        free(copy);
    }
    free(b.p);
}

static void test_corruptions(void)
{
    struct small_pos pos;
    struct buf b;
#define FRESH() (b = build_small(&pos))
#define DONE() free(b.p)

    FRESH();
    memcpy(b.p, "GGUG", 4);
    expect_fail(&b, "bad magic", "magic");
    DONE();

    FRESH();
    poke_u32(&b, 4, 1);
    expect_fail(&b, "v1", "version 1");
    DONE();

    FRESH();
    poke_u32(&b, 4, 4);
    expect_fail(&b, "v4", "version 4");
    DONE();

    FRESH();
    poke_u32(&b, 4, 0x03000000u);
    expect_fail(&b, "big-endian", "big-endian");
    DONE();

    FRESH();
    poke_u64(&b, pos.n_kv, 1ull << 60);
    expect_fail(&b, "huge kv count", "metadata count");
    DONE();

    FRESH();
    poke_u64(&b, pos.n_tensors, 1ull << 60);
    expect_fail(&b, "huge tensor count", "tensor count");
    DONE();

    FRESH();
    poke_u64(&b, pos.n_kv, 4); /* one more kv than present: eats tensor infos */
    expect_fail(&b, "kv count too large", NULL);
    DONE();

    FRESH();
    poke_u64(&b, pos.str_len, 1ull << 40);
    expect_fail(&b, "string length past EOF", "past end");
    DONE();

    FRESH();
    poke_u64(&b, pos.str_len, (uint64_t)-1);
    expect_fail(&b, "string length -1", "past end");
    DONE();

    FRESH();
    poke_u64(&b, pos.arr_n, 1ull << 60);
    expect_fail(&b, "huge array count", "array");
    DONE();

    FRESH();
    poke_u32(&b, pos.arr_type, 13);
    expect_fail(&b, "bad array type", "type");
    DONE();

    FRESH();
    poke_u32(&b, pos.str_len - 4, 99); /* value type of general.architecture */
    expect_fail(&b, "bad kv type", "general.architecture");
    DONE();

    FRESH();
    poke_u32(&b, pos.t_ndims, 5);
    expect_fail(&b, "5 dims", "dims");
    DONE();

    FRESH();
    poke_u64(&b, pos.t_dim0, 0);
    expect_fail(&b, "zero dim", "a.weight");
    DONE();

    FRESH();
    poke_u64(&b, pos.t_dim0, 1ull << 62);
    poke_u64(&b, pos.t_dim0 + 8, 1ull << 62);
    expect_fail(&b, "dims overflow", "overflow");
    DONE();

    FRESH();
    poke_u64(&b, pos.t_dim0, (uint64_t)-8);
    expect_fail(&b, "negative dim", "a.weight");
    DONE();

    FRESH();
    poke_u32(&b, pos.t_type, 77);
    expect_fail(&b, "bad type id", "type id 77");
    DONE();

    FRESH();
    poke_u32(&b, pos.t_type, 4); /* removed Q4_2 */
    expect_fail(&b, "removed type", "a.weight");
    DONE();

    FRESH();
    poke_u32(&b, pos.t_type, 16); /* IQ2_XXS: known to GGML, not to cinfer */
    expect_fail(&b, "unsupported type", "IQ2_XXS");
    DONE();

    FRESH();
    poke_u32(&b, pos.t_type, DT_Q4_0); /* ne0 = 8 not a multiple of 32 */
    expect_fail(&b, "block multiple", "multiple");
    DONE();

    FRESH();
    poke_u64(&b, pos.t_off, 4);
    expect_fail(&b, "misaligned offset", "alignment");
    DONE();

    FRESH();
    poke_u64(&b, pos.t_off, 32); /* a: [32, 96) overlaps b: [64, 96) */
    expect_fail(&b, "overlap", "overlap");
    DONE();

    FRESH();
    poke_u64(&b, pos.t2_off, 1ull << 40);
    expect_fail(&b, "offset past EOF", "exceeds file size");
    DONE();

    FRESH();
    poke_u64(&b, pos.t2_off, (uint64_t)-32);
    expect_fail(&b, "offset wraps", "exceeds file size");
    DONE();

    FRESH();
    b.n -= 4; /* last tensor's data cut */
    expect_fail(&b, "data cut", "b.weight");
    DONE();
#undef FRESH
#undef DONE
}

static void test_duplicates_and_alignment(void)
{
    struct buf b = {0};
    header(&b, 3, 0, 2);
    put_key(&b, "k", GGUF_UINT8);
    put_u8(&b, 1);
    put_key(&b, "k", GGUF_UINT8);
    put_u8(&b, 2);
    expect_fail(&b, "duplicate key", "duplicate");
    free(b.p);

    memset(&b, 0, sizeof b);
    int64_t ne[1] = {8};
    header(&b, 3, 2, 0);
    tensor_info(&b, "w", 1, ne, DT_F32, 0);
    tensor_info(&b, "w", 1, ne, DT_F32, 32);
    pad_to(&b, 32);
    for (int i = 0; i < 16; i++)
        put_f32(&b, 0);
    expect_fail(&b, "duplicate tensor", "duplicate tensor");
    free(b.p);

    static const uint32_t bad_align[] = {0, 3, 48, 1u << 31};
    for (size_t i = 0; i < sizeof bad_align / sizeof bad_align[0]; i++) {
        memset(&b, 0, sizeof b);
        header(&b, 3, 0, 1);
        put_key(&b, "general.alignment", GGUF_UINT32);
        put_u32(&b, bad_align[i]);
        expect_fail(&b, "bad alignment", "general.alignment");
        free(b.p);
    }
    memset(&b, 0, sizeof b);
    header(&b, 3, 0, 1);
    put_key(&b, "general.alignment", GGUF_STRING);
    put_str(&b, "32");
    expect_fail(&b, "alignment type", "general.alignment");
    free(b.p);

    /* arrays nested deeper than the limit */
    memset(&b, 0, sizeof b);
    header(&b, 3, 0, 1);
    put_key(&b, "deep", GGUF_ARRAY);
    for (int d = 0; d < 20; d++) {
        put_u32(&b, GGUF_ARRAY);
        put_u64(&b, 1);
    }
    put_u32(&b, GGUF_UINT8);
    put_u64(&b, 0);
    expect_fail(&b, "deep nesting", "nested");
    free(b.p);

    /* nested array whose inner count overruns */
    memset(&b, 0, sizeof b);
    header(&b, 3, 0, 1);
    put_key(&b, "nest", GGUF_ARRAY);
    put_u32(&b, GGUF_ARRAY);
    put_u64(&b, 1);
    put_u32(&b, GGUF_UINT64);
    put_u64(&b, 1ull << 61);
    expect_fail(&b, "inner overrun", "nest");
    free(b.p);

    /* null buffer */
    struct gguf *g = NULL;
    struct cerr e = {0};
    CHECK(gguf_open_mem(&g, NULL, 0, "test.gguf", &e) < 0);
}

/* ---- split models -------------------------------------------------------------------- */

/* One split file: split.no = no, split.count = count, one F32 tensor `name` of 4 values. */
static struct buf build_split(int no, int count, int total, const char *name, float val)
{
    struct buf b = {0};
    int n_kv = 2 + (no == 0 ? 2 : 0);
    header(&b, 3, 1, (uint64_t)n_kv);
    if (no == 0) {
        put_key(&b, "general.architecture", GGUF_STRING);
        put_str(&b, "llama");
        put_key(&b, "split.tensors.count", GGUF_INT32);
        put_u32(&b, (uint32_t)total);
    }
    put_key(&b, "split.no", GGUF_UINT16);
    put_u16(&b, (uint16_t)no);
    put_key(&b, "split.count", GGUF_UINT16);
    put_u16(&b, (uint16_t)count);
    int64_t ne[1] = {4};
    tensor_info(&b, name, 1, ne, DT_F32, 0);
    pad_to(&b, 32);
    for (int i = 0; i < 4; i++)
        put_f32(&b, val + (float)i);
    return b;
}

static void write_buf(const char *path, const struct buf *b)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f) {
        fwrite(b->p, 1, b->n, f);
        fclose(f);
    }
}

static void write_split(const char *dir, int no, int count, int total, const char *name,
                        int file_no)
{
    char path[512];
    snprintf(path, sizeof path, "%s/m-%05d-of-%05d.gguf", dir, file_no + 1, count);
    struct buf b = build_split(no, count, total, name, (float)(10 * no));
    write_buf(path, &b);
    free(b.p);
}

static void test_split_files(void)
{
    char dir[] = "/tmp/cinfer_gguf_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char p0[512], p1[512], p2[512], out[512];
    snprintf(p0, sizeof p0, "%s/m-00001-of-00003.gguf", dir);
    snprintf(p1, sizeof p1, "%s/m-00002-of-00003.gguf", dir);
    snprintf(p2, sizeof p2, "%s/m-00003-of-00003.gguf", dir);
    CHECK_EQ_INT(gguf_split_path(out, sizeof out, p1, 2, 3), 0);
    CHECK_STR(out, p2);
    CHECK_EQ_INT(gguf_split_path(out, sizeof out, "model.gguf", 0, 2), CERR_INVALID);
    CHECK_EQ_INT(gguf_split_path(out, sizeof out, "m-0000x-of-00003.gguf", 0, 2), CERR_INVALID);
    CHECK_EQ_INT(gguf_split_path(out, 8, p1, 2, 3), CERR_LIMIT);

    write_split(dir, 0, 3, 3, "t0", 0);
    write_split(dir, 1, 3, 3, "t1", 1);
    write_split(dir, 2, 3, 3, "t2", 2);
    const char *entry[3] = {p0, p1, p2};
    for (int k = 0; k < 3; k++) {
        struct gguf_model *m = NULL;
        struct cerr e = {0};
        int rc = gguf_model_open(&m, entry[k], &e);
        CHECK_MSG(rc == 0, "%s", e.msg);
        if (!m)
            continue;
        CHECK_EQ_INT(m->n_splits, 3);
        CHECK_EQ_INT(m->n_tensors, 3);
        struct gguf_str s;
        CHECK_EQ_INT(gguf_get_str(gguf_model_meta(m), "general.architecture", &s, &e), 0);
        const struct gguf_tensor *t = gguf_model_find_tensor(m, "t2");
        CHECK(t != NULL);
        if (t) {
            float v;
            memcpy(&v, t->data + 4, 4);
            CHECK_NEAR(v, 21, 0);
        }
        CHECK(gguf_model_find_tensor(m, "t3") == NULL);
        gguf_model_close(m);
    }
    struct gguf_model *m = NULL;
    struct cerr e = {0};
    /* wrong split.no inside the third file */
    write_split(dir, 1, 3, 3, "t2", 2);
    CHECK(gguf_model_open(&m, p0, &e) < 0);
    CHECK(strstr(e.msg, "m-00003-of-00003.gguf") && strstr(e.msg, "split.no"));
    /* the same tensor in two splits */
    write_split(dir, 2, 3, 3, "t1", 2);
    CHECK(gguf_model_open(&m, p0, &e) < 0);
    CHECK(strstr(e.msg, "'t1'") != NULL);
    /* wrong total */
    write_split(dir, 0, 3, 5, "t0", 0);
    write_split(dir, 2, 3, 3, "t2", 2);
    CHECK(gguf_model_open(&m, p0, &e) < 0);
    CHECK(strstr(e.msg, "split.tensors.count") != NULL);
    /* a missing split */
    write_split(dir, 0, 3, 3, "t0", 0);
    unlink(p2);
    CHECK_EQ_INT(gguf_model_open(&m, p0, &e), CERR_IO);
    CHECK(strstr(e.msg, "m-00003-of-00003.gguf") != NULL);
    unlink(p0);
    unlink(p1);
    rmdir(dir);
    /* a plain file is a one-split model */
    int rc = gguf_model_open(&m, fixture_path("stories260K/stories260K.gguf"), &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    if (m) {
        CHECK_EQ_INT(m->n_splits, 1);
        CHECK_EQ_INT(m->n_tensors, 48);
        CHECK(gguf_model_find_tensor(m, "output.weight") != NULL);
        gguf_model_close(m);
    }
}

/* ---- files written by gguf-py (tests/data/format/gen.py) ------------------------------ */

static void test_reference_writer(void)
{
    struct gguf *g = NULL;
    struct cerr e = {0};
    int rc = gguf_open(&g, repo_path("tests/data/format/ref.gguf"), &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    if (!g)
        return;
    int64_t v = 0;
    double d = 0;
    int b = 0;
    struct gguf_str s;
    CHECK_EQ_INT(gguf_get_int(g, "t.u8", &v, &e), 0);
    CHECK_EQ_INT(v, 250);
    CHECK_EQ_INT(gguf_get_int(g, "t.i8", &v, &e), 0);
    CHECK_EQ_INT(v, -100);
    CHECK_EQ_INT(gguf_get_int(g, "t.u16", &v, &e), 0);
    CHECK_EQ_INT(v, 65000);
    CHECK_EQ_INT(gguf_get_int(g, "t.i16", &v, &e), 0);
    CHECK_EQ_INT(v, -32000);
    CHECK_EQ_INT(gguf_get_int(g, "t.u32", &v, &e), 0);
    CHECK_EQ_INT(v, 4000000000ll);
    CHECK_EQ_INT(gguf_get_int(g, "t.i32", &v, &e), 0);
    CHECK_EQ_INT(v, -2000000000ll);
    CHECK_EQ_INT(gguf_get_int(g, "t.i64", &v, &e), 0);
    CHECK_EQ_INT(v, -(1ll << 62));
    CHECK_EQ_INT(gguf_get_int(g, "t.u64", &v, &e), CERR_FORMAT);
    CHECK(gguf_find(g, "t.u64")->v.u64 == (1ull << 63) + 5);
    CHECK_EQ_INT(gguf_get_float(g, "t.f32", &d, &e), 0);
    CHECK_NEAR(d, 0.25, 0);
    CHECK_EQ_INT(gguf_get_float(g, "t.f64", &d, &e), 0);
    CHECK_NEAR(d / 1e300, 1, 1e-15);
    CHECK_EQ_INT(gguf_get_bool(g, "t.bool", &b, &e), 0);
    CHECK_EQ_INT(b, 1);
    CHECK_EQ_INT(gguf_get_str(g, "t.str", &s, &e), 0);
    CHECK(gguf_str_eq(s, "h\xc3\xa9llo w\xc3\xb6rld"));
    CHECK_EQ_INT(gguf_get_str(g, "tokenizer.chat_template", &s, &e), 0);
    CHECK(gguf_str_eq(s, "{{ messages }}"));
    CHECK_EQ_INT(gguf_get_int(g, "llama.block_count", &v, &e), 0);
    CHECK_EQ_INT(v, 2);
    const struct gguf_kv *a = NULL;
    CHECK_EQ_INT(gguf_get_arr(g, "t.arr_i32", &a, &e), 0);
    if (a) {
        CHECK_EQ_INT(a->arr_type, GGUF_INT32);
        CHECK_NEAR(gguf_arr_num(a, 1), -2, 0);
    }
    CHECK_EQ_INT(gguf_get_arr(g, "t.arr_str", &a, &e), 0);
    if (a) {
        CHECK_EQ_INT(a->arr_n, 3);
        CHECK_EQ_INT(gguf_arr_str(a, 1).len, 0);
        CHECK(gguf_str_eq(gguf_arr_str(a, 2), "ccc"));
    }
    CHECK_EQ_INT(gguf_get_arr(g, "t.arr_f32", &a, &e), 0);
    if (a)
        CHECK_NEAR(gguf_arr_num(a, 1), 1.5, 0);
    const struct gguf_tensor *t = gguf_find_tensor(g, "f32");
    CHECK(t && t->ne[0] == 3 && t->ne[1] == 2 && t->dtype == DT_F32);
    if (t) {
        float f;
        memcpy(&f, t->data + 5 * 4, 4);
        CHECK_NEAR(f, 5, 0);
    }
    t = gguf_find_tensor(g, "f16");
    CHECK(t && t->ne[0] == 8 && t->dtype == DT_F16 && t->nbytes == 16);
    t = gguf_find_tensor(g, "q8");
    CHECK(t && t->ne[0] == 32 && t->ne[1] == 2 && t->dtype == DT_Q8_0 && t->nbytes == 68);
    if (t)
        CHECK_EQ_INT(t->data[34 + 2], 7);
    gguf_close(g);

    struct gguf_model *m = NULL;
    rc = gguf_model_open(&m, repo_path("tests/data/format/ref-00002-of-00002.gguf"), &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    if (m) {
        CHECK_EQ_INT(m->n_splits, 2);
        CHECK_EQ_INT(m->n_tensors, 2);
        const struct gguf_tensor *tb = gguf_model_find_tensor(m, "b");
        CHECK(tb != NULL);
        if (tb) {
            float f;
            memcpy(&f, tb->data, 4);
            CHECK_NEAR(f, 2, 0);
        }
        CHECK(gguf_model_find_tensor(m, "a") != NULL);
        gguf_model_close(m);
    }
}

/* ---- cinfer info ------------------------------------------------------------------ */

/* Runs cmd_info with stdout captured into a malloc'd string; returns the exit status. */
static int run_info(char **out, int argc, char **argv)
{
    char tmpl[] = "/tmp/cinfer_info_XXXXXX";
    int fd = mkstemp(tmpl);
    fflush(stdout);
    int saved = dup(1);
    dup2(fd, 1);
    int rc = cmd_info(argc, argv);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    close(fd);
    size_t len = 0;
    *out = NULL;
    FILE *f = fopen(tmpl, "rb");
    if (f) {
        *out = calloc(1, 1 << 20);
        len = fread(*out, 1, (1 << 20) - 1, f);
        fclose(f);
    }
    (void)len;
    unlink(tmpl);
    return rc;
}

static void test_info_command(void)
{
    char *o = NULL;
    char *path = (char *)fixture_path("stories260K/stories260K.gguf");
    char *a1[] = {"info", path};
    CHECK_EQ_INT(run_info(&o, 2, a1), 0);
    if (o) {
        CHECK(strstr(o, "architecture:   llama") != NULL);
        CHECK(strstr(o, "block_count                              5") != NULL);
        CHECK(strstr(o, "512 tokens") != NULL);
        CHECK(strstr(o, "chat template:  no") != NULL);
        CHECK(strstr(o, "F32          48 tensors") != NULL);
        CHECK(strstr(o, "tokenizer.ggml.scores") == NULL); /* only with --kv */
        free(o);
    }
    char *a2[] = {"info", "--kv", "--tensors", path};
    CHECK_EQ_INT(run_info(&o, 4, a2), 0);
    if (o) {
        CHECK(strstr(o, "string[512] [\"<unk>\", \"<s>\"") != NULL);
        CHECK(strstr(o, "blk.4.ffn_down.weight") != NULL);
        CHECK(strstr(o, "[172, 64]") != NULL);
        free(o);
    }
    char *a3[] = {"info", "/nonexistent.gguf"};
    CHECK_EQ_INT(run_info(&o, 2, a3), 1);
    free(o);
    char *a4[] = {"info", "--bogus", path};
    CHECK_EQ_INT(run_info(&o, 3, a4), 1);
    free(o);
    char *a5[] = {"info", "--help"};
    CHECK_EQ_INT(run_info(&o, 2, a5), 0);
    if (o) {
        CHECK(strstr(o, "usage: cinfer info") != NULL);
        free(o);
    }
}

int main(void)
{
    RUN(test_stories260k);
    RUN(test_vocab_ggufs);
    RUN(test_missing_file);
    RUN(test_all_types);
    RUN(test_default_alignment_and_empty);
    RUN(test_truncation_every_byte);
    RUN(test_corruptions);
    RUN(test_duplicates_and_alignment);
    RUN(test_split_files);
    RUN(test_reference_writer);
    RUN(test_info_command);
    return harness_done();
}
