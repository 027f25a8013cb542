/* tc_emu.c — a host emulation of CINFER_KVQ_DEC=tc's scores (cuda_kvq_dec.cu: kd_tc_prep,
 * kd_tc_scores) over the index arithmetic of src/backend/cuda/cuda_kvq_tc.h, the same
 * functions the kernel calls. Each lane's A and B registers are filled the way the kernel
 * fills them; the mma is emulated from the PTX ISA's fragment tables for
 * mma.m16n8k32 .s8 (A, row) x .u8 (B, col) -> .s32 (written out here independently:
 * ptx_a / ptx_b / ptx_c); the lanes' C registers are combined as the kernel does (the
 * shuffle with lane ^ 16, the f16 group headers). Scores are checked against a plain
 * double-precision dot of q with the decoded keys (m + d * code), for head_dim 128 and 64,
 * 1, 2 and 4 heads a block, random and extreme q (largest |q| a power of two, negative,
 * tiny, zero rows).
 *
 * Usage: tc_emu [plant]   plant 0: the kernel's arithmetic (must pass, exit 0); 1..4: a
 * planted mistake (must fail, exit 1): 1 the digit-1 partner lane ^ 8, 2 A's high columns
 * without + 16, 3 the minimum term scaled by 1 / 2^e, 4 B's second register 8 bytes on. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_kvq_tc.h"

enum { ROUND = 64, MAXHD = 128, GB = 4 + 32, HDR = 4 };

static int g_plant;
static uint64_t g_rng = 0x243F6A8885A308D3ull;

static uint32_t rnd(void)
{
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 11);
}
static double urand(void)
{
    return (rnd() & 0xFFFFFF) / 16777216.0;
}

/* f16 bits -> float (normal numbers and zero: all this emulator makes) */
static float h2f(uint16_t h)
{
    const int e = (h >> 10) & 31, m = h & 1023;
    const float v = e == 0 ? ldexpf((float)m, -24) : ldexpf((float)(1024 + m), e - 25);
    return h & 0x8000 ? -v : v;
}

/* ---- the PTX ISA's tables for m16n8k32 with 8-bit A/B (gid = lane / 4, tig = lane % 4) ---- */

/* A element i (0..15; register i / 4, byte i % 4) of lane: row, column */
static void ptx_a(int lane, int i, int *row, int *col)
{
    const int gid = lane >> 2, tig = lane & 3;
    *row = (i < 4 || (i >= 8 && i < 12)) ? gid : gid + 8;
    *col = i < 8 ? tig * 4 + (i & 3) : tig * 4 + (i & 3) + 16;
}
/* B element i (0..7; register i / 4, byte i % 4) of lane: row (k), column (n) */
static void ptx_b(int lane, int i, int *row, int *col)
{
    const int gid = lane >> 2, tig = lane & 3;
    *row = i < 4 ? tig * 4 + (i & 3) : tig * 4 + (i & 3) + 16;
    *col = gid;
}
/* C element i (0..3) of lane: row, column */
static void ptx_c(int lane, int i, int *row, int *col)
{
    const int gid = lane >> 2, tig = lane & 3;
    *row = i < 2 ? gid : gid + 8;
    *col = tig * 2 + (i & 1);
}

/* one warp's mma: c[lane][4] = A (from a[lane][4]) x B (from b[lane][2]); returns -1 when
 * the tables leave an element unset or set twice (a broken emulation) */
static int emu_mma(const uint32_t a[32][4], const uint32_t b[32][2], int32_t c[32][4])
{
    int8_t A[16][32];
    uint8_t B[32][8];
    int na[16][32] = {{0}}, nb[32][8] = {{0}};
    for (int l = 0; l < 32; l++) {
        for (int i = 0; i < 16; i++) {
            int r, k;
            ptx_a(l, i, &r, &k);
            A[r][k] = (int8_t)(uint8_t)(a[l][i / 4] >> (8 * (i % 4)));
            na[r][k]++;
        }
        for (int i = 0; i < 8; i++) {
            int k, n;
            ptx_b(l, i, &k, &n);
            B[k][n] = (uint8_t)(b[l][i / 4] >> (8 * (i % 4)));
            nb[k][n]++;
        }
    }
    for (int k = 0; k < 32; k++) {
        for (int n = 0; n < 8; n++)
            if (nb[k][n] != 1)
                return -1;
        for (int r = 0; r < 16; r++)
            if (na[r][k] != 1)
                return -1;
    }
    for (int l = 0; l < 32; l++)
        for (int i = 0; i < 4; i++) {
            int r, n;
            ptx_c(l, i, &r, &n);
            int32_t s = 0;
            for (int k = 0; k < 32; k++)
                s += (int32_t)A[r][k] * (int32_t)B[k][n];
            c[l][i] = s;
        }
    return 0;
}

