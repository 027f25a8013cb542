/* cuda_kvq_dec.cuh — the device side of cuda_kvq_dec.cu (included by it alone: it defines
 * the __constant__ Lloyd-Max table): the kernel's sizes and arguments, the Hadamard rotation
 * of a warp's row, the cp.async round copies (and the waits of a pipeline of 2 .. 4 round
 * buffers: CINFER_KVQ_STAGES), the decoders of a lane's 8 elements, CINFER_KVQ_SOFT=one's
 * softmax of a head, the scores (per team, and with CINFER_KVQ_DEC=tc on the tensor cores),
 * the dynamic shared memory a round takes, and CINFER_KVQ_STORE=attn's store of the new
 * token. The kernels and the host side are in cuda_kvq_dec.cu. */
#ifndef CINFER_BACKEND_CUDA_KVQ_DEC_CUH
#define CINFER_BACKEND_CUDA_KVQ_DEC_CUH

#include "backend/cuda/cuda_dec_split.cuh"
#include "backend/cuda/cuda_kvq.cuh"
#include "backend/cuda/cuda_kvq_tc.h"

enum {
    KD_ROUND = 64,      /* positions per round */
    KD_MAX_TOK = 64,    /* longer steps: the general kernel */
    KD_TARGET = 32,     /* default: most splits of one token's positions */
    KD_MAX_TARGET = 64, /* CINFER_KVQ_SPLITS' largest */
    KD_MCH = 16,        /* merge: partial outputs loaded ahead */
    KD_CNT_Y = 256,     /* fused merge: arrival counters per token (KV heads x head groups) */
    KD_MAX_STAGES = 4,  /* CINFER_KVQ_STAGES' largest: round buffers in shared memory */
};

/* How a side's 8 elements are decoded: KC_ANY reads the side's format at run time (every
 * quantized format and f16); the others are fixed at compile time. */
enum { KC_ANY = 0, KC_F16 = 1, KC_A8 = 2, KC_A4 = 3, KC_LM = 4, KC_L3 = 5, KC_L4 = 6 };

__constant__ float c_kd_lm[KQ_LM_N];

struct kd_side {
    int fmt, bits, hdr, gb, hb; /* hb: bytes of one head record */
    int lmo;
    size_t rb;
};

struct kd_args {
    const float *q;
    float *out;
    float *part; /* (n_tok, n_head, maxs, hd) unnormalised split outputs */
    float2 *ml;  /* (n_tok, n_head, maxs) split max and sum */
    const int32_t *pos, *seq, *bt;
    const uint8_t *kc, *vc;
    int n_head, n_kv_head, nsub, max_blocks, block_size, bs_shift, window, maxs, target, G;
    int rot_k, rot_v;
    int stages; /* round buffers, 2 .. KD_MAX_STAGES: rounds rd + 1 .. rd + stages - 1 in flight */
    float scale, softcap;
    kd_side s[2];
    /* the FU instances only (kd_kernel_of): */
    unsigned *cnt; /* fmerge: (KD_MAX_TOK, KD_CNT_Y) arrivals, zero between calls */
    int fmerge;    /* the last split block to finish merges (no k_kvq_sd_merge) */
    int fstore;    /* q unroped; the new token's K/V quantized and stored here */
    const float *kn, *vn; /* fstore: (n_tok, kvd) k (unroped) and v of the step's tokens */
    const int32_t *slots; /* fstore: (n_tok) cache rows of the new tokens */
    uint8_t *kcw, *vcw;   /* fstore: the caches, written */
    int kvd, stg;         /* stg: byte offset of the new records in dynamic shared memory */
    kq_rope_args rp;      /* fstore: the rope (half, neox, inv_freq, mscale) */
    kq_side ks[2];        /* fstore: the sides as the store sees them */
};

/* Threads per block: teams of head_dim/8 lanes, 64 / TEAMS positions a lane per round;
 * head_dim 256 always 256, the others CINFER_KVQ_NT (256 by default, or 128). */
