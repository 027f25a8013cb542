/* gemv_bench.cu — design experiments for the decode projection (y = x W^T, BF16 W, 1-8 rows
 * of x): variants of the skinny mma kernel (warps per block, chunks in flight, one or two
 * accumulator chains, hi+lo x) and a plain FMA warp-per-row kernel, against cuBLAS, on the
 * l1b/l8b shapes. Not a test and not linked into cinfer: a standalone program.
 *
 * "tile" variants read W repacked tile-contiguous (per 16-row tile, per 32-column chunk, the
 * 16 rows' 64 bytes back to back: a warp's load instruction then reads 512 contiguous bytes,
 * not 64-byte pieces of 8 rows); "bulk" variants stream that layout into a shared-memory
 * ring with cp.async.bulk (one producer warp, mbarriers, STAGES segments of NW KB in
 * flight a block, no registers held for loads in flight). Every mma variant with one
 * accumulator chain and 16 warps adds in the same order as the first, so its maxrel must be
 * 0 (other warp counts group the partial sums otherwise: a small maxrel).
 *
 * Each variant runs as a CUDA graph of R launches over NB distinct weight copies (>= 256 MB
 * together, so W comes from HBM, not L2); it prints microseconds per call and weight GB/s.
 *
 * Build and run (on the GPU machine):
 *   nvcc -O3 -arch=sm_90 -std=c++17 -o /tmp/gemv_bench bench/gpu/gemv_bench.cu -lcublas
 *   /tmp/gemv_bench [n [name-substring]]
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <vector>

#define CK(x)                                                                                  \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));         \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

__device__ __forceinline__ uint32_t pk(float a, float b)
{
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *(uint32_t *)&h;
}
__device__ __forceinline__ float lo16(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float hi16(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }

__device__ __forceinline__ void mma(float *c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                    uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* The skinny mma kernel (PLAIN, n <= 8): block = NW warps on one 16-row tile, warp w takes
 * chunks w, w + NW, ...; U chunks in flight; ACC = 2 keeps two accumulator chains (the two
 * mma halves of a chunk), P = x as hi + lo. */
template <int NW, int U, int ACC, int P>
__global__ void __launch_bounds__(NW * 32) k_mma(float *y, const uint16_t *W, const float *x,
                                                 int n, int M, int K)
{
    __shared__ float red[NW][4 * ACC][32];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
    const int row0 = blockIdx.x * 16;
    const uint4 *w0 = (const uint4 *)(W + (size_t)(row0 + g) * K) + tq;
    const uint4 *w1 = (const uint4 *)(W + (size_t)(row0 + g + 8) * K) + tq;
    const bool ok = g < n;
    const float4 *xr = (const float4 *)(x + (size_t)(ok ? g : n - 1) * K) + 2 * tq;
    float acc[ACC][4] = {};
    const int nc = K / 32;
    int c = warp;
    for (; c + (U - 1) * NW < nc; c += U * NW) {
        uint4 a0[U], a1[U];
        float4 xb[U][2];
#pragma unroll
        for (int u = 0; u < U; u++) {
            a0[u] = __ldg(w0 + (c + u * NW) * 4);
            a1[u] = __ldg(w1 + (c + u * NW) * 4);
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            xb[u][0] = __ldg(xr + (c + u * NW) * 8);
            xb[u][1] = __ldg(xr + (c + u * NW) * 8 + 1);
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            float xv[8] = {xb[u][0].x, xb[u][0].y, xb[u][0].z, xb[u][0].w,
                           xb[u][1].x, xb[u][1].y, xb[u][1].z, xb[u][1].w};
            uint32_t bh[4], bl[4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                bh[j] = ok ? pk(xv[2 * j], xv[2 * j + 1]) : 0u;
                if (P)
                    bl[j] = pk(xv[2 * j] - lo16(bh[j]), xv[2 * j + 1] - hi16(bh[j]));
            }
            mma(acc[0], a0[u].x, a1[u].x, a0[u].y, a1[u].y, bh[0], bh[1]);
            mma(acc[ACC - 1], a0[u].z, a1[u].z, a0[u].w, a1[u].w, bh[2], bh[3]);
            if (P) {
                mma(acc[0], a0[u].x, a1[u].x, a0[u].y, a1[u].y, bl[0], bl[1]);
                mma(acc[ACC - 1], a0[u].z, a1[u].z, a0[u].w, a1[u].w, bl[2], bl[3]);
            }
        }
    }
    for (; c < nc; c += NW) {
        uint4 a0 = __ldg(w0 + c * 4), a1 = __ldg(w1 + c * 4);
        float4 xa = __ldg(xr + c * 8), xc = __ldg(xr + c * 8 + 1);
        float xv[8] = {xa.x, xa.y, xa.z, xa.w, xc.x, xc.y, xc.z, xc.w};
        uint32_t bh[4];
#pragma unroll
        for (int j = 0; j < 4; j++)
            bh[j] = ok ? pk(xv[2 * j], xv[2 * j + 1]) : 0u;
        mma(acc[0], a0.x, a1.x, a0.y, a1.y, bh[0], bh[1]);
        mma(acc[ACC - 1], a0.z, a1.z, a0.w, a1.w, bh[2], bh[3]);
    }
#pragma unroll
    for (int a = 0; a < ACC; a++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            red[warp][a * 4 + i][lane] = acc[a][i];
    __syncthreads();
    if (warp)
        return;
    float r[4] = {};
    for (int w = 0; w < NW; w++)
#pragma unroll
        for (int a = 0; a < ACC; a++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                r[i] += red[w][a * 4 + i][lane];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int col = 2 * tq + (i & 1), row = row0 + g + (i >> 1) * 8;
        if (col < n)
            y[(size_t)col * M + row] = r[i];
    }
}

/* One chunk of the one-chain kernels below: x row g's 8 values at the chunk rounded to bf16
 * pairs, then the two mmas of k_mma (ACC = 1, P = 0). */
__device__ __forceinline__ void chunk_mma(float *acc, uint4 a0, uint4 a1, float4 xa, float4 xc,
                                          bool ok)
{
    const float xv[8] = {xa.x, xa.y, xa.z, xa.w, xc.x, xc.y, xc.z, xc.w};
    uint32_t bh[4];
#pragma unroll
    for (int j = 0; j < 4; j++)
        bh[j] = ok ? pk(xv[2 * j], xv[2 * j + 1]) : 0u;
    mma(acc, a0.x, a1.x, a0.y, a1.y, bh[0], bh[1]);
    mma(acc, a0.z, a1.z, a0.w, a1.w, bh[2], bh[3]);
}

/* The consumer warps' partial sums added in warp order by warp 0, which stores the tile's
 * outputs (every thread of the block calls it: it holds the block barrier). */
template <int NW>
__device__ __forceinline__ void sum_store(float (*red)[4][32], const float *acc, float *y, int n,
                                          int M)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
    if (warp < NW)
#pragma unroll
        for (int i = 0; i < 4; i++)
            red[warp][i][lane] = acc[i];
    __syncthreads();
    if (warp)
        return;
    float r[4] = {};
    for (int w = 0; w < NW; w++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            r[i] += red[w][i][lane];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int col = 2 * tq + (i & 1), row = blockIdx.x * 16 + g + (i >> 1) * 8;
        if (col < n)
            y[(size_t)col * M + row] = r[i];
    }
}