static uint32_t ld32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* ---- the kernel's arithmetic (kd_tc_prep, kd_tc_scores), warp by warp, lane by lane ---- */

struct blk {
    int hd, hg;
    float q[4][MAXHD];
    uint8_t rec[ROUND * MAXHD / 32 * GB]; /* 64 positions' K head records, hd / 32 * GB
                                           * bytes apart (as in shared memory) */
    int8_t qd[KT_ROWS * MAXHD];
    float qinv[4], qg[4][MAXHD / 32];
    float sc[4][ROUND];
};

static void emu_prep(struct blk *b)
{
    const int hd = b->hd, R = hd / 32;
    memset(b->qd, 0x5A, sizeof b->qd); /* garbage: every row must be written */
    for (int warp = 0; warp < 8; warp++) {
        if (warp >= 4) {
            for (int i = 0; i < hd; i++)
                b->qd[(8 + warp) * hd + i] = 0;
            continue;
        }
        const int h = warp;
        if (h >= b->hg) {
            for (int k = 0; k < 3; k++)
                for (int i = 0; i < hd; i++)
                    b->qd[kt_qrow(h, k) * hd + i] = 0;
            continue;
        }
        float mx = 0.0f;
        for (int i = 0; i < hd; i++)
            mx = fmaxf(mx, fabsf(b->q[h][i]));
        const int e = kt_exp(mx);
        for (int i = 0; i < hd; i++) {
            int8_t d[3];
            const int32_t qi = (int32_t)rintf(ldexpf(b->q[h][i], e));
            kt_digits(qi, d);
            if (d[0] + 256 * d[1] + 65536 * d[2] != qi || abs(qi) > (1 << KT_SHIFT)) {
                fprintf(stderr, "digits of %d: %d %d %d\n", qi, d[0], d[1], d[2]);
                exit(1);
            }
            for (int j = 0; j < 3; j++)
                b->qd[kt_qrow(h, j) * hd + i] = d[j];
        }
        for (int k = 0; k < R; k++) {
            float s = 0.0f;
            for (int i = 0; i < 32; i++)
                s += b->q[h][32 * k + i];
            b->qg[h][k] = s;
        }
        b->qinv[h] = ldexpf(1.0f, -e);
    }
}

static int emu_scores(struct blk *b)
{
    const int hd = b->hd, R = hd / 32, hb = R * GB;
    for (int warp = 0; warp < 8; warp++) {
        const int j0 = warp * 8;
        uint32_t qa[4][32][4];
        for (int gi = 0; gi < R; gi++)
            for (int l = 0; l < 32; l++)
                for (int r = 0; r < 4; r++) {
                    int col = gi * KT_G + kt_a_col(l, r);
                    if (g_plant == 2 && r >= 2)
                        col -= 16;
                    qa[gi][l][r] = ld32(b->qd + kt_a_row(l, r) * hd + col);
                }
        float s[32][2] = {{0}}, t[32][2] = {{0}};
        for (int gi = 0; gi < R; gi++) {
            uint32_t bb[32][2];
            int32_t c[32][4];
            for (int l = 0; l < 32; l++) {
                const uint8_t *rb = b->rec + (j0 + kt_b_pos(l)) * hb;
                bb[l][0] = ld32(rb + kt_b_off(l, 0, gi, GB, HDR));
                bb[l][1] = ld32(rb + kt_b_off(l, 1, gi, GB, HDR) - (g_plant == 4 ? 8 : 0));
            }
            if (emu_mma(qa[gi], bb, c))
                return fprintf(stderr, "the fragment tables cover an element twice\n"), -1;
            for (int l = 0; l < 32; l++) {
                const int partner = l ^ (g_plant == 1 ? 8 : 16);
                const int32_t m0 = c[partner][0], m1 = c[partner][1];
                const int h = l >> 2, hh = h < b->hg ? h : 0;
                const uint8_t *r0 = b->rec + (j0 + kt_c_pos(l, 0)) * hb;
                const uint8_t *r1 = b->rec + (j0 + kt_c_pos(l, 1)) * hb;
                const uint32_t w0 = ld32(r0 + gi * GB), w1 = ld32(r1 + gi * GB);
                const float q = b->qg[hh][gi];
                s[l][0] =
                    fmaf(h2f((uint16_t)(w0 & 0xFFFFu)), kt_combine(c[l][0], m0, c[l][2]), s[l][0]);
                s[l][1] =
                    fmaf(h2f((uint16_t)(w1 & 0xFFFFu)), kt_combine(c[l][1], m1, c[l][3]), s[l][1]);
                t[l][0] = fmaf(h2f((uint16_t)(w0 >> 16)), q, t[l][0]);
                t[l][1] = fmaf(h2f((uint16_t)(w1 >> 16)), q, t[l][1]);
            }
        }
        for (int l = 0; l < 16; l++) {
            const int h = l >> 2;
            if (h >= b->hg)
                continue;
            const float qi = b->qinv[h];
            for (int c = 0; c < 2; c++) {
                const int j = j0 + kt_c_pos(l, c);
                b->sc[h][j] = g_plant == 3 ? (s[l][c] + t[l][c]) * qi : fmaf(s[l][c], qi, t[l][c]);
            }
        }
    }
    return 0;
}