static int kd_nt_of(int hd, int nt) { return hd == 256 ? 256 : nt; }

/* x <- H D x (kvq_rotate) on one row held by a warp, element lane + 32 k in v[k]: the sign
 * diagonal, the butterflies in kq_rotate_rows' order (strides 1, 2, 4, ...; a + b below, a - b
 * above: the same operations, so the same bits), then the scale. */
template <int HD>
__device__ __forceinline__ void kd_rot_warp(float *v, int lane)
{
    constexpr int R = HD / 32;
#pragma unroll
    for (int k = 0; k < R; k++)
        v[k] *= kq_sign(lane + 32 * k);
#pragma unroll
    for (int h = 1; h < 32; h <<= 1)
#pragma unroll
        for (int k = 0; k < R; k++) {
            const float o = __shfl_xor_sync(0xffffffffu, v[k], h);
            v[k] = (lane & h) ? o - v[k] : v[k] + o;
        }
#pragma unroll
    for (int h = 1; h < R; h <<= 1)
#pragma unroll
        for (int k = 0; k < R; k++)
            if (!(k & h)) {
                const float x = v[k], y = v[k + h];
                v[k] = x + y, v[k + h] = x - y;
            }
    const float sc = 1.0f / sqrtf((float)HD);
#pragma unroll
    for (int k = 0; k < R; k++)
        v[k] *= sc;
}

/* ---- a split's positions and their cache rows ---- */

/* Split z's rounds [*r0, *r1) of a token at pos (cu_dec_splits' first round rb, per rounds a
 * split; the last split ends at pos's round). */
__device__ __forceinline__ void kd_rounds(int pos, int rb, int per, int z, int *r0, int *r1)
{
    const int last = pos / KD_ROUND + 1;
    *r0 = rb + z * per;
    *r1 = rb + (z + 1) * per < last ? rb + (z + 1) * per : last;
}

/* The cache row of round rd's position j, for a token at pos attending from lo (block table
 * bt, block_size bs, bsh its log2 or -1): a position outside [lo, pos] reads pos's row (finite
 * bytes, weighted by zero), or with below_lo one before lo reads lo's. */
__device__ __forceinline__ int kd_row(const int32_t *bt, int bs, int bsh, int lo, int pos, int rd,
                                      int j, bool below_lo)
{
    const int p = rd * KD_ROUND + j;
    const int pc = p >= lo && p <= pos ? p : below_lo && p < lo ? lo : pos;
    const int bi = bsh >= 0 ? pc >> bsh : pc / bs, in = bsh >= 0 ? pc & (bs - 1) : pc % bs;
    return bt[bi] * bs + in;
}

/* Thread tid < KD_ROUND: the rows of the first ns rounds of [r0, r1) into rows[0 .. ns), and
 * the row of round r0 + ns's position tid returned (loaded a round early after that). */
template <class RowOf>
__device__ __forceinline__ int kd_prime_rows(int (*rows)[KD_ROUND], int ns, int r0, int r1,
                                             int tid, RowOf row_of)
{
    int nrow = 0;
    if (tid < KD_ROUND) {
        for (int i = 0; i < ns && r0 + i < r1; i++)
            rows[i][tid] = row_of(r0 + i, tid);
        if (r0 + ns < r1)
            nrow = row_of(r0 + ns, tid);
    }
    return nrow;
}

/* ---- cp.async (sm_80+; a plain copy before) ---- */

template <int W>
__device__ __forceinline__ void kd_cp(void *dst, const void *src)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned sa = (unsigned)__cvta_generic_to_shared(dst);
    if constexpr (W == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa), "l"(src));
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(sa), "l"(src), "n"(W));
#else
    if constexpr (W == 16)
        *(uint4 *)dst = *(const uint4 *)src;
    else if constexpr (W == 8)
        *(uint2 *)dst = *(const uint2 *)src;
    else
        *(uint32_t *)dst = *(const uint32_t *)src;