/* k_mma on the tile-contiguous layout (ACC = 1, P = 0): the same chunks per warp, the same
 * order, so the same bits. */
template <int NW, int U>
__global__ void __launch_bounds__(NW * 32) k_tile(float *y, const uint16_t *Wt, const float *x,
                                                  int n, int M, int K)
{
    __shared__ float red[NW][4][32];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
    const uint4 *wt = (const uint4 *)(Wt + (size_t)blockIdx.x * 16 * K) + lane; /* 1 KB a chunk */
    const bool ok = g < n;
    const float4 *xr = (const float4 *)(x + (size_t)(ok ? g : n - 1) * K) + 2 * tq;
    float acc[4] = {};
    const int nc = K / 32;
    int c = warp;
    for (; c + (U - 1) * NW < nc; c += U * NW) {
        uint4 a0[U], a1[U];
        float4 xb[U][2];
#pragma unroll
        for (int u = 0; u < U; u++) {
            a0[u] = __ldg(wt + (c + u * NW) * 64);
            a1[u] = __ldg(wt + (c + u * NW) * 64 + 32);
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            xb[u][0] = __ldg(xr + (c + u * NW) * 8);
            xb[u][1] = __ldg(xr + (c + u * NW) * 8 + 1);
        }
#pragma unroll
        for (int u = 0; u < U; u++)
            chunk_mma(acc, a0[u], a1[u], xb[u][0], xb[u][1], ok);
    }
    for (; c < nc; c += NW)
        chunk_mma(acc, __ldg(wt + c * 64), __ldg(wt + c * 64 + 32), __ldg(xr + c * 8),
                  __ldg(xr + c * 8 + 1), ok);
    sum_store<NW>(red, acc, y, n, M);
}

