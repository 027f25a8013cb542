/* cuda_mmf.cu — skinny tensor-core matmuls for 16-bit weights (decode steps), fused
 * projections (be_mm: q/k/v in one pass, gate/up with the activation, the residual add).
 *
 * For steps of up to SG_MAX_N rows with BF16/F16 weights, y = x W^T runs on mma.sync
 * m16n8k16 (f32 accumulate): W is operand A (16 weight rows per tile, read straight from
 * global memory with 16-byte loads), x is operand B (rows of x rounded to the weight's
 * 16-bit type as they are loaded). Within each 32-element chunk of K a lane loads 8
 * consecutive elements of W and of x; the k order inside the mma is a fixed permutation of
 * the chunk, the same for A and B, so the dot product is unchanged. A block of W warps
 * (8, 16 or 32: sg_warps) owns one 16-row tile of W and one tile of up to SG_NT rows
 * of x; warp w takes the chunks w, w + W, ... and the partial sums are added in warp order. A
 * y element's arithmetic therefore depends only on K (never on n or on the other rows): steps
 * of 1..SG_MAX_N rows are batch invariant bit for bit, and so are longer steps, which take
 * this kernel up to cu_be.inv_rows rows (CINFER_CUDA_INVARIANT_ROWS: a speculative verify
 * step or a short prompt chunk gets a decode step's bits; each 16-row x tile re-reads its
 * weight tile, mostly from L2). Weight tiles are walked with the x
 * tiles fastest, so the blocks that read the same weights run together (L2 hits).
 *
 * Chained norm (be_mm.chain): a residual ADD writes the sum of squares of each 16-row tile
 * of its output rows (its epilogue holds them) and its output times the next norm's weights
 * (be_mm.next_norm); the q/k/v or gate/up projection that norms that output next loads the
 * latter as its x, reduces the tile sums in a fixed order to each row's 1/rms and scales its
 * accumulators by it, so the separate rmsnorm kernel goes and the inner loop is the plain
 * one. cq_matmul_fused (cuda_graph.cu) decides the chain in call order (cu_mm_chain_ok).
 * Measured on the H200 (one call, A/B with CINFER_CUDA_FUSE_NORM=0, decode device step):
 * l1b 1039 -> 1027 µs, l8b 4132 -> 4106 µs; in ncu (two calls) the chained gate/up costs
 * what the plain one does (63.0 against 62.8 µs on l8b) and its 3.5 µs rmsnorm is gone. The
 * earlier form (x normed as loaded: (x * r) * gamma, r reduced before the loop) was slower
 * on l8b than no chain, as were staging the normed x in shared memory and a per-warp
 * reduction with an L2 prefetch of the first weights.
 *
 * Measured and removed: a bulk-copy pipeline (one more warp a block streaming the tile's
 * rows into a shared-memory ring with cp.async.bulk and mbarriers, the same chunk order):
 * bit-identical, but decode 848 against 1041 tok/s on l1b and 188 against 227 on l8b
 * (H200, one call). bench/gpu/gemv_bench.cu keeps the layout experiments.
 *
 * Measured on the H200 and dropped: splitting K over blocks (last block reduces), loading
 * the first weights before the PDL wait (+ L2 prefetch): each was slower on l8b decode and
 * no faster on l1b.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_int.cuh"
#include "backend/cuda/cuda_lora_mm.cuh"

enum {
    SG_ROPE = 3, /* kernel MODE beyond enum be_mm_mode: PLAIN q/k/v with rope + K/V store */
    SG_NT = 16, /* x rows per block (two n8 mma tiles) */
    SG_U = 4,   /* chunks of 32 in flight per warp (GLU: 2, it reads two weights) */
};

/* Warps per block (they split K), from K, M and the device only, never from the rows of x
 * (batch invariance):
 * - 32 for a residual ADD with no more 16-row tiles than SMs and a long K (each warp still
 *   takes >= 8 chunks): the SM then has 32 warps' loads in flight, not 16 (H200, the l1b down
 *   projection, 128 tiles, K = 8192: 17.0 -> 13.9 µs in ncu; decode 964 -> 1031 tok/s in
 *   one call);
 * - 8 when 16 would leave a warp fewer than 4 chunks, or when the projection has more tiles
 *   than SG_WAVE_TILES (two 16-warp blocks on each of an H100/H200's 132 SMs): 8-warp blocks
 *   (three or four an SM) then fill the waves better (H200, device time of a decode step
 *   alone: l1b 1040 -> 1013 µs, l8b 4296 -> 4230 µs, most of it gate/up; the classifier
 *   gains ~8 µs on l1b);
 * - else 16.
 * wave: CINFER_CUDA_SG_WAVE (measurements): 0 K only, 1 every projection (default), 2
 * gate/up only, 3 gate/up and q/k/v. */