#endif
}
__device__ __forceinline__ void kd_cp_commit()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
/* Waits until at most n (0 .. 2) of this thread's newest commit groups are pending: with one
 * group committed per round (empty past the split's last), round rd's copies have landed when
 * the rounds after it in flight are the only pending ones (n = stages - 2). */
__device__ __forceinline__ void kd_cp_wait_ahead(int n)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if (n >= 2)
        asm volatile("cp.async.wait_group 2;\n" ::: "memory");
    else if (n == 1)
        asm volatile("cp.async.wait_group 1;\n" ::: "memory");
    else
        asm volatile("cp.async.wait_group 0;\n" ::: "memory");
#endif
}

/* Copies the head records of the 64 positions whose cache rows are rows[] (one side: rb
 * bytes a row, the head at byte hoff, hb bytes) into dst, hb bytes apart, W bytes a piece. */
template <int W, int NT>
__device__ __forceinline__ void kd_issue_side(uint8_t *dst, const uint8_t *cache, size_t rb,
                                              size_t hoff, int hb, const int *rows)
{
    const int cpr = hb / W, tot = KD_ROUND * cpr;
    const int dj = NT / cpr, dc = NT - dj * cpr;
    int j = threadIdx.x / cpr, c = threadIdx.x - j * cpr;
    for (int i = threadIdx.x; i < tot; i += NT) {
        kd_cp<W>(dst + j * hb + c * W, cache + (size_t)rows[j] * rb + hoff + (size_t)c * W);
        j += dj, c += dc;
        if (c >= cpr)
            c -= cpr, j++;
    }
}

template <int NT>
__device__ __forceinline__ void kd_issue_w(int w, uint8_t *dst, const uint8_t *cache, size_t rb,
                                           size_t hoff, int hb, const int *rows)
{
    if (w == 16)
        kd_issue_side<16, NT>(dst, cache, rb, hoff, hb, rows);
    else if (w == 8)
        kd_issue_side<8, NT>(dst, cache, rb, hoff, hb, rows);
    else
        kd_issue_side<4, NT>(dst, cache, rb, hoff, hb, rows);
}

/* One round: K's records into kb, V's into vb; vw: the pieces' widths, K's | V's << 8. */
template <int NT>
__device__ __forceinline__ void kd_issue(const kd_args &a, int vw, uint8_t *kb, uint8_t *vb,
                                         const int *rows, size_t hk, size_t hv)
{
    kd_issue_w<NT>(vw & 255, kb, a.kc, a.s[0].rb, hk, a.s[0].hb, rows);
    kd_issue_w<NT>(vw >> 8, vb, a.vc, a.s[1].rb, hv, a.s[1].hb, rows);
    kd_cp_commit();
}

/* ---- decoding a lane's 8 elements from a head record in shared memory ---- */

__device__ __forceinline__ float kd_h(uint32_t u16) { return __half2float(__ushort_as_half((unsigned short)u16)); }
/* code c (< 2^23) as a float: its bits under the exponent of 2^23, minus 2^23 */
__device__ __forceinline__ float kd_u2f(uint32_t c) { return __uint_as_float(c | 0x4B000000u) - 8388608.0f; }

/* hoff: the lane's group header, coff: its 8 codes (f16: its 8 halves), both relative to
 * the record rec; cb: the side's codebook (Lloyd-Max). */
