/* cuda_mmf_lk.cu — the skinny matmul with a projection's adapters folded in
 * (cuda_lora_mm.cuh, CINFER_CUDA_LORA_FOLD): k_sgl (shrink blocks first, fold 1-3), k_sglp
 * (fold 4: the shrink the launch before), k_sglh (fold 6: the next call's shrink in trailing
 * host blocks), their launchers and cu_matmul_fused_lk / _lk6. The tiles are cuda_mmf.cu's
 * (sg_body, cuda_mmf.cuh) with the same warps, so the projection's bits do not change. */
#include <string.h>

#include "backend/cuda/cuda_mmf.cuh"

/* A PLAIN, GLU or ADD projection with its adapters' deltas folded in (cuda_lora_mm.cuh):
 * the first L.S blocks run shrink items, the rest are k_sg's tiles plus one warp (8 or 16
 * warps) that gathers t. */
template <int BF, int MODE, int NS, int SG_WARPS, int NI>
static __device__ __forceinline__ void sgl_block(const struct sg_args &a, const struct cu_lkm &L,
                                                 int act)
{
    if ((int)blockIdx.x < L.S) {
        lkm_shrink_block(L, (int)blockIdx.x);
        return;
    }
    __shared__ struct lkm_smem lsm;
    sg_body<BF, MODE, NS, 0, SG_WARPS, NI, 1>(a, act, &L, &lsm, blockIdx.x - (unsigned)L.S);
}

template <int BF, int MODE, int NS, int SG_WARPS, int NI>
__global__ void __launch_bounds__(sg_lk_threads(1, MODE, SG_WARPS))
    k_sgl(const __grid_constant__ struct sg_args a, const __grid_constant__ struct cu_lkm L,
          int act)
{
    sgl_block<BF, MODE, NS, SG_WARPS, NI>(a, L, act);
}

/* k_sgl's 8-warp GLU held to 4 blocks an SM (64 registers), as k_sg's GLU (sg_lk_xw):
 * its shrink role alone needs more (80), which made it 3 blocks an SM and the l1b/l8b
 * gate/up grid two waves. */
template <int BF, int NS, int NI>
__global__ void __launch_bounds__(8 * 32, 4)
    k_sgl_g8(const __grid_constant__ struct sg_args a, const __grid_constant__ struct cu_lkm L,
             int act)
{
    sgl_block<BF, BE_MM_GLU, NS, 8, NI>(a, L, act);
}

/* k_sglp / k_sgl8's blocks an SM, k_sg's: 4 for the 8-warp GLU, 2 for 16-warp tiles */
static __host__ __device__ constexpr int sg_lk_min_blocks(int mode, int warps)
{
    return mode == BE_MM_GLU && warps == 8 ? 4 : warps == 16 ? 2 : 1;
}

/* Fold 4 (L.pre): k_sgl's tiles without shrink blocks; x read before the PDL wait, which
 * comes after the main loop (the shrink was the launch just before: cu_lk_shrink_pre).
 * Held to k_sg's blocks an SM (session 15: without the bound, lkm_dot's loads ahead took the
 * 8-warp GLU to 76 registers, 3 blocks an SM, so l1b's 512 gate/up tiles ran in two rounds;
 * the 16-warp q/k/v and o tiles to 2 an SM, one wave for l1b's 192 / 128 tiles). */
template <int BF, int MODE, int NS, int SG_WARPS, int NI>
__global__ void __launch_bounds__(sg_lk_threads(2, MODE, SG_WARPS),
                                  sg_lk_min_blocks(MODE, SG_WARPS))
    k_sglp(const __grid_constant__ struct sg_args a, const __grid_constant__ struct cu_lkm L,
           int act)
{
    __shared__ struct lkm_smem lsm;
    sg_body<BF, MODE, NS, 0, SG_WARPS, NI, 2>(a, act, &L, &lsm, blockIdx.x);
}

/* Fold 8 (L.pre 4, cuda_lora_mm.cuh level 8): the tiles wait at their start, the first L.S8
 * blocks add their slices of t to the call's accumulators, the gathering warp reads them
 * after the loop. The 8-warp GLU is held to 4 blocks an SM as k_sgl_g8, 16-warp tiles to 2
 * (session 15: 96 registers had made fold 8's q/k/v tiles 1 block an SM, two rounds). */
