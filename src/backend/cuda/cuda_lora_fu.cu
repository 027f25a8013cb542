/* cuda_lora_fu.cu — the op lora on the GPU as ONE launch per recorded call
 * (CINFER_CUDA_LORA=fused): shrink t = x a^T and expand y += (t * scale) b^T for every row,
 * group and projection of a struct cu_lk (cuda_lora.cuh).
 *
 * Why: with the two-launch path (cuda_lora_sg.cu) one rank-16 adapter on all projections
 * still costs 0.38 of l1b's decode tok/s at batch 1 and 8 on the H100 (session 4): a fixed
 * cost per dependent launch, not bandwidth (the adapter is a few MB). Here one grid
 * of LF_T-thread blocks takes both roles, assigned by a ticket (an atomic counter, in the
 * order the blocks really start, so a block that waits never waits for one not yet
 * running): the first S tickets are shrink blocks (one per row, tile of LF_TJ ranks, chunk
 * of LF_KC columns of K, as the two-launch shrink), the rest expand blocks (LF_T outputs
 * of one projection x up to LF_RC rows of one group). An expand block loads its B values
 * first, waits until the S shrink blocks have published their partials (a second
 * counter), sums them in chunk order into t (shared memory), and only then waits for the
 * previous kernel (PDL: the base projection that wrote y) and adds its delta to y with
 * one atomic add per element (a single addend: the same value as a load, add and store).
 * The last block to finish sets the counters back to zero.
 *
 * pre (struct cu_lk, set by the recorder): x may be read before the PDL wait. The recorder
 * sets it only when the previous recorded call is a projection (its kernel waits for the
 * kernels before it before it lets this one launch, or never lets it launch early) that
 * does not write x; then the whole shrink and the expand's loads overlap the base
 * projection, and what is left after it is one atomic add per output. Otherwise every
 * block waits first.
 *
 * With a norm (op lora_norm) the shrink sums each chunk's x * norm * a and x^2; the expand
 * turns the chunks' x^2 into 1/rms (chunk order) and scales t by it. A row's arithmetic
 * depends only on its row, its group's terms and K: batch invariant.
 * Scratch CU_SCRATCH_LORA: CU_LK_HDR bytes of counters (zero between launches), then the
 * partials (and the x^2 partials). cu_lkf_run returns -1 when a call does not fit (ranks of
 * one projection > LF_RS, partials over the budget, a new buffer while a graph is being
 * captured): the caller runs the two-launch path.
 */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_lora.cuh"

enum {
    LF_KC = 512, /* columns of K per shrink block */
    LF_TJ = 16,  /* ranks per shrink block */
    LF_T = 256,  /* threads of every block */
    LF_RC = 8,   /* rows per expand block */
    LF_BP = 32,  /* B values an expand thread loads before the wait (ranks of a projection) */
    LF_RS = 128, /* most ranks of one projection of one group (stacked terms summed) */
    LF_PART_MAX = 64 << 20,
};

/* element i of a (dtype dt: f32, f16, bf16) as float (exact) */
static __device__ __forceinline__ float lf_ld(const void *a, int dt, int64_t i)
{
    if (dt == DT_F16)
        return cu_f16(((const uint16_t *)a)[i]);
    if (dt == DT_BF16)
        return cu_bf16(((const uint16_t *)a)[i]);
    return ((const float *)a)[i];
}

