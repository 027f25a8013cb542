/* test_cpu_quant.c — CPU backend internals: GGML block decoding, the int8 activation
 * formats, and the worker pool's exactly-once chunk execution under stress.
 *
 * Known answers: hand-built blocks whose values follow from the format description, and
 * pseudo-random blocks whose decoded sums were produced by the `gguf` Python package
 * (gguf.quants.dequantize, an independent implementation) with this generator:
 *   st = 12345 + block_bytes; per byte: st = st*6364136223846793005 + 1442695040888963407
 *   (mod 2^64), byte = st >> 56; then fp16 scale fields := 0.1 (0x2e66) and 0.0625 (0x2c00);
 *   sums = sum(v[i]) and sum(v[i] * (i+1)) in float64, index order.
 */
#include "harness.h"

#include <stdatomic.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_int.h"
#include "backend/cpu/pool.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/repack.h"
#include "util/half.h"

struct gold {
    int dt;
    double sum, wsum;
    float first[4];
};

static const struct gold g_gold[] = {
    {DT_Q4_0, -5.2987060546875, -132.567626953125, {0.0999755859f, -0.699829102f, 0.49987793f, 0.0999755859f}},
    {DT_Q4_1, 23.6947021484375, 369.0179443359375, {1.56213379f, 1.06225586f, 1.06225586f, 0.462402344f}},
    {DT_Q5_0, 5.5986328125, 38.990478515625, {1.29968262f, -0.0999755859f, 0.999755859f, -0.599853516f}},
    {DT_Q5_1, 47.2889404296875, 804.01171875, {1.76208496f, 1.16223145f, 1.66210938f, 0.362426758f}},
    {DT_Q8_0, -3.8990478515625, 28.0931396484375, {8.89782715f, 5.39868164f, 8.29797363f, -12.5969238f}},
    {DT_Q2_K, 263.304931640625, 37726.1591796875, {1.13720703f, 1.73706055f, -0.0625f, -0.0625f}},
    {DT_Q3_K, -100.975341796875, -22420.9248046875, {-0.0f, -0.0f, 7.99804688f, -5.99853516f}},
    {DT_Q4_K, 5788.1727294921875, 780099.71008300781, {6.22265625f, 19.0195312f, -0.17578125f, 15.8203125f}},
    {DT_Q5_K, 11452.909423828125, 1461126.7922363281, {41.2644043f, 14.6708984f, -2.125f, 11.871582f}},
    {DT_Q6_K, 2201.7623291015625, 364185.16589355469, {-155.961914f, -20.7949219f, -291.128906f, 218.34668f}},
};

static void gold_block(int dt, uint8_t *raw)
{
    size_t bb = dtype_block_bytes(dt);
    uint64_t st = 12345 + bb;
    for (size_t i = 0; i < bb; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        raw[i] = (uint8_t)(st >> 56);
    }
    int offs[2] = {0, -1};
    if (dt == DT_Q4_1 || dt == DT_Q5_1 || dt == DT_Q4_K || dt == DT_Q5_K)
        offs[1] = 2;
    if (dt == DT_Q2_K)
        offs[0] = 80, offs[1] = 82;
    if (dt == DT_Q3_K)
        offs[0] = 108;
    if (dt == DT_Q6_K)
        offs[0] = 208;
    const uint16_t sc[2] = {0x2e66, 0x2c00};
    for (int j = 0; j < 2; j++)
        if (offs[j] >= 0)
            memcpy(raw + offs[j], &sc[j], 2);
}