template <int C>
__device__ __forceinline__ void kd_dec(const uint8_t *rec, const kd_side &s, int hoff, int coff,
                                       const float *cb, float *y)
{
    if (C == KC_F16 || (C == KC_ANY && s.fmt == KVF_F16)) {
        const uint4 raw = *(const uint4 *)(rec + coff);
        const __half2 *h = (const __half2 *)&raw;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float2 x = __half22float2(h[i]);
            y[2 * i] = x.x, y[2 * i + 1] = x.y;
        }
    } else if (C == KC_A8) { /* header and codes 4-byte aligned */
        const uint32_t hw = *(const uint32_t *)(rec + hoff);
        const uint32_t w0 = *(const uint32_t *)(rec + coff), w1 = *(const uint32_t *)(rec + coff + 4);
        const float d = kd_h(hw & 0xFFFFu), m = kd_h(hw >> 16);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            y[i] = fmaf(d, __uint_as_float(__byte_perm(w0, 0x4B000000u, 0x7440 + i)) - 8388608.0f, m);
            y[4 + i] = fmaf(d, __uint_as_float(__byte_perm(w1, 0x4B000000u, 0x7440 + i)) - 8388608.0f, m);
        }
    } else if (C == KC_A4) {
        const uint32_t hw = *(const uint32_t *)(rec + hoff);
        const uint32_t w = *(const uint32_t *)(rec + coff);
        const float d = kd_h(hw & 0xFFFFu), m = kd_h(hw >> 16);
#pragma unroll
        for (int i = 0; i < 8; i++)
            y[i] = fmaf(d, kd_u2f((w >> (4 * i)) & 15u), m);
    } else { /* any width: three words around the codes, shifted into one 64-bit run */
        const int sh = (coff & 3) * 8;
        const uint32_t *wp = (const uint32_t *)(rec + (coff & ~3));
        const uint32_t w0 = wp[0], w1 = wp[1], w2 = wp[2];
        const uint64_t v = (uint64_t)__funnelshift_r(w0, w1, sh) |
                           ((uint64_t)__funnelshift_r(w1, w2, sh) << 32);
        const int b = C == KC_L3 ? 3 : C == KC_L4 ? 4 : s.bits;
        const uint32_t mask = (1u << b) - 1u;
        if (C == KC_LM || C == KC_L3 || C == KC_L4 || (C == KC_ANY && s.hdr == 2)) {
            const float sc = kd_h(*(const uint16_t *)(rec + hoff));
#pragma unroll
            for (int i = 0; i < 8; i++)
                y[i] = __fmul_rn(sc, cb[(uint32_t)(v >> (i * b)) & mask]);
        } else {
            const uint32_t hw = *(const uint32_t *)(rec + hoff);
            const float d = kd_h(hw & 0xFFFFu), m = kd_h(hw >> 16);
#pragma unroll
            for (int i = 0; i < 8; i++)
                y[i] = fmaf(d, kd_u2f((uint32_t)(v >> (i * b)) & mask), m);
        }
    }
}

/* ---- CINFER_KVQ_SOFT=one: one warp a head's online softmax ---- */

/* Head h's online softmax over a round, run by one warp (lane: its lane): its scores sc (64),
 * its running max *m and sum *l (the same in every lane) updated, its 64 probabilities into
 * p and its rescale factor into *f (lane 0). The default's operations in its order (every
 * warp of the block runs them there: k_kvq_sd), so the same bits: the max over the warp by
 * cu_warp_max, expf of the differences from the new max (none for an all-masked round: the
 * factor 1, the probabilities 0), the sum scaled by the factor plus cu_warp_sum's. */
__device__ __forceinline__ void kd_soft_one(const float *sc, float *p, float *f, float *m,
                                            float *l, int lane)
{
    const float s0 = sc[lane], s1 = sc[lane + 32], mo = *m, lo_ = *l;
    float fh = 1.0f, p0 = 0.0f, p1 = 0.0f;
    const float mn = fmaxf(mo, cu_warp_max(fmaxf(s0, s1)));
    if (mn != -INFINITY)
        fh = expf(mo - mn), p0 = expf(s0 - mn), p1 = expf(s1 - mn);
    const float ln = lo_ * fh + cu_warp_sum(p0 + p1); /* (the default's expression) */
    *m = mn, *l = ln;
    p[lane] = p0, p[lane + 32] = p1;
    if (lane == 0)
        *f = fh;
}

