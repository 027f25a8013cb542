/* chain_bench.cu — would one persistent kernel per decode step beat a kernel per projection?
 *
 * A design experiment for batch-1 decode (issue 7), standalone (not linked into cinfer). It
 * runs the projection chain of L decoder layers with one row of x — q/k/v, out-proj,
 * gate/up, down, each reading the previous output — on l1b or l8b shapes with distinct
 * random BF16 weights per layer (so they stream from HBM), two ways:
 *   kernels:    one launch per projection (the skinny mma tile kernel of cuda_mmf.cu: 16
 *               weight rows per block, 16 warps splitting K, 4 chunks in flight), the 4L
 *               launches captured in one CUDA graph;
 *   persistent: one cooperative launch for the whole chain (2 blocks per SM, tiles dealt
 *               round-robin), a grid barrier between projections; with PRE, each block loads
 *               its first tile's first weights of the next projection before the barrier
 *               (weights never depend on the previous output), x only after it.
 * and (added 2026-11-30, after the first run found the persistent kernel slower):
 *   kernels (graph, PDL): the kernel per projection launched as cinfer launches its own
 *               (programmatic dependent launch: it waits for the previous kernel first);
 *   flag barrier: the persistent chain with a plain counter barrier instead of grid.sync;
 *   + smem pre: before each barrier every thread cp.async-copies its share of the next
 *               projection's first weights into shared memory (no registers held across
 *               the barrier, unlike PRE).
 * Both compute every output with the same per-tile arithmetic, so the final vectors must be
 * equal bit for bit (checked). Prints microseconds per layer and weight GB/s.
 *
 * Build and run (on the GPU machine):
 *   nvcc -O3 -arch=sm_90 -std=c++17 -o /tmp/chain_bench bench/gpu/chain_bench.cu
 *   /tmp/chain_bench l1b; /tmp/chain_bench l8b
 */
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

namespace cg = cooperative_groups;

#define CK(x)                                                                                  \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));         \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

enum { NW = 16, U = 4, NP = 4 };

struct proj {
    const uint16_t *w; /* (M, K) bf16 */
    const float *x;    /* K floats */
    float *y;          /* M floats */
    int M, K;
};

struct chain {
    proj p[64 * NP];
    int n;
};

__device__ __forceinline__ uint32_t pk(float a, float b)
{
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *(uint32_t *)&h;
}

__device__ __forceinline__ void mma(float *c, uint4 a0, uint4 a1, int half, uint32_t b0,
                                    uint32_t b1)
{
    uint32_t x0 = half ? a0.z : a0.x, x1 = half ? a1.z : a1.x;
    uint32_t x2 = half ? a0.w : a0.y, x3 = half ? a1.w : a1.y;
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(x0), "r"(x1), "r"(x2), "r"(x3), "r"(b0), "r"(b1));
}

/* One 16-row tile of y = W x (one x row), by the block's NW warps. pre: the first group of
 * weights, already loaded by the caller into registers (npre = 1), into this thread's slots
 * of shared memory with cp.async (npre = 2: pa0 is then the slots, 2 U uint4: a0, a1 of each
 * u), or not (0). red: NW x 4 x 32 floats. */
__device__ __forceinline__ void tile(const proj &p, int t, float *red, uint4 (*pa0), uint4 (*pa1),
                                     int npre)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
    const int row0 = t * 16, K = p.K, nc = K / 32;
    const uint4 *w0 = (const uint4 *)(p.w + (size_t)(row0 + g) * K) + tq;
    const uint4 *w1 = (const uint4 *)(p.w + (size_t)(row0 + g + 8) * K) + tq;
    const float4 *xr = (const float4 *)p.x + 2 * tq;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    int c = warp;
    for (; c + (U - 1) * NW < nc; c += U * NW) {
        uint4 a0[U], a1[U];
        float4 xb[U][2];
        if (npre == 2) /* this thread's own cp.async copies: no block barrier needed */
            asm volatile("cp.async.wait_all;" ::: "memory");
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (npre == 1) {
                a0[u] = pa0[u], a1[u] = pa1[u];
            } else if (npre == 2) {
                a0[u] = pa0[2 * u], a1[u] = pa0[2 * u + 1];
            } else {
                a0[u] = __ldg(w0 + (c + u * NW) * 4);
                a1[u] = __ldg(w1 + (c + u * NW) * 4);
            }
        }
        npre = 0;
