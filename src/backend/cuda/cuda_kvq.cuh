/* cuda_kvq.cuh — what the quantized-KV CUDA files share (cuda_kvq.cu: the store and the
 * general attention kernel; cuda_kvq_dec.cu: the decode-step attention): a scheme side
 * resolved on the host, the rotation's sign diagonal and the in-place rotation of rows in
 * shared memory (kvq.c's exact butterfly order and scale), the codebook offsets, and the
 * decode path's entry points. Internal to those two files. */
#ifndef CINFER_BACKEND_CUDA_KVQ_CUH
#define CINFER_BACKEND_CUDA_KVQ_CUH

#include "backend/cuda/cuda_int.cuh"

extern "C" {
#include "backend/kvq.h"
}

enum {
    KQ_MAX_HD = 256,                 /* largest head_dim */
    KQ_LM_N = 4 + 8 + 16 + 32 + 256, /* the Lloyd-Max codebooks of 2, 3, 4, 5, 8 bits */
};

static __host__ __device__ __forceinline__ int kq_lm_off(int bits)
{
    return bits == 2 ? 0 : bits == 3 ? 4 : bits == 4 ? 12 : bits == 5 ? 28 : 60;
}

/* One side (K or V) of a scheme, resolved on the host. */
struct kq_side {
    int fmt;   /* KVF_* */
    int bits;  /* code bits (16 / 32 for the plain formats) */
    int hdr;   /* group header bytes: 0 plain, 2 Lloyd-Max (RMS), 4 affine (scale, minimum) */
    int gb;    /* bytes of one group */
    int rot;   /* rows rotated */
    int lmo;   /* offset of the codebook in the codebook table */
    size_t rb; /* bytes of one cache row (all KV heads) */
};

static inline kq_side kq_side_of(int dt, int which, int kvd)
{
    kq_side s;
    s.fmt = kvq_fmt_of(dt, which);
    s.bits = kvq_fmt_bits(s.fmt);
    s.hdr = s.fmt <= KVF_F16 ? 0 : kvq_fmt_is_lm(s.fmt) ? 2 : 4;
    s.gb = (int)kvq_group_bytes(s.fmt, kvq_group_of(dt));
    s.rot = kvq_rot_of(dt, which);
    s.lmo = kq_lm_off(s.bits);
    s.rb = kvq_row_bytes(dt, which, kvd);
    return s;
}