/* The lane's header and code offsets in a head record (element e0 = 8 * team lane). */
__device__ __forceinline__ void kd_offs(const kd_side &s, int G, int e0, int *hoff, int *coff)
{
    if (s.hdr == 0) {
        *hoff = 0, *coff = e0 * 2;
        return;
    }
    const int gi = e0 / G, o = (e0 % G) / 8;
    *hoff = gi * s.gb;
    *coff = gi * s.gb + s.hdr + o * s.bits;
}

/* Dynamic shared memory: ns (2 .. KD_MAX_STAGES) buffers of a round's K and V records (16
 * bytes of slack after each: the any-width decoder reads a word past a record), or the team
 * sums at the end. */
static size_t kd_smem(const kd_side *s, int hd, int hg, int nt, int ns)
{
    const size_t buf = (size_t)KD_ROUND * (s[0].hb + s[1].hb) + 32;
    const size_t red = (size_t)(nt / (hd / 8)) * hg * hd * sizeof(float);
    return ns * buf > red ? ns * buf : red;
}

/* CINFER_KVQ_STORE=attn: token t's new K and V (KV head g) roped, quantized into the records
 * at stg (K's, then V's 2 HD bytes on) and, by the first head group's block (sub 0), written
 * to the cache at slots[t]: kq_store_head's arithmetic, so the bytes of k_kvq_rope_store. The
 * front of kd_sm serves as scratch (nothing is in flight there yet). Every thread calls it. */
template <int HD, int NT>
__device__ __forceinline__ void kd_store_new(const kd_args &a, int t, int g, int sub, int pos,
                                          uint8_t *sm, uint8_t *stg)
{
    constexpr int SSM = (sizeof(kq_store_sm) + 15) & ~15;
    kq_store_sm &ssm = *(kq_store_sm *)sm;
    float *kr = (float *)(sm + SSM);
    const int tid = threadIdx.x;
    const size_t ro = (size_t)t * a.kvd + (size_t)g * HD;
    for (int i = tid; i < HD; i += NT)
        kr[i] = a.kn[ro + i];
    __syncthreads();
    for (int i = tid; i < a.rp.half; i += NT)
        kq_rope_pair(kr, i, a.rp, (float)pos);
    __syncthreads();
    kq_quant_head(a.ks[0], HD, a.G, tid < HD ? kr[tid] : 0.0f, stg, c_kd_lm + a.ks[0].lmo, ssm);
    __syncthreads();
    kq_quant_head(a.ks[1], HD, a.G, tid < HD ? a.vn[ro + tid] : 0.0f, stg + 2 * HD,
                  c_kd_lm + a.ks[1].lmo, ssm);
    __syncthreads();
    if (sub == 0) { /* records are 4-byte multiples at 4-byte aligned offsets (cu_kvq_decode) */
        const int wk = a.s[0].hb / 4, wv = a.s[1].hb / 4;
        uint32_t *dk = (uint32_t *)(a.kcw + (size_t)a.slots[t] * a.s[0].rb + (size_t)g * a.s[0].hb);
        uint32_t *dv = (uint32_t *)(a.vcw + (size_t)a.slots[t] * a.s[1].rb + (size_t)g * a.s[1].hb);
        for (int i = tid; i < wk + wv; i += NT) {
            if (i < wk)
                dk[i] = ((const uint32_t *)stg)[i];
            else
                dv[i - wk] = ((const uint32_t *)(stg + 2 * HD))[i - wk];
        }
    }
}

/* CINFER_KVQ_MERGE=fused: after a split's partials are written, the last of token t's n
 * split blocks of this (KV head, head group) to finish merges them: k_kvq_sd_merge's
 * arithmetic in its order (the same bits), rows h0 .. h0 + HG - 1 through xs (HG * HD
 * floats of shared memory), unrotated when the values are rotated. The block that merges
 * resets the counter (zero between calls: graph replays stay right). Every thread calls it. */