__device__ __forceinline__ uint32_t smem_u32(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity)
{
    uint32_t done;
    do {
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     " selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
}

/* The ring's barriers: full[s] completes when slot s's bytes have landed (one arrival, the
 * producer's expect_tx), empty[s] when the NW consumers have read it. */
template <int ST>
__device__ __forceinline__ void ring_init(uint64_t *full, uint64_t *empty, int nw)
{
    if (threadIdx.x == 0) {
        for (int s = 0; s < ST; s++) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(&full[s])));
            asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(&empty[s])),
                         "r"(nw));
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
}
/* Producer side of segment seg: wait until its slot is free (lane 0), announce the bytes. */
template <int ST>
__device__ __forceinline__ void ring_claim(uint64_t *full, uint64_t *empty, int seg,
                                           uint32_t bytes, int lane)
{
    const int s = seg % ST, k = seg / ST;
    if (k > 0 && lane == 0)
        mbar_wait(smem_u32(&empty[s]), (k - 1) & 1);
    __syncwarp();
    if (lane == 0)
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(
                         smem_u32(&full[s])),
                     "r"(bytes)
                     : "memory");
    __syncwarp();
}
__device__ __forceinline__ void bulk_copy(void *dst, const void *src, uint32_t bytes,
                                          uint64_t *bar)
{
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
                 "[%0], [%1], %2, [%3];" ::"r"(smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar))
                 : "memory");
}
/* Consumer side: lane (g, tq) reads rows g and g + 8 of its chunk (row0 / row8: the slot
 * addresses of those rows' 16 bytes), frees the slot, and runs the chunk. */
template <int ST>
__device__ __forceinline__ void ring_take(float *acc, uint64_t *full, uint64_t *empty, int seg,
                                          const uint8_t *row0, const uint8_t *row8,
                                          const float4 *xp, bool ok)
{
    const int s = seg % ST, lane = threadIdx.x & 31;
    const float4 xa = __ldg(xp), xc = __ldg(xp + 1);
    mbar_wait(smem_u32(&full[s]), (seg / ST) & 1);
    const uint4 a0 = *(const uint4 *)row0, a1 = *(const uint4 *)row8;
    __syncwarp();
    if (lane == 0)
        asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(&empty[s]))
                     : "memory");
    chunk_mma(acc, a0, a1, xa, xc, ok);
}

/* Bulk-copy pipeline on the tile-contiguous layout: warp NW (lane 0) streams the block's tile
 * in segments of NW chunks (NW KB) into a ring of ST slots; consumer warp w takes chunk w of
 * every segment (chunks w, w + NW, ...: k_mma's order, the same bits). Needs K / 32 a
 * multiple of NW. */
template <int NW, int ST>
__global__ void __launch_bounds__((NW + 1) * 32) k_bulk(float *y, const uint16_t *Wt,
                                                        const float *x, int n, int M, int K)
{
    extern __shared__ __align__(128) uint8_t ring[]; /* ST * NW KB */
    __shared__ float red[NW][4][32];
    __shared__ __align__(8) uint64_t full[ST], empty[ST];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
    const int nseg = K / 32 / NW;
    const uint32_t segb = NW * 1024;
    float acc[4] = {};
    ring_init<ST>(full, empty, NW);
    if (warp == NW) { /* producer */
        const uint8_t *src = (const uint8_t *)(Wt + (size_t)blockIdx.x * 16 * K);
        for (int seg = 0; seg < nseg; seg++) {
            ring_claim<ST>(full, empty, seg, segb, lane);
            if (lane == 0)
                bulk_copy(ring + (size_t)(seg % ST) * segb, src + (size_t)seg * segb, segb,
                          &full[seg % ST]);
        }
    } else {
        const bool ok = g < n;
        const float4 *xr = (const float4 *)(x + (size_t)(ok ? g : n - 1) * K) + 2 * tq;
        for (int seg = 0; seg < nseg; seg++) {
            const uint8_t *blk = ring + (size_t)(seg % ST) * segb + warp * 1024 + lane * 16;
            ring_take<ST>(acc, full, empty, seg, blk, blk + 512, xr + (seg * NW + warp) * 8, ok);
        }
    }
    sum_store<NW>(red, acc, y, n, M);
}

/* The bulk pipeline on the row-major layout (what cuBLAS reads too): a segment is the 16 rows
 * x NW chunks of the block's tile, one cp.async.bulk a row (NW * 64 contiguous bytes, issued
 * by lanes 0-15 of the producer warp); in the slot, rows are NW * 64 + 64 bytes apart, so a
 * quarter-warp's 16-byte reads (rows g, g + 1 at tq 0-3) hit distinct banks. */
