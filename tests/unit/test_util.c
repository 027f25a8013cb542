/* test_util.c — arena, errors, fp16/bf16 conversions, dtype sizes. */
#include "harness.h"

#include "backend/dtype.h"
#include "util/arena.h"
#include "util/base64.h"
#include "util/err.h"
#include "util/half.h"
#include "util/jsonfmt.h"

static void test_arena(void)
{
    struct arena a;
    arena_init(&a, 64);
    char *s = arena_strdup(&a, "hello");
    CHECK_STR(s, "hello");
    void *big = arena_alloc(&a, 1000);
    CHECK(big != NULL);
    CHECK(((size_t)big & 15) == 0);
    int *z = arena_calloc(&a, 10, sizeof(int));
    CHECK(z && z[9] == 0);
    CHECK(arena_calloc(&a, (size_t)-1, 16) == NULL);
    arena_free(&a);
}

static void test_err(void)
{
    struct cerr e = {0};
    CHECK_EQ_INT(cerr_set(&e, CERR_FORMAT, "bad %d", 7), CERR_FORMAT);
    CHECK_STR(e.msg, "bad 7");
    cerr_prefix(&e, "%s", "f.gguf");
    CHECK_STR(e.msg, "f.gguf: bad 7");
    CHECK_EQ_INT(cerr_set(NULL, CERR_IO, "x"), CERR_IO);
}

static void test_half(void)
{
    /* every fp16 value round-trips through f32 */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff))
            continue; /* NaN payloads */
        if (half_f32_to_f16(half_f16_to_f32((uint16_t)h)) != h)
            bad++;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_NEAR(half_f16_to_f32(0x3c00), 1.0, 0);
    CHECK_NEAR(half_bf16_to_f32(half_f32_to_bf16(3.0f)), 3.0, 0);
    CHECK_EQ_INT(half_f32_to_f16(65520.0f), 0x7c00);
    CHECK_EQ_INT(half_f32_to_bf16(1.00390625f), 0x3f80); /* tie rounds to even */
}

static void test_dtype(void)
{
    CHECK_EQ_INT(dtype_row_bytes(DT_Q4_K, 512), 288);
    CHECK_EQ_INT(dtype_row_bytes(DT_Q8_0, 33), 0);
    CHECK_EQ_INT(dtype_block_bytes(DT_Q6_K), 210);
    CHECK_STR(dtype_name(DT_BF16), "BF16");
    CHECK_STR(dtype_name(5), "?");
}

static void test_base64(void)
{
    const char *cases[][2] = {{"", ""}, {"f", "Zg=="}, {"fo", "Zm8="}, {"foo", "Zm9v"},
                              {"foobar", "Zm9vYmFy"}};
    for (int i = 0; i < 5; i++) {
        char enc[32];
        uint8_t dec[32];
        size_t n = strlen(cases[i][0]);
        base64_encode((const uint8_t *)cases[i][0], n, enc);
        CHECK_STR(enc, cases[i][1]);
        long m = base64_decode(enc, strlen(enc), dec, sizeof dec);
        CHECK_EQ_INT(m, (long)n);
        CHECK(m >= 0 && memcmp(dec, cases[i][0], n) == 0);
    }
    uint8_t b[8];
    CHECK_EQ_INT(base64_decode("Zm9", 3, b, 8), -1);     /* length not a multiple of 4 */
    CHECK_EQ_INT(base64_decode("Zm=v", 4, b, 8), -1);    /* padding in the middle */
    CHECK_EQ_INT(base64_decode("Zm9v!A==", 8, b, 8), -1); /* bad character */
    CHECK_EQ_INT(base64_decode("Zm9vYmFy", 8, b, 5), -1); /* buffer too small */
}

static void test_jsonfmt(void)
{
    const char *cases[][2] = {
        {"{\"t\":0.69999999999999996}", "{\"t\":0.7}"},
        {"[1.0,0.10000000000000001,-2.5,100,1e+300,1.0000000000000001e-05]",
         "[1.0,0.1,-2.5,100,1e300,1e-5]"},
        {"{\"s\":\"0.69999999999999996 \\\" 1.50\",\"x\":0.30000000000000004}",
         "{\"s\":\"0.69999999999999996 \\\" 1.50\",\"x\":0.30000000000000004}"},
        {"[3.1415926535897931,-0.0,123456789012345678.0]",
         "[3.141592653589793,-0.0,123456789012345678.0]"}, /* longer forms stay */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *s = strdup(cases[i][0]);
        CHECK_STR(json_shorten_reals(s), cases[i][1]);
        free(s);
    }
    /* every real reads back as the same double; jansson's own dump of 0.7 */
    json_t *j =
        json_pack("{s:f, s:f, s:f, s:i}", "a", 0.7, "b", 1.0 / 3.0, "c", (double)0.7f, "d", 7);
    char *s = json_dumps_short(j, JSON_COMPACT | JSON_SORT_KEYS);
    CHECK_STR(s, "{\"a\":0.7,\"b\":0.3333333333333333,\"c\":0.699999988079071,\"d\":7}");
    json_t *back = json_loads(s, 0, NULL);
    CHECK(back && json_real_value(json_object_get(back, "b")) == 1.0 / 3.0);
    CHECK(back && json_real_value(json_object_get(back, "c")) == (double)0.7f);
    json_decref(back);
    free(s);
    json_decref(j);
}

int main(void)
{
    RUN(test_arena);
    RUN(test_err);
    RUN(test_half);
    RUN(test_dtype);
    RUN(test_base64);
    RUN(test_jsonfmt);
    return harness_done();
}
