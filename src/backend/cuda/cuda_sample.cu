/* cuda_sample.cu — sampling helpers on the device: argmax of logit rows (the optional op
 * argmax), so a greedy step copies back one id per row instead of the whole vocabulary.
 * One block per row; ties go to the lowest index and NaN never wins, as sampler_argmax.
 */
#include <math.h>

#include "backend/cuda/cuda_int.cuh"

enum { AM_THREADS = 1024 };

/* (v, i) beats (bv, bi): larger value, or equal value and lower index; NaN never wins. */
__device__ __forceinline__ bool am_better(float v, int i, float bv, int bi)
{
    return v > bv || (v == bv && i < bi);
}

/* The warp's best (value, index) in every lane (xor butterfly). */
__device__ __forceinline__ void am_warp(float &bv, int &bi)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (am_better(ov, oi, bv, bi))
            bv = ov, bi = oi;
    }
}

__global__ void __launch_bounds__(AM_THREADS) k_argmax(int32_t *out, const float *x, int n)
{
    __shared__ float sv[AM_THREADS / 32];
    __shared__ int si[AM_THREADS / 32];
    cu_pdl_wait();
    const float *r = x + (size_t)blockIdx.x * n;
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int i = threadIdx.x; i < n; i += AM_THREADS) {
        float v = r[i];
        if (am_better(v, i, bv, bi))
            bv = v, bi = i;
    }
    am_warp(bv, bi);
    if ((threadIdx.x & 31) == 0)
        sv[threadIdx.x >> 5] = bv, si[threadIdx.x >> 5] = bi;
    __syncthreads();
    if (threadIdx.x >= 32)
        return;
    bv = sv[threadIdx.x], bi = si[threadIdx.x];
    am_warp(bv, bi);
    if (threadIdx.x == 0)
        out[blockIdx.x] = bi == 0x7fffffff ? 0 : bi;
}

void cu_argmax(struct be *b, int32_t *out, const float *x, int rows, int n)
{
    struct cu_be *cb = cu_be(b);
    if (rows <= 0 || n <= 0)
        return;
    cu_launch(cb, k_argmax, dim3((unsigned)rows), dim3(AM_THREADS), 0, out, x, n);
    cu_after_launch(cb, "argmax");
}
