/* cuda_lora.cu — the op lora on the GPU (backend.h, struct be_lora_grp): the LoRA deltas of
 * one projection for up to CU_LORA_GRP (3) groups of rows per launch.
 *
 * One block per (slice of CU_LORA_MT outputs, chunk of up to CU_LORA_RC rows of one group):
 * its warps first compute t = x a^T * scale for the chunk's rows and every term's ranks into
 * shared memory (each a lane-strided dot over K, reduced by shuffles in a fixed order), then
 * each thread sums t_j * bt[j][m] over the terms and ranks in order for its output m of every
 * row and adds it to y. A group's B slice is read once per chunk of rows. A row's arithmetic
 * depends only on its own row and group (batch invariant). The t of a chunk is recomputed
 * per output slice: A is small and stays in L2.
 */
#include "backend/cuda/cuda_int.cuh"

enum { CU_LORA_MT = 256, CU_LORA_RC = 8 };

struct lora_k {
    float *y;
    const float *x;
    int K, M, n_grp, rank_sum_max;
    int chunk0[CU_LORA_GRP + 1]; /* first row-chunk of each group (blockIdx.y) */
    struct be_lora_grp g[CU_LORA_GRP];
};

/* element i of a (dtype dt: f32, f16, bf16) as float (exact) */
__device__ __forceinline__ float lora_ld(const void *a, int dt, int64_t i)
{
    if (dt == DT_F16)
        return cu_f16(((const uint16_t *)a)[i]);
    if (dt == DT_BF16)
        return cu_bf16(((const uint16_t *)a)[i]);
    return ((const float *)a)[i];
}

__global__ void k_lora(struct lora_k p)
{
    extern __shared__ float t[]; /* (CU_LORA_RC, rank_sum_max) */
    int c = blockIdx.y, gi = 0;
    while (gi + 1 < p.n_grp && c >= p.chunk0[gi + 1])
        gi++;
    const struct be_lora_grp &g = p.g[gi];
    int r0 = (c - p.chunk0[gi]) * CU_LORA_RC;
    int nr = g.n_rows - r0 < CU_LORA_RC ? g.n_rows - r0 : CU_LORA_RC;
    int rs = 0;
    for (int i = 0; i < g.n_terms; i++)
        rs += g.t[i].rank;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    /* pass 1: t[r][k] for r < nr, k < rs */
    for (int it = warp; it < nr * rs; it += nw) {
        int r = it / rs, k = it % rs, ti = 0;
        while (k >= g.t[ti].rank)
            k -= g.t[ti].rank, ti++;
        const float *x = p.x + (int64_t)g.rows[r0 + r] * p.K;
        const int dt = g.t[ti].dtype;
        const int64_t a0 = (int64_t)k * p.K;
        float s = 0.0f;
        for (int i = lane; i < p.K; i += 32)
            s = __fmaf_rn(x[i], lora_ld(g.t[ti].a, dt, a0 + i), s);
        for (int o = 16; o > 0; o >>= 1)
            s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, o));
        if (lane == 0)
            t[r * p.rank_sum_max + (it % rs)] = __fmul_rn(s, g.t[ti].scale);
    }
    __syncthreads();
    /* pass 2: y[row][m] += sum over terms, ranks of t * bt */
    int m = blockIdx.x * CU_LORA_MT + threadIdx.x;
    if (m >= p.M)
        return;
    for (int r = 0; r < nr; r++) {
        const float *tv = t + r * p.rank_sum_max;
        float acc = 0.0f;
        for (int i = 0; i < g.n_terms; i++) {
            const void *bt = g.t[i].bt;
            const int dt = g.t[i].dtype;
            for (int j = 0; j < g.t[i].rank; j++)
                acc = __fmaf_rn(tv[j], lora_ld(bt, dt, (int64_t)j * p.M + m), acc);
            tv += g.t[i].rank;
        }
        float *y = p.y + (int64_t)g.rows[r0 + r] * p.M + m;
        *y = __fadd_rn(*y, acc);
    }
}

void cu_lora(struct be *b, float *y, const float *x, int K, int M, const struct be_lora_grp *g,
             int n_grp)
{
    struct cu_be *cb = cu_be(b);
    if (n_grp <= 0 || n_grp > CU_LORA_GRP || K <= 0 || M <= 0)
        return;
    struct lora_k p;
    memset(&p, 0, sizeof p);
    p.y = y, p.x = x, p.K = K, p.M = M, p.n_grp = n_grp;
    int chunks = 0;
    for (int i = 0; i < n_grp; i++) {
        p.g[i] = g[i];
        p.chunk0[i] = chunks;
        chunks += (g[i].n_rows + CU_LORA_RC - 1) / CU_LORA_RC;
        int rs = 0;
        for (int k = 0; k < g[i].n_terms; k++)
            rs += g[i].t[k].rank;
        p.rank_sum_max = rs > p.rank_sum_max ? rs : p.rank_sum_max;
    }
    p.chunk0[n_grp] = chunks;
    if (chunks == 0 || p.rank_sum_max == 0)
        return;
    size_t smem = (size_t)CU_LORA_RC * p.rank_sum_max * sizeof(float);
    if (smem > 48 * 1024 &&
        cudaFuncSetAttribute(k_lora, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) !=
            cudaSuccess) {
        cu_latch(cb, "lora (shared memory)", cudaErrorInvalidValue);
        return;
    }
    dim3 grid((unsigned)((M + CU_LORA_MT - 1) / CU_LORA_MT), (unsigned)chunks);
    k_lora<<<grid, CU_LORA_MT, smem, cb->stream>>>(p);
    cu_after_launch(cb, "lora");
}