template <int BF, int MODE, int NS, int SG_WARPS, int NI, int LEAD>
__global__ void __launch_bounds__(sg_lk_threads(4, MODE, SG_WARPS),
                                  sg_lk_min_blocks(MODE, SG_WARPS))
    k_sgl8(const __grid_constant__ struct sg_args a, const __grid_constant__ struct cu_lkm L,
           int act)
{
    if constexpr (LEAD) /* CINFER_CUDA_LORA_FOLD8_LEAD: S8 slice-only blocks first (lowest
                         * indices: each is dispatched before any tile waits), then tiles
                         * (sg_body LK 5) with no slice in their code */
        if ((int)blockIdx.x < L.S8) {
            lk8_prefetch(L, a.K, (int)blockIdx.x);
            cu_pdl_wait();
            cu_pdl_trigger();
            lk8_slice(L, a.x, a.K, (int)blockIdx.x);
            return;
        }
    __shared__ struct lkm_smem lsm;
    sg_body<BF, MODE, NS, 0, SG_WARPS, NI, LEAD ? 5 : 4>(a, act, &L, &lsm,
                                                         blockIdx.x - (LEAD ? (unsigned)L.S8 : 0u));
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
__global__ void __launch_bounds__(sg_lk_threads(LK, MODE, SG_WARPS))
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

/* ---- the folded lora (cuda_lora_mm.cuh) ---- */

template <int BF, int MODE, int W, int NI>
static void sgl_launch_w(struct cu_be *cb, const struct sg_args &a, const struct cu_lkm &L,
                         int act)
{
    const unsigned grid = (unsigned)L.S + (unsigned)a.tiles[a.n_w] * (unsigned)a.ny;
    if constexpr (BF) /* fold 8: bf16 weights only (cu_matmul_fused_lk6) */
        if (L.pre == 4) {
            if (L.lead8)
                cu_launch(cb, k_sgl8<BF, MODE, 1, W, NI, 1>, dim3(grid + (unsigned)L.S8),
                          dim3(sg_lk_threads(4, MODE, W)), 0, a, L, act);
            else
                cu_launch(cb, k_sgl8<BF, MODE, 1, W, NI, 0>, dim3(grid),
                          dim3(sg_lk_threads(4, MODE, W)), 0, a, L, act);
            return;
        }
    if (L.pre == 1) /* fold 4 (L.S == 0) */
        cu_launch(cb, k_sglp<BF, MODE, 1, W, NI>, dim3(grid), dim3(sg_lk_threads(2, MODE, W)), 0,
                  a, L, act);
    else if constexpr (MODE == BE_MM_GLU && W == 8)
        cu_launch(cb, k_sgl_g8<BF, 1, NI>, dim3(grid), dim3(8 * 32), 0, a, L, act);
    else
        cu_launch(cb, k_sgl<BF, MODE, 1, W, NI>, dim3(grid), dim3(sg_lk_threads(1, MODE, W)), 0,
                  a, L, act);
}

/* The warps sg_launch gives a (the same, so the projection's bits do not change). */
static int sgl_warps(const struct cu_be *cb, const struct sg_args &a, int mode)
{
    const int wf = mode == BE_MM_PLAIN || mode == SG_ROPE ? cb->sg_warps_qkv
                   : mode == BE_MM_GLU                  ? cb->sg_warps_glu
                                                        : 0;
    const int kind = mode == SG_ROPE || (mode == BE_MM_PLAIN && a.n_w > 1) ? SG_ROPE : mode;
    const int w = wf ? wf : cu_sg_warps(a.K, a.tiles[a.n_w], kind, cb->sg_wave, cb->n_sm, 0);
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
    cu_launch(cb, k_sglh<1, MODE, 1, W, NI, LK>, dim3(grid), dim3(sg_lk_threads(LK, MODE, W)), 0,
              a, L, H, act);
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
        (m0->mode == BE_MM_ADD && m0->norm) || !cu_sg_ok(cb, m0) || d->x != m0->x ||
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
        if (!cu_sg_ok(cb, &m) || (chain == SG_CHAIN_IN && !cu_mm_chain_ok(cb, &m)))
            return 0;
    }
    struct sg_args a;
    int ns, mode;
    cu_sg_fill(cb, &m, chain, a, ns, mode);
    const int w = sgl_warps(cb, a, mode);
    float *const ys[3] = {m.y[0], m.y[1], m.y[2]};
    int ms[3] = {0, 0, 0};
    for (int i = 0; i < m.n_w && i < 3; i++)
        ms[i] = (int)m.w[i]->ne[1];
    struct cu_lk dd = *d; /* (the fold writes the chained values and the activation itself) */
    dd.act_y = NULL, dd.ss_out = NULL, dd.xg_out = NULL, dd.gnext = NULL;
    if (m.w[0]->dtype != DT_BF16)
        dd.acc8 = NULL; /* (fold 8's kernels are bf16 only: fold 4 then) */
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
    if (L.pre == 1 || L.pre == 2) /* fold 4: the shrink, the launch just before the projection */
        cu_lk_shrink_pre(cb, &L);
    if (m.w[0]->dtype == DT_BF16)
        sgl_launch<1>(cb, a, mode, w, chain == SG_CHAIN_IN, L, m.act);
    else
        sgl_launch<0>(cb, a, mode, w, chain == SG_CHAIN_IN, L, m.act);
    cu_after_launch(cb, "skinny matmul + lora");
    return 1;
}
