/* cuda_attn_dec.cu — decode-step attention over the paged KV cache (steps of <= 64 tokens).
 *
 * A block serves one token, one KV head and HG (<= 4) of its query heads over one split of
 * the token's positions, so K/V are read once for those heads. Positions go in rounds of
 * AD_ROUND (64-aligned, absolute): a team of head_dim/8 lanes owns one position at a time,
 * each lane 8 dims (one 16-byte load of f16), and a lane keeps its RPT positions of K and V
 * in registers; a score is 8 FMAs per lane plus a butterfly reduce-scatter over the team.
 * Warp h keeps head h's online softmax; each team accumulates its own positions' V and the
 * teams are summed in a fixed order at the end. A token's split length depends only on its
 * own attended range (at most AD_TARGET splits of whole rounds), never on the batch or the
 * context capacity, so its result is the same alone or in any step. Splits are merged in
 * split order with one formula (ad_merge_out). By default the splits of a one-token step
 * (batch-1 decode) are merged inside a thread-block cluster through distributed shared
 * memory when they fit in one (<= 8: contexts up to 512 positions), with no second kernel
 * (H200: l1b decode +0.4-0.7% in three calls, l8b within +-0.1%); other steps, and longer
 * contexts, merge in a second kernel launched with programmatic dependent launch (the
 * cluster for every step cost 6-7% of aggregate decode at 64 sequences). The mode never
 * changes a result. CINFER_ATTN_DEC_MERGE: "kernel" or "cluster" for every step; "fused"
 * lets the last split block to finish merge (arrival counters in scratch CU_SCRATCH_DEC).
 * Process-wide knobs, read when a backend is created (for measurements): CINFER_ATTN_DEC=0
 * (off: the general kernel runs), CINFER_ATTN_DEC_SPLITS=N (split target 1..64),
 * CINFER_ATTN_DEC_MERGE, CINFER_ATTN_DEC_PDL=0 (plain launches; CINFER_CUDA_PDL=0 does the
 * same for every kernel).
 * The split kernel (except as a cluster) and the merge kernel are launched with programmatic
 * dependent launch and wait for the previous kernel first thing (the merge reads only pos,
 * written before the step, before its wait).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cooperative_groups.h>

#include "backend/cuda/cuda_dec_split.cuh"
#include "backend/cuda/cuda_int.cuh"

enum {
    AD_ROUND = 64,   /* positions per round (one score per position in shared memory) */
    AD_MAX_TOK = 64, /* longer steps go to the general kernel */
    AD_TARGET = 32,  /* default: most splits of one token's positions */
    AD_MAX_TARGET = 64,
    AD_MAX_CLUSTER = 8, /* portable cluster size: the most splits merged in a cluster */
    AD_CNT_Y = 256,     /* fused merge: counters per token (KV heads x head groups) */
};
/* how the splits of a token are merged */
enum { AD_KERNEL = 0, AD_CLUSTER = 1, AD_FUSED = 2,
       AD_AUTO = 3 /* the cluster for a one-token step, else the kernel */ };

static struct {
    int on, target, pdl, mode;
} g_ad = {1, AD_TARGET, 1, AD_AUTO};

struct ad_args {
    const float *q;
    float *out;
    float *part; /* (n_tok, n_head, maxs, hd) unnormalised split outputs */
    float2 *ml;  /* (n_tok, n_head, maxs) split max and sum */
    unsigned *cnt; /* AD_FUSED: (AD_MAX_TOK, AD_CNT_Y) arrivals, zero between calls */
    const int32_t *pos, *seq, *bt;
    const void *kc, *vc;
    int n_head, n_kv_head, nsub, max_blocks, block_size, bs_shift, window, maxs, target;
    float scale, softcap;
};

/* Threads per block: enough teams that a round of 64 positions is RPT <= 8 rows a lane. */
__host__ __device__ constexpr int ad_nt(int hd, int f16)
{
    return hd == 64 ? 128 : hd == 128 ? (f16 ? 128 : 256) : 256;
}