enum { SG_WAVE_TILES = 264 };
static int g_wave_tiles = SG_WAVE_TILES; /* CINFER_CUDA_SG_WAVE_TILES (measurements) */
static int g_w32 = 1;                    /* CINFER_CUDA_SG_W32=0: never 32 warps (measurements) */
static int sg_warps(int K, int tiles, int kind, int wave, int n_sm, int precise)
{
    if (K / 32 < 64)
        return 8;
    /* a residual ADD with fewer tiles than SMs and a long K (the 1B down projection: 128
     * tiles, K = 8192): 32 warps, so each SM has as many loads in flight as the many-tile
     * projections give it (each warp still takes >= 8 chunks) */
    if (g_w32 && kind == BE_MM_ADD && !precise && tiles <= n_sm && K / 32 >= 32 * 8)
        return 32;
    const int on = wave == 1 || (wave >= 2 && kind == BE_MM_GLU) || (wave == 3 && kind == SG_ROPE);
    return on && tiles > g_wave_tiles ? 8 : 16;
}

void cu_mmf_init(void)
{
    const char *wt = getenv("CINFER_CUDA_SG_WAVE_TILES");
    g_wave_tiles = wt && atoi(wt) > 0 ? atoi(wt) : SG_WAVE_TILES;
    const char *w32 = getenv("CINFER_CUDA_SG_W32");
    g_w32 = !(w32 && !strcmp(w32, "0"));
}

__device__ __forceinline__ uint32_t pack2(float a, float b, int bf)
{
    if (bf) {
        __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
        return *(uint32_t *)&h;
    }
    __half2 h = __floats2half2_rn(a, b);
    return *(uint32_t *)&h;
}

__device__ __forceinline__ float unpack_lo(uint32_t v, int bf)
{
    uint16_t h = (uint16_t)(v & 0xffff);
    return bf ? cu_bf16(h) : cu_f16(h);
}
__device__ __forceinline__ float unpack_hi(uint32_t v, int bf)
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

