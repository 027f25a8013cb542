/* repack.c — see repack.h. Byte shuffling only: every scale and quant keeps its file value
 * (fp16 d stays fp16; -dmin is the same fp16 with the sign bit flipped), so rp_orig_row()
 * rebuilds the file's bytes exactly. */
#include "backend/cpu/repack.h"

#include <stdlib.h>
#include <string.h>

#include "backend/cpu/quant.h"

#define RP_MAGIC 0x31304b4341504552ull /* "REPACK01" */

/* group block offsets */
enum {
    Q4K_D = 0, Q4K_NDM = 16, Q4K_SC = 32, Q4K_MN = 96, Q4K_Q = 160, Q4K_GBLK = 1184,
    Q5K_GBLK = 1440,
    Q6K_D = 0, Q6K_SC = 16, Q6K_GBLK = 1680,
    Q8_D = 0, Q8_Q = 16, Q8_GBLK = 272,
    Q5_D = 0, Q5_H = 16, Q5_Q = 48, Q5_GBLK = 176,
    Q40_D = 0, Q40_Q = 16, Q40_GBLK = 144,
    Q41_D = 0, Q41_M = 16, Q41_Q = 32, Q41_GBLK = 160,
};

int rp_supported(int dt)
{
    return dt == DT_Q4_K || dt == DT_Q5_K || dt == DT_Q6_K || dt == DT_Q8_0 || dt == DT_Q5_0 ||
           dt == DT_Q4_0 || dt == DT_Q4_1;
}

size_t rp_gblk_bytes(int dt)
{
    switch (dt) {
    case DT_Q4_K: return Q4K_GBLK;
    case DT_Q5_K: return Q5K_GBLK;
    case DT_Q6_K: return Q6K_GBLK;
    case DT_Q8_0: return Q8_GBLK;
    case DT_Q5_0: return Q5_GBLK;
    case DT_Q4_0: return Q40_GBLK;
    case DT_Q4_1: return Q41_GBLK;
    default: return 0;
    }
}

/* ---- 32-element blocks: Q8_0 (int8 ^ 0x80), Q5_0 (nibbles + high-bit masks), Q4_0 ---- */

static void b32_pack(int dt, uint8_t *g, int r, const uint8_t *p)
{
    memcpy(g + 2 * r, p, 2); /* d: first in every 32-element block */
    if (dt == DT_Q8_0) {
        const struct blk_q8_0 *b = (const struct blk_q8_0 *)p;
        for (int j = 0; j < 4; j++)
            for (int t = 0; t < 8; t++)
                g[Q8_Q + j * 64 + r * 8 + t] = (uint8_t)b->qs[8 * j + t] ^ 0x80u;
    } else if (dt == DT_Q5_0) {
        const struct blk_q5_0 *b = (const struct blk_q5_0 *)p;
        for (int j = 0; j < 4; j++)
            g[Q5_H + j * 8 + r] = b->qh[j];
        for (int jj = 0; jj < 2; jj++)
            memcpy(g + Q5_Q + jj * 64 + r * 8, b->qs + 8 * jj, 8);
    } else if (dt == DT_Q4_1) {
        const struct blk_q4_1 *b = (const struct blk_q4_1 *)p;
        memcpy(g + Q41_M + 2 * r, &b->m, 2);
        for (int jj = 0; jj < 2; jj++)
            memcpy(g + Q41_Q + jj * 64 + r * 8, b->qs + 8 * jj, 8);
    } else {
        const struct blk_q4_0 *b = (const struct blk_q4_0 *)p;
        for (int jj = 0; jj < 2; jj++)
            memcpy(g + Q40_Q + jj * 64 + r * 8, b->qs + 8 * jj, 8);
    }
}