/* 8 cache elements (raw 16-byte words) as floats. */
template <int F16>
__device__ __forceinline__ void ad_cvt(const uint4 *raw, float *f)
{
    if constexpr (F16) {
        const __half2 *h = (const __half2 *)raw;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float2 x = __half22float2(h[i]);
            f[2 * i] = x.x, f[2 * i + 1] = x.y;
        }
    } else {
        const float *x = (const float *)raw;
#pragma unroll
        for (int i = 0; i < 8; i++)
            f[i] = x[i];
    }
}

/* Output of one (token, head, dim) from its n split results (max m[z], sum l[z], and
 * unnormalised output get_o(z) of split z), merged in split order. The o loads go out
 * AD_MCH at a time before they are used (a merge is a few dependent trips to L2, not n).
 * Both merges (the kernel and the cluster one) use this, so the result does not depend on
 * which ran. */
enum { AD_MCH = 16 };
template <typename G>
__device__ __forceinline__ float ad_merge_out(int n, const float *m, const float *l, G get_o)
{
    float mx = -INFINITY;
    for (int z = 0; z < n; z++)
        if (l[z] > 0.0f)
            mx = fmaxf(mx, m[z]);
    float L = 0.0f, o = 0.0f;
    for (int z0 = 0; z0 < n; z0 += AD_MCH) {
        float ov[AD_MCH];
#pragma unroll
        for (int k = 0; k < AD_MCH; k++)
            ov[k] = z0 + k < n ? get_o(z0 + k) : 0.0f;
#pragma unroll
        for (int k = 0; k < AD_MCH; k++) {
            const int z = z0 + k;
            if (z < n && l[z] > 0.0f) {
                const float f = expf(m[z] - mx);
                L = fmaf(f, l[z], L);
                o = fmaf(f, ov[k], o);
            }
        }
    }
    return L > 0.0f ? o * (1.0f / L) : 0.0f;
}

/* MODE AD_KERNEL: splits write partial results for k_attn_dec_merge. AD_CLUSTER: launched
 * as clusters of maxs blocks along x (the splits of one token, KV head and head group),
 * merged through distributed shared memory, each split block a slice of the outputs; every
 * block of the cluster, idle or not, reaches the two cluster barriers. AD_FUSED: the last
 * split block to finish (an arrival counter, reset by that block) merges the partials. */