#pragma unroll
        for (int u = 0; u < U; u++) {
            xb[u][0] = __ldcg(xr + (c + u * NW) * 8);
            xb[u][1] = __ldcg(xr + (c + u * NW) * 8 + 1);
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            /* only x row 0 is real: lanes g > 0 hold zeros (as the skinny kernel at n = 1) */
            uint32_t b[4];
            b[0] = g == 0 ? pk(xb[u][0].x, xb[u][0].y) : 0u;
            b[1] = g == 0 ? pk(xb[u][0].z, xb[u][0].w) : 0u;
            b[2] = g == 0 ? pk(xb[u][1].x, xb[u][1].y) : 0u;
            b[3] = g == 0 ? pk(xb[u][1].z, xb[u][1].w) : 0u;
            mma(acc, a0[u], a1[u], 0, b[0], b[1]);
            mma(acc, a0[u], a1[u], 1, b[2], b[3]);
        }
    }
    /* every shape here has K / 32 a multiple of U * NW: no tail */
#pragma unroll
    for (int i = 0; i < 4; i++)
        red[(warp * 4 + i) * 32 + lane] = acc[i];
    __syncthreads();
    if (warp == 0) {
        float r[4] = {0.f, 0.f, 0.f, 0.f};
        for (int w = 0; w < NW; w++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                r[i] += red[(w * 4 + i) * 32 + lane];
        if (tq == 0) { /* column 0 = the x row */
            p.y[row0 + g] = r[0];
            p.y[row0 + g + 8] = r[2];
        }
    }
    __syncthreads();
}

__global__ void __launch_bounds__(NW * 32) k_one(proj p)
{
    __shared__ float red[NW * 4 * 32];
    uint4 d0[U], d1[U];
    tile(p, blockIdx.x, red, d0, d1, 0);
}

/* k_one with programmatic dependent launch (as cinfer's kernels): waits for the previous
 * kernel before reading x, lets the next one launch once every block has started. */
__global__ void __launch_bounds__(NW * 32) k_one_pdl(proj p)
{
    __shared__ float red[NW * 4 * 32];
    uint4 d0[U], d1[U];
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;");
    tile(p, blockIdx.x, red, d0, d1, 0);
}

/* A grid barrier on a counter that only grows (zeroed before the launch): block arrivals
 * after a release fence, one thread spins on an acquire load. */
__device__ __forceinline__ void gbar(unsigned *bar, unsigned target)
{
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(bar, 1u);
        unsigned v;
        do {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(bar) : "memory");
        } while (v < target);
    }
    __syncthreads();
}

/* The chain with gbar between projections; SMEM: before each barrier, every thread copies
 * its share of its block's first tile of the next projection (U chunks of the two rows it
 * reads) into shared memory with cp.async (no registers held across the barrier). */
template <int SMEM>
__global__ void __launch_bounds__(NW * 32, 2) k_chain2(const chain *ch, unsigned *bar)
{
    __shared__ float red[NW * 4 * 32];
    extern __shared__ __align__(16) uint4 pre[]; /* SMEM: NW * 32 threads x 2 U */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
    uint4 *mine = pre + (size_t)threadIdx.x * 2 * U;
    uint4 d0[U], d1[U];
    int have = 0;
    for (int i = 0; i < ch->n; i++) {
        const proj &p = ch->p[i];
        const int tiles = p.M / 16;
        for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
            tile(p, t, red, have ? mine : d0, d1, have);
            have = 0;
        }
        if (i + 1 < ch->n) {
            const proj &q = ch->p[i + 1];
            if (SMEM && (int)blockIdx.x < q.M / 16) {
                const int K = q.K, row0 = blockIdx.x * 16;
                const uint4 *w0 = (const uint4 *)(q.w + (size_t)(row0 + g) * K) + tq;
                const uint4 *w1 = (const uint4 *)(q.w + (size_t)(row0 + g + 8) * K) + tq;
#pragma unroll
                for (int u = 0; u < U; u++) {
                    const unsigned s0 = (unsigned)__cvta_generic_to_shared(mine + 2 * u);
                    const unsigned s1 = (unsigned)__cvta_generic_to_shared(mine + 2 * u + 1);
                    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s0),
                                 "l"(w0 + (warp + u * NW) * 4));
                    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s1),
                                 "l"(w1 + (warp + u * NW) * 4));
                }
                asm volatile("cp.async.commit_group;");
                have = 2;
            }
            gbar(bar, (unsigned)(i + 1) * gridDim.x);
        }
    }
}