/* Shrink block s: row i, ranks [j0, j0 + LF_TJ) of its group, columns of chunk z. */
static __device__ __forceinline__ void lf_shrink(const struct cu_lk &d, int s, float *part,
                                                 float *pss, int R, int Tmax, int ntile, int ksplit)
{
    __shared__ const char *s_a[LF_TJ];
    __shared__ int s_dt[LF_TJ];
    __shared__ float s_red[LF_T / 32][LF_TJ + 1];
    const int z = s % ksplit, jt = (s / ksplit) % ntile, i = s / (ksplit * ntile);
    int gi = 0, base = 0;
    while (gi + 1 < d.n_grp && i >= base + d.g[gi].n_rows)
        base += d.g[gi].n_rows, gi++;
    const struct cu_lk_grp &g = d.g[gi];
    const int j0 = jt * LF_TJ;
    if (j0 >= g.T) /* (block-uniform) */
        return;
    const int nv = g.T - j0 < LF_TJ ? g.T - j0 : LF_TJ;
    const int tid = threadIdx.x;
    if (tid < LF_TJ) {
        const char *ap = NULL;
        int dt = DT_F32;
        const int jj = j0 + tid;
        for (int p = 0; tid < nv && p < d.n_proj; p++)
            for (int k = g.t0[p]; k < g.t0[p] + g.nt[p]; k++) {
                const struct cu_lk_term &t = d.t[k];
                if (jj >= t.roff && jj < t.roff + t.rank) {
                    const size_t es = t.dtype == DT_F32 ? 4 : 2;
                    ap = (const char *)t.a + (size_t)(jj - t.roff) * (size_t)d.K * es;
                    dt = t.dtype;
                }
            }
        s_a[tid] = ap;
        s_dt[tid] = dt;
    }
    __syncthreads();
    const float *x = d.x + (int64_t)g.rows[i - base] * d.K;
    const int k0 = z * LF_KC, k1 = d.K < k0 + LF_KC ? d.K : k0 + LF_KC;
    const int e0 = k0 + tid, e1 = k0 + tid + LF_T;
    const int h0 = e0 < k1, h1 = e1 < k1;
    /* every load first: x (from L2: another kernel wrote it), norm, the ranks' a */
    float x0 = h0 ? __ldcg(x + e0) : 0.0f, x1 = h1 ? __ldcg(x + e1) : 0.0f;
    float g0 = 1.0f, g1 = 1.0f;
    if (d.norm) {
        g0 = h0 ? d.norm[e0] : 0.0f;
        g1 = h1 ? d.norm[e1] : 0.0f;
    }
    float a0[LF_TJ], a1[LF_TJ];
#pragma unroll
    for (int j = 0; j < LF_TJ; j++) {
        a0[j] = j < nv && h0 ? lf_ld(s_a[j], s_dt[j], e0) : 0.0f;
        a1[j] = j < nv && h1 ? lf_ld(s_a[j], s_dt[j], e1) : 0.0f;
    }
    float ss = __fadd_rn(__fmul_rn(x0, x0), __fmul_rn(x1, x1));
    const float xv0 = d.norm ? __fmul_rn(x0, g0) : x0, xv1 = d.norm ? __fmul_rn(x1, g1) : x1;
    const int lane = tid & 31, warp = tid >> 5;
#pragma unroll
    for (int j = 0; j < LF_TJ; j++) {
        const float v = cu_warp_sum(__fmaf_rn(xv1, a1[j], __fmul_rn(xv0, a0[j])));
        if (lane == 0)
            s_red[warp][j] = v;
    }
    if (d.norm) {
        ss = cu_warp_sum(ss);
        if (lane == 0)
            s_red[warp][LF_TJ] = ss;
    }
    __syncthreads();
    if (tid < nv || (tid == LF_TJ && d.norm && jt == 0)) {
        const int c = tid < nv ? tid : LF_TJ;
        float v = s_red[0][c];
        for (int w = 1; w < LF_T / 32; w++)
            v = __fadd_rn(v, s_red[w][c]);
        if (tid < nv)
            part[((int64_t)z * R + i) * Tmax + j0 + tid] = v;
        else
            pss[(int64_t)z * R + i] = v;
        __threadfence(); /* published before the block counts itself done */
    }
}

/* The delta of projection p at output m for the rows [r0, r0 + nr) of group g (global row
 * index row0 = their first) into acc[LF_RC] (0 beyond nr or M; every thread of the block
 * calls it). Loads its B values first, waits until the S shrink blocks are done, sums their
 * partials in chunk order into t; no y is read (before the PDL wait). */