static void test_gold_blocks(void)
{
    for (size_t i = 0; i < sizeof g_gold / sizeof g_gold[0]; i++) {
        const struct gold *g = &g_gold[i];
        uint8_t raw[256];
        float v[256];
        gold_block(g->dt, raw);
        int n = dtype_block_elems(g->dt);
        quant_dequant_row(g->dt, raw, v, n);
        double s = 0, w = 0;
        for (int e = 0; e < n; e++)
            s += v[e], w += (double)v[e] * (e + 1);
        CHECK_MSG(s == g->sum && w == g->wsum, "%s: sums %.17g %.17g, want %.17g %.17g",
                  dtype_name(g->dt), s, w, g->sum, g->wsum);
        for (int e = 0; e < 4; e++)
            CHECK_MSG(v[e] == g->first[e], "%s[%d] = %.9g, want %.9g", dtype_name(g->dt), e,
                      v[e], g->first[e]);
    }
}

/* Q4_0 by hand: d = 0.5, byte j holds element j (low nibble) and j+16 (high nibble). */
static void test_q4_0_by_hand(void)
{
    struct blk_q4_0 b;
    b.d = half_f32_to_f16(0.5f);
    for (int j = 0; j < 16; j++)
        b.qs[j] = (uint8_t)(j | (15 - j) << 4);
    float v[32];
    quant_dequant_row(DT_Q4_0, &b, v, 32);
    for (int j = 0; j < 16; j++) {
        CHECK_NEAR(v[j], (j - 8) * 0.5, 0);
        CHECK_NEAR(v[j + 16], (15 - j - 8) * 0.5, 0);
    }
}

/* Q5_1 by hand: the fifth bit of element j is bit j of qh (little-endian 32 bits). */
static void test_q5_1_by_hand(void)
{
    struct blk_q5_1 b;
    b.d = half_f32_to_f16(2.0f);
    b.m = half_f32_to_f16(-1.0f);
    uint32_t qh = 0x80000001u; /* elements 0 and 31 get +16 */
    memcpy(b.qh, &qh, 4);
    memset(b.qs, 0x31, 16); /* low nibbles 1, high nibbles 3 */
    float v[32];
    quant_dequant_row(DT_Q5_1, &b, v, 32);
    CHECK_NEAR(v[0], 17 * 2.0 - 1, 0);
    CHECK_NEAR(v[1], 1 * 2.0 - 1, 0);
    CHECK_NEAR(v[16], 3 * 2.0 - 1, 0);
    CHECK_NEAR(v[31], 19 * 2.0 - 1, 0);
}

/* Q4_K by hand: sub-block s (32 elements) uses 6-bit scale/min s; for s < 4 they are the low
 * 6 bits of bytes s and s+4; for s >= 4 low nibbles come from byte s+4 and the top two bits
 * from the high bits of bytes s-4 (scale) and s (min). */
static void test_q4_k_by_hand(void)
{
    struct blk_q4_k b;
    memset(&b, 0, sizeof b);
    b.d = half_f32_to_f16(1.0f);
    b.dmin = half_f32_to_f16(0.5f);
    b.scales[0] = 3;          /* sub-block 0: scale 3 */
    b.scales[4] = 2;          /* sub-block 0: min 2 */
    b.scales[8] = 0x5 | 0x10; /* sub-block 4: scale low 5, min low 1 */
    b.scales[0] |= 0x40;      /* sub-block 4: scale high bits 01 -> 16 + 5 = 21 */
    b.scales[4] |= 0x80;      /* sub-block 4: min high bits 10 -> 32 + 1 = 33 */
    for (int i = 0; i < 128; i++)
        b.qs[i] = 0x97; /* low nibble 7, high nibble 9 */
    float v[256];
    quant_dequant_row(DT_Q4_K, &b, v, 256);
    CHECK_NEAR(v[0], 3 * 7 - 0.5 * 2, 0);   /* sub-block 0, low nibbles */
    CHECK_NEAR(v[31], 3 * 7 - 0.5 * 2, 0);
    CHECK_NEAR(v[32], 0, 0);                /* sub-block 1: scale 0, min 0 */
    CHECK_NEAR(v[128], 21 * 7 - 0.5 * 33, 0); /* sub-block 4 = chunk 2, low nibbles */
    CHECK_NEAR(v[160], 0, 0);
}