static void b32_unpack(int dt, const uint8_t *g, int r, uint8_t *p)
{
    memcpy(p, g + 2 * r, 2);
    if (dt == DT_Q8_0) {
        struct blk_q8_0 *b = (struct blk_q8_0 *)p;
        for (int j = 0; j < 4; j++)
            for (int t = 0; t < 8; t++)
                b->qs[8 * j + t] = (int8_t)(g[Q8_Q + j * 64 + r * 8 + t] ^ 0x80u);
    } else if (dt == DT_Q5_0) {
        struct blk_q5_0 *b = (struct blk_q5_0 *)p;
        for (int j = 0; j < 4; j++)
            b->qh[j] = g[Q5_H + j * 8 + r];
        for (int jj = 0; jj < 2; jj++)
            memcpy(b->qs + 8 * jj, g + Q5_Q + jj * 64 + r * 8, 8);
    } else if (dt == DT_Q4_1) {
        struct blk_q4_1 *b = (struct blk_q4_1 *)p;
        memcpy(&b->m, g + Q41_M + 2 * r, 2);
        for (int jj = 0; jj < 2; jj++)
            memcpy(b->qs + 8 * jj, g + Q41_Q + jj * 64 + r * 8, 8);
    } else {
        struct blk_q4_0 *b = (struct blk_q4_0 *)p;
        for (int jj = 0; jj < 2; jj++)
            memcpy(b->qs + 8 * jj, g + Q40_Q + jj * 64 + r * 8, 8);
    }
}

const struct rp_hdr *rp_of(const struct be_tensor *t)
{
    if (!t->data || t->nbytes < sizeof(struct rp_hdr) || !rp_supported(t->dtype))
        return NULL;
    const struct rp_hdr *h = t->data;
    if (h->magic != RP_MAGIC || h->self != t->data || h->dtype != t->dtype)
        return NULL;
    return h;
}

/* The 12-byte packing of 8 six-bit scales and mins (Q4_K): decode and encode. */
static void k4_get(const uint8_t *q, int j, uint8_t *sc, uint8_t *mn)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
        *mn = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