template <int NW, int ST>
__global__ void __launch_bounds__((NW + 1) * 32) k_bulkrow(float *y, const uint16_t *W,
                                                           const float *x, int n, int M, int K)
{
    extern __shared__ __align__(128) uint8_t ring[]; /* ST * 16 * (NW * 64 + 64) */
    __shared__ float red[NW][4][32];
    __shared__ __align__(8) uint64_t full[ST], empty[ST];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
    const int nseg = K / 32 / NW;
    const uint32_t piece = NW * 64, stride = NW * 64 + 64, slotb = 16 * stride;
    float acc[4] = {};
    ring_init<ST>(full, empty, NW);
    if (warp == NW) { /* producer: lane r < 16 copies row r */
        const uint8_t *src = (const uint8_t *)(W + (size_t)(blockIdx.x * 16 + (lane & 15)) * K);
        for (int seg = 0; seg < nseg; seg++) {
            ring_claim<ST>(full, empty, seg, 16 * piece, lane);
            if (lane < 16)
                bulk_copy(ring + (size_t)(seg % ST) * slotb + lane * stride,
                          src + (size_t)seg * piece, piece, &full[seg % ST]);
        }
    } else {
        const bool ok = g < n;
        const float4 *xr = (const float4 *)(x + (size_t)(ok ? g : n - 1) * K) + 2 * tq;
        for (int seg = 0; seg < nseg; seg++) {
            const uint8_t *sl = ring + (size_t)(seg % ST) * slotb + warp * 64 + tq * 16;
            ring_take<ST>(acc, full, empty, seg, sl + g * stride, sl + (g + 8) * stride,
                          xr + (seg * NW + warp) * 8, ok);
        }
    }
    sum_store<NW>(red, acc, y, n, M);
}

/* W (M, K) row-major -> tile-contiguous: element (16 t + r, 32 c + j) at ((t nc + c) 16 + r) 32 + j */
__global__ void k_repack(uint16_t *dst, const uint16_t *src, int M, int K)
{
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)M * K)
        return;
    const int row = (int)(i / K), col = (int)(i % K), nc = K / 32;
    const size_t t = row / 16, r = row % 16, c = col / 32, j = col % 32;
    dst[((t * nc + c) * 16 + r) * 32 + j] = src[i];
}

/* FMA kernel: each warp owns R rows over all of K; lane l reads 16 bytes at l*16 of each
 * 512-byte segment (coalesced), U segments in flight; n x rows (<= NX) from L1. */
template <int R, int U, int NX>
__global__ void __launch_bounds__(256) k_fma(float *y, const uint16_t *W, const float *x, int n,
                                             int M, int K)
{
    const int warp = (blockIdx.x * 8) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    const int r0 = warp * R;
    if (r0 >= M)
        return;
    float acc[R][NX] = {};
    const int ns = K / 256; /* 256 elements per segment */
    int s = 0;
    for (; s + U <= ns; s += U) {
        uint4 wv[U][R];
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int r = 0; r < R; r++)
                wv[u][r] = __ldg((const uint4 *)(W + (size_t)(r0 + r) * K + (s + u) * 256) + lane);
#pragma unroll
        for (int u = 0; u < U; u++) {
#pragma unroll
            for (int j = 0; j < NX; j++) {
                if (j >= n)
                    break;
                const float4 *xp = (const float4 *)(x + (size_t)j * K + (s + u) * 256) + 2 * lane;
                float4 xa = __ldg(xp), xb = __ldg(xp + 1);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    uint4 v = wv[u][r];
                    float t = acc[r][j];
                    t = fmaf(lo16(v.x), xa.x, t);
                    t = fmaf(hi16(v.x), xa.y, t);
                    t = fmaf(lo16(v.y), xa.z, t);
                    t = fmaf(hi16(v.y), xa.w, t);
                    t = fmaf(lo16(v.z), xb.x, t);
                    t = fmaf(hi16(v.z), xb.y, t);
                    t = fmaf(lo16(v.w), xb.z, t);
                    t = fmaf(hi16(v.w), xb.w, t);
                    acc[r][j] = t;
                }
            }
        }
    }
    /* (K % (256 U) tails are left out here: every shape below is a multiple) */
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int j = 0; j < NX; j++) {
            float t = acc[r][j];
#pragma unroll
            for (int o = 16; o; o >>= 1)
                t += __shfl_xor_sync(0xffffffffu, t, o);
            if (lane == 0 && j < n)
                y[(size_t)j * M + r0 + r] = t;
        }
}

__global__ void k_tobf(__nv_bfloat16 *o, const float *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        o[i] = __float2bfloat16_rn(x[i]);
}

struct shape {
    const char *name;
    int M, K;
};

typedef void (*launch_fn)(cudaStream_t, float *, const uint16_t *, const float *, int, int, int);

template <int NW, int U, int ACC, int P>
static void l_mma(cudaStream_t st, float *y, const uint16_t *W, const float *x, int n, int M, int K)
{
    k_mma<NW, U, ACC, P><<<M / 16, NW * 32, 0, st>>>(y, W, x, n, M, K);
}
template <int R, int U, int NX>
static void l_fma(cudaStream_t st, float *y, const uint16_t *W, const float *x, int n, int M, int K)
{
    int warps = M / R;
    k_fma<R, U, NX><<<(warps + 7) / 8, 256, 0, st>>>(y, W, x, n, M, K);
}