/* Q6_K by hand: element e's low 4 bits are in ql, high 2 bits in qh, minus 32; scale e/16. */
static void test_q6_k_by_hand(void)
{
    struct blk_q6_k b;
    memset(&b, 0, sizeof b);
    b.d = half_f32_to_f16(0.25f);
    for (int g = 0; g < 16; g++)
        b.scales[g] = (int8_t)(g - 8);
    b.ql[0] = 0x5a;  /* e=0: low 0xa; e=64: low 0x5 */
    b.qh[0] = 0xe4;  /* e=0: 0, e=32: 1, e=64: 2, e=96: 3 */
    float v[256];
    quant_dequant_row(DT_Q6_K, &b, v, 256);
    CHECK_NEAR(v[0], 0.25 * -8 * (0xa - 32), 0);
    CHECK_NEAR(v[32], 0.25 * -6 * (16 - 32), 0);
    CHECK_NEAR(v[64], 0.25 * -4 * (0x5 + 32 - 32), 0);
    CHECK_NEAR(v[96], 0.25 * -2 * (48 - 32), 0);
    CHECK_NEAR(v[1], 0.25 * -8 * -32, 0);
}

static void test_act_quant(void)
{
    float x[512];
    for (int i = 0; i < 512; i++)
        x[i] = sinf((float)i * 0.37f) * (i < 256 ? 3.0f : 0.01f);
    x[40] = 0.0f;
    struct blk_a8 a[16];
    quant_act_row(QA_A8, x, a, 512);
    for (int b = 0; b < 16; b++) {
        int s = 0, amax = 0;
        for (int i = 0; i < 32; i++) {
            /* half a step, plus the fp16 rounding of d (2^-11 relative) times |q| <= 127 */
            float d = fabsf(x[b * 32 + i] - a[b].d * a[b].q[i]);
            CHECK(d <= a[b].d * (0.5f + 127.0f / 2048.0f));
            s += a[b].q[i];
            amax = abs(a[b].q[i]) > amax ? abs(a[b].q[i]) : amax;
        }
        CHECK(fabsf(a[b].ds - a[b].d * (float)s) <= fabsf(a[b].d * (float)s) * 1e-3f);
        CHECK_EQ_INT(a[b].ns1, -s);
        CHECK_EQ_INT(a[b].ns2, -2 * s);
        CHECK_EQ_INT(amax, 127);
    }
    struct blk_a8k k[2];
    quant_act_row(QA_A8K, x, k, 512);
    for (int b = 0; b < 2; b++)
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int i = 0; i < 16; i++) {
                s += k[b].q[g * 16 + i];
                /* d is negative: scale = -127 / (signed value of largest magnitude) */
                CHECK(fabsf(x[b * 256 + g * 16 + i] - k[b].d * k[b].q[g * 16 + i]) <= fabsf(k[b].d) * 0.5001f);
            }
            CHECK_EQ_INT(s, k[b].bsums[g]);
        }
    float z[32] = {0};
    quant_act_row(QA_A8, z, a, 32);
    CHECK(a[0].d == 0.0f && a[0].ds == 0.0f && a[0].q[5] == 0);
    z[3] = NAN, z[4] = INFINITY, z[5] = 1.0f; /* must not trap or hit UB (UBSan build) */
    quant_act_row(QA_A8, z, a, 32);
    CHECK(a[0].q[3] == 0);
}

/* The reference dot of a quantized row equals the double dot of the decoded row with the
 * decoded activations (within float rounding), for every quantized type. */
