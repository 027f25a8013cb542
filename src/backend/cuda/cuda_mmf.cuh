/* cuda_mmf.cuh — what the skinny tensor-core matmul's two files share (internal to the CUDA
 * backend): the kernel body sg_body and its arguments (cuda_mmf.cu describes the kernel),
 * the host helpers that pick and fill a launch. cuda_mmf.cu launches the plain and fused
 * projections (k_sg), cuda_mmf_lk.cu the ones with adapters folded in (k_sgl, k_sglp,
 * k_sglh; cuda_lora_mm.cuh). */
#ifndef CINFER_CUDA_MMF_CUH
#define CINFER_CUDA_MMF_CUH

#include "backend/cuda/cuda_int.cuh"
#include "backend/cuda/cuda_lora_mm.cuh"

enum {
    SG_ROPE = 3, /* kernel MODE beyond enum be_mm_mode: PLAIN q/k/v with rope + K/V store */
    SG_NT = 16, /* x rows per block (two n8 mma tiles) */
    SG_U = 4,   /* chunks of 32 in flight per warp (GLU: 2, it reads two weights) */
};

/* chain (only outside the precise mode): SG_CHAIN_OUT, the ADD gathers its tile sums of
 * squares and its output times m->next_norm (cb->ss_buf, cb->xg_buf); SG_CHAIN_IN, the
 * projection takes those as its normed x. */
enum { SG_CHAIN_NONE, SG_CHAIN_OUT, SG_CHAIN_IN };

/* Warps per block of a projection (cuda_mmf.cu): from K, its 16-row tiles, the kind (a
 * be_mm_mode or SG_ROPE), CINFER_CUDA_SG_WAVE, the SMs and the precise mode, never from the
 * rows of x. */
int cu_sg_warps(int K, int tiles, int kind, int wave, int n_sm, int precise);

static __device__ __forceinline__ uint32_t pack2(float a, float b, int bf)
{
    if (bf) {
        __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
        return *(uint32_t *)&h;
    }
    __half2 h = __floats2half2_rn(a, b);
    return *(uint32_t *)&h;
}

static __device__ __forceinline__ float unpack_lo(uint32_t v, int bf)
{
    uint16_t h = (uint16_t)(v & 0xffff);
    return bf ? cu_bf16(h) : cu_f16(h);
}
static __device__ __forceinline__ float unpack_hi(uint32_t v, int bf)
{
    uint16_t h = (uint16_t)(v >> 16);
    return bf ? cu_bf16(h) : cu_f16(h);
}