template <int NW, int U>
static void l_tile(cudaStream_t st, float *y, const uint16_t *W, const float *x, int n, int M, int K)
{
    k_tile<NW, U><<<M / 16, NW * 32, 0, st>>>(y, W, x, n, M, K);
}
template <int NW, int ST>
static void l_bulk(cudaStream_t st, float *y, const uint16_t *W, const float *x, int n, int M, int K)
{
    const int smem = ST * NW * 1024; /* allowed by bulk_init, before any capture */
    if ((K / 32) % NW)
        return; /* not this shape */
    k_bulk<NW, ST><<<M / 16, (NW + 1) * 32, smem, st>>>(y, W, x, n, M, K);
}

template <int NW, int ST>
static void bulk_attr(void)
{
    CK(cudaFuncSetAttribute(k_bulk<NW, ST>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            ST * NW * 1024));
}
template <int NW, int ST>
static void bulkrow_attr(void)
{
    CK(cudaFuncSetAttribute(k_bulkrow<NW, ST>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            ST * 16 * (NW * 64 + 64)));
}
static void bulk_init(void)
{
    bulk_attr<8, 4>(), bulk_attr<8, 8>(), bulk_attr<16, 4>(), bulk_attr<16, 8>(),
        bulk_attr<4, 16>();
    bulkrow_attr<8, 4>(), bulkrow_attr<8, 8>(), bulkrow_attr<16, 4>(), bulkrow_attr<16, 6>();
}
template <int NW, int ST>
static void l_bulkrow(cudaStream_t st, float *y, const uint16_t *W, const float *x, int n, int M,
                      int K)
{
    if ((K / 32) % NW)
        return; /* not this shape */
    k_bulkrow<NW, ST><<<M / 16, (NW + 1) * 32, ST * 16 * (NW * 64 + 64), st>>>(y, W, x, n, M, K);
}

/* One segment of SEG columns from a warp's swizzled shared buffer at `slot` (16-byte units
 * XOR-swizzled by row): ldmatrix.x4 gives each mma's A fragments (k in column order), x
 * row g's matching values (xs: the segment's first column, + 2 tq) the B ones. */
template <int SEG>
__device__ __forceinline__ void seg_mma(float *acc, uint32_t slot, const float *xs, int mr,
                                        int mu, bool ok)
{
#pragma unroll
    for (int m = 0; m < SEG / 16; m++) {
        const int unit = 2 * m + mu;
        uint32_t a0, a1, a2, a3;
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(a0), "=r"(a1), "=r"(a2), "=r"(a3)
                     : "r"(slot + mr * SEG * 2 + ((unit ^ (mr & 7)) << 4)));
        const float2 xa = __ldg((const float2 *)(xs + 16 * m));
        const float2 xb = __ldg((const float2 *)(xs + 16 * m + 8));
        mma(acc, a0, a1, a2, a3, ok ? pk(xa.x, xa.y) : 0u, ok ? pk(xb.x, xb.y) : 0u);
    }
}

/* Row-contiguous loads through shared memory (row-major W, what cuBLAS and prefill read):
 * a warp takes segments of SEG columns of its block's 16 rows; each load instruction reads
 * 512 contiguous bytes (SEG = 256: one row; SEG = 128: two rows of 256 bytes), U segments in
 * flight a lane; the warp stores a segment to its own shared buffer (16-byte units XOR-swizzled
 * by row) and ldmatrix.x4 gives the mma A fragments (k in column order). */
template <int NW, int SEG, int U>
__global__ void __launch_bounds__(NW * 32) k_rowc(float *y, const uint16_t *W, const float *x,
                                                  int n, int M, int K)
{
    constexpr int UPR = SEG / 8, RPI = 32 / UPR, NI = 16 / RPI;
    extern __shared__ __align__(16) unsigned char dsm[];
    __shared__ float red[NW][4][32];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
    unsigned char *buf = dsm + (size_t)warp * 16 * SEG * 2;
    const int row0 = blockIdx.x * 16, lr = lane / UPR, lu = lane % UPR;
    const bool ok = g < n;
    const float *xr = x + (size_t)(ok ? g : n - 1) * K + 2 * tq;
    /* ldmatrix address of this lane for mma m: matrix L/8 = (rows 0-7 | 8-15) x (k 0-7 | 8-15) */
    const int mat = lane >> 3, mr = (lane & 7) + 8 * (mat & 1), mu = mat >> 1;
    const uint32_t sbase = smem_u32(buf);
    float acc[4] = {};
    const int nseg = K / SEG;
    for (int s = warp; s < nseg; s += NW * U) {
        uint4 v[U][NI];
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int i = 0; i < NI; i++)
                if (s + u * NW < nseg)
                    v[u][i] = __ldg((const uint4 *)(W + (size_t)(row0 + i * RPI + lr) * K +
                                                    (size_t)(s + u * NW) * SEG) + lu);
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (s + u * NW >= nseg)
                break;
            __syncwarp();
#pragma unroll
            for (int i = 0; i < NI; i++) {
                const int r = i * RPI + lr;
                *(uint4 *)(buf + r * SEG * 2 + ((lu ^ (r & 7)) << 4)) = v[u][i];
            }
            __syncwarp();
            seg_mma<SEG>(acc, sbase, xr + (size_t)(s + u * NW) * SEG, mr, mu, ok);
        }
    }
    sum_store<NW>(red, acc, y, n, M);
}