template <int HD, int F16, int HG, int MODE>
__global__ void __launch_bounds__(ad_nt(HD, F16), ad_nt(HD, F16) == 128 ? 3 : 1)
    k_attn_dec(struct ad_args a)
{
    constexpr int CL = MODE == AD_CLUSTER;
    constexpr int NT = ad_nt(HD, F16), TS = HD / 8, TEAMS = NT / TS, RPT = AD_ROUND / TEAMS;
    constexpr int N = RPT * HG, NF = N >= TS ? N / TS : 1, W = F16 ? 1 : 2, ES = F16 ? 2 : 4;
    static_assert(TEAMS * RPT == AD_ROUND && NT / 32 >= HG && TS <= 32, "layout");
    __shared__ float sc[2][HG][AD_ROUND]; /* scores, then probabilities (by round parity) */
    __shared__ float fsh[2][HG];          /* rescale factor of the round */
    __shared__ float msh[HG], lsh[HG];
    __shared__ __align__(16) float red[TEAMS][HG][HD];
    __shared__ float pso[CL ? HG : 1][CL ? HD : 1]; /* CL: this split's unnormalised output */

    cu_pdl_trigger(); /* the merge kernel (or the next op) may launch; it waits for us */
    cu_pdl_wait();    /* launched with PDL: the previous kernel (q, K/V) is complete */
    const int z = blockIdx.x, t = blockIdx.z;
    const int g = blockIdx.y / a.nsub, sub = blockIdx.y % a.nsub;
    const int h0 = g * (a.n_head / a.n_kv_head) + sub * HG;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, team = tid / TS;
    const int d0 = (tid % TS) * 8;
    const int pos = a.pos[t], sq = a.seq[t]; /* loads issued together with q's */
    float qv[HG][8];
#pragma unroll
    for (int h = 0; h < HG; h++) {
        const float4 *qp = (const float4 *)(a.q + ((size_t)t * a.n_head + h0 + h) * HD + d0);
        const float4 x0 = qp[0], x1 = qp[1];
        qv[h][0] = x0.x, qv[h][1] = x0.y, qv[h][2] = x0.z, qv[h][3] = x0.w;
        qv[h][4] = x1.x, qv[h][5] = x1.y, qv[h][6] = x1.z, qv[h][7] = x1.w;
    }
    int lo = 0, rb = 0, per = 1;
    const int n = cu_dec_splits<AD_ROUND>(pos, a.window, a.target,
                                         a.max_blocks * a.block_size, &lo, &rb, &per);
    float *orow = a.out + ((size_t)t * a.n_head + h0) * HD; /* head h0 + h at orow + h * HD */
    if (n == 0 && z == 0)
        for (int i = tid; i < HG * HD; i += NT)
            orow[i] = 0.0f;
    if (!CL && z >= n)
        return;
    const int last = pos / AD_ROUND + 1, r0 = rb + z * per;
    int r1 = rb + (z + 1) * per < last ? rb + (z + 1) * per : last;
    if (z >= n) /* CL: an idle block of the cluster */
        r1 = r0;
    const int32_t *bt = a.bt + (size_t)sq * a.max_blocks;
    const size_t kvd = (size_t)a.n_kv_head * HD, hoff = (size_t)g * HD + d0;
    const int bs = a.block_size, bsh = a.bs_shift;
    float acc[HG][8];
#pragma unroll
    for (int h = 0; h < HG; h++)
#pragma unroll
        for (int k = 0; k < 8; k++)
            acc[h][k] = 0.0f;
    float m = -INFINITY, l = 0.0f; /* warp h < HG: head h's running max and sum */
    int buf = 0;
    for (int rd = r0; rd < r1; rd++, buf ^= 1) {
        /* this lane's rows: positions rd * 64 + r * TEAMS + team */
        long long row[RPT];
#pragma unroll
        for (int r = 0; r < RPT; r++) { /* a safe position for every lane: loads without branches */
            const int p = rd * AD_ROUND + r * TEAMS + team;
            const bool ok = p >= lo && p <= pos;
            const int pc = ok ? p : pos;
            const int bi = bsh >= 0 ? pc >> bsh : pc / bs, in = bsh >= 0 ? pc & (bs - 1) : pc % bs;
            row[r] = ok ? (long long)bt[bi] * bs + in : -1;
        }
        uint4 kr[RPT][W], vr[RPT][W];
#pragma unroll
        for (int r = 0; r < RPT; r++) {
            if (row[r] >= 0) {
                const size_t off = ((size_t)row[r] * kvd + hoff) * ES;
                const uint4 *kp = (const uint4 *)((const char *)a.kc + off);
                const uint4 *vp = (const uint4 *)((const char *)a.vc + off);
#pragma unroll
                for (int w = 0; w < W; w++)
                    kr[r][w] = __ldg(kp + w), vr[r][w] = __ldg(vp + w);
            } else {
#pragma unroll
                for (int w = 0; w < W; w++)
                    kr[r][w] = make_uint4(0, 0, 0, 0), vr[r][w] = make_uint4(0, 0, 0, 0);
            }
        }
        /* partial dots of this lane's 8 dims, then summed over the team */
        float s[N];
#pragma unroll
        for (int r = 0; r < RPT; r++) {
            float kf[8];
            ad_cvt<F16>(kr[r], kf);
#pragma unroll
            for (int h = 0; h < HG; h++) {
                float d = 0.0f;
#pragma unroll
                for (int k = 0; k < 8; k++)
                    d = fmaf(qv[h][k], kf[k], d);
                s[r * HG + h] = d;
            }
        }
        int base = 0;
        cu_team_sum<N, TS / 2>(s, lane, &base);
#pragma unroll
        for (int i = 0; i < NF; i++) {
            const int f = base + i, h = f % HG, j = (f / HG) * TEAMS + team;
            const int p = rd * AD_ROUND + j;
            float x = s[i] * a.scale;
            if (a.softcap > 0.0f)
                x = a.softcap * tanhf(x / a.softcap);
            sc[buf][h][j] = p >= lo && p <= pos ? x : -INFINITY;
        }
        __syncthreads();
        if (warp < HG) {
            const float s0 = sc[buf][warp][lane], s1 = sc[buf][warp][lane + 32];
            const float mn = fmaxf(m, cu_warp_max(fmaxf(s0, s1)));
            float f = 1.0f, p0 = 0.0f, p1 = 0.0f;
            if (mn != -INFINITY)
                f = expf(m - mn), p0 = expf(s0 - mn), p1 = expf(s1 - mn);
            l = l * f + cu_warp_sum(p0 + p1);
            m = mn;
            sc[buf][warp][lane] = p0, sc[buf][warp][lane + 32] = p1;
            if (lane == 0)
                fsh[buf][warp] = f;
        }
        __syncthreads();
#pragma unroll
        for (int h = 0; h < HG; h++) {
            const float f = fsh[buf][h];
#pragma unroll
            for (int k = 0; k < 8; k++)
                acc[h][k] *= f;
        }
#pragma unroll
        for (int r = 0; r < RPT; r++) {
            float vf[8];
            ad_cvt<F16>(vr[r], vf);
#pragma unroll
            for (int h = 0; h < HG; h++) {
                const float pr = sc[buf][h][r * TEAMS + team];
#pragma unroll
                for (int k = 0; k < 8; k++)
                    acc[h][k] = fmaf(pr, vf[k], acc[h][k]);
            }
        }
    }
    if (warp < HG && lane == 0)
        msh[warp] = m, lsh[warp] = l;
#pragma unroll
    for (int h = 0; h < HG; h++) {
        float4 *rp = (float4 *)&red[team][h][d0];
        rp[0] = make_float4(acc[h][0], acc[h][1], acc[h][2], acc[h][3]);
        rp[1] = make_float4(acc[h][4], acc[h][5], acc[h][6], acc[h][7]);
    }
    __syncthreads();
    for (int i = tid; i < HG * HD; i += NT) {
        const int h = i / HD, d = i % HD;
        float o = 0.0f;
#pragma unroll
        for (int tm = 0; tm < TEAMS; tm++)
            o += red[tm][h][d];
        if (n == 1) {
            const float L = lsh[h];
            if (z == 0) /* CL: not an idle block */
                orow[i] = L > 0.0f ? o * (1.0f / L) : 0.0f;
        } else if (CL) {
            pso[CL ? h : 0][CL ? d : 0] = o;
        } else if (z < n) {
            const size_t pr = ((size_t)t * a.n_head + h0 + h) * a.maxs + z;
            a.part[pr * HD + d] = o;
            if (d == 0)
                a.ml[pr] = make_float2(msh[h], lsh[h]);
        }
    }
    if constexpr (CL) {
        __shared__ float cms[HG][AD_MAX_CLUSTER], cls[HG][AD_MAX_CLUSTER];
        cooperative_groups::cluster_group cl = cooperative_groups::this_cluster();
        cl.sync(); /* every split's pso, msh, lsh are written */
        if (n > 1 && z < n) { /* split z merges slice z of the HG * HD outputs */
            if (tid < n * HG) {
                const int zz = tid / HG, hh = tid % HG;
                cms[hh][zz] = cl.map_shared_rank(msh, zz)[hh];
                cls[hh][zz] = cl.map_shared_rank(lsh, zz)[hh];
            }
            __syncthreads();
            const int tot = HG * HD, per_b = (tot + n - 1) / n;
            const int i1 = (z + 1) * per_b < tot ? (z + 1) * per_b : tot;
            for (int i = z * per_b + tid; i < i1; i += NT)
                orow[i] = ad_merge_out(n, cms[i / HD], cls[i / HD], [&](int zz) {
                    return cl.map_shared_rank(&pso[0][0], zz)[i];
                });
        }
        cl.sync(); /* the others are done reading this block's shared memory */
    }
    if constexpr (MODE == AD_FUSED) {
        __shared__ int s_last;
        __shared__ float fm[HG][AD_MAX_TARGET], fl[HG][AD_MAX_TARGET];
        if (n <= 1)
            return;
        __threadfence(); /* this split's partials are visible before it counts */
        __syncthreads();
        unsigned *cnt = a.cnt + (size_t)t * AD_CNT_Y + blockIdx.y;
        if (tid == 0)
            s_last = atomicAdd(cnt, 1u) == (unsigned)(n - 1);
        __syncthreads();
        if (!s_last)
            return;
        __threadfence();
        if (tid == 0)
            *cnt = 0; /* for the next call */
        for (int k = tid; k < n * HG; k += NT) {
            const int zz = k / HG, hh = k % HG;
            const float2 x = __ldcg(&a.ml[((size_t)t * a.n_head + h0 + hh) * a.maxs + zz]);
            fm[hh][zz] = x.x, fl[hh][zz] = x.y;
        }
        __syncthreads();
        for (int i = tid; i < HG * HD; i += NT) {
            const int h = i / HD, d = i % HD;
            const float *pp = a.part + ((size_t)t * a.n_head + h0 + h) * a.maxs * HD + d;
            orow[i] = ad_merge_out(n, fm[h], fl[h],
                                   [&](int zz) { return __ldcg(pp + (size_t)zz * HD); });
        }
    }
}

