/* quant.h — GGML block layouts, the int8 activation formats, and the scalar reference
 * decode / quantize / dot functions every SIMD kernel is checked against.
 *
 * Weight blocks follow the GGUF/GGML byte layouts (a file-format fact). Activations are
 * quantized once per matmul row to one of two int8 formats: struct blk_a8 (32 elements,
 * for the 32-element weight types) and struct blk_a8k (256 elements with per-16 sums, for
 * the K-quants). Internal to backend/cpu; pure functions, any thread.
 */
#ifndef CINFER_BACKEND_CPU_QUANT_H
#define CINFER_BACKEND_CPU_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "backend/dtype.h"

/* ---- weight blocks (fp16 scales stored as raw bits) ---- */
struct blk_q4_0 { uint16_t d; uint8_t qs[16]; };
struct blk_q4_1 { uint16_t d, m; uint8_t qs[16]; };
struct blk_q5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; };
struct blk_q5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[16]; };
struct blk_q8_0 { uint16_t d; int8_t qs[32]; };
struct blk_q2_k { uint8_t scales[16]; uint8_t qs[64]; uint16_t d, dmin; };
struct blk_q3_k { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; uint16_t d; };
struct blk_q4_k { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; };
struct blk_q5_k { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; };
struct blk_q6_k { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; };

/* ---- activation blocks ---- */
/* 32 floats as d * q[i] (d kept at fp16 precision, as llama.cpp does); ds = d * (sum of q)
 * for the min terms; ns1 = -(sum of q) and ns2 = -2 (sum of q) for the integer offset terms
 * (-8 / -16 per element, spread over 8 lanes). */
struct blk_a8 { float d, ds; int32_t ns1, ns2; int8_t q[32]; };
/* 256 floats as d * q[i] (d may be negative); bsums[g] = sum of q[16g .. 16g+16). */
struct blk_a8k { float d; int16_t bsums[16]; int8_t q[256]; };

/* How a weight type wants its activations. */
enum quant_act { QA_F32 = 0, QA_A8 = 1, QA_A8K = 2 };

/* The activation format matmul uses for weight dtype dt. */
int quant_act_kind(int dt);
/* Bytes of one activation row of k elements in format kind (k a multiple of the block). */
size_t quant_act_row_bytes(int kind, int64_t k);
/* Quantizes x (k floats) into kind's format at dst, rounding as llama.cpp's x86 code does.
 * Deterministic: every ISA level uses this same function, so quantized dot products differ
 * only in float accumulation. */
void quant_act_row(int kind, const float *x, void *dst, int64_t k);

/* Decodes one 32-element block: element i = v[i] * d + m (m = 0 for symmetric types). */
void quant_unpack32(int dt, const void *blk, int8_t v[32], float *d, float *m);
/* Decodes one 256-element K block: element e = (d * sc[e/16]) * v[e] - (dmin * mn[e/16]). */
void quant_unpackk(int dt, const void *blk, int8_t v[256], int16_t sc[16], int16_t mn[16],
                   float *d, float *dmin);

/* dst (k floats) = one row of dtype dt at src (k a multiple of the block size). */
void quant_dequant_row(int dt, const void *src, float *dst, int64_t k);

/* The scalar reference dot product of one weight row (k elements of dtype dt) with one
 * activation row in quant_act_kind(dt) format (plain floats for F32/F16/BF16). Floats are
 * accumulated left to right, one block at a time. */
float quant_dot_ref(int dt, int64_t k, const void *w, const void *x);

#endif