/* Launches kernel k (NW warps a block, a block per 16-row tile) with sm bytes of dynamic
 * shared memory, raising its limit once. */
template <typename KF>
static void l_dyn(KF k, int nw, int sm, bool *set, cudaStream_t st, float *y, const uint16_t *W,
                  const float *x, int n, int M, int K)
{
    if (!*set) {
        CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, sm));
        *set = true;
    }
    k<<<M / 16, nw * 32, sm, st>>>(y, W, x, n, M, K);
}

template <int NW, int SEG, int U>
static void l_rowc(cudaStream_t st, float *y, const uint16_t *W, const float *x, int n, int M,
                   int K)
{
    static bool set = false;
    l_dyn(k_rowc<NW, SEG, U>, NW, NW * 16 * SEG * 2, &set, st, y, W, x, n, M, K);
}

/* k_rowc's access pattern with cp.async (16 bytes a lane, straight to shared memory, no
 * registers held for loads in flight): a per-warp ring of ST segment slots. */
template <int NW, int SEG, int ST>
__global__ void __launch_bounds__(NW * 32) k_cpa(float *y, const uint16_t *W, const float *x,
                                                 int n, int M, int K)
{
    constexpr int UPR = SEG / 8, RPI = 32 / UPR, NI = 16 / RPI, SLOT = 16 * SEG * 2;
    extern __shared__ __align__(16) unsigned char dsm[];
    __shared__ float red[NW][4][32];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
    const uint32_t ring = smem_u32(dsm + (size_t)warp * ST * SLOT);
    const int row0 = blockIdx.x * 16, lr = lane / UPR, lu = lane % UPR;
    const bool ok = g < n;
    const float *xr = x + (size_t)(ok ? g : n - 1) * K + 2 * tq;
    const int mat = lane >> 3, mr = (lane & 7) + 8 * (mat & 1), mu = mat >> 1;
    float acc[4] = {};
    const int nseg = K / SEG, nj = nseg > warp ? (nseg - warp + NW - 1) / NW : 0;
    auto issue = [&](int j) {
        if (j < nj) {
            const int sg = warp + j * NW;
            const uint32_t slot = ring + (j % ST) * SLOT;
#pragma unroll
            for (int i = 0; i < NI; i++) {
                const int r = i * RPI + lr;
                const uint16_t *src = W + (size_t)(row0 + r) * K + (size_t)sg * SEG + lu * 8;
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(
                                 slot + r * SEG * 2 + ((lu ^ (r & 7)) << 4)),
                             "l"(src));
            }
        }
        asm volatile("cp.async.commit_group;\n" ::);
    };
#pragma unroll
    for (int j = 0; j < ST - 1; j++)
        issue(j);
    for (int j = 0; j < nj; j++) {
        __syncwarp();
        issue(j + ST - 1);
        asm volatile("cp.async.wait_group %0;\n" ::"n"(ST - 1));
        __syncwarp();
        seg_mma<SEG>(acc, ring + (j % ST) * SLOT, xr + (size_t)(warp + j * NW) * SEG, mr, mu,
                     ok);
    }
    asm volatile("cp.async.wait_group 0;\n" ::);
    sum_store<NW>(red, acc, y, n, M);
}

template <int NW, int SEG, int ST>
static void l_cpa(cudaStream_t st, float *y, const uint16_t *W, const float *x, int n, int M,
                  int K)
{
    static bool set = false;
    l_dyn(k_cpa<NW, SEG, ST>, NW, NW * ST * 16 * SEG * 2, &set, st, y, W, x, n, M, K);
}

static cublasHandle_t g_blas;
static __nv_bfloat16 *g_xb;
static void l_cublas(cudaStream_t st, float *y, const uint16_t *W, const float *x, int n, int M,
                     int K)
{
    (void)x;
    const float one = 1.0f, zero = 0.0f;
    cublasSetStream(g_blas, st);
    cublasGemmEx(g_blas, CUBLAS_OP_T, CUBLAS_OP_N, M, n, K, &one, W, CUDA_R_16BF, K, g_xb,
                 CUDA_R_16BF, K, &zero, y, CUDA_R_32F, M, CUBLAS_COMPUTE_32F,
                 CUBLAS_GEMM_DEFAULT);
}

