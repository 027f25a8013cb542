/* cuda_mmf.cu — skinny tensor-core matmuls for 16-bit weights (decode steps), fused
 * projections (be_mm: q/k/v in one pass, gate/up with the activation, the residual add).
 *
 * For steps of up to SG_MAX_N rows with BF16/F16 weights, y = x W^T runs on mma.sync
 * m16n8k16 (f32 accumulate): W is operand A (16 weight rows per tile, read straight from
 * global memory with 16-byte loads), x is operand B (rows of x rounded to the weight's
 * 16-bit type as they are loaded). Within each 32-element chunk of K a lane loads 8
 * consecutive elements of W and of x; the k order inside the mma is a fixed permutation of
 * the chunk, the same for A and B, so the dot product is unchanged. A block of W warps
 * (8, 16 or 32: cu_sg_warps) owns one 16-row tile of W and one tile of up to SG_NT rows
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

#include "backend/cuda/cuda_mmf.cuh"

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
int cu_sg_warps(int K, int tiles, int kind, int wave, int n_sm, int precise)
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

template <int BF, int MODE, int NS, int P, int SG_WARPS, int NI>
__global__ void __launch_bounds__(SG_WARPS * 32)
    k_sg(const __grid_constant__ struct sg_args a, int act)
{
    sg_body<BF, MODE, NS, P, SG_WARPS, NI, 0>(a, act, nullptr, nullptr, blockIdx.x);
}

/* 1 when the skinny kernel takes this projection. */
int cu_sg_ok(const struct cu_be *cb, const struct be_mm *m)
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
    const int w = wf ? wf : cu_sg_warps(a.K, a.tiles[a.n_w], kind, cb->sg_wave, cb->n_sm, P);
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

void cu_sg_fill(struct cu_be *cb, const struct be_mm *m, int chain, struct sg_args &a, int &ns,
                int &mode)
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
    cu_sg_fill(cb, m, chain, a, ns, mode);
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
    if (!cu_sg_ok(cb, &m))
        return 0;
    sg_run(cb, &m, SG_CHAIN_NONE);
    return 1;
}

int cu_mm_chain_ok(const struct cu_be *cb, const struct be_mm *m)
{
    if (!cb->fuse_norm || !cb->ss_buf || cb->precise || cb->sg_precise || !cu_sg_ok(cb, m) ||
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
    if (cu_sg_ok(cb, m) && !m->norm) {
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
        if (cu_sg_ok(cb, m)) {
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