/* ---- cases ---- */

static uint16_t rand_half(int emin, int emax)
{
    const int e = emin + (int)(rnd() % (unsigned)(emax - emin + 1));
    return (uint16_t)((rnd() & 1) << 15 | e << 10 | (rnd() & 1023));
}

/* returns the worst error over 64 positions x hg heads relative to sum |q| |k| */
static double run_case(int hd, int hg, int qkind)
{
    static struct blk b;
    memset(&b, 0, sizeof b);
    b.hd = hd, b.hg = hg;
    const int R = hd / 32;
    for (int h = 0; h < hg; h++) {
        const double mag = qkind == 2 ? 1e-6 : qkind == 3 ? 300.0 : 1.0 + 3.0 * urand();
        for (int i = 0; i < hd; i++)
            b.q[h][i] = (float)(mag * (2.0 * urand() - 1.0));
        if (qkind == 1) /* largest |q| a power of two, negative */
            b.q[h][(int)(rnd() % (unsigned)hd)] = -4.0f;
        if (qkind == 4 && h == 1) /* a zero row */
            memset(b.q[h], 0, sizeof b.q[h]);
    }
    for (int j = 0; j < ROUND; j++)
        for (int gi = 0; gi < R; gi++) {
            uint8_t *g = b.rec + j * R * GB + gi * GB;
            const uint16_t d = rand_half(8, 14) & 0x7FFF, m = rand_half(10, 16);
            memcpy(g, &d, 2), memcpy(g + 2, &m, 2);
            for (int i = 0; i < 32; i++)
                g[HDR + i] = (uint8_t)rnd();
        }
    emu_prep(&b);
    if (emu_scores(&b))
        return 1e30;
    double worst = 0.0;
    for (int h = 0; h < hg; h++)
        for (int j = 0; j < ROUND; j++) {
            double ref = 0.0, mag = 0.0;
            for (int gi = 0; gi < R; gi++) {
                const uint8_t *g = b.rec + j * R * GB + gi * GB;
                uint16_t d, m;
                memcpy(&d, g, 2), memcpy(&m, g + 2, 2);
                for (int i = 0; i < 32; i++) {
                    const double k = (double)h2f(m) + (double)h2f(d) * g[HDR + i];
                    ref += (double)b.q[h][gi * 32 + i] * k;
                    mag += fabs((double)b.q[h][gi * 32 + i] * k);
                }
            }
            const double err = fabs((double)b.sc[h][j] - ref) / (mag > 0.0 ? mag : 1.0);
            if (!(err <= worst)) /* (NaN counts as worst) */
                worst = err != err ? 1e30 : err;
        }
    return worst;
}

int main(int argc, char **argv)
{
    g_plant = argc > 1 ? atoi(argv[1]) : 0;
    const double tol = 1e-5; /* of sum |q| |k|: the kernel's rounding is ~2^-22 of it */
    int bad = 0, n = 0;
    double worst = 0.0;
    for (int hd = 64; hd <= 128; hd += 64)
        for (int hg = 1; hg <= 4; hg *= 2)
            for (int qk = 0; qk < 5; qk++)
                for (int rep = 0; rep < 4; rep++) {
                    const double e = run_case(hd, hg, qk);
                    worst = e > worst ? e : worst;
                    n++;
                    if (!(e <= tol)) {
                        if (bad < 3)
                            fprintf(stderr, "hd %d hg %d q kind %d: error %.3g of sum |q||k|\n", hd,
                                    hg, qk, e);
                        bad++;
                    }
                }
    printf("tc_emu plant %d: %d cases (64 positions each), %d over %.0e of sum |q||k|, worst "
           "%.3g\n",
           g_plant, n, bad, tol, worst);
    return bad ? 1 : 0;
}
