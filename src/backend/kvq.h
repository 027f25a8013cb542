/* kvq.h — quantized KV cache formats: the schemes, quantize/dequantize of cache rows, the
 * Hadamard rotation and the Lloyd-Max codebooks (docs/kv-quant.md).
 *
 * A KV "dtype" (the int that struct be_attn, model_kv_view and kv_pool carry) is either a
 * plain DT_F16 / DT_F32, or a scheme code made by kvq_code(): a format for K and one for
 * V, whether each is rotated, and the head_dim and group size the rows are laid out for.
 * A cache row (one position of one layer) is n_kv_head head records, each head_dim / G
 * groups of G elements (G = 32, or 16 / 8 when head_dim is smaller or not a multiple):
 *   KVF_A<b> (asymmetric affine, b in 2, 4, 5, 8): f16 scale d, f16 minimum m, then G b-bit
 *            codes q; x = m + d q, d = (max - min) / (2^b - 1). Error bound per element:
 *            |x - x'| <= d/2 (1 + 2^-10) + 2^-10 (|min| + |max|) + 2^-24 2^b.
 *   KVF_L<b> (Lloyd-Max, b in 2, 3, 4, 5, 8): f16 RMS s of the group, then G b-bit indices
 *            into the N(0, 1) Lloyd-Max codebook c (kvq_lm.h); x = s c[q]. On Gaussian
 *            coordinates the mean squared error is about D_b s^2 (KVQ_LM<b>_MSE).
 *   KVF_F16 / KVF_F32: the plain elements (a per-layer scheme may keep one side exact).
 * Codes are packed little-endian, 8 codes per b bytes. A rotated side (always for L
 * formats) stores H x, H = the orthonormal Walsh-Hadamard transform of size head_dim times
 * a fixed ±1 diagonal (head_dim a power of two). Attention works in the rotated domain:
 * q.k = (Hq).(Hk), and sum p v = H^T sum p (Hv), so a kernel rotates q once and the
 * output once — never a cached row. Everything here is pure, deterministic and
 * thread-safe. */
#ifndef CINFER_BACKEND_KVQ_H
#define CINFER_BACKEND_KVQ_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

enum kvq_fmt {
    KVF_F32 = 0,
    KVF_F16 = 1,
    KVF_A2, KVF_A4, KVF_A5, KVF_A8,
    KVF_L2, KVF_L3, KVF_L4, KVF_L5, KVF_L8,
    KVF_N
};

#define KVQ_TAG 0x4B000000
#define KVQ_MAX_HD 256 /* the CPU kernel widens a chunk of rows of at most this */

/* 1 when dt is a scheme code (not a plain DT_*). */
static inline int kvq_is(int dt) { return (dt & 0x7F000000) == KVQ_TAG; }
static inline int kvq_fmt_of(int dt, int which) { return which ? (dt >> 4) & 15 : dt & 15; }
static inline int kvq_rot_of(int dt, int which) { return (dt >> (8 + (which != 0))) & 1; }
static inline int kvq_group_of(int dt) { return 8 << ((dt >> 10) & 3); }
static inline int kvq_head_dim_of(int dt) { return ((dt >> 12) & 127) * 8; }

/* Bits per element of a format's codes (16 / 32 for the plain ones); 1 for L formats. */
int kvq_fmt_bits(int fmt);
int kvq_fmt_is_lm(int fmt);
/* The affine / Lloyd-Max format of b bits, or -1 when there is none. */
int kvq_fmt_affine(int bits);
int kvq_fmt_lm(int bits);
/* Short name: "f16", "a8", "lm3" ... */
const char *kvq_fmt_name(int fmt);

/* Makes the scheme code for K format kf and V format vf (rotated: rk, rv) at head_dim.
 * L formats are always rotated. Refuses (CERR_INVALID, naming what) a head_dim with no
 * group size, a rotation at a head_dim that is not a power of two, unknown formats. When
 * both sides are KVF_F16 (or both KVF_F32) and nothing is rotated, returns the plain DT. */
int kvq_code(int kf, int vf, int rk, int rv, int head_dim, int *code, struct cerr *e);

/* Bytes of one cache row (kv_dim elements) of side which (0 = K, 1 = V) under dt (plain
 * DT_F16 / DT_F32 too). */
size_t kvq_row_bytes(int dt, int which, int kv_dim);
/* Bytes of K plus V of one position of one layer. */
static inline size_t kvq_token_bytes(int dt, int kv_dim)
{
    return kvq_row_bytes(dt, 0, kv_dim) + kvq_row_bytes(dt, 1, kv_dim);
}
/* Bytes of one group of g elements of format fmt. */
size_t kvq_group_bytes(int fmt, int g);

/* Quantizes one row src (kv_dim floats) of side which into dst (kvq_row_bytes bytes),
 * rotating each head first when that side is rotated. dt must be a scheme code. */
void kvq_store_row(int dt, int which, void *dst, const float *src, int kv_dim);
/* Dequantizes head h of row src into out (head_dim floats) — in the rotated domain when
 * that side is rotated. */
void kvq_load_head(int dt, int which, const void *src, int h, float *out);

/* One group: quantize g elements x into dst / dequantize into y (format fmt). */
void kvq_quant_group(int fmt, int g, const float *x, void *dst);
void kvq_dequant_group(int fmt, int g, const void *src, float *y);

/* In place on n floats (n a power of two <= KVQ_MAX_HD): x <- H D x (kvq_rotate) and its
 * inverse x <- D H x (kvq_unrotate); H orthonormal (1/sqrt(n) scaled). */
void kvq_rotate(float *x, int n);
void kvq_unrotate(float *x, int n);
/* The fast Walsh-Hadamard transform (unnormalized) of n floats, n a power of two. */
void kvq_fwht(float *x, int n);

/* The Lloyd-Max codebook of b bits (2^b ascending floats) and its MSE, or NULL. */
const float *kvq_lm_codebook(int bits, double *mse);

#endif