static __device__ __forceinline__ void lf_delta(const struct cu_lk &d, int p,
                                                const struct cu_lk_grp &g, int row0, int nr,
                                                int m, const float *part, const float *pss,
                                                const unsigned *cnt, int R, int Tmax,
                                                int ksplit, int S, float *acc)
{
    __shared__ const char *s_bp[LF_RS];
    __shared__ int s_bdt[LF_RS], s_tj[LF_RS];
    __shared__ float s_sc[LF_RS];
    __shared__ float s_t[LF_RC][LF_RS];
    __shared__ float s_inv[LF_RC];
    const int tb = g.t0[p], te = g.t0[p] + g.nt[p];
    const int tid = threadIdx.x, M = d.M[p], on = m < M;
#pragma unroll
    for (int r = 0; r < LF_RC; r++)
        acc[r] = 0.0f;
    __syncthreads(); /* (the tables of a previous call are read) */
    if (tid == 0) { /* the block's ranks in term order: B row, dtype, t index, scale */
        int j = 0;
        for (int k = tb; k < te; k++)
            for (int jj = 0; jj < d.t[k].rank; jj++, j++) {
                const struct cu_lk_term &t = d.t[k];
                const size_t es = t.dtype == DT_F32 ? 4 : 2;
                s_bp[j] = (const char *)t.bt + (size_t)jj * (size_t)M * es;
                s_bdt[j] = t.dtype;
                s_tj[j] = t.roff + jj;
                s_sc[j] = t.scale;
            }
    }
    __syncthreads();
    int rs = 0;
    for (int k = tb; k < te; k++)
        rs += d.t[k].rank;
    if (rs == 0) /* (block-uniform: this group has no term on p) */
        return;
    float bv[LF_BP];
#pragma unroll
    for (int j = 0; j < LF_BP; j++)
        bv[j] = j < rs && on ? lf_ld(s_bp[j], s_bdt[j], m) : 0.0f;
    if (tid == 0) { /* the shrink blocks started before this one (tickets): no deadlock */
        for (long n = 0; *(const volatile unsigned *)(cnt + 1) < (unsigned)S; n++) { /* (L2) */
            if (n > (1l << 24)) /* seconds: counters not zero at the launch; fail, never hang */
                __trap();
            __nanosleep(32);
        }
        __threadfence(); /* (their partials are read after the count) */
    }
    __syncthreads();
    if (d.norm && tid < nr) {
        float s = __ldcg(pss + row0 + tid);
        for (int z = 1; z < ksplit; z++)
            s = __fadd_rn(s, __ldcg(pss + (int64_t)z * R + row0 + tid));
        s_inv[tid] = 1.0f / sqrtf(s / (float)d.K + d.eps);
    }
    __syncthreads();
    for (int idx = tid; idx < nr * rs; idx += LF_T) {
        const int r = idx / rs, j = idx - r * rs;
        const float *pp = part + (int64_t)(row0 + r) * Tmax + s_tj[j];
        float s = __ldcg(pp);
        for (int z = 1; z < ksplit; z++)
            s = __fadd_rn(s, __ldcg(pp + (int64_t)z * R * Tmax));
        if (d.norm)
            s = __fmul_rn(s, s_inv[r]);
        s_t[r][j] = __fmul_rn(s, s_sc[j]);
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < LF_BP; j++)
        if (j < rs) {
#pragma unroll
            for (int r = 0; r < LF_RC; r++)
                acc[r] = __fmaf_rn(s_t[r][j], bv[j], acc[r]);
        }
    for (int j = LF_BP; j < rs; j++) { /* more ranks than were loaded early */
        const float b = on ? lf_ld(s_bp[j], s_bdt[j], m) : 0.0f;
#pragma unroll
        for (int r = 0; r < LF_RC; r++)
            acc[r] = __fmaf_rn(s_t[r][j], b, acc[r]);
    }
}

/* act(g) * u with the arithmetic of the op act_mul (cuda_ops.cu k_ew). */
static __device__ __forceinline__ float lf_glu(float g, float u, int act)
{
    if (act != BE_ACT_GELU_TANH)
        return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
    const float in = __fmul_rn(0.7978845608028654f,
                               __fadd_rn(g, __fmul_rn(__fmul_rn(__fmul_rn(0.044715f, g), g), g)));
    return __fmul_rn(__fmul_rn(__fmul_rn(0.5f, g), __fadd_rn(1.0f, tanhf(in))), u);
}

/* Expand block e: LF_T outputs of projection p (with act_y: of gate and up both) x up to
 * LF_RC rows of group gi. */