static void k4_put(uint8_t q[12], const uint8_t sc[8], const uint8_t mn[8])
{
    for (int j = 0; j < 4; j++) {
        q[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        q[j + 4] = (uint8_t)((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
        q[j + 8] = (uint8_t)((sc[j + 4] & 0xf) | ((mn[j + 4] & 0xf) << 4));
    }
}

/* Sets the 6-bit value (0..63) of element e of a Q6_K block. */
static void q6_put(struct blk_q6_k *b, int e, int v)
{
    int n = e / 128, r = e % 128, qq = r / 32, l = r % 32;
    uint8_t *lb = &b->ql[n * 64 + l + (qq & 1) * 32];
    *lb = qq >= 2 ? (uint8_t)((*lb & 0x0f) | (v & 0xf) << 4) : (uint8_t)((*lb & 0xf0) | (v & 0xf));
    uint8_t *hb = &b->qh[n * 32 + l];
    *hb = (uint8_t)((*hb & ~(3 << (2 * qq))) | ((v >> 4) & 3) << (2 * qq));
}

/* Q4_K and Q5_K share the header (d, -dmin, scales, mins) and the nibble layout; Q5_K's
 * nibble vectors sit after their fifth-bit masks (rp_q5k_q / rp_q5k_m). */
static size_t k45_q(int dt, int c, int j)
{
    return dt == DT_Q5_K ? rp_q5k_q(c, j) : (size_t)Q4K_Q + (size_t)(c * 4 + j) * 64;
}

static void k45_pack(int dt, uint8_t *g, int r, const uint8_t *p)
{
    const struct blk_q4_k *b = (const struct blk_q4_k *)p; /* same header for Q5_K */
    const uint8_t *qs = dt == DT_Q5_K ? ((const struct blk_q5_k *)p)->qs : b->qs;
    memcpy(g + Q4K_D + 2 * r, &b->d, 2);
    uint16_t nd = b->dmin ^ 0x8000u;
    memcpy(g + Q4K_NDM + 2 * r, &nd, 2);
    for (int s = 0; s < 8; s++)
        k4_get(b->scales, s, &g[Q4K_SC + s * 8 + r], &g[Q4K_MN + s * 8 + r]);
    for (int c = 0; c < 4; c++)
        for (int j = 0; j < 4; j++)
            memcpy(g + k45_q(dt, c, j) + r * 8, qs + 32 * c + 8 * j, 8);
    if (dt != DT_Q5_K)
        return;
    const uint8_t *qh = ((const struct blk_q5_k *)p)->qh;
    for (int c = 0; c < 4; c++)
        for (int j = 0; j < 4; j++)
            for (int hb = 0; hb < 2; hb++) { /* low / high nibble elements: qh bit 2c / 2c+1 */
                uint8_t m = 0;
                for (int t = 0; t < 8; t++)
                    m = (uint8_t)(m | ((qh[8 * j + t] >> (2 * c + hb)) & 1) << t);
                g[rp_q5k_m(c, j, hb) + r] = m;
            }
}

static void k45_unpack(int dt, const uint8_t *g, int r, uint8_t *p)
{
    struct blk_q4_k *b = (struct blk_q4_k *)p;
    memset(p, 0, dtype_block_bytes(dt));
    uint8_t *qs = dt == DT_Q5_K ? ((struct blk_q5_k *)p)->qs : b->qs;
    memcpy(&b->d, g + Q4K_D + 2 * r, 2);
    uint16_t nd;
    memcpy(&nd, g + Q4K_NDM + 2 * r, 2);
    b->dmin = nd ^ 0x8000u;
    uint8_t sc[8], mn[8];
    for (int s = 0; s < 8; s++)
        sc[s] = g[Q4K_SC + s * 8 + r], mn[s] = g[Q4K_MN + s * 8 + r];
    k4_put(b->scales, sc, mn);
    for (int c = 0; c < 4; c++)
        for (int j = 0; j < 4; j++)
            memcpy(qs + 32 * c + 8 * j, g + k45_q(dt, c, j) + r * 8, 8);
    if (dt != DT_Q5_K)
        return;
    uint8_t *qh = ((struct blk_q5_k *)p)->qh;
    for (int c = 0; c < 4; c++)
        for (int j = 0; j < 4; j++)
            for (int hb = 0; hb < 2; hb++) {
                uint8_t m = g[rp_q5k_m(c, j, hb) + r];
                for (int t = 0; t < 8; t++)
                    qh[8 * j + t] = (uint8_t)(qh[8 * j + t] | ((m >> t) & 1) << (2 * c + hb));
            }
}

static void q6k_pack(uint8_t *g, int r, const struct blk_q6_k *b)
{
    memcpy(g + Q6K_D + 2 * r, &b->d, 2);
    for (int s = 0; s < 16; s++)
        g[Q6K_SC + s * 8 + r] = (uint8_t)b->scales[s];
    uint8_t q[256];
    for (int n = 0; n < 2; n++)
        for (int l = 0; l < 32; l++) {
            int a = b->ql[64 * n + l], c = b->ql[64 * n + 32 + l], h = b->qh[32 * n + l];
            q[128 * n + l] = (uint8_t)((a & 0xf) | (h & 3) << 4);
            q[128 * n + 32 + l] = (uint8_t)((c & 0xf) | ((h >> 2) & 3) << 4);
            q[128 * n + 64 + l] = (uint8_t)((a >> 4) | ((h >> 4) & 3) << 4);
            q[128 * n + 96 + l] = (uint8_t)((c >> 4) | ((h >> 6) & 3) << 4);
        }
    for (int c = 0; c < 4; c++)
        for (int j = 0; j < 4; j++)
            for (int t = 0; t < 8; t++) {
                int lo = q[64 * c + 8 * j + t], hi = q[64 * c + 32 + 8 * j + t];
                g[rp_q6k_q(c, j) + r * 8 + t] = (uint8_t)((lo & 0xf) | (hi & 0xf) << 4);
                uint8_t *h = &g[rp_q6k_h(c, j / 2) + r * 8 + t];
                int sh = (j & 1) * 4;
                *h = (uint8_t)(*h | (lo >> 4) << sh | (hi >> 4) << (sh + 2));
            }
}

static void q6k_unpack(const uint8_t *g, int r, struct blk_q6_k *b)
{
    memset(b, 0, sizeof *b);
    memcpy(&b->d, g + Q6K_D + 2 * r, 2);
    for (int s = 0; s < 16; s++)
        b->scales[s] = (int8_t)g[Q6K_SC + s * 8 + r];
    for (int c = 0; c < 4; c++)
        for (int j = 0; j < 4; j++)
            for (int t = 0; t < 8; t++) {
                int q = g[rp_q6k_q(c, j) + r * 8 + t];
                int h = g[rp_q6k_h(c, j / 2) + r * 8 + t] >> ((j & 1) * 4);
                q6_put(b, 64 * c + 8 * j + t, (q & 0xf) | (h & 3) << 4);
                q6_put(b, 64 * c + 32 + 8 * j + t, (q >> 4) | ((h >> 2) & 3) << 4);
            }
}

struct rp_hdr *rp_alloc(int dt, int64_t k, int64_t rows)
{
    size_t gb = rp_gblk_bytes(dt);
    int be = dtype_block_elems(dt);
    if (!gb || k <= 0 || k % be || rows <= 0)
        return NULL;
    int64_t nb = k / be, ng = (rows + RP_ROWS - 1) / RP_ROWS;
    size_t bytes = sizeof(struct rp_hdr) + (size_t)ng * (size_t)nb * gb;
    bytes = (bytes + 63) & ~(size_t)63;
    struct rp_hdr *h = aligned_alloc(64, bytes);
    if (!h)
        return NULL;
    memset(h, 0, sizeof *h);
    h->magic = RP_MAGIC;
    h->self = h;
    h->dtype = dt;
    h->rows = rows, h->k = k;
    h->gblk = gb, h->gstride = (size_t)nb * gb, h->bytes = bytes;
    return h;
}

void rp_fill(struct rp_hdr *h, const void *src, int64_t g0, int64_t g1)
{
    int dt = h->dtype;
    size_t gb = h->gblk, bb = dtype_block_bytes(dt);
    int64_t nb = h->k / dtype_block_elems(dt);
    size_t rb = (size_t)nb * bb;
    uint8_t *d = (uint8_t *)(h + 1);
    for (int64_t gi = g0; gi < g1; gi++) {
        uint8_t *grp = d + (size_t)gi * h->gstride;
        memset(grp, 0, h->gstride); /* tail rows: zero blocks */
        for (int r = 0; r < RP_ROWS && gi * RP_ROWS + r < h->rows; r++) {
            const uint8_t *s = (const uint8_t *)src + (size_t)(gi * RP_ROWS + r) * rb;
            for (int64_t b = 0; b < nb; b++) {
                if (dt == DT_Q4_K || dt == DT_Q5_K)
                    k45_pack(dt, grp + (size_t)b * gb, r, s + (size_t)b * bb);
                else if (dt == DT_Q6_K)
                    q6k_pack(grp + (size_t)b * gb, r, (const struct blk_q6_k *)(s + (size_t)b * bb));
                else
                    b32_pack(dt, grp + (size_t)b * gb, r, s + (size_t)b * bb);
            }
        }
    }
}

void rp_orig_row_part(const struct rp_hdr *h, int64_t row, int64_t b0, int64_t nb, void *dst)
{
    const uint8_t *grp = rp_data(h) + (size_t)(row / RP_ROWS) * h->gstride;
    int r = (int)(row % RP_ROWS);
    for (int64_t b = 0; b < nb; b++) {
        if (h->dtype == DT_Q4_K || h->dtype == DT_Q5_K)
            k45_unpack(h->dtype, grp + (size_t)(b0 + b) * h->gblk, r,
                       (uint8_t *)dst + (size_t)b * dtype_block_bytes(h->dtype));
        else if (h->dtype == DT_Q6_K)
            q6k_unpack(grp + (size_t)(b0 + b) * h->gblk, r, (struct blk_q6_k *)dst + b);
        else
            b32_unpack(h->dtype, grp + (size_t)(b0 + b) * h->gblk, r,
                       (uint8_t *)dst + (size_t)b * dtype_block_bytes(h->dtype));
    }
}