template <int HD, int HG, int NT>
__device__ __forceinline__ void kd_merge_last(const kd_args &a, int t, int h0, int n,
                                              float *orow, float *xs)
{
    __shared__ int s_last;
    __shared__ float fm[HG][KD_MAX_TARGET], fl[HG][KD_MAX_TARGET];
    const int tid = threadIdx.x;
    __threadfence(); /* this split's partials are visible before it counts */
    __syncthreads();
    unsigned *cnt = a.cnt + (size_t)t * KD_CNT_Y + blockIdx.y;
    if (tid == 0)
        s_last = atomicAdd(cnt, 1u) == (unsigned)(n - 1);
    __syncthreads();
    if (!s_last)
        return;
    __threadfence(); /* the other splits' partials, seen through L2 (__ldcg) */
    if (tid == 0)
        *cnt = 0; /* for the next call */
    for (int k = tid; k < n * HG; k += NT) {
        const int zz = k / HG, hh = k % HG;
        const float2 v = __ldcg(&a.ml[((size_t)t * a.n_head + h0 + hh) * a.maxs + zz]);
        fm[hh][zz] = v.x, fl[hh][zz] = v.y;
    }
    __syncthreads();
    for (int i = tid; i < HG * HD; i += NT) {
        const int h = i / HD, d = i % HD;
        const float *pp = a.part + ((size_t)t * a.n_head + h0 + h) * a.maxs * HD + d;
        const float *sm = fm[h], *sl = fl[h];
        float mx = -INFINITY;
        for (int z = 0; z < n; z++)
            if (sl[z] > 0.0f)
                mx = fmaxf(mx, sm[z]);
        float L = 0.0f, o = 0.0f;
        for (int z0 = 0; z0 < n; z0 += KD_MCH) {
            float ov[KD_MCH];
#pragma unroll
            for (int k = 0; k < KD_MCH; k++)
                ov[k] = z0 + k < n ? __ldcg(pp + (size_t)(z0 + k) * HD) : 0.0f;
#pragma unroll
            for (int k = 0; k < KD_MCH; k++) {
                const int z = z0 + k;
                if (z < n && sl[z] > 0.0f) {
                    const float f = expf(sm[z] - mx);
                    L = fmaf(f, sl[z], L);
                    o = fmaf(f, ov[k], o);
                }
            }
        }
        xs[i] = L > 0.0f ? o * (1.0f / L) : 0.0f;
    }
    if (a.rot_v)
        kq_rotate_rows(xs, HG, HD, 1);
    else
        __syncthreads();
    for (int i = tid; i < HG * HD; i += NT)
        orow[i] = xs[i];
}

/* ---- CINFER_KVQ_DEC=tc: the keys' scores on the tensor cores (cuda_kvq_tc.h) ---- */

/* c (16 x 8, s32) = a (16 x 32 digits, s8, row) b (32 x 8 codes, u8, col) */
__device__ __forceinline__ void kd_mma_s8u8(int32_t *c, const uint32_t *a, uint32_t b0, uint32_t b1)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.u8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%10,%10,%10,%10};\n"
        : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
#else
    c[0] = c[1] = c[2] = c[3] = 0; /* (never launched: the backend needs cc 8.0) */
#endif
}

/* The digit matrix qd (KT_ROWS x HD, s8) of the HG q rows in qs, each head's 1 / 2^e in qinv
 * and its sums over each group of 32 in qg (HG x HD / 32): warp w < 4 does head w (zero rows
 * for w >= HG), warps 4 .. 7 the zero rows 12 .. 15. Needs 8 warps; no barrier inside. */