/* out row (t, h) = merge of the token's splits in split order (tokens of one split were
 * written by k_attn_dec itself). */
template <int HD>
__global__ void __launch_bounds__(HD, 1) k_attn_dec_merge(struct ad_args a)
{
    __shared__ float sm[AD_MAX_TARGET], sl[AD_MAX_TARGET];
    const int h = blockIdx.x, t = blockIdx.y, d = threadIdx.x;
    int lo = 0, rb = 0, per = 1;
    /* pos was written before k_attn_dec started: readable before the wait */
    const int n = cu_dec_splits<AD_ROUND>(a.pos[t], a.window, a.target,
                                         a.max_blocks * a.block_size, &lo, &rb, &per);
    cu_pdl_trigger();
    cu_pdl_wait();
    if (n <= 1)
        return;
    const size_t row = ((size_t)t * a.n_head + h) * a.maxs;
    if (d < n) { /* n <= AD_MAX_TARGET <= HD */
        const float2 x = a.ml[row + d];
        sm[d] = x.x, sl[d] = x.y;
    }
    __syncthreads();
    a.out[((size_t)t * a.n_head + h) * HD + d] =
        ad_merge_out(n, sm, sl, [&](int z) { return a.part[(row + z) * HD + d]; });
}

cudaError_t cu_attn_decode_init(struct cu_be *cb)
{
    (void)cb;
    const char *on = getenv("CINFER_ATTN_DEC"), *sp = getenv("CINFER_ATTN_DEC_SPLITS");
    const char *pdl = getenv("CINFER_ATTN_DEC_PDL"), *mo = getenv("CINFER_ATTN_DEC_MERGE");
    g_ad.on = !(on && on[0] == '0');
    g_ad.pdl = !(pdl && pdl[0] == '0');
    g_ad.mode = AD_AUTO;
    if (mo && !strcmp(mo, "kernel"))
        g_ad.mode = AD_KERNEL;
    else if (mo && !strcmp(mo, "cluster"))
        g_ad.mode = AD_CLUSTER;
    else if (mo && !strcmp(mo, "fused"))
        g_ad.mode = AD_FUSED;
    g_ad.target = AD_TARGET;
    if (sp) {
        long v = strtol(sp, NULL, 10);
        if (v >= 1 && v <= AD_MAX_TARGET)
            g_ad.target = (int)v;
    }
    return cudaSuccess;
}