template <int BF>
__device__ __forceinline__ void mma16816(float *c, uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1)
{
    if (BF)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

struct sg_args {
    const uint8_t *w[3]; /* weights (16-bit rows of K) */
    float *y[3];
    int tiles[4];        /* prefix sums of 16-row tiles per weight (tiles[n_w] = total) */
    int m[3];            /* rows of each weight */
    int n_w;
    const float *x;
    int n, K, ny;        /* ny = x tiles */
    /* SG_ROPE: rope of q (w 0) and k (w 1), K and V (w 1, 2) stored at slots (be_rope_kv) */
    const int32_t *pos, *slots;
    const float *inv_freq;
    float mscale;
    int hd, rot, neox, kvd, kv_dtype;
    void *k_cache, *v_cache;
    /* chained norm (be_mm.chain): an ADD writes the sum of squares of each 16-row tile of
     * its output rows to ss_out[col * (M / 16) + tile] and its output times the next norm's
     * weights (gnext) to xg_out; a kernel with NI reads that as its x and the sums (ss_in,
     * K / 16 per x row), and scales its accumulators by each row's 1/rms */
    float *ss_out, *xg_out;
    const float *ss_in, *gnext;
    float eps;
};

/* act(g) * u with the operation order of the unfused act_mul (cuda_ops.cu k_ew). */
__device__ __forceinline__ float sg_glu(float g, float u, int act)
{
    if (act == BE_ACT_SILU)
        return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
    float in = __fmul_rn(0.7978845608028654f,
                         __fadd_rn(g, __fmul_rn(__fmul_rn(__fmul_rn(0.044715f, g), g), g)));
    return __fmul_rn(__fmul_rn(__fmul_rn(0.5f, g), __fadd_rn(1.0f, tanhf(in))), u);
}

/* NI: rsh[cl] = 1 / sqrt(ss / K + eps) of x row col0 + cl, ss = the producer's K / 16 tile
 * sums of that row (lane i adds tiles i, i + 32, ... in order, then the warp butterfly: a
 * fixed order that depends only on K); warp w reduces rows w, w + W, ... of the block's x
 * tile that exist (cl < n - col0). */
template <int NS, int W>
__device__ __forceinline__ void sg_norm_r(const sg_args &a, int col0, int warp, int lane,
                                          float *rsh)
{
    const int T = a.K / 16;
    for (int cl = warp; cl < NS * 8 && col0 + cl < a.n; cl += W) {
        const float *p = a.ss_in + (size_t)(col0 + cl) * T;
        float ss = 0.0f;
        for (int i = lane; i < T; i += 32)
            ss = __fadd_rn(ss, p[i]);
        ss = cu_warp_sum(ss);
        if (lane == 0)
            rsh[cl] = 1.0f / sqrtf(ss / (float)a.K + a.eps);
    }
}

/* A tile block of a folded projection (LK > 0) has SG_WARPS warps and an extra one that
 * takes no chunks (it gathers t while the others stream), except with 32 warps and in the
 * 8-warp GLU of LK 1 and 2 (folds 1-4, fold 6's producers): there the extra warp (and its
 * registers: 70 where k_sg's GLU has 64) made the kernel 3 blocks an SM where k_sg's 4 hold
 * the whole gate/up grid of l1b/l8b in one wave (512 tiles on 132 SMs): 36.8 against 26.6 us
 * on the H100 (ncu, session 11, fold 4). Its last warp gathers after its chunks instead
 * (LK 1: polling the shrink's counter). */
static __host__ __device__ constexpr bool sg_lk_xw(int lk, int mode, int warps)
{
    return warps < 32 && !((lk == 1 || lk == 2 || lk >= 4) && mode == BE_MM_GLU && warps == 8);
}
static __host__ __device__ constexpr int sg_lk_threads(int lk, int mode, int warps)
{
    return (warps + (sg_lk_xw(lk, mode, warps) ? 1 : 0)) * 32;
}

/* MODE: BE_MM_PLAIN / BE_MM_GLU / BE_MM_ADD / SG_ROPE. NS: n8 tiles per block (1 or 2). P:
 * precise (x split into hi + lo 16-bit parts, two mmas). SG_ROPE: a q or k tile inside the
 * rotated part of a head holds 8 rope pairs (mma rows g and g + 8 are the pair's two rows),
 * so each lane rotates its own accumulators, with rope_pair's arithmetic (cuda_ops.cu). NI:
 * x is the producer's x * gamma (sg_args.xg_out) and the accumulators are scaled by
 * r = 1 / sqrt(ss / K + eps) of their row before the epilogue: rmsnorm(x) * gamma with the
 * row's scalar r taken out of the dot product; ss = the producer's tile sums added in a
 * fixed order (sg_norm_r) that depends only on K. LK: 0 none, 1 the folded lora's tiles
 * (k_sgl), 2 fold 4's (k_sglp: x read before the PDL wait, which comes after the loop), 3
 * fold 6's hosted call (k_sglh: the wait at the start, t gathered without counters), 4 fold
 * 8's (k_sgl8: the wait at the start, then the first L->S8 blocks add their slice of t to
 * the call's accumulators, gathered after the loop; cuda_lora_mm.cuh level 8), 5 fold 8's
 * with its slices in leading blocks of their own (k_sgl8 LEAD: the tiles only gather). */
template <int BF, int MODE, int NS, int P, int SG_WARPS, int NI, int LK>
__device__ __forceinline__ void sg_body(const struct sg_args &a, int act, const struct cu_lkm *L,
                                        struct lkm_smem *lsm, const unsigned bid)
{
    constexpr int NA = MODE == BE_MM_GLU ? 2 : 1; /* accumulators (gate, up) */
    /* chunks in flight: GLU reads two weights, so half as many (two blocks fit an SM) */
    constexpr int U = MODE == BE_MM_GLU ? SG_U / 2 : SG_U;
    __shared__ float red[SG_WARPS - 1][NA * NS * 4][32];
    __shared__ float rsh[NS * 8]; /* NI: 1/rms of the block's x rows */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
    const int tile = bid / a.ny, xt = bid % a.ny;
    /* which weight (no dynamic indexing of the parameter arrays: it would go to the stack) */
    const int wi = tile >= a.tiles[1] ? (tile >= a.tiles[2] ? 2 : 1) : 0;
    const int t0 = wi == 0 ? 0 : wi == 1 ? a.tiles[1] : a.tiles[2];
    const int row0 = (tile - t0) * 16, M = wi == 0 ? a.m[0] : wi == 1 ? a.m[1] : a.m[2];
    const int K = a.K, col0 = xt * NS * 8;
    const uint8_t *W = wi == 0 ? a.w[0] : wi == 1 ? a.w[1] : a.w[2];
    const uint8_t *W2 = MODE == BE_MM_GLU ? a.w[1] : W;
    const size_t rb = (size_t)K * 2;
    int ra = row0 + g, rz = row0 + g + 8, pj = -1; /* weight rows of mma rows g, g + 8 */
    if (MODE == SG_ROPE && wi < 2) {
        const int base = row0 - row0 % a.hd, k16 = (row0 % a.hd) / 16;
        if (k16 * 16 < a.rot) { /* pair pj: rows (pj, pj + rot/2) or (2 pj, 2 pj + 1) */
            pj = 8 * k16 + g;
            ra = base + (a.neox ? pj : 2 * pj);
            rz = a.neox ? ra + a.rot / 2 : ra + 1;
        }
    }
    const uint4 *wr0 = (const uint4 *)(W + (size_t)ra * rb) + tq;
    const uint4 *wr1 = (const uint4 *)(W + (size_t)rz * rb) + tq;
    const uint4 *ur0 = (const uint4 *)(W2 + (size_t)(row0 + g) * rb) + tq;
    const uint4 *ur1 = (const uint4 *)(W2 + (size_t)(row0 + g + 8) * rb) + tq;
    const float4 *xr[NS];
    bool xok[NS];
#pragma unroll
    for (int s = 0; s < NS; s++) {
        int col = col0 + s * 8 + g;
        xok[s] = col < a.n; /* rows past n load row n-1 and use zeros */
        xr[s] = (const float4 *)(a.x + (size_t)(xok[s] ? col : a.n - 1) * K) + 2 * tq;
    }
    float acc[NA][NS][4];
#pragma unroll
    for (int q = 0; q < NA; q++)
#pragma unroll
        for (int s = 0; s < NS; s++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                acc[q][s][i] = 0.0f;

    int lp = -1, lq = -1, lqb = 0; /* LK (k_sgl): the lora projections of this tile's weight
                                    * (GLU: gate lp, up lq, its slab from rank lqb) */
    if constexpr (LK) {
        auto rowf = [&](int r) { /* output r of the tile: mma row r (g, g + 8) */
            if (MODE == SG_ROPE && wi < 2) {
                const int base = row0 - row0 % a.hd, k16 = (row0 % a.hd) / 16;
                if (k16 * 16 < a.rot) {
                    const int p2 = 8 * k16 + (r & 7), r0 = base + (a.neox ? p2 : 2 * p2);
                    return r < 8 ? r0 : a.neox ? r0 + a.rot / 2 : r0 + 1;
                }
            }
            return row0 + r;
        };
        if (MODE == BE_MM_GLU) {
            lp = L->pw[0], lq = L->pw[1], lqb = lp >= 0 ? L->rst[lp] : 0;
            lkm_load_b(*L, lp, rowf, M, 0, lsm);
            lkm_load_b(*L, lq, rowf, M, lqb, lsm);
        } else {
            lp = wi == 0 ? L->pw[0] : wi == 1 ? L->pw[1] : L->pw[2];
            lkm_load_b(*L, lp, rowf, M, 0, lsm);
        }
    }
    /* LK == 2 (L->pre, fold 4): x is read before the wait (it is the output of a kernel that
     * finished before this one launched: cuda_lora_mm.cuh), the wait (for the shrink) comes
     * after the loop */
    if constexpr (LK == 4) /* fold 8: the slice's rows of a into L2 meanwhile */
        if ((int)bid < L->S8)
            lk8_prefetch(*L, a.K, (int)bid);
    if constexpr (LK != 2)
        cu_pdl_wait();
    cu_pdl_trigger(); /* the next kernel may launch; it waits for this one to finish */
    if constexpr (LK == 4) /* fold 8: this block's slice of t (x is complete now) */
        if ((int)bid < L->S8)
            lk8_slice(*L, a.x, a.K, (int)bid);
    const int nc = K / 32;
    int c = warp;
    if constexpr (LK) /* the extra warp takes no chunks */
        c = warp >= SG_WARPS ? nc : warp;
    static_assert(!NI || P == 0, "no normed x in the precise mode");
    /* one chunk: A = rows g, g+8 at 8tq..8tq+7 (uint4 each); B = x rows at the same k */
#define SG_CHUNK(AW0, AW1, AU0, AU1, XB)                                                       \
    do {                                                                                       \
        _Pragma("unroll") for (int s = 0; s < NS; s++)                                         \
        {                                                                                      \
            uint32_t bh[4], bl[4];                                                             \
            float xv[8] = {XB[s][0].x, XB[s][0].y, XB[s][0].z, XB[s][0].w,                     \
                           XB[s][1].x, XB[s][1].y, XB[s][1].z, XB[s][1].w};                    \
            _Pragma("unroll") for (int j = 0; j < 4; j++)                                      \
            {                                                                                  \
                bh[j] = xok[s] ? pack2(xv[2 * j], xv[2 * j + 1], BF) : 0u;                     \
                if (P)                                                                         \
                    bl[j] = pack2(xv[2 * j] - unpack_lo(bh[j], BF),                            \
                                  xv[2 * j + 1] - unpack_hi(bh[j], BF), BF);                   \
            }                                                                                  \
            mma16816<BF>(acc[0][s], AW0.x, AW1.x, AW0.y, AW1.y, bh[0], bh[1]);                 \
            mma16816<BF>(acc[0][s], AW0.z, AW1.z, AW0.w, AW1.w, bh[2], bh[3]);                 \
            if (P) {                                                                           \
                mma16816<BF>(acc[0][s], AW0.x, AW1.x, AW0.y, AW1.y, bl[0], bl[1]);             \
                mma16816<BF>(acc[0][s], AW0.z, AW1.z, AW0.w, AW1.w, bl[2], bl[3]);             \
            }                                                                                  \
            if (MODE == BE_MM_GLU) {                                                           \
                mma16816<BF>(acc[NA - 1][s], AU0.x, AU1.x, AU0.y, AU1.y, bh[0], bh[1]);        \
                mma16816<BF>(acc[NA - 1][s], AU0.z, AU1.z, AU0.w, AU1.w, bh[2], bh[3]);        \
                if (P) {                                                                       \
                    mma16816<BF>(acc[NA - 1][s], AU0.x, AU1.x, AU0.y, AU1.y, bl[0], bl[1]);    \
                    mma16816<BF>(acc[NA - 1][s], AU0.z, AU1.z, AU0.w, AU1.w, bl[2], bl[3]);    \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    } while (0)

    for (; c + (U - 1) * SG_WARPS < nc; c += U * SG_WARPS) {
        uint4 aw0[U], aw1[U], au0[U], au1[U];
        float4 xb[U][NS][2];
#pragma unroll
        for (int u = 0; u < U; u++) {
            int cc = (c + u * SG_WARPS) * 4; /* uint4 index of the chunk in a row */
            aw0[u] = __ldg(wr0 + cc);
            aw1[u] = __ldg(wr1 + cc);
            if (MODE == BE_MM_GLU) {
                au0[u] = __ldg(ur0 + cc);
                au1[u] = __ldg(ur1 + cc);
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int s = 0; s < NS; s++) {
                int cx = (c + u * SG_WARPS) * 8; /* float4 index */
                xb[u][s][0] = __ldg(xr[s] + cx);
                xb[u][s][1] = __ldg(xr[s] + cx + 1);
            }
#pragma unroll
        for (int u = 0; u < U; u++)
            SG_CHUNK(aw0[u], aw1[u], au0[u], au1[u], xb[u]);
    }
    for (; c < nc; c += SG_WARPS) {
        int cc = c * 4, cx = c * 8;
        uint4 aw0 = __ldg(wr0 + cc), aw1 = __ldg(wr1 + cc), au0 = aw0, au1 = aw1;
        if (MODE == BE_MM_GLU)
            au0 = __ldg(ur0 + cc), au1 = __ldg(ur1 + cc);
        float4 xb[NS][2];
#pragma unroll
        for (int s = 0; s < NS; s++) {
            xb[s][0] = __ldg(xr[s] + cx);
            xb[s][1] = __ldg(xr[s] + cx + 1);
        }
        SG_CHUNK(aw0, aw1, au0, au1, xb);
    }
#undef SG_CHUNK
    if constexpr (LK == 2) /* fold 4: the shrink's partials (and y, for ADD) from here on */
        cu_pdl_wait();
    if constexpr (NI) /* the rows' 1/rms, read by warp 0 after the barrier below */
        sg_norm_r<NS, SG_WARPS>(a, col0, warp, lane, rsh);
    if constexpr (LK) /* t of the block's x rows (the extra warp, or the last one) */
        if (warp == (sg_lk_xw(LK, MODE, SG_WARPS) ? SG_WARPS : SG_WARPS - 1)) {
            if constexpr (LK >= 4)
                lk8_gather(*L, lp, MODE == BE_MM_GLU ? lq : -1, col0,
                           a.n - col0 < NS * 8 ? a.n - col0 : NS * 8, lsm);
            else if constexpr (LK >= 2)
                lkm_gather_pre(*L, lp, MODE == BE_MM_GLU ? lq : -1, col0,
                               a.n - col0 < NS * 8 ? a.n - col0 : NS * 8, lsm);
            else
                lkm_gather(*L, lp, MODE == BE_MM_GLU ? lq : -1, col0,
                           a.n - col0 < NS * 8 ? a.n - col0 : NS * 8, lsm);
        }
    /* partial sums of warps 1.. to shared memory; warp 0 adds them in warp order */
    if (warp > 0 && (!LK || warp < SG_WARPS)) {
#pragma unroll
        for (int q = 0; q < NA; q++)
#pragma unroll
            for (int s = 0; s < NS; s++)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    red[warp - 1][(q * NS + s) * 4 + i][lane] = acc[q][s][i];
    }
    __syncthreads();
    if (warp > 0)
        return;
#pragma unroll
    for (int w = 0; w < SG_WARPS - 1; w++)
#pragma unroll
        for (int q = 0; q < NA; q++)
#pragma unroll
            for (int s = 0; s < NS; s++)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    acc[q][s][i] += red[w][(q * NS + s) * 4 + i][lane];
    if constexpr (NI) { /* accumulator i is x row col0 + s * 8 + 2 tq + (i & 1) */
#pragma unroll
        for (int s = 0; s < NS; s++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int cl = s * 8 + 2 * tq + (i & 1);
                if (col0 + cl < a.n)
#pragma unroll
                    for (int q = 0; q < NA; q++)
                        acc[q][s][i] = __fmul_rn(acc[q][s][i], rsh[cl]);
            }
    }
    float *Y = wi == 0 ? a.y[0] : wi == 1 ? a.y[1] : a.y[2];
    /* v plus the delta of projection p for x row cc of the block, tile row r (fold 8: times
     * the row's 1 / rms when x is chained) */
    auto ladd = [&](int p, int sl, int sb, int cc, int r, float v) {
        if constexpr (LK >= 4)
            return lk8_add(*L, p, lsm, sl, sb, cc, r, v, NI ? rsh[cc] : 1.0f);
        else
            return lkm_add(*L, p, lsm, sl, sb, cc, r, v);
    };
    if constexpr (MODE == SG_ROPE) {
#pragma unroll
        for (int s = 0; s < NS; s++)
#pragma unroll
            for (int c2 = 0; c2 < 2; c2++) {
                const int col = col0 + s * 8 + 2 * tq + c2;
                if (col >= a.n)
                    continue;
                float v0 = acc[0][s][c2], v1 = acc[0][s][2 + c2];
                if constexpr (LK) { /* + the deltas of rows ra, rz (slab rows g, g + 8) */
                    v0 = ladd(lp, 0, 0, s * 8 + 2 * tq + c2, g, v0);
                    v1 = ladd(lp, 0, 0, s * 8 + 2 * tq + c2, g + 8, v1);
                }
                if (pj >= 0) {
                    float ang = __fmul_rn((float)a.pos[col], a.inv_freq[pj]);
                    float cs = __fmul_rn(cosf(ang), a.mscale), sn = __fmul_rn(sinf(ang), a.mscale);
                    float r0 = __fsub_rn(__fmul_rn(v0, cs), __fmul_rn(v1, sn));
                    v1 = __fadd_rn(__fmul_rn(v1, cs), __fmul_rn(v0, sn));
                    v0 = r0;
                }
                Y[(size_t)col * M + ra] = v0;
                Y[(size_t)col * M + rz] = v1;
                if (wi > 0) { /* K or V row of this token into the cache */
                    void *cache = wi == 1 ? a.k_cache : a.v_cache;
                    const size_t off = (size_t)a.slots[col] * a.kvd;
                    if (a.kv_dtype == DT_F16) {
                        ((__half *)cache)[off + ra] = __float2half_rn(v0);
                        ((__half *)cache)[off + rz] = __float2half_rn(v1);
                    } else {
                        ((float *)cache)[off + ra] = v0;
                        ((float *)cache)[off + rz] = v1;
                    }
                }
            }
    } else {
        float yv[NS][4]; /* the values stored (ADD: for the tile sums of squares) */
#pragma unroll
        for (int s = 0; s < NS; s++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int col = col0 + s * 8 + 2 * tq + (i & 1), row = row0 + g + (i >> 1) * 8;
                yv[s][i] = 0.0f;
                if (col >= a.n)
                    continue;
                float *yp = Y + (size_t)col * M + row;
                if (MODE == BE_MM_GLU) {
                    float gv = acc[0][s][i], uv = acc[NA - 1][s][i];
                    if constexpr (LK) { /* + the deltas of gate and up, before the activation */
                        const int cc = s * 8 + 2 * tq + (i & 1), rr = g + (i >> 1) * 8;
                        gv = ladd(lp, 0, 0, cc, rr, gv);
                        uv = ladd(lq, 1, lqb, cc, rr, uv);
                    }
                    *yp = sg_glu(gv, uv, act);
                }
                else if (MODE == BE_MM_ADD) {
                    float v = __fadd_rn(*yp, acc[0][s][i]);
                    if constexpr (LK) /* + the adapters' delta, after the add (as unfolded) */
                        v = ladd(lp, 0, 0, s * 8 + 2 * tq + (i & 1), g + (i >> 1) * 8, v);
                    *yp = yv[s][i] = v;
                    if (a.xg_out) /* the next projection's x: this output times its norm */
                        a.xg_out[(size_t)col * M + row] = __fmul_rn(yv[s][i], a.gnext[row]);
                }
                else if constexpr (LK)
                    *yp = ladd(lp, 0, 0, s * 8 + 2 * tq + (i & 1), g + (i >> 1) * 8,
                               acc[0][s][i]);
                else
                    *yp = acc[0][s][i];
            }
        if (MODE == BE_MM_ADD && a.ss_out) { /* rows g and g + 8, then over g (lanes ^4..16) */
#pragma unroll
            for (int s = 0; s < NS; s++)
#pragma unroll
                for (int c2 = 0; c2 < 2; c2++) {
                    const int col = col0 + s * 8 + 2 * tq + c2;
                    float p = __fadd_rn(__fmul_rn(yv[s][c2], yv[s][c2]),
                                        __fmul_rn(yv[s][2 + c2], yv[s][2 + c2]));
#pragma unroll
                    for (int o = 4; o < 32; o <<= 1)
                        p = __fadd_rn(p, __shfl_xor_sync(0xffffffffu, p, o));
                    if (g == 0 && col < a.n)
                        a.ss_out[(size_t)col * (M / 16) + row0 / 16] = p;
                }
        }
    }
}

/* 1 when the skinny kernel takes this projection (a norm: the caller decides). */
int cu_sg_ok(const struct cu_be *cb, const struct be_mm *m);

/* The launch arguments of m (chain: SG_CHAIN_*), its n8 tiles per block (ns) and kernel
 * mode (a be_mm_mode or SG_ROPE). */
void cu_sg_fill(struct cu_be *cb, const struct be_mm *m, int chain, struct sg_args &a, int &ns,
                int &mode);

#endif
