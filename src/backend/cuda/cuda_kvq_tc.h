/* cuda_kvq_tc.h — the index arithmetic of CINFER_KVQ_DEC=tc (cuda_kvq_dec.cu): the keys'
 * scores of the quantized decode kernel on the tensor cores, one integer
 * mma.sync.m16n8k32.row.col.s32.s8.u8.s32 per (8 positions, group of 32 elements).
 *
 *   A (16 x 32, s8, row): the query "digits". Each head's q (rotated when the keys are) is
 *     scaled by 2^(22 - e) (e: the exponent of its largest |q|, so |q_int| <= 2^22) and
 *     rounded to q_int = d0 + 256 d1 + 65536 d2 with signed digits d0, d1 in [-128, 127],
 *     d2 in [-65, 64]; row kt_qrow(h, k) holds digit k of head h (rows 12..15: zero).
 *   B (32 x 8, u8, col): the 8-bit key codes of 8 positions (column n: position n), one
 *     group (k: the group's element), read as words straight from a record in shared memory.
 *   C (16 x 8, s32): exact integer dots; lane (gid = lane / 4, tig = lane % 4) holds rows
 *     gid, gid + 8 of columns 2 tig, 2 tig + 1: for gid < 4 digits 0 and 2 of head gid, and
 *     lane + 16 holds digit 1 (one shuffle).
 *   score (h, p) += d_pg * (C0 + 256 C1 + 65536 C2) / 2^(22 - e) + m_pg * sum_g(q)
 *   (8-bit affine keys: an element is m + d * code).
 *
 * Plain C, host and device: bench/kv_quant/emu/ runs the same functions on the host against
 * an emulation of the fragment tables (the PTX ISA's, for m16n8k32 .s8/.u8). The maps below
 * were checked against the ISA's text ("Matrix Fragments for mma.m16n8k32": A row groupID +
 * 8 for registers 1 and 3, column 4 threadID_in_group + byte, + 16 for registers 2 and 3; B
 * column groupID, row 4 threadID_in_group + byte, + 16 for register 1; C row groupID (+ 8
 * for c2, c3), column 2 threadID_in_group + (i & 1)). */
#ifndef CINFER_BACKEND_CUDA_KVQ_TC_H
#define CINFER_BACKEND_CUDA_KVQ_TC_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define KT_FN static __host__ __device__ __forceinline__
#else
#define KT_FN static inline
#endif

enum {
    KT_G = 32,     /* elements a group (one mma's k) */
    KT_ROWS = 16,  /* rows of the digit matrix */
    KT_SHIFT = 22, /* |q_int| <= 2^22: the top digit stays within a signed byte */
};

/* The row of digit k (0 low .. 2 high) of head h (< 4) in the digit matrix. */
KT_FN int kt_qrow(int h, int k)
{
    return k * 4 + h;
}

/* The scale exponent of a head whose largest |q| is mx: q_int = rint(q * 2^kt_exp(mx)). */
KT_FN int kt_exp(float mx)
{
    int e = 0;
    if (mx > 0.0f && isfinite(mx))
        (void)frexpf(mx, &e); /* mx = f 2^e, f in [0.5, 1) */
    return KT_SHIFT - e;
}

/* q_int's three signed digits (|q_int| <= 2^22). */
KT_FN void kt_digits(int32_t qi, int8_t *d)
{
    const int32_t d0 = (int32_t)(int8_t)(uint8_t)(qi & 255);
    const int32_t r = (qi - d0) / 256;
    const int32_t d1 = (int32_t)(int8_t)(uint8_t)(r & 255);
    d[0] = (int8_t)d0, d[1] = (int8_t)d1, d[2] = (int8_t)((r - d1) / 256);
}

/* A register ra (0..3) of lane: the 4 digits at row kt_a_row, columns kt_a_col .. + 3 of the
 * group's 32 (the digit matrix is row-major, hd bytes a row). */
KT_FN int kt_a_row(int lane, int ra)
{
    return (lane >> 2) + (ra & 1) * 8;
}
KT_FN int kt_a_col(int lane, int ra)
{
    return (lane & 3) * 4 + (ra >> 1) * 16;
}

/* B register rb (0..1) of lane: position (column) kt_b_pos of the tile; its 4 codes at byte
 * kt_b_off of that position's head record (group gi; gb bytes a group, hdr of header). */
KT_FN int kt_b_pos(int lane)
{
    return lane >> 2;
}
KT_FN int kt_b_off(int lane, int rb, int gi, int gb, int hdr)
{
    return gi * gb + hdr + (lane & 3) * 4 + rb * 16;
}

/* The tile position of C register c (0..3) of lane (lanes < 16: head lane / 4). */
KT_FN int kt_c_pos(int lane, int c)
{
    return (lane & 3) * 2 + (c & 1);
}

/* A lane < 16's sum over a group for one position: its digit-0 and digit-2 dots (c_lo, c_hi)
 * and lane + 16's digit-1 dot (c_mid); |each| <= 128 * 255 * 32 < 2^21. */
KT_FN float kt_combine(int32_t c_lo, int32_t c_mid, int32_t c_hi)
{
    return (float)(c_lo + 256 * c_mid) + 65536.0f * (float)c_hi;
}

#endif