template <int HD, int F16, int HG, int MODE>
static void ad_launch1(struct cu_be *cb, const struct ad_args &x, dim3 grid)
{
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    if (MODE == AD_CLUSTER) { /* (with PDL as well: l8b decode 0.45% slower, one call) */
        at[0].id = cudaLaunchAttributeClusterDimension;
        at[0].val.clusterDim.x = grid.x, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
    } else { /* may start while the previous kernel drains (it waits first thing) */
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
    }
    cfg.gridDim = grid;
    cfg.blockDim = dim3(ad_nt(HD, F16));
    cfg.dynamicSmemBytes = 0;
    cfg.stream = cb->stream;
    cfg.attrs = at;
    cfg.numAttrs = MODE == AD_CLUSTER || (cu_pdl_ok(cb) && g_ad.pdl) ? 1 : 0;
    cudaError_t rc = cudaLaunchKernelEx(&cfg, k_attn_dec<HD, F16, HG, MODE>, x);
    cb->last_kernel = 1;
    if (rc != cudaSuccess) {
        cudaGetLastError();
        cu_latch(cb, "attention (decode)", rc);
    }
}

template <int HD, int F16, int HG>
static void ad_launch_m(struct cu_be *cb, const struct ad_args &x, int mode, dim3 grid)
{
    if (mode == AD_CLUSTER)
        ad_launch1<HD, F16, HG, AD_CLUSTER>(cb, x, grid);
    else if (mode == AD_FUSED)
        ad_launch1<HD, F16, HG, AD_FUSED>(cb, x, grid);
    else
        ad_launch1<HD, F16, HG, AD_KERNEL>(cb, x, grid);
}