static void test_dot_ref(void)
{
    static const int types[] = {DT_Q4_0, DT_Q4_1, DT_Q5_0, DT_Q5_1, DT_Q8_0,
                                DT_Q2_K, DT_Q3_K, DT_Q4_K, DT_Q5_K, DT_Q6_K};
    float x[512], w[512], xd[512];
    for (int i = 0; i < 512; i++)
        x[i] = cosf((float)i * 1.7f);
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        int dt = types[ti], kind = quant_act_kind(dt);
        uint8_t raw[2 * 256];
        gold_block(dt, raw);
        gold_block(dt, raw + dtype_block_bytes(dt)); /* two blocks */
        int n = 2 * dtype_block_elems(dt);
        quant_dequant_row(dt, raw, w, n);
        uint8_t xq[2 * sizeof(struct blk_a8k)];
        quant_act_row(kind, x, xq, n);
        /* decoded activations */
        for (int b = 0; b < n / (kind == QA_A8 ? 32 : 256); b++) {
            if (kind == QA_A8) {
                const struct blk_a8 *a = (const struct blk_a8 *)xq + b;
                for (int i = 0; i < 32; i++)
                    xd[b * 32 + i] = a->d * a->q[i];
            } else {
                const struct blk_a8k *a = (const struct blk_a8k *)xq + b;
                for (int i = 0; i < 256; i++)
                    xd[b * 256 + i] = a->d * a->q[i];
            }
        }
        double want = 0, mag = 0;
        for (int i = 0; i < n; i++)
            want += (double)w[i] * xd[i], mag += fabs((double)w[i] * xd[i]);
        float got = quant_dot_ref(dt, n, raw, xq);
        CHECK_MSG(fabs(got - want) <= 1e-5 * mag, "%s: dot %.9g, want %.9g", dtype_name(dt),
                  got, want);
    }
}

/* Every SIMD level's activation quantizer writes the same bytes as quant_act_row(),
 * including zero blocks, exact .5 ties, huge/tiny values and NaN/inf. */
static void test_act_quant_simd_identical(void)
{
    static const char *const levels[] = {"avx2", "avx512"};
    enum { K = 256 * 8 };
    static float x[K];
    static uint8_t a[2][K / 32 * sizeof(struct blk_a8)], b[2][K / 256 * sizeof(struct blk_a8k)];
    uint64_t st = 7;
    for (int i = 0; i < K; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((int64_t)(st >> 33) % 20001 - 10000) / 1000.0f;
    }
    memset(x + 256, 0, 256 * sizeof(float)); /* an all-zero K block */
    for (int i = 0; i < 32; i++)            /* ties: amax 127 gives id 1, x + .5 */
        x[512 + i] = (float)(i - 16) + 0.5f;
    x[512 + 5] = 127.0f;
    x[768 + 3] = 1e30f, x[768 + 40] = -3e-30f;
    x[1024 + 7] = NAN, x[1024 + 300] = INFINITY;
    x[1600] = -9.75f; /* negative largest magnitude in its K block */
    struct cpu_kernels ref, k;
    cpu_kernels_scalar(&ref);
    for (int li = 0; li < 2; li++) {
        if (!be_cpu_isa_supported(levels[li]))
            continue;
        cpu_kernels_scalar(&k);
        cpu_kernels_avx2(&k);
        if (li == 1)
            cpu_kernels_avx512(&k);
        ref.quant_act(QA_A8, x, a[0], K);
        k.quant_act(QA_A8, x, a[1], K);
        ref.quant_act(QA_A8K, x, b[0], K);
        k.quant_act(QA_A8K, x, b[1], K);
        CHECK_MSG(memcmp(a[0], a[1], sizeof a[0]) == 0, "%s: a8 bytes differ", levels[li]);
        CHECK_MSG(memcmp(b[0], b[1], sizeof b[0]) == 0, "%s: a8k bytes differ", levels[li]);
    }
}

struct pool_ctx {
    atomic_int hits[64];
    int round;
};

static void pool_chunk(void *arg, int64_t c)
{
    struct pool_ctx *p = arg;
    atomic_fetch_add(&p->hits[c], 1);
    if ((c + p->round) % 7 == 0) /* uneven chunk cost */
        for (volatile int i = 0; i < 2000; i++)
            ;
}

