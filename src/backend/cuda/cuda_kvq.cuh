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

/* cuda_kvq_dec.cu. The decode path for steps of up to 64 tokens when it supports the scheme
 * and geometry: returns 1 when it ran (or latched an error), 0 when the general kernel
 * must. */
int cu_kvq_decode(struct cu_be *cb, float *out, const float *q, const struct be_attn *a);
/* One-time setup (codebooks, shared-memory opt-in, CINFER_KVQ_ATTN / CINFER_KVQ_SPLITS);
 * 0 or a CUDA error. */
cudaError_t cu_kvq_decode_init(struct cu_be *cb);

#endif