static __device__ __forceinline__ void lf_expand(const struct cu_lk &d, int e, const float *part,
                                                 const float *pss, const unsigned *cnt, int R,
                                                 int Tmax, int ksplit, int S, int slices)
{
    int sl = e % slices, p = 0;
    while (!d.act_y && p + 1 < d.n_proj && sl >= (d.M[p] + LF_T - 1) / LF_T)
        sl -= (d.M[p] + LF_T - 1) / LF_T, p++;
    int c = e / slices, gi = 0, base = 0;
    while (gi + 1 < d.n_grp && c >= (d.g[gi].n_rows + LF_RC - 1) / LF_RC)
        c -= (d.g[gi].n_rows + LF_RC - 1) / LF_RC, base += d.g[gi].n_rows, gi++;
    const struct cu_lk_grp &g = d.g[gi];
    if (!d.act_y && g.nt[p] == 0) /* (block-uniform) */
        return;
    const int r0 = c * LF_RC, nr = g.n_rows - r0 < LF_RC ? g.n_rows - r0 : LF_RC;
    const int tid = threadIdx.x, M = d.M[p], m = sl * LF_T + tid, on = m < M;
    float acc[LF_RC], acc1[LF_RC];
    lf_delta(d, p, g, base + r0, nr, m, part, pss, cnt, R, Tmax, ksplit, S, acc);
    if (d.act_y)
        lf_delta(d, 1, g, base + r0, nr, m, part, pss, cnt, R, Tmax, ksplit, S, acc1);
    cu_pdl_wait(); /* the base projection has written y */
    if (d.act_y) { /* gate and up plus their deltas, then the activation */
#pragma unroll
        for (int r = 0; r < LF_RC; r++)
            if (r < nr && on) {
                const int64_t o = (int64_t)g.rows[r0 + r] * M + m;
                d.act_y[o] = lf_glu(__fadd_rn(d.y[0][o], acc[r]), __fadd_rn(d.y[1][o], acc1[r]),
                                    d.act);
            }
        return;
    }
    if (!d.ss_out) {
#pragma unroll
        for (int r = 0; r < LF_RC; r++)
            if (r < nr && on)
                atomicAdd(d.y[p] + (int64_t)g.rows[r0 + r] * M + m, acc[r]);
        return;
    }
    /* a chained call (n_proj 1): y, then the next norm's xg and tile sums of its rows (every
     * thread of the block takes part in the shuffles: nr is the block's) */
#pragma unroll
    for (int r = 0; r < LF_RC; r++)
        if (r < nr) {
            const int64_t row = g.rows[r0 + r];
            float v = 0.0f;
            if (on) {
                float *yp = d.y[0] + row * M + m;
                v = __fadd_rn(*yp, acc[r]);
                *yp = v;
                d.xg_out[row * M + m] = __fmul_rn(v, d.gnext[m]);
            }
            float q = __fmul_rn(v, v);
#pragma unroll
            for (int o = 1; o < 16; o <<= 1)
                q = __fadd_rn(q, __shfl_xor_sync(0xffffffffu, q, o));
            if ((tid & 15) == 0 && on)
                d.ss_out[row * (M / 16) + m / 16] = q;
        }
}

/* With act_y, plain block e: the activation of LF_T outputs x up to LF_RC of the act_rows
 * rows that are in no group (those in a group are their expand blocks'). */
static __device__ __forceinline__ void lf_plain(const struct cu_lk &d, int e, int slices)
{
    __shared__ int s_skip[LF_RC];
    const int sl = e % slices, r0 = (e / slices) * LF_RC, tid = threadIdx.x;
    const int M = d.M[0], m = sl * LF_T + tid;
    if (tid < LF_RC) {
        int in = r0 + tid >= d.act_rows;
        for (int gi = 0; gi < d.n_grp && !in; gi++)
            for (int i = 0; i < d.g[gi].n_rows && !in; i++)
                in = d.g[gi].rows[i] == r0 + tid;
        s_skip[tid] = in;
    }
    __syncthreads();
    cu_pdl_wait(); /* the base projection has written y */
    if (m >= M)
        return;
    for (int r = 0; r < LF_RC; r++)
        if (!s_skip[r]) {
            const int64_t o = (int64_t)(r0 + r) * M + m;
            d.act_y[o] = lf_glu(d.y[0][o], d.y[1][o], d.act);
        }
}