/* Many back-to-back tasks of varying size: every chunk runs exactly once per task. */
static void test_pool_exactly_once(void)
{
    struct cerr e = {0};
    for (int nt = 1; nt <= 5; nt += 2) {
        struct cpu_pool *pool = cpu_pool_new(nt, &e);
        CHECK(pool != NULL);
        if (!pool)
            return;
        static struct pool_ctx ctx;
        int bad = 0;
        for (int r = 0; r < 3000; r++) {
            int n = 1 + (r * 37) % 64;
            for (int i = 0; i < 64; i++)
                atomic_store(&ctx.hits[i], 0);
            ctx.round = r;
            cpu_pool_run(pool, pool_chunk, &ctx, n);
            for (int i = 0; i < 64; i++)
                bad += atomic_load(&ctx.hits[i]) != (i < n);
            if (r % 500 == 0) /* let the workers fall asleep now and then */
                for (volatile int i = 0; i < 3000000; i++)
                    ;
        }
        CHECK_MSG(bad == 0, "%d threads: %d chunk counts wrong", nt, bad);
        cpu_pool_free(pool);
    }
}

/* Repacking is lossless: every row rebuilt from the repacked copy equals the file's bytes
 * (13 rows: a full group and a tail group; pseudo-random bytes, so every scale/min/quant
 * bit pattern occurs), and tail rows of the last group are zero blocks. */
static void test_repack_roundtrip(void)
{
    static const int types[] = {DT_Q4_K, DT_Q5_K, DT_Q6_K, DT_Q8_0, DT_Q5_0, DT_Q4_0, DT_Q4_1};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        int dt = types[ti], rows = 13;
        int64_t k = 768;
        size_t rb = dtype_row_bytes(dt, k);
        uint8_t *src = malloc(rb * (size_t)rows), *back = malloc(rb);
        uint64_t st = 777 + (uint64_t)dt;
        for (size_t i = 0; i < rb * (size_t)rows; i++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            src[i] = (uint8_t)(st >> 56);
        }
        struct rp_hdr *h = rp_alloc(dt, k, rows);
        CHECK(h != NULL);
        if (!h)
            continue;
        rp_fill(h, src, 0, 1);
        rp_fill(h, src, 1, 2);
        int bad = 0;
        for (int r = 0; r < rows; r++) {
            rp_orig_row_part(h, r, 0, k / dtype_block_elems(dt), back);
            bad += memcmp(back, src + (size_t)r * rb, rb) != 0;
        }
        CHECK_MSG(bad == 0, "%s: %d rows differ after the round trip", dtype_name(dt), bad);
        /* rows 13..15 of the tail group: all zero (d = 0) */
        float y[768];
        rp_orig_row_part(h, 15, 0, k / dtype_block_elems(dt), back);
        quant_dequant_row(dt, back, y, k);
        int nz = 0;
        for (int i = 0; i < k; i++)
            nz += y[i] != 0.0f;
        CHECK_MSG(nz == 0, "%s: tail row not zero", dtype_name(dt));
        struct be_tensor t = {.dtype = dt, .ne = {k, rows, 1, 1}, .data = h, .nbytes = h->bytes};
        CHECK(rp_of(&t) == h);
        t.data = src, t.nbytes = rb * (size_t)rows;
        CHECK(rp_of(&t) == NULL);
        free(h), free(src), free(back);
    }
}

int main(void)
{
    RUN(test_pool_exactly_once);
    RUN(test_act_quant_simd_identical);
    RUN(test_gold_blocks);
    RUN(test_q4_0_by_hand);
    RUN(test_q5_1_by_hand);
    RUN(test_q4_k_by_hand);
    RUN(test_q6_k_by_hand);
    RUN(test_act_quant);
    RUN(test_dot_ref);
    RUN(test_repack_roundtrip);
    return harness_done();
}