template <int HD, int F16>
static void ad_launch(struct cu_be *cb, const struct ad_args &x, int hg, int mode, dim3 grid)
{
    if (hg == 4)
        ad_launch_m<HD, F16, 4>(cb, x, mode, grid);
    else if (hg == 2)
        ad_launch_m<HD, F16, 2>(cb, x, mode, grid);
    else
        ad_launch_m<HD, F16, 1>(cb, x, mode, grid);
}

template <int HD>
static void ad_merge(struct cu_be *cb, const struct ad_args &x, int n_tok)
{
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.gridDim = dim3((unsigned)x.n_head, (unsigned)n_tok);
    cfg.blockDim = dim3(HD);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = cb->stream;
    cfg.attrs = at;
    cfg.numAttrs = cu_pdl_ok(cb) && g_ad.pdl ? 1 : 0;
    cudaError_t rc = cudaLaunchKernelEx(&cfg, k_attn_dec_merge<HD>, x);
    cb->last_kernel = 1;
    if (rc != cudaSuccess) {
        cudaGetLastError();
        cu_latch(cb, "attention merge (decode)", rc);
    }
}

static int ad_aligned(const void *p) { return ((uintptr_t)p & 15) == 0; }

int cu_attn_decode(struct cu_be *cb, float *out, const float *q, const struct be_attn *a)
{
    const int hd = a->head_dim, f16 = a->kv_dtype == DT_F16;
    if (!g_ad.on || a->n_tok > AD_MAX_TOK || (!f16 && a->kv_dtype != DT_F32))
        return 0;
    if (!(hd == 64 || hd == 128 || (hd == 256 && f16)))
        return 0;
    if (a->block_size <= 0 || a->max_blocks <= 0 || !ad_aligned(q) || !ad_aligned(out) ||
        !ad_aligned(a->k_cache) || !ad_aligned(a->v_cache))
        return 0;
    const long long cap = (long long)a->max_blocks * a->block_size;
    if (cap > (1ll << 30))
        return 0;
    const int group = a->n_head / a->n_kv_head;
    const int hg = group % 4 == 0 ? 4 : group % 2 == 0 ? 2 : 1, nsub = group / hg;
    if ((long long)a->n_kv_head * nsub > 65535)
        return 0;
    const int rounds = (int)((cap + AD_ROUND - 1) / AD_ROUND);
    const int maxs = g_ad.target < rounds ? g_ad.target : rounds;
    struct ad_args x;
    x.q = q, x.out = out, x.part = NULL, x.ml = NULL, x.cnt = NULL;
    x.pos = a->pos, x.seq = a->seq, x.bt = a->block_tables;
    x.kc = a->k_cache, x.vc = a->v_cache;
    x.n_head = a->n_head, x.n_kv_head = a->n_kv_head, x.nsub = nsub;
    x.max_blocks = a->max_blocks, x.block_size = a->block_size, x.window = a->window;
    x.bs_shift = -1; /* block_size a power of two: shifts instead of divisions */
    for (int sh = 0; sh < 30; sh++)
        if (a->block_size == 1 << sh)
            x.bs_shift = sh;
    x.maxs = maxs, x.target = g_ad.target;
    x.scale = a->scale, x.softcap = a->softcap;
    /* every mode merges with the same arithmetic: the choice never changes a result */
    int mode = maxs <= 1 ? AD_KERNEL
               : g_ad.mode == AD_AUTO ? (a->n_tok == 1 ? AD_CLUSTER : AD_KERNEL)
                                      : g_ad.mode;
    if ((mode == AD_CLUSTER && maxs > AD_MAX_CLUSTER) ||
        (mode == AD_FUSED && a->n_kv_head * nsub > AD_CNT_Y))
        mode = AD_KERNEL;
    const size_t rows = (size_t)a->n_tok * a->n_head * maxs;
    const size_t need = rows * ((size_t)hd + 2) * sizeof(float);
    if (mode == AD_FUSED) {
        /* counters first (always zero between calls: the last block resets its own), then
         * the partials; a new buffer has its counters zeroed, never inside a capture */
        const size_t cbytes = (size_t)AD_MAX_TOK * AD_CNT_Y * sizeof(unsigned);
        const size_t cap0 = cb->scratch_cap[CU_SCRATCH_DEC];
        cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing(cb->stream, &cs) != cudaSuccess)
            cudaGetLastError(), cs = cudaStreamCaptureStatusActive;
        if (cap0 < cbytes + need && cs != cudaStreamCaptureStatusNone) {
            mode = AD_KERNEL;
        } else {
            char *p = (char *)cu_scratch(cb, CU_SCRATCH_DEC, cbytes + need);
            if (!p)
                return 1; /* out of memory: latched */
            if (cb->scratch_cap[CU_SCRATCH_DEC] != cap0) {
                cb->last_kernel = 0;
                cudaError_t rc = cudaMemsetAsync(p, 0, cbytes, cb->stream);
                if (rc != cudaSuccess) {
                    cudaGetLastError();
                    cu_latch(cb, "attention (decode) counters", rc);
                    return 1;
                }
            }
            x.cnt = (unsigned *)p;
            x.part = (float *)(p + cbytes);
            x.ml = (float2 *)(p + cbytes + rows * (size_t)hd * sizeof(float));
        }
    }
    if (maxs > 1 && mode == AD_KERNEL) {
        char *p = (char *)cu_scratch(cb, CU_SCRATCH_ATT, need);
        if (!p)
            return 1; /* out of memory: latched */
        x.part = (float *)p;
        x.ml = (float2 *)(p + rows * (size_t)hd * sizeof(float));
    }
    dim3 grid((unsigned)maxs, (unsigned)(a->n_kv_head * nsub), (unsigned)a->n_tok);
    /* CINFER_CUDA_REPEAT attn / merge (measurement): launched twice */
    for (int r = 0; r < 1 + ((cb->repeat & CU_REP_ATTN) != 0); r++) {
        if (hd == 64)
            f16 ? ad_launch<64, 1>(cb, x, hg, mode, grid) : ad_launch<64, 0>(cb, x, hg, mode, grid);
        else if (hd == 128)
            f16 ? ad_launch<128, 1>(cb, x, hg, mode, grid)
                : ad_launch<128, 0>(cb, x, hg, mode, grid);
        else
            ad_launch<256, 1>(cb, x, hg, mode, grid);
    }
    for (int r = 0; maxs > 1 && mode == AD_KERNEL && r < 1 + ((cb->repeat & CU_REP_MERGE) != 0);
         r++) {
        if (hd == 64)
            ad_merge<64>(cb, x, a->n_tok);
        else if (hd == 128)
            ad_merge<128>(cb, x, a->n_tok);
        else
            ad_merge<256>(cb, x, a->n_tok);
    }
    return 1;
}