/* After the two-launch path ran a chained call: xg and the tile sums of every row of its
 * groups from the final y (block: LF_T outputs x one row; M % 16 == 0). */
__global__ void __launch_bounds__(LF_T) k_lkf_fix(const __grid_constant__ struct cu_lk d)
{
    cu_pdl_trigger();
    cu_pdl_wait();
    int i = blockIdx.y, gi = 0;
    while (gi + 1 < d.n_grp && i >= d.g[gi].n_rows)
        i -= d.g[gi].n_rows, gi++;
    const int M = d.M[0], m = blockIdx.x * LF_T + threadIdx.x, on = m < M;
    const int64_t row = d.g[gi].rows[i];
    float v = 0.0f;
    if (on) {
        v = d.y[0][row * M + m];
        d.xg_out[row * M + m] = __fmul_rn(v, d.gnext[m]);
    }
    float q = __fmul_rn(v, v);
#pragma unroll
    for (int o = 1; o < 16; o <<= 1)
        q = __fadd_rn(q, __shfl_xor_sync(0xffffffffu, q, o));
    if ((threadIdx.x & 15) == 0 && on)
        d.ss_out[row * (M / 16) + m / 16] = q;
}

__global__ void __launch_bounds__(LF_T)
    k_lkf(const __grid_constant__ struct cu_lk d, float *part, unsigned *cnt, int R, int Tmax,
          int ntile, int ksplit, int S, int E, int slices)
{
    cu_pdl_trigger(); /* the next kernel may launch; it waits for this one to finish */
    if (!d.pre)
        cu_pdl_wait();
    __shared__ unsigned s_ticket;
    if (threadIdx.x == 0)
        s_ticket = atomicAdd(cnt, 1u);
    __syncthreads();
    const int tk = (int)s_ticket;
    float *pss = part + (int64_t)ksplit * R * Tmax;
    if (tk < S)
        lf_shrink(d, tk, part, pss, R, Tmax, ntile, ksplit);
    else if (tk < S + E)
        lf_expand(d, tk - S, part, pss, cnt, R, Tmax, ksplit, S, slices);
    else
        lf_plain(d, tk - S - E, slices);
    __syncthreads();
    if (threadIdx.x == 0) {
        if (tk < S) {
            __threadfence();
            atomicAdd(cnt + 1, 1u); /* this shrink block's partials are out */
        }
        if (atomicAdd(cnt + 2, 1u) == gridDim.x - 1) { /* the last block: all have tickets */
            cnt[0] = 0;
            cnt[1] = 0;
            cnt[2] = 0;
        }
    }
}

/* ---- host side ---- */

int cu_lkf_act_on(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("CINFER_CUDA_LORA_ACT");
        v = !(e && !strcmp(e, "0"));
    }
    return v;
}

int cu_lkf_chain_on(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("CINFER_CUDA_LORA_CHAIN");
        v = !(e && !strcmp(e, "0"));
    }
    return v;
}

void cu_lkf_fix(struct be *b, const struct cu_lk *d)
{
    struct cu_be *cb = cu_be(b);
    int R = 0;
    for (int i = 0; i < d->n_grp; i++)
        R += d->g[i].n_rows;
    if (!d->ss_out || R == 0 || d->M[0] <= 0)
        return;
    cu_launch(cb, k_lkf_fix, dim3((unsigned)((d->M[0] + LF_T - 1) / LF_T), (unsigned)R),
              dim3(LF_T), 0, *d);
    cu_after_launch(cb, "lora (chained norm)");
}

int cu_lkf_pre_on(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("CINFER_CUDA_LORA_PRE");
        v = !(e && !strcmp(e, "0"));
    }
    return v;
}

/* Whether the counters of a backend's CU_SCRATCH_LORA buffer are known to be zero (a few
 * backends; one not listed: not known). */
static struct {
    const void *cb;
    int clean;
} g_lf_hdr[8];