struct variant {
    const char *name;
    launch_fn f;
    int max_n;
    int tiled; /* reads the tile-contiguous copy of the weights */
};

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 1;
    static const shape shapes[] = {
        {"l8b.o", 4096, 4096},      {"l8b.qkv", 6144, 4096},   {"l8b.gate_up", 28672, 4096},
        {"l8b.down", 4096, 14336},  {"l8b.lm_head", 128256, 4096}, {"l1b.o", 2048, 2048},
        {"l1b.qkv", 3072, 2048},    {"l1b.gate_up", 16384, 2048}, {"l1b.down", 2048, 8192},
        {"l1b.lm_head", 128256, 2048},
    };
    static const variant vars[] = {
        {"mma w16 u4 acc1", l_mma<16, 4, 1, 0>, 8},   {"mma w16 u4 acc2", l_mma<16, 4, 2, 0>, 8},
        {"mma w16 u4 acc2 P", l_mma<16, 4, 2, 1>, 8}, {"mma w16 u4 acc1 P", l_mma<16, 4, 1, 1>, 8},
        {"mma w16 u8 acc2", l_mma<16, 8, 2, 0>, 8},   {"mma w8 u4 acc2", l_mma<8, 4, 2, 0>, 8},
        {"mma w8 u8 acc2", l_mma<8, 8, 2, 0>, 8},     {"mma w4 u8 acc2", l_mma<4, 8, 2, 0>, 8},
        {"fma r1 u4", l_fma<1, 4, 1>, 1},             {"fma r2 u4", l_fma<2, 4, 1>, 1},
        {"fma r1 u8", l_fma<1, 8, 1>, 1},             {"fma r2 u2 nx2", l_fma<2, 2, 2>, 2},
        {"fma r2 u4 nx4", l_fma<2, 4, 4>, 4},         {"cublas", l_cublas, 64},
        {"mma w32 u4 acc1", l_mma<32, 4, 1, 0>, 8},
        {"tile w8 u4", l_tile<8, 4>, 8, 1},           {"tile w16 u4", l_tile<16, 4>, 8, 1},
        {"tile w32 u4", l_tile<32, 4>, 8, 1},         {"tile w16 u8", l_tile<16, 8>, 8, 1},
        {"bulk w8 s4", l_bulk<8, 4>, 8, 1},           {"bulk w8 s8", l_bulk<8, 8>, 8, 1},
        {"bulk w16 s4", l_bulk<16, 4>, 8, 1},         {"bulk w16 s8", l_bulk<16, 8>, 8, 1},
        {"bulk w4 s16", l_bulk<4, 16>, 8, 1},
        {"bulkrow w8 s4", l_bulkrow<8, 4>, 8},        {"bulkrow w8 s8", l_bulkrow<8, 8>, 8},
        {"bulkrow w16 s4", l_bulkrow<16, 4>, 8},      {"bulkrow w16 s6", l_bulkrow<16, 6>, 8},
        {"rowc w16 s128 u2", l_rowc<16, 128, 2>, 8},  {"rowc w8 s128 u2", l_rowc<8, 128, 2>, 8},
        {"rowc w8 s128 u4", l_rowc<8, 128, 4>, 8},    {"rowc w16 s256 u1", l_rowc<16, 256, 1>, 8},
        {"rowc w8 s256 u1", l_rowc<8, 256, 1>, 8},    {"rowc w8 s256 u2", l_rowc<8, 256, 2>, 8},
        {"rowc w4 s256 u2", l_rowc<4, 256, 2>, 8},
        {"cpa w8 s128 st4", l_cpa<8, 128, 4>, 8},     {"cpa w8 s128 st6", l_cpa<8, 128, 6>, 8},
        {"cpa w16 s128 st3", l_cpa<16, 128, 3>, 8},   {"cpa w8 s256 st3", l_cpa<8, 256, 3>, 8},
        {"cpa w4 s256 st6", l_cpa<4, 256, 6>, 8},     {"cpa w4 s128 st8", l_cpa<4, 128, 8>, 8},
        {"cpa w16 s128 st2", l_cpa<16, 128, 2>, 8},   {"cpa w8 s128 st2", l_cpa<8, 128, 2>, 8},
        {"cpa w4 s128 st4", l_cpa<4, 128, 4>, 8},     {"cpa w4 s256 st3", l_cpa<4, 256, 3>, 8},
    };
    cublasCreate(&g_blas);
    bulk_init();
    size_t maxw = 0;
    for (const shape &s : shapes)
        maxw = (size_t)s.M * s.K * 2 > maxw ? (size_t)s.M * s.K * 2 : maxw;
    /* weight copies: enough that one graph pass reads >= 256 MB */
    const size_t pool = 1200ull << 20;
    uint16_t *wpool, *wtile;
    CK(cudaMalloc(&wpool, pool));
    CK(cudaMalloc(&wtile, pool));
    {
        std::vector<uint16_t> h(1 << 24);
        uint32_t r = 1;
        for (auto &v : h) {
            r = r * 1664525u + 1013904223u;
            float f = ((float)(r >> 8) / 16777216.0f - 0.5f) * 0.1f;
            uint32_t u = *(uint32_t *)&f;
            v = (uint16_t)(u >> 16);
        }
        for (size_t o = 0; o < pool; o += h.size() * 2)
            CK(cudaMemcpy((char *)wpool + o, h.data(),
                          pool - o < h.size() * 2 ? pool - o : h.size() * 2,
                          cudaMemcpyHostToDevice));
    }
    float *x, *y;
    CK(cudaMalloc(&x, 64 * 14336 * 4));
    CK(cudaMalloc(&y, 64 * 128256 * 4));
    CK(cudaMalloc(&g_xb, 64 * 14336 * 2));
    {
        std::vector<float> hx(64 * 14336);
        for (size_t i = 0; i < hx.size(); i++)
            hx[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
        CK(cudaMemcpy(x, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
        k_tobf<<<(64 * 14336 + 255) / 256, 256>>>(g_xb, x, 64 * 14336);
    }
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    printf("n=%d  (us per call / weight GB/s)\n%-20s", n, "variant");
    for (const shape &s : shapes)
        printf(" %16s", s.name);
    printf("\n");
    const int n_sh = (int)(sizeof shapes / sizeof shapes[0]);
    std::vector<std::vector<float>> ref(n_sh);
    const char *only = argc > 2 ? argv[2] : NULL;
    for (const variant &v : vars) {
        if (n > v.max_n)
            continue;
        /* argv[2]: run only variants whose name contains it (and the first: the reference) */
        if (only && &v != vars && !strstr(v.name, only))
            continue;
        printf("%-20s", v.name);
        double worst = 0;
        for (int si = 0; si < n_sh; si++) {
            const shape &s = shapes[si];
            size_t wb = (size_t)s.M * s.K * 2;
            int nb = (int)(pool / wb);
            if (v.tiled) /* the same matrices, tile-contiguous */
                for (int b = 0; b < nb; b++) {
                    const size_t ne = (size_t)s.M * s.K;
                    k_repack<<<(unsigned)((ne + 255) / 256), 256, 0, st>>>(
                        wtile + (size_t)b * (wb / 2), wpool + (size_t)b * (wb / 2), s.M, s.K);
                }
            uint16_t *wsrc = v.tiled ? wtile : wpool;
            int reps = (int)((512ull << 20) / wb);
            if (reps < 8)
                reps = 8;
            cudaGraph_t g;
            cudaGraphExec_t ge;
            CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
            for (int r = 0; r < reps; r++)
                v.f(st, y, wsrc + (size_t)(r % nb) * (wb / 2), x, n, s.M, s.K);
            CK(cudaStreamEndCapture(st, &g));
            CK(cudaGraphInstantiate(&ge, g, 0));
            CK(cudaGraphLaunch(ge, st));
            CK(cudaStreamSynchronize(st));
            CK(cudaEventRecord(e0, st));
            for (int it = 0; it < 3; it++)
                CK(cudaGraphLaunch(ge, st));
            CK(cudaEventRecord(e1, st));
            CK(cudaStreamSynchronize(st));
            float ms;
            cudaEventElapsedTime(&ms, e0, e1);
            double us = ms * 1000.0 / (3 * reps);
            printf(" %7.2f %7.0f ", us, wb / us / 1e3);
            cudaGraphExecDestroy(ge);
            cudaGraphDestroy(g);
            /* the last call used copy (reps-1) % nb: check against the first variant */
            std::vector<float> hy((size_t)n * s.M);
            CK(cudaMemcpy(hy.data(), y, hy.size() * 4, cudaMemcpyDeviceToHost));
            if (ref[si].empty())
                ref[si] = hy;
            double mx = 0, d = 0;
            for (size_t i = 0; i < hy.size(); i++) {
                mx = fabs(ref[si][i]) > mx ? fabs(ref[si][i]) : mx;
                d = fabs(hy[i] - ref[si][i]) > d ? fabs(hy[i] - ref[si][i]) : d;
            }
            worst = d / mx > worst ? d / mx : worst;
        }
        printf(" maxrel %.1e\n", worst);
        fflush(stdout);
    }
    return 0;
}