template <int PRE>
__global__ void __launch_bounds__(NW * 32, 2) k_chain(const chain *ch)
{
    __shared__ float red[NW * 4 * 32];
    cg::grid_group grid = cg::this_grid();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
    uint4 pa0[U], pa1[U];
    int have = 0;
    for (int i = 0; i < ch->n; i++) {
        const proj &p = ch->p[i];
        const int tiles = p.M / 16;
        for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
            tile(p, t, red, pa0, pa1, have);
            have = 0;
        }
        if (i + 1 < ch->n) {
            const proj &q = ch->p[i + 1];
            if (PRE && (int)blockIdx.x < q.M / 16) { /* the next projection's first weights */
                const int K = q.K, row0 = blockIdx.x * 16;
                const uint4 *w0 = (const uint4 *)(q.w + (size_t)(row0 + g) * K) + tq;
                const uint4 *w1 = (const uint4 *)(q.w + (size_t)(row0 + g + 8) * K) + tq;
#pragma unroll
                for (int u = 0; u < U; u++) {
                    pa0[u] = __ldg(w0 + (warp + u * NW) * 4);
                    pa1[u] = __ldg(w1 + (warp + u * NW) * 4);
                }
                have = 1;
            }
            grid.sync();
        }
    }
}

int main(int argc, char **argv)
{
    const char *which = argc > 1 ? argv[1] : "l1b";
    int big = !strcmp(which, "l8b");
    int D = big ? 4096 : 2048, F = big ? 14336 : 8192, QKV = big ? 6144 : 3072;
    int L = big ? 8 : 16; /* l8b: 8 layers (1.7 GB of weights) are enough to leave L2 */
    int Ms[NP] = {QKV, D, 2 * F, D}, Ks[NP] = {D, D, D, F};
    size_t per_layer = 0;
    for (int j = 0; j < NP; j++)
        per_layer += (size_t)Ms[j] * Ks[j];
    uint16_t *w;
    CK(cudaMalloc(&w, per_layer * L * 2));
    {
        std::vector<uint16_t> h(1 << 24);
        uint32_t r = 7;
        for (auto &v : h) {
            r = r * 1664525u + 1013904223u;
            float f = ((float)(r >> 8) / 16777216.0f - 0.5f) * 0.05f;
            uint32_t u;
            memcpy(&u, &f, 4);
            v = (uint16_t)(u >> 16);
        }
        size_t tot = per_layer * L * 2;
        for (size_t o = 0; o < tot; o += h.size() * 2)
            CK(cudaMemcpy((char *)w + o, h.data(), tot - o < h.size() * 2 ? tot - o : h.size() * 2,
                          cudaMemcpyHostToDevice));
    }
    /* activations: one buffer per projection output, x0 the chain's input */
    float *act;
    size_t act_n = (size_t)D + (size_t)L * (QKV + D + 2 * F + D);
    CK(cudaMalloc(&act, act_n * 4));
    std::vector<float> hx(D);
    for (int i = 0; i < D; i++)
        hx[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    chain hc;
    memset(&hc, 0, sizeof hc);
    {
        size_t wo = 0, ao = D;
        const float *x = act;
        for (int l = 0; l < L; l++)
            for (int j = 0; j < NP; j++) {
                proj &p = hc.p[hc.n++];
                p.w = w + wo, p.x = x, p.y = act + ao, p.M = Ms[j], p.K = Ks[j];
                wo += (size_t)Ms[j] * Ks[j];
                x = p.y; /* the next one reads the first K of this output */
                ao += Ms[j];
            }
    }
    chain *dc;
    CK(cudaMalloc(&dc, sizeof hc));
    CK(cudaMemcpy(dc, &hc, sizeof hc, cudaMemcpyHostToDevice));
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    int dev = 0, n_sm = 0, per_sm = 0;
    cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_chain<1>, NW * 32, 0);
    int grid = n_sm * (per_sm < 2 ? per_sm : 2);
    printf("%s: %d layers, %.1f MB weights per layer, %d SMs, persistent grid %d\n", which, L,
           per_layer * 2 / 1e6, n_sm, grid);
    static const char *names[] = {"kernels (graph)", "persistent", "persistent + prefetch",
                                  "kernels (graph, PDL)", "persistent, flag barrier",
                                  "flag barrier + smem pre"};
    const int NV = 6;
    std::vector<float> out[NV];
    const float *last = hc.p[hc.n - 1].y;
    int lastM = hc.p[hc.n - 1].M;
    unsigned *bar;
    CK(cudaMalloc(&bar, 4));
    const size_t pre_bytes = (size_t)NW * 32 * 2 * U * 16;
    CK(cudaFuncSetAttribute(k_chain2<1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            (int)pre_bytes));
    int per_sm2 = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm2, k_chain2<1>, NW * 32, pre_bytes);
    const int grid2 = n_sm * (per_sm2 < 2 ? per_sm2 : 2); /* all blocks resident (spin barrier) */
    printf("flag-barrier grids: %d (smem prefetch %zu bytes a block, %d a SM)\n", grid2,
           pre_bytes, per_sm2);
    for (int v = 0; v < NV; v++) {
        float best = 1e30f;
        cudaGraphExec_t ge = NULL;
        if (v == 0 || v == 3) {
            cudaGraph_t gr;
            CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
            for (int i = 0; i < hc.n; i++) {
                if (v == 0) {
                    k_one<<<hc.p[i].M / 16, NW * 32, 0, st>>>(hc.p[i]);
                    continue;
                }
                cudaLaunchConfig_t cfg = {};
                cudaLaunchAttribute at[1];
                at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
                at[0].val.programmaticStreamSerializationAllowed = 1;
                cfg.gridDim = dim3(hc.p[i].M / 16), cfg.blockDim = dim3(NW * 32);
                cfg.stream = st, cfg.attrs = at, cfg.numAttrs = i > 0 ? 1 : 0;
                CK(cudaLaunchKernelEx(&cfg, k_one_pdl, hc.p[i]));
            }
            CK(cudaStreamEndCapture(st, &gr));
            CK(cudaGraphInstantiate(&ge, gr, 0));
        }
        for (int rep = 0; rep < 6; rep++) {
            CK(cudaMemcpyAsync(act, hx.data(), D * 4, cudaMemcpyHostToDevice, st));
            CK(cudaMemsetAsync(bar, 0, 4, st));
            CK(cudaEventRecord(e0, st));
            if (v == 0 || v == 3) {
                CK(cudaGraphLaunch(ge, st));
            } else if (v == 1 || v == 2) {
                void *args[] = {&dc};
                CK(cudaLaunchCooperativeKernel(v == 1 ? (void *)k_chain<0> : (void *)k_chain<1>,
                                               grid, NW * 32, args, 0, st));
            } else {
                void *args[] = {&dc, &bar};
                CK(cudaLaunchCooperativeKernel(v == 4 ? (void *)k_chain2<0> : (void *)k_chain2<1>,
                                               grid2, NW * 32, args, v == 4 ? 0 : pre_bytes, st));
            }
            CK(cudaEventRecord(e1, st));
            CK(cudaStreamSynchronize(st));
            float ms;
            cudaEventElapsedTime(&ms, e0, e1);
            if (rep > 0 && ms < best)
                best = ms;
        }
        out[v].resize(lastM);
        CK(cudaMemcpy(out[v].data(), last, lastM * 4, cudaMemcpyDeviceToHost));
        double us = best * 1000.0 / L;
        printf("%-26s %8.2f us/layer  %7.0f GB/s  %s\n", names[v], us,
               per_layer * 2 / us / 1e3,
               v == 0 ? "" : memcmp(out[v].data(), out[0].data(), lastM * 4) ? "DIFFERS" : "same bits");
    }
    return 0;
}