/* The fixed ±1 diagonal of the rotation (kvq.c's sign_of). */
static __device__ __forceinline__ float kq_sign(int i)
{
    uint64_t z = 0x9E3779B97F4A7C15ull * (uint64_t)(i / 64 + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (z >> (i % 64)) & 1 ? -1.0f : 1.0f;
}

/* In place on n rows of hd floats in shared memory (every thread of the block calls it):
 * x <- H D x (inv = 0, kvq_rotate) or x <- D H x (inv = 1, kvq_unrotate). */
static __device__ void kq_rotate_rows(float *x, int n, int hd, int inv)
{
    const int tid = threadIdx.x, nth = blockDim.x, half = hd / 2;
    __syncthreads();
    if (!inv)
        for (int i = tid; i < n * hd; i += nth)
            x[i] *= kq_sign(i % hd);
    __syncthreads();
    for (int h = 1; h < hd; h *= 2) {
        for (int p = tid; p < n * half; p += nth) {
            const int r = p / half, k = p - r * half;
            const int j = r * hd + (k / h) * 2 * h + k % h;
            const float a = x[j], b = x[j + h];
            x[j] = a + b;
            x[j + h] = a - b;
        }
        __syncthreads();
    }
    const float sc = 1.0f / sqrtf((float)hd);
    for (int i = tid; i < n * hd; i += nth)
        x[i] *= inv ? sc * kq_sign(i % hd) : sc;
    __syncthreads();
}

/* ---- quantizing one head row (the store's arithmetic) ----
 * Thread i holds element i. The rotation is kq_rotate_rows' operations in its order (the
 * same bits): strides below 32 by shuffles within a warp, the longer ones through shared
 * memory. An affine group's minimum and maximum come from a butterfly over its G lanes that
 * keeps, of equal values, the one of the lowest index — the CPU loop's choice (so a -0 / +0
 * tie gives the same header bytes); every lane of the group then computes the header itself. */
struct kq_store_sm {
    float x[KQ_MAX_HD];
    float par[2][KQ_MAX_HD / 8]; /* Lloyd-Max groups: RMS, its reciprocal */
    uint8_t q[KQ_MAX_HD];
};

/* One head row of side s quantized into the head record dst (global or shared memory),
 * exactly kvq_store_row's bytes: thread i holds element i in v (0 past hd), rotated first
 * when the side is; cb: the side's Lloyd-Max codebook. Every thread of the block calls it
 * (blockDim.x a multiple of 32, hd <= blockDim.x <= KQ_MAX_HD, groups of G <= 32 lanes);
 * sm is reused at once after it returns only behind a barrier. (cuda_kvq.cu's store and
 * cuda_kvq_dec.cu's store of a decode step's new token share it.) */
static __device__ __forceinline__ void kq_quant_head(const kq_side &s, int hd, int G, float v,
                                                     uint8_t *dst, const float *cb,
                                                     kq_store_sm &sm)
{
    float *x = sm.x;
    float(*par)[KQ_MAX_HD / 8] = sm.par;
    uint8_t *q = sm.q;
    const int i = threadIdx.x;
    const int ng = hd / G, gi = i / G;
    if (s.rot) { /* x <- H D x (head_dim a power of two) */
        v *= kq_sign(i);
        for (int h = 1; h < 32 && h < hd; h <<= 1) {
            const float o = __shfl_xor_sync(0xffffffffu, v, h);
            v = (i & h) ? o - v : v + o;
        }
        for (int h = 32; h < hd; h <<= 1) { /* (threads past hd: values unused) */
            x[i] = v;
            __syncthreads();
            const float o = x[i ^ h];
            __syncthreads();
            v = (i & h) ? o - v : v + o;
        }
        v *= 1.0f / sqrtf((float)hd);
    }
    if (s.hdr == 0) { /* a plain side: the row as it is (rotated or not) */
        if (i < hd) {
            if (s.fmt == KVF_F16)
                ((__half *)dst)[i] = __float2half_rn(v);
            else
                ((float *)dst)[i] = v;
        }
        return;
    }
    if (s.hdr == 2) { /* Lloyd-Max: the group leader sums the squares in element order */
        x[i] = v;
        __syncthreads();
        if (i < ng) {
            const float *xg = x + i * G;
            uint8_t *gp = dst + (size_t)i * s.gb;
            double ss = 0;
            for (int k = 0; k < G; k++)
                ss += (double)xg[k] * xg[k];
            const __half sh = __float2half_rn((float)sqrt(ss / G));
            const float sc = __half2float(sh);
            par[0][i] = sc;
            par[1][i] = sc > 0.0f ? 1.0f / sc : 0.0f;
            const uint16_t u = __half_as_ushort(sh);
            gp[0] = (uint8_t)u, gp[1] = (uint8_t)(u >> 8);
        }
        __syncthreads();
        if (i < hd) {
            const float u = __fmul_rn(v, par[1][gi]);
            const float *c = cb;
            int lo = 0, hi = (1 << s.bits) - 1;
            while (lo < hi) { /* first level whose upper midpoint is not below u */
                const int mid = (lo + hi) / 2;
                if (u > __fmul_rn(0.5f, __fadd_rn(c[mid], c[mid + 1])))
                    lo = mid + 1;
                else
                    hi = mid;
            }
            q[i] = (uint8_t)lo;
        }
    } else { /* affine: minimum and maximum over the group's lanes */
        float mn = v, mx = v;
        int imn = i, imx = i;
        for (int o = 1; o < G; o <<= 1) {
            const float omn = __shfl_xor_sync(0xffffffffu, mn, o);
            const float omx = __shfl_xor_sync(0xffffffffu, mx, o);
            const int jmn = __shfl_xor_sync(0xffffffffu, imn, o);
            const int jmx = __shfl_xor_sync(0xffffffffu, imx, o);
            if (omn < mn || (omn == mn && jmn < imn))
                mn = omn, imn = jmn;
            if (omx > mx || (omx == mx && jmx < imx))
                mx = omx, imx = jmx;
        }
        const int top = (1 << s.bits) - 1;
        const __half dh = __float2half_rn(__fdiv_rn(__fsub_rn(mx, mn), (float)top));
        const __half mh = __float2half_rn(mn);
        const float d = __half2float(dh), m = __half2float(mh);
        const float rd = d > 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
        if (i < hd) {
            if (i % G == 0) {
                uint8_t *gp = dst + (size_t)gi * s.gb;
                const uint16_t ud = __half_as_ushort(dh), um = __half_as_ushort(mh);
                gp[0] = (uint8_t)ud, gp[1] = (uint8_t)(ud >> 8);
                gp[2] = (uint8_t)um, gp[3] = (uint8_t)(um >> 8);
            }
            const float c = rintf(__fmul_rn(__fsub_rn(v, m), rd));
            q[i] = (uint8_t)(c < 0.0f ? 0 : c > (float)top ? top : (int)c);
        }
    }
    __syncthreads();
    if (i < hd / 8) { /* octet i: its 8 codes into s.bits bytes */
        const int e = 8 * i;
        uint8_t *c = dst + (size_t)(e / G) * s.gb + s.hdr + ((e % G) / 8) * s.bits;
        uint64_t acc = 0;
#pragma unroll
        for (int j = 0; j < 8; j++)
            acc |= (uint64_t)q[e + j] << (j * s.bits);
        for (int j = 0; j < s.bits; j++)
            c[j] = (uint8_t)(acc >> (8 * j));
    }
}

/* rope of one pair (cuda_ops.cu's k_rope / rope_pair arithmetic: the same bits) */
struct kq_rope_args {
    float *q, *k;
    const int32_t *pos;
    int n_head, half, neox;
    const float *inv_freq;
    float mscale;
};

static __device__ __forceinline__ void kq_rope_pair(float *v, int i, const kq_rope_args &r,
                                                    float pos)
{
    const float ang = __fmul_rn(pos, r.inv_freq[i]);
    const float c = __fmul_rn(cosf(ang), r.mscale), sn = __fmul_rn(sinf(ang), r.mscale);
    const int i0 = r.neox ? i : 2 * i, i1 = r.neox ? i + r.half : 2 * i + 1;
    const float x0 = v[i0], x1 = v[i1];
    v[i0] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, sn));
    v[i1] = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, sn));
}

/* cuda_kvq_dec.cu. The decode path for steps of up to 64 tokens when it supports the scheme
 * and geometry: returns 1 when it ran (or latched an error), 0 when the general kernel
 * must. */
int cu_kvq_decode(struct cu_be *cb, float *out, const float *q, const struct be_attn *a);
/* The same with r's rope and K/V store done in the kernel (CINFER_KVQ_STORE=attn; see
 * cu_kvq_attention_store): 1 when it ran both, 0 when it ran nothing. */
int cu_kvq_decode_store(struct cu_be *cb, float *out, const float *q, const struct be_attn *a,
                        const struct be_rope_kv *r);
/* One-time setup (codebooks, shared-memory opt-in, CINFER_KVQ_ATTN / CINFER_KVQ_SPLITS /
 * CINFER_KVQ_NT / CINFER_KVQ_MERGE / CINFER_KVQ_STORE);
 * 0 or a CUDA error. */
cudaError_t cu_kvq_decode_init(struct cu_be *cb);

#endif