/* MODE: BE_MM_PLAIN / BE_MM_GLU / BE_MM_ADD / SG_ROPE. NS: n8 tiles per block (1 or 2). P:
 * precise (x split into hi + lo 16-bit parts, two mmas). SG_ROPE: a q or k tile inside the
 * rotated part of a head holds 8 rope pairs (mma rows g and g + 8 are the pair's two rows),
 * so each lane rotates its own accumulators, with rope_pair's arithmetic (cuda_ops.cu). NI:
 * x is the producer's x * gamma (sg_args.xg_out) and the accumulators are scaled by
 * r = 1 / sqrt(ss / K + eps) of their row before the epilogue: rmsnorm(x) * gamma with the
 * row's scalar r taken out of the dot product; ss = the producer's tile sums added in a
 * fixed order (sg_norm_r) that depends only on K. LK: 0 none, 1 the folded lora's tiles
 * (k_sgl), 2 fold 4's (k_sglp: x read before the PDL wait, which comes after the loop), 3
 * fold 6's hosted call (k_sglh: the wait at the start, t gathered without counters). */
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
    if constexpr (LK != 2)
        cu_pdl_wait();
    cu_pdl_trigger(); /* the next kernel may launch; it waits for this one to finish */
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
        if (warp == (SG_WARPS < 32 ? SG_WARPS : SG_WARPS - 1)) {
            if constexpr (LK >= 2)
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
                    v0 = lkm_add(*L, lp, lsm, 0, 0, s * 8 + 2 * tq + c2, g, v0);
                    v1 = lkm_add(*L, lp, lsm, 0, 0, s * 8 + 2 * tq + c2, g + 8, v1);
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
                        gv = lkm_add(*L, lp, lsm, 0, 0, cc, rr, gv);
                        uv = lkm_add(*L, lq, lsm, 1, lqb, cc, rr, uv);
                    }
                    *yp = sg_glu(gv, uv, act);
                }
                else if (MODE == BE_MM_ADD) {
                    float v = __fadd_rn(*yp, acc[0][s][i]);
                    if constexpr (LK) /* + the adapters' delta, after the add (as unfolded) */
                        v = lkm_add(*L, lp, lsm, 0, 0, s * 8 + 2 * tq + (i & 1), g + (i >> 1) * 8, v);
                    *yp = yv[s][i] = v;
                    if (a.xg_out) /* the next projection's x: this output times its norm */
                        a.xg_out[(size_t)col * M + row] = __fmul_rn(yv[s][i], a.gnext[row]);
                }
                else if constexpr (LK)
                    *yp = lkm_add(*L, lp, lsm, 0, 0, s * 8 + 2 * tq + (i & 1), g + (i >> 1) * 8,
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

template <int BF, int MODE, int NS, int P, int SG_WARPS, int NI>
__global__ void __launch_bounds__(SG_WARPS * 32)
    k_sg(const __grid_constant__ struct sg_args a, int act)
{
    sg_body<BF, MODE, NS, P, SG_WARPS, NI, 0>(a, act, nullptr, nullptr, blockIdx.x);
}

/* A PLAIN, GLU or ADD projection with its adapters' deltas folded in (cuda_lora_mm.cuh):
 * the first L.S blocks run shrink items, the rest are k_sg's tiles plus one warp (8 or 16
 * warps) that gathers t. */
template <int BF, int MODE, int NS, int SG_WARPS, int NI>
__global__ void __launch_bounds__((SG_WARPS + (SG_WARPS < 32)) * 32)
    k_sgl(const __grid_constant__ struct sg_args a, const __grid_constant__ struct cu_lkm L,
          int act)
{
    if ((int)blockIdx.x < L.S) {
        lkm_shrink_block(L, (int)blockIdx.x);
        return;
    }
    __shared__ struct lkm_smem lsm;
    sg_body<BF, MODE, NS, 0, SG_WARPS, NI, 1>(a, act, &L, &lsm, blockIdx.x - (unsigned)L.S);
}

/* Fold 4 (L.pre): k_sgl's tiles without shrink blocks; x read before the PDL wait, which
 * comes after the main loop (the shrink was the launch just before: cu_lk_shrink_pre). */
template <int BF, int MODE, int NS, int SG_WARPS, int NI>
__global__ void __launch_bounds__((SG_WARPS + (SG_WARPS < 32)) * 32)
    k_sglp(const __grid_constant__ struct sg_args a, const __grid_constant__ struct cu_lkm L,
           int act)
{
    __shared__ struct lkm_smem lsm;
    sg_body<BF, MODE, NS, 0, SG_WARPS, NI, 2>(a, act, &L, &lsm, blockIdx.x);
}

/* Fold 6: the kernels with host blocks: the producers (ADD: o, down; GLU: gate/up) in the
 * block shapes where the host code does not make the kernel spill (ptxas: GLU with 16 warps
 * and ADD with 8 did; the l1b/l8b gate/up has 8 warps, o 16, down 32). */
static __host__ __device__ constexpr bool sglh_hosts(int mode, int warps)
{
    return (mode == BE_MM_ADD && warps >= 16) || (mode == BE_MM_GLU && warps == 8);
}

/* Fold 6 (cuda_lora_mm.cuh level 6): fold 4's tiles (LK 2) or a hosted call's (LK 3: the
 * wait at the start), then H.S host blocks running the next call's shrink items once every
 * tile block is finished (H.nsv == 0: none). */
template <int BF, int MODE, int NS, int SG_WARPS, int NI, int LK>
__global__ void __launch_bounds__((SG_WARPS + (SG_WARPS < 32)) * 32)
    k_sglh(const __grid_constant__ struct sg_args a, const __grid_constant__ struct cu_lkm L,
           const __grid_constant__ struct cu_lkh H, int act)
{
    if constexpr (sglh_hosts(MODE, SG_WARPS)) /* (H.S == 0 else) */
        if ((int)blockIdx.x >= H.tiles) {
            lkh_host_block(H, (int)blockIdx.x - H.tiles);
            return;
        }
    __shared__ struct lkm_smem lsm;
    sg_body<BF, MODE, NS, 0, SG_WARPS, NI, LK>(a, act, &L, &lsm, blockIdx.x);
    lkh_tile_done(H);
}

/* 1 when the skinny kernel takes this projection. */
static int sg_ok(const struct cu_be *cb, const struct be_mm *m)
{
    if (m->n <= 0 || m->n > cu_sg_lim(cb) || m->n_w < 1 || m->n_w > 3 || ((uintptr_t)m->x & 15))
        return 0;
    int dt = m->w[0]->dtype;
    if (dt != DT_BF16 && dt != DT_F16)
        return 0;
    int64_t K = m->w[0]->ne[0];
    if (K % 32 || K > (1 << 20))
        return 0;
    for (int i = 0; i < m->n_w; i++)
        if (m->w[i]->dtype != dt || m->w[i]->ne[0] != K || m->w[i]->ne[1] % 16 ||
            ((uintptr_t)m->w[i]->data & 15))
            return 0;
    if (m->mode == BE_MM_GLU && (m->n_w != 2 || m->w[1]->ne[1] != m->w[0]->ne[1]))
        return 0;
    if (m->mode == BE_MM_ADD && m->n_w != 1)
        return 0;
    if (m->rope) { /* q/k/v tiles must not straddle heads or the rotated part */
        const struct be_rope_kv *r = m->rope;
        if (!cb->fuse_rope || m->mode != BE_MM_PLAIN || m->n_w != 3 || r->n_tok != m->n || r->head_dim % 16 ||
            r->rot_dim % 16 || r->rot_dim > r->head_dim || r->rot_dim <= 0 ||
            m->w[0]->ne[1] != (int64_t)r->n_head * r->head_dim ||
            m->w[1]->ne[1] != (int64_t)r->n_kv_head * r->head_dim ||
            m->w[2]->ne[1] != m->w[1]->ne[1] ||
            (r->kv_dtype != DT_F16 && r->kv_dtype != DT_F32))
            return 0;
    }
    return 1; /* a norm: the caller decides (cu_matmul_fused) */
}

template <int BF, int MODE, int P, int W, int NI>
static void sg_launch_ni(struct cu_be *cb, const struct sg_args &a, int ns, int act)
{
    unsigned grid = (unsigned)a.tiles[a.n_w] * (unsigned)a.ny;
    if (ns == 1)
        cu_launch(cb, k_sg<BF, MODE, 1, P, W, NI>, dim3(grid), dim3(W * 32), 0, a, act);
    else
        cu_launch(cb, k_sg<BF, MODE, 2, P, W, NI>, dim3(grid), dim3(W * 32), 0, a, act);
}

/* NI kernels exist for the projections that norm x, outside the precise mode (cu_mm_chain_ok) */
template <int BF, int MODE, int P, int W>
static void sg_launch_w(struct cu_be *cb, const struct sg_args &a, int ns, int act)
{
    if constexpr (MODE != BE_MM_ADD && P == 0)
        if (a.ss_in) {
            sg_launch_ni<BF, MODE, P, W, 1>(cb, a, ns, act);
            return;
        }
    sg_launch_ni<BF, MODE, P, W, 0>(cb, a, ns, act);
}

template <int BF, int MODE, int P>
static void sg_launch(struct cu_be *cb, const struct sg_args &a, int ns, int act)
{
    /* CINFER_CUDA_SG_WARPS_QKV / _GLU = 8|16 (measurements): the warps of the q/k/v and
     * gate/up projections, for wave-count A/Bs (l8b q/k/v: 384 tiles = 1.45 waves of two
     * 16-warp blocks per SM; gate/up: 896 tiles = 3.4 waves) */
    const int wf = MODE == BE_MM_PLAIN || MODE == SG_ROPE ? cb->sg_warps_qkv
                   : MODE == BE_MM_GLU                    ? cb->sg_warps_glu
                                                          : 0;
    const int kind = MODE == SG_ROPE || (MODE == BE_MM_PLAIN && a.n_w > 1) ? SG_ROPE : MODE;
    const int w = wf ? wf : sg_warps(a.K, a.tiles[a.n_w], kind, cb->sg_wave, cb->n_sm, P);
    if constexpr (MODE == BE_MM_ADD && P == 0)
        if (w == 32) {
            sg_launch_w<BF, MODE, P, 32>(cb, a, ns, act);
            return;
        }
    if (w == 8)
        sg_launch_w<BF, MODE, P, 8>(cb, a, ns, act);
    else
        sg_launch_w<BF, MODE, P, 16>(cb, a, ns, act);
}

template <int BF, int P> static void sg_mode(struct cu_be *cb, const struct sg_args &a, int ns,
                                              int mode, int act)
{
    if (mode == SG_ROPE)
        sg_launch<BF, SG_ROPE, P>(cb, a, ns, act);
    else if (mode == BE_MM_GLU)
        sg_launch<BF, BE_MM_GLU, P>(cb, a, ns, act);
    else if (mode == BE_MM_ADD)
        sg_launch<BF, BE_MM_ADD, P>(cb, a, ns, act);
    else
        sg_launch<BF, BE_MM_PLAIN, P>(cb, a, ns, act);
}

/* chain (only outside the precise mode): SG_CHAIN_OUT, the ADD gathers its tile sums of
 * squares and its output times m->next_norm (cb->ss_buf, cb->xg_buf); SG_CHAIN_IN, the
 * projection takes those as its normed x. */
enum { SG_CHAIN_NONE, SG_CHAIN_OUT, SG_CHAIN_IN };
static void sg_fill(struct cu_be *cb, const struct be_mm *m, int chain, struct sg_args &a,
                    int &ns, int &mode)
{
    memset(&a, 0, sizeof a);
    a.eps = m->eps;
    if (chain == SG_CHAIN_OUT)
        a.ss_out = cb->ss_buf, a.xg_out = cb->xg_buf, a.gnext = m->next_norm;
    else if (chain == SG_CHAIN_IN)
        a.ss_in = cb->ss_buf;
    a.n_w = m->mode == BE_MM_GLU ? 2 : m->n_w;
    a.tiles[0] = 0;
    for (int i = 0; i < a.n_w; i++) {
        a.w[i] = (const uint8_t *)m->w[i]->data;
        a.y[i] = m->y[i];
        a.m[i] = (int)m->w[i]->ne[1];
        a.tiles[i + 1] = a.tiles[i] + a.m[i] / 16;
    }
    if (m->mode == BE_MM_GLU) { /* one output, both weights read per tile */
        a.n_w = 1;
        a.tiles[1] = a.m[0] / 16;
        a.w[1] = (const uint8_t *)m->w[1]->data;
    }
    a.x = chain == SG_CHAIN_IN ? cb->xg_buf : m->x;
    a.n = m->n;
    a.K = (int)m->w[0]->ne[0];
    ns = m->n <= 8 ? 1 : 2;
    a.ny = (m->n + ns * 8 - 1) / (ns * 8);
    mode = m->mode;
    if (m->rope) {
        const struct be_rope_kv *r = m->rope;
        mode = SG_ROPE;
        a.pos = r->pos, a.slots = r->slots, a.inv_freq = r->inv_freq, a.mscale = r->mscale;
        a.hd = r->head_dim, a.rot = r->rot_dim, a.neox = r->mode == BE_ROPE_NEOX;
        a.kvd = r->n_kv_head * r->head_dim, a.kv_dtype = r->kv_dtype;
        a.k_cache = r->k_cache, a.v_cache = r->v_cache;
    }
}

static void sg_run(struct cu_be *cb, const struct be_mm *m, int chain)
{
    struct sg_args a;
    int ns, mode;
    sg_fill(cb, m, chain, a, ns, mode);
    int bf = m->w[0]->dtype == DT_BF16, precise = cb->precise || cb->sg_precise;
    const int rep = m->mode == BE_MM_GLU                ? CU_REP_GLU
                    : m->mode == BE_MM_ADD              ? (a.K > a.m[0] ? CU_REP_DOWN : CU_REP_OUT)
                    : m->n_w == 1 && m->mode == BE_MM_PLAIN ? CU_REP_CLS
                                                          : CU_REP_QKV;
    for (int r = 0; r < 1 + ((cb->repeat & rep) != 0); r++) {
        if (bf && precise)
            sg_mode<1, 1>(cb, a, ns, mode, m->act);
        else if (bf)
            sg_mode<1, 0>(cb, a, ns, mode, m->act);
        else if (precise)
            sg_mode<0, 1>(cb, a, ns, mode, m->act);
        else
            sg_mode<0, 0>(cb, a, ns, mode, m->act);
        cu_after_launch(cb, "skinny matmul");
    }
}

/* ---- the folded lora (cuda_lora_mm.cuh) ---- */

template <int BF, int MODE, int W, int NI>
static void sgl_launch_w(struct cu_be *cb, const struct sg_args &a, const struct cu_lkm &L,
                         int act)
{
    const unsigned grid = (unsigned)L.S + (unsigned)a.tiles[a.n_w] * (unsigned)a.ny;
    if (L.pre == 1) /* fold 4 (L.S == 0) */
        cu_launch(cb, k_sglp<BF, MODE, 1, W, NI>, dim3(grid), dim3((W + (W < 32)) * 32), 0, a, L,
                  act);
    else
        cu_launch(cb, k_sgl<BF, MODE, 1, W, NI>, dim3(grid), dim3((W + (W < 32)) * 32), 0, a, L,
                  act);
}

/* The warps sg_launch gives a (the same, so the projection's bits do not change). */
static int sgl_warps(const struct cu_be *cb, const struct sg_args &a, int mode)
{
    const int wf = mode == BE_MM_PLAIN || mode == SG_ROPE ? cb->sg_warps_qkv
                   : mode == BE_MM_GLU                  ? cb->sg_warps_glu
                                                        : 0;
    const int kind = mode == SG_ROPE || (mode == BE_MM_PLAIN && a.n_w > 1) ? SG_ROPE : mode;
    const int w = wf ? wf : sg_warps(a.K, a.tiles[a.n_w], kind, cb->sg_wave, cb->n_sm, 0);
    return mode == BE_MM_ADD && w == 32 ? 32 : w == 8 ? 8 : 16;
}

template <int BF, int MODE>
static void sgl_launch_m(struct cu_be *cb, const struct sg_args &a, int w, int ni,
                         const struct cu_lkm &L, int act)
{
    if constexpr (MODE == BE_MM_ADD) {
        if (w == 32)
            sgl_launch_w<BF, MODE, 32, 0>(cb, a, L, act);
        else if (w == 8)
            sgl_launch_w<BF, MODE, 8, 0>(cb, a, L, act);
        else
            sgl_launch_w<BF, MODE, 16, 0>(cb, a, L, act);
    } else if (w == 8 && ni)
        sgl_launch_w<BF, MODE, 8, 1>(cb, a, L, act);
    else if (w == 8)
        sgl_launch_w<BF, MODE, 8, 0>(cb, a, L, act);
    else if (ni)
        sgl_launch_w<BF, MODE, 16, 1>(cb, a, L, act);
    else
        sgl_launch_w<BF, MODE, 16, 0>(cb, a, L, act);
}

template <int BF>
static void sgl_launch(struct cu_be *cb, const struct sg_args &a, int mode, int w, int ni,
                       const struct cu_lkm &L, int act)
{
    if (mode == BE_MM_ADD)
        sgl_launch_m<BF, BE_MM_ADD>(cb, a, w, ni, L, act);
    else if (mode == BE_MM_GLU)
        sgl_launch_m<BF, BE_MM_GLU>(cb, a, w, ni, L, act);
    else if (mode == SG_ROPE)
        sgl_launch_m<BF, SG_ROPE>(cb, a, w, ni, L, act);
    else
        sgl_launch_m<BF, BE_MM_PLAIN>(cb, a, w, ni, L, act);
}

/* ---- fold 6: host blocks (cuda_lora_mm.cuh level 6; bf16 weights only) ---- */

template <int MODE, int W, int NI, int LK>
static void sglh_launch_w(struct cu_be *cb, const struct sg_args &a, const struct cu_lkm &L,
                          const struct cu_lkh &H, int act)
{
    const unsigned grid = (unsigned)H.tiles + (unsigned)H.S;
    cu_launch(cb, k_sglh<1, MODE, 1, W, NI, LK>, dim3(grid), dim3((W + (W < 32)) * 32), 0, a, L, H,
              act);
}

template <int MODE, int LK>
static void sglh_launch_m(struct cu_be *cb, const struct sg_args &a, int w, int ni,
                          const struct cu_lkm &L, const struct cu_lkh &H, int act)
{
    if constexpr (MODE == BE_MM_ADD) {
        if (w == 32)
            sglh_launch_w<MODE, 32, 0, LK>(cb, a, L, H, act);
        else if (w == 8)
            sglh_launch_w<MODE, 8, 0, LK>(cb, a, L, H, act);
        else
            sglh_launch_w<MODE, 16, 0, LK>(cb, a, L, H, act);
    } else if (w == 8 && ni)
        sglh_launch_w<MODE, 8, 1, LK>(cb, a, L, H, act);
    else if (w == 8)
        sglh_launch_w<MODE, 8, 0, LK>(cb, a, L, H, act);
    else if (ni)
        sglh_launch_w<MODE, 16, 1, LK>(cb, a, L, H, act);
    else
        sglh_launch_w<MODE, 16, 0, LK>(cb, a, L, H, act);
}

template <int LK>
static void sglh_launch(struct cu_be *cb, const struct sg_args &a, int mode, int w, int ni,
                        const struct cu_lkm &L, const struct cu_lkh &H, int act)
{
    if (mode == BE_MM_ADD)
        sglh_launch_m<BE_MM_ADD, LK>(cb, a, w, ni, L, H, act);
    else if (mode == BE_MM_GLU)
        sglh_launch_m<BE_MM_GLU, LK>(cb, a, w, ni, L, H, act);
    else if (mode == SG_ROPE)
        sglh_launch_m<SG_ROPE, LK>(cb, a, w, ni, L, H, act);
    else
        sglh_launch_m<BE_MM_PLAIN, LK>(cb, a, w, ni, L, H, act);
}

/* The call whose shrink the last launched grid's host blocks ran (fold 6): a hosted call
 * skips its own shrink only when it is this one (its x, first output, K, terms). Set and
 * read in call order on the recording thread, also while a graph is captured. */
static struct {
    const struct cu_be *cb;
    const float *x;
    const float *y0;
    int K, n_t;
} g_lkh_tok;

int cu_matmul_fused_lk(struct be *b, const struct be_mm *m0, const struct cu_lk *d)
{
    return cu_matmul_fused_lk6(b, m0, d, 0, NULL);
}

int cu_matmul_fused_lk6(struct be *b, const struct be_mm *m0, const struct cu_lk *d, int hosted,
                        const struct cu_lk *host)
{
    struct cu_be *cb = cu_be(b);
    /* fold 6: did the grid just before run this call's shrink? (the token is used once) */
    hosted = hosted && g_lkh_tok.cb == cb && g_lkh_tok.x == d->x && g_lkh_tok.y0 == d->y[0] &&
             g_lkh_tok.K == d->K && g_lkh_tok.n_t == d->n_t;
    memset(&g_lkh_tok, 0, sizeof g_lkh_tok);
    if (m0->n <= 0 || m0->n > LKM_COLS || cb->precise || cb->sg_precise ||
        cb->repeat || (m0->mode != BE_MM_PLAIN && m0->mode != BE_MM_ADD) ||
        (m0->mode == BE_MM_ADD && m0->norm) || !sg_ok(cb, m0) || d->x != m0->x ||
        d->norm != m0->norm || (m0->norm && d->eps != m0->eps) ||
        d->K != (int)m0->w[0]->ne[0])
        return 0;
    /* chain: an ADD that gathers for the next norm (its delta first: d->ss_out, set by the
     * recorder, is what the fallback rewrites), or a projection that takes the gathered x */
    int chain = SG_CHAIN_NONE;
    if (m0->chain) {
        if (!cu_mm_chain_ok(cb, m0) || (m0->mode == BE_MM_ADD && !d->ss_out))
            return 0;
        chain = m0->mode == BE_MM_ADD ? SG_CHAIN_OUT : SG_CHAIN_IN;
    } else if (d->ss_out)
        return 0;
    struct be_mm m = *m0;
    if (m.rope && (d->act_y || m.mode != BE_MM_PLAIN || m.n_w != 3))
        return 0;
    if (d->act_y) { /* gate/up + act_mul (recorder: lkm_act): one GLU pass into act_y */
        if (m.mode != BE_MM_PLAIN || m.n_w != 2 || d->n_proj != 2 || d->y[0] != m.y[0] ||
            d->y[1] != m.y[1] || d->act_y != m.y[0] || d->act_rows != m.n ||
            m.w[0]->ne[1] != m.w[1]->ne[1])
            return 0;
        m.mode = BE_MM_GLU, m.act = d->act;
        if (!sg_ok(cb, &m) || (chain == SG_CHAIN_IN && !cu_mm_chain_ok(cb, &m)))
            return 0;
    }
    struct sg_args a;
    int ns, mode;
    sg_fill(cb, &m, chain, a, ns, mode);
    const int w = sgl_warps(cb, a, mode);
    float *const ys[3] = {m.y[0], m.y[1], m.y[2]};
    int ms[3] = {0, 0, 0};
    for (int i = 0; i < m.n_w && i < 3; i++)
        ms[i] = (int)m.w[i]->ne[1];
    struct cu_lk dd = *d; /* (the fold writes the chained values and the activation itself) */
    dd.act_y = NULL, dd.ss_out = NULL, dd.xg_out = NULL, dd.gnext = NULL;
    struct cu_lkm L;
    const int rc = cu_lkm_prep(cb, &dd, ys, ms, m.n_w, w / 8, a.tiles[a.n_w] * a.ny, &L);
    if (rc == -1)
        return 0;
    if (rc < 0)
        return 1; /* out of memory: latched */
    if (mode == BE_MM_GLU &&
        (L.pw[0] >= 0 ? L.rst[L.pw[0]] : 0) + (L.pw[1] >= 0 ? L.rst[L.pw[1]] : 0) > LKM_BS) {
        /* gate's and up's slabs do not fit one tile: the two folded apart, then the act_mul
         * (the same bits) */
        struct cu_lk e = *d;
        e.act_y = NULL;
        if (!cu_matmul_fused_lk(b, m0, &e))
            return 0;
        cu_act_mul(b, d->act_y, m0->y[0], m0->y[1], (int64_t)d->act_rows * d->M[0], d->act);
        return 1;
    }
    if (m.norm && chain == SG_CHAIN_NONE) { /* the norm on its own, as cu_matmul_fused (the
                                             * deltas norm on the fly) */
        float *xn = (float *)cu_scratch(cb, CU_SCRATCH_N, (size_t)m.n * a.K * sizeof(float));
        if (!xn)
            return 1;
        cu_rmsnorm(b, xn, m.x, m.norm, m.n, a.K, m.eps);
        a.x = xn;
    }
    if (L.pre == 1 && m.w[0]->dtype == DT_BF16 && (hosted || host)) { /* fold 6 */
        struct cu_lkh H;
        const int tiles = a.tiles[a.n_w] * a.ny;
        if (!host || !sglh_hosts(mode, w) || cu_lkh_prep(cb, host, w / 8, tiles, &H))
            memset(&H, 0, sizeof H), H.tiles = tiles; /* (no host blocks) */
        if (hosted)
            L.pre = 3; /* the shrink ran in the grid before: no launch, wait at the start */
        else
            cu_lk_shrink_pre(cb, &L);
        if (hosted)
            sglh_launch<3>(cb, a, mode, w, chain == SG_CHAIN_IN, L, H, m.act);
        else
            sglh_launch<2>(cb, a, mode, w, chain == SG_CHAIN_IN, L, H, m.act);
        cu_after_launch(cb, "skinny matmul + lora (fold 6)");
        if (H.nsv) {
            g_lkh_tok.cb = cb, g_lkh_tok.x = host->x, g_lkh_tok.y0 = host->y[0];
            g_lkh_tok.K = host->K, g_lkh_tok.n_t = host->n_t;
        }
        return 1;
    }
    if (L.pre) /* fold 4: the shrink, the launch just before the projection */
        cu_lk_shrink_pre(cb, &L);
    if (m.w[0]->dtype == DT_BF16)
        sgl_launch<1>(cb, a, mode, w, chain == SG_CHAIN_IN, L, m.act);
    else
        sgl_launch<0>(cb, a, mode, w, chain == SG_CHAIN_IN, L, m.act);
    cu_after_launch(cb, "skinny matmul + lora");
    return 1;
}

int cu_matmul_skinny(struct cu_be *cb, float *y, const float *x, int n, const struct be_tensor *w)
{
    struct be_mm m;
    memset(&m, 0, sizeof m);
    m.mode = BE_MM_PLAIN;
    m.n = n;
    m.x = x;
    m.n_w = 1;
    m.w[0] = w;
    m.y[0] = y;
    if (!sg_ok(cb, &m))
        return 0;
    sg_run(cb, &m, SG_CHAIN_NONE);
    return 1;
}

int cu_mm_chain_ok(const struct cu_be *cb, const struct be_mm *m)
{
    if (!cb->fuse_norm || !cb->ss_buf || cb->precise || cb->sg_precise || !sg_ok(cb, m) ||
        m->n > cb->ss_rows)
        return 0;
    if (m->mode == BE_MM_ADD)
        return !m->norm && m->next_norm && ((uintptr_t)m->next_norm & 15) == 0 &&
               m->w[0]->ne[1] / 16 <= CU_SS_TILES;
    /* CINFER_CUDA_FUSE_NORM=2: q/k/v only (measurements) */
    return m->norm && (m->mode == BE_MM_PLAIN || (m->mode == BE_MM_GLU && cb->fuse_norm == 1));
}

void cu_matmul_fused(struct be *b, const struct be_mm *m)
{
    struct cu_be *cb = cu_be(b);
    if (m->n <= 0)
        return;
    /* chain: cq_matmul_fused kept it only for a pair that both run here (cu_mm_chain_ok) */
    if (m->chain && cu_mm_chain_ok(cb, m)) {
        if (m->mode == BE_MM_ADD)
            sg_run(cb, m, SG_CHAIN_OUT);
        else /* the norm rides on the projection */
            sg_run(cb, m, SG_CHAIN_IN);
        return;
    }
    if (sg_ok(cb, m) && !m->norm) {
        sg_run(cb, m, SG_CHAIN_NONE);
        return;
    }
    struct be_mm mm;
    if (m->norm) { /* the norm on its own, then the projection of the normed rows */
        int K = (int)m->w[0]->ne[0];
        float *xn = (float *)cu_scratch(cb, CU_SCRATCH_N, (size_t)m->n * K * sizeof(float));
        if (!xn)
            return;
        cu_rmsnorm(b, xn, m->x, m->norm, m->n, K, m->eps);
        mm = *m;
        mm.x = xn;
        mm.norm = NULL;
        m = &mm;
        if (sg_ok(cb, m)) {
            sg_run(cb, m, SG_CHAIN_NONE);
            return;
        }
    }
    if (m->rope) { /* not fusable here: the projections, then the rope and K/V store */
        struct be_mm mr = *m;
        mr.rope = NULL;
        cu_matmul_fused(b, &mr);
        struct be_rope_kv r = *m->rope;
        r.q = m->y[0], r.k = m->y[1], r.v = m->y[2];
        cu_rope_kv_store(b, &r);
        return;
    }
    /* 16-bit weights on cuBLAS: x converted once; the residual add as beta = 1. Not for
     * steps the matvec takes (cu_mv_lim: their rows must not depend on the row count) */
    const int big = m->n > cu_mv_lim(cb);
    if (big && (m->mode == BE_MM_PLAIN || m->mode == BE_MM_ADD)) {
        const float beta[3] = {m->mode == BE_MM_ADD ? 1.0f : 0.0f, 0.0f, 0.0f};
        if (cu_gemm16_shared_x(cb, m->x, m->n, m->n_w, m->w, m->y, beta))
            return;
    }
    /* the unfused sequence */
    if (m->mode == BE_MM_PLAIN) {
        for (int i = 0; i < m->n_w; i++)
            cu_matmul(b, m->y[i], m->x, m->n, m->w[i]);
        return;
    }
    int64_t M = m->w[0]->ne[1], nel = (int64_t)m->n * M;
    float *t = (float *)cu_scratch(cb, CU_SCRATCH_F, (size_t)nel * sizeof(float));
    if (!t)
        return;
    if (m->mode == BE_MM_GLU) {
        const float beta[2] = {0.0f, 0.0f};
        float *const ys[2] = {m->y[0], t};
        if (!big || !cu_gemm16_shared_x(cb, m->x, m->n, 2, m->w, ys, beta)) {
            cu_matmul(b, m->y[0], m->x, m->n, m->w[0]);
            cu_matmul(b, t, m->x, m->n, m->w[1]);
        }
        cu_act_mul(b, m->y[0], m->y[0], t, nel, m->act);
    } else {
        cu_matmul(b, t, m->x, m->n, m->w[0]);
        cu_add(b, m->y[0], m->y[0], t, nel);
    }
}
