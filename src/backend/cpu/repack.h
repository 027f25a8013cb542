/* repack.h — quantized weights repacked at load into row-interleaved groups (CPU backend).
 *
 * A repacked tensor keeps 8 weight rows per group, block by block: for each 256-element
 * block index b, one "group block" holds the 8 rows' block b with the scales pre-decoded
 * and the quant bytes interleaved 8 bytes per row, so one 64-byte vector holds 8 bytes of
 * each of the 8 rows and one broadcast activation load serves all of them (kernels in
 * rp_avx512.c). Rows past the tensor's last one (the tail group) are zero blocks.
 *
 * The copy lives in host memory owned by the backend; the mmap'd file is never written.
 * A repacked tensor's data points at a struct rp_hdr (64 bytes), the group blocks follow.
 * rp_of() recognises one by its magic and self pointer, so a tensor that was not repacked
 * (or was prepared by another backend) is never mistaken for one.
 *
 * Layouts (group block of 8 rows r, bytes; K-quants per 256 elements, the others per 32):
 *   Q4_K (1184): u16 d[8], u16 -dmin[8] (fp16 bits); u8 sc[8 sub][8 r]; u8 mn[8 sub][8 r];
 *                q[4 c][4 j][8 r][8 t] = the original qs byte 32c + 8j + t of row r
 *                (low nibble: element 64c + 8j + t, high nibble: element 64c + 32 + 8j + t).
 *   Q5_K (1440): Q4_K's 160-byte header (d, -dmin, sc, mn), then for each c < 4: the fifth
 *                bits m[4 j][2 hb][8 r] (byte: bit t = the fifth bit of element 64c + 8j + t,
 *                hb 0, or 64c + 32 + 8j + t, hb 1, of row r: a 64-bit mask per vector), then
 *                q[4 j][8 r][8 t] as Q4_K's (rp_q5k_m / rp_q5k_q), in the order the kernel
 *                reads them.
 *   Q6_K (1680): u16 d[8]; i8 sc[16 grp][8 r]; then for each (c, jj) in order (c < 4,
 *                jj < 2) 192 bytes: h[8 r][8 t], q[j = 2jj][8 r][8 t], q[j = 2jj + 1][8 r][8 t]
 *                (rp_q6k_h / rp_q6k_q), in the order the kernel reads them, so a group block
 *                streams front to back. q: low 4 bits of the 6-bit values of the same
 *                elements as Q4_K's (low / high nibble); h: their top 2 bits, bits 0-1 / 2-3
 *                for j = 2jj (low / high nibble element), bits 4-5 / 6-7 for j = 2jj + 1.
 *   Q8_0 (272):  u16 d[8]; q[4 j][8 r][8 t] = int8 element 8j + t of row r, xor 0x80 (so
 *                unsigned: w + 128).
 *   Q5_0 (176):  u16 d[8]; u8 h[4 j][8 r] = the file's qh byte j of row r (as a 64-bit mask
 *                per j: bit 8r + t = high bit of element 8j + t); q[2 jj][8 r][8 t] = the
 *                file's qs byte 8jj + t of row r (low nibble: element 8jj + t, high: 16 +
 *                8jj + t).
 *   Q4_0 (144):  u16 d[8]; q as Q5_0's.
 *   Q4_1 (160):  u16 d[8]; u16 m[8]; q as Q5_0's.
 * Internal to backend/cpu; pure functions, any thread.
 */
#ifndef CINFER_BACKEND_CPU_REPACK_H
#define CINFER_BACKEND_CPU_REPACK_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

enum { RP_ROWS = 8 };

/* Byte offsets in a Q5_K group block of the nibble vector q(c, j) and of the 8 mask bytes
 * (one per row) of its low (hb 0) or high (hb 1) nibble elements' fifth bits. */
static inline size_t rp_q5k_m(int c, int j, int hb) { return 160 + (size_t)320 * c + (size_t)16 * j + (size_t)8 * hb; }
static inline size_t rp_q5k_q(int c, int j) { return 160 + (size_t)320 * c + 64 + (size_t)64 * j; }

/* Byte offsets in a Q6_K group block of h(c, jj) and q(c, j). */
static inline size_t rp_q6k_h(int c, int jj) { return 144 + (size_t)192 * (2 * c + jj); }
static inline size_t rp_q6k_q(int c, int j) { return rp_q6k_h(c, j / 2) + 64 + (size_t)64 * (j % 2); }

struct rp_hdr {
    uint64_t magic;
    const void *self; /* == the tensor's data pointer */
    int32_t dtype, pad;
    int64_t rows, k;
    size_t gblk;      /* bytes of one group block */
    size_t gstride;   /* bytes of one group (k / 256 group blocks) */
    size_t bytes;     /* the whole allocation, header included */
};

/* The group blocks of a repacked tensor. */
static inline const uint8_t *rp_data(const struct rp_hdr *h) { return (const uint8_t *)(h + 1); }

/* 1 when dtype dt has a repacked layout. */
int rp_supported(int dt);
/* Bytes of one group block of dtype dt (0 when not supported). */
size_t rp_gblk_bytes(int dt);
/* The header of t when t->data is a repacked copy, else NULL. */
const struct rp_hdr *rp_of(const struct be_tensor *t);
/* A new repacked tensor of rows x k elements of dtype dt (rp_supported), 64-byte aligned
 * (free() it), header set, group blocks not yet filled; NULL when out of memory. */
struct rp_hdr *rp_alloc(int dt, int64_t k, int64_t rows);
/* Fills groups [g0, g1) of h from src (the whole tensor in the file layout). Distinct
 * ranges may be filled concurrently. */
void rp_fill(struct rp_hdr *h, const void *src, int64_t g0, int64_t g1);
/* Rebuilds file blocks (dtype_block_elems each) [b0, b0 + nb) of row `row` of a repacked tensor in the file layout
 * (nb file blocks at dst). */
void rp_orig_row_part(const struct rp_hdr *h, int64_t row, int64_t b0, int64_t nb, void *dst);

#endif