static int lf_hdr_slot(const void *cb)
{
    for (int i = 0; i < 8; i++)
        if (g_lf_hdr[i].cb == cb)
            return i;
    int s = 0; /* (full: the first entry's backend will zero its counters again) */
    for (int i = 7; i >= 0; i--)
        if (!g_lf_hdr[i].cb)
            s = i;
    g_lf_hdr[s].cb = cb, g_lf_hdr[s].clean = 0;
    return s;
}

char *cu_lk_scratch(struct cu_be *cb, size_t bytes, int need_hdr, int *declined)
{
    *declined = 0;
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(cb->stream, &cs) != cudaSuccess)
        cudaGetLastError(), cs = cudaStreamCaptureStatusActive;
    const int capturing = cs != cudaStreamCaptureStatusNone;
    const size_t cap0 = cb->scratch_cap[CU_SCRATCH_LORA];
    if (need_hdr && capturing && cap0 < bytes) {
        *declined = 1; /* (no allocation inside a capture) */
        return NULL;
    }
    char *buf = (char *)cu_scratch(cb, CU_SCRATCH_LORA, bytes);
    if (!buf)
        return NULL; /* out of memory: latched */
    const int s = lf_hdr_slot(cb);
    if (cb->scratch_cap[CU_SCRATCH_LORA] != cap0) /* a new buffer: its counters are garbage */
        g_lf_hdr[s].clean = 0;
    if (!g_lf_hdr[s].clean && !capturing) {
        cb->last_kernel = 0; /* (no PDL launch right after a memset) */
        cudaError_t rc = cudaMemsetAsync(buf, 0, CU_LK_HDR, cb->stream);
        if (rc != cudaSuccess) {
            cudaGetLastError();
            cu_latch(cb, "lora counters", rc);
            return NULL;
        }
        g_lf_hdr[s].clean = 1;
    }
    if (need_hdr && !g_lf_hdr[s].clean) {
        *declined = 1;
        return NULL;
    }
    return buf;
}

int cu_lkf_run(struct be *b, const struct cu_lk *d)
{
    struct cu_be *cb = cu_be(b);
    int R = 0, Tmax = 0, rsmax = 0, chunks = 0, slices = 0;
    for (int i = 0; i < d->n_grp; i++) {
        R += d->g[i].n_rows;
        chunks += (d->g[i].n_rows + LF_RC - 1) / LF_RC;
        Tmax = d->g[i].T > Tmax ? d->g[i].T : Tmax;
        for (int p = 0; p < d->n_proj; p++) {
            int rs = 0;
            for (int k = d->g[i].t0[p]; k < d->g[i].t0[p] + d->g[i].nt[p]; k++)
                rs += d->t[k].rank;
            rsmax = rs > rsmax ? rs : rsmax;
        }
    }
    for (int p = 0; p < (d->act_y ? 1 : d->n_proj); p++) /* (act: a block does gate and up) */
        slices += (d->M[p] + LF_T - 1) / LF_T;
    if (R == 0 || Tmax == 0 || rsmax == 0 || d->K <= 0)
        return 0;
    if (rsmax > LF_RS || (d->act_y && (d->n_proj != 2 || d->M[0] != d->M[1])))
        return -1;
    const int ksplit = (d->K + LF_KC - 1) / LF_KC, ntile = (Tmax + LF_TJ - 1) / LF_TJ;
    const size_t pbytes = (size_t)ksplit * (size_t)R * ((size_t)Tmax + 1) * sizeof(float);
    if (pbytes > LF_PART_MAX)
        return -1;
    const int64_t S = (int64_t)R * ntile * ksplit, E = (int64_t)slices * chunks;
    const int64_t P = d->act_y ? (int64_t)slices * ((d->act_rows + LF_RC - 1) / LF_RC) : 0;
    if (S + E + P > (1 << 30))
        return -1;
    int declined = 0;
    char *buf = cu_lk_scratch(cb, CU_LK_HDR + pbytes, 1, &declined);
    if (!buf)
        return declined ? -1 : 0; /* (0: out of memory, latched) */
    cu_launch(cb, k_lkf, dim3((unsigned)(S + E + P)), dim3(LF_T), 0, *d,
              (float *)(buf + CU_LK_HDR), (unsigned *)buf, R, Tmax, ntile, ksplit, (int)S, (int)E,
              slices);
    cu_after_launch(cb, "lora (fused)");
    return 0;
}