template <int HD, int HG>
__device__ __forceinline__ void kd_tc_prep(const float *qs, int8_t *qd, float *qinv, float *qg,
                                           int warp, int lane)
{
    constexpr int R = HD / 32;
    if (warp >= 4) {
        for (int i = lane; i < HD; i += 32)
            qd[(8 + warp) * HD + i] = 0;
        return;
    }
    const int h = warp;
    if (h >= HG) {
        for (int k = 0; k < 3; k++)
            for (int i = lane; i < HD; i += 32)
                qd[kt_qrow(h, k) * HD + i] = 0;
        return;
    }
    float v[R], mx = 0.0f;
#pragma unroll
    for (int k = 0; k < R; k++)
        v[k] = qs[h * HD + lane + 32 * k], mx = fmaxf(mx, fabsf(v[k]));
    mx = cu_warp_max(mx);
    const int e = kt_exp(mx);
#pragma unroll
    for (int k = 0; k < R; k++) { /* element lane + 32 k: group k */
        int8_t d[3];
        kt_digits((int32_t)rintf(ldexpf(v[k], e)), d);
#pragma unroll
        for (int j = 0; j < 3; j++)
            qd[kt_qrow(h, j) * HD + lane + 32 * k] = d[j];
        const float gs = cu_warp_sum(v[k]);
        if (lane == 0)
            qg[h * R + k] = gs;
    }
    if (lane == 0)
        qinv[h] = ldexpf(1.0f, -e);
}

/* Round rd's scores into scw (HG x KD_ROUND): warp w the positions 8 w .. 8 w + 7, one mma a
 * group; a lane < 16 ends with head lane / 4's scores of two positions. kb: the round's K
 * records (8-bit affine, groups of 32). Needs 8 warps. */
template <int HD, int HG>
__device__ __forceinline__ void kd_tc_scores(const kd_args &a, const uint8_t *kb,
                                             const uint32_t (*qa)[4], const float *qinv,
                                             const float *qg, int warp, int lane, int rd, int lo,
                                             int pos, float *scw)
{
    constexpr int R = HD / 32;
    const int hb = a.s[0].hb, gb = a.s[0].gb, hdr = a.s[0].hdr;
    const int j0 = warp * 8, h = lane >> 2, hh = h < HG ? h : 0;
    const uint8_t *rb = kb + (j0 + kt_b_pos(lane)) * hb;       /* this lane's B column */
    const uint8_t *r0 = kb + (j0 + kt_c_pos(lane, 0)) * hb;    /* its two C positions */
    const uint8_t *r1 = kb + (j0 + kt_c_pos(lane, 1)) * hb;
    float s0 = 0.0f, s1 = 0.0f, t0 = 0.0f, t1 = 0.0f; /* sum d S (scaled q), sum m sum(q) */
#pragma unroll
    for (int gi = 0; gi < R; gi++) {
        int32_t c[4];
        kd_mma_s8u8(c, qa[gi], *(const uint32_t *)(rb + kt_b_off(lane, 0, gi, gb, hdr)),
                    *(const uint32_t *)(rb + kt_b_off(lane, 1, gi, gb, hdr)));
        const int32_t m0 = __shfl_xor_sync(0xffffffffu, c[0], 16);
        const int32_t m1 = __shfl_xor_sync(0xffffffffu, c[1], 16);
        const uint32_t w0 = *(const uint32_t *)(r0 + gi * gb), w1 = *(const uint32_t *)(r1 + gi * gb);
        const float q = qg[hh * R + gi];
        s0 = fmaf(kd_h(w0 & 0xFFFFu), kt_combine(c[0], m0, c[2]), s0);
        s1 = fmaf(kd_h(w1 & 0xFFFFu), kt_combine(c[1], m1, c[3]), s1);
        t0 = fmaf(kd_h(w0 >> 16), q, t0);
        t1 = fmaf(kd_h(w1 >> 16), q, t1);
    }
    if (lane < 16 && h < HG) {
        const float qi = qinv[h];
#pragma unroll
        for (int c = 0; c < 2; c++) {
            const int j = j0 + kt_c_pos(lane, c), p = rd * KD_ROUND + j;
            float x = fmaf(c ? s1 : s0, qi, c ? t1 : t0) * a.scale;
            if (a.softcap > 0.0f)
                x = a.softcap * tanhf(x / a.softcap);
            scw[h * KD_ROUND + j] = p >= lo && p <= pos ? x : -INFINITY;
        }
    }
}

#endif
