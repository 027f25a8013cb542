/* cuda_lora_mm.cuh — the op lora folded into the skinny projection kernel (cuda_mmf_lk.cu
 * k_sgl; CINFER_CUDA_LORA_FOLD): the device side shared by cuda_lora_sg.cu (the two-launch
 * path) and cuda_mmf_lk.cu (the folded path), so that both compute every delta with the same
 * arithmetic, bit for bit.
 *
 * Why: at batch 1 on the H100 each of the two-launch path's kernels costs ~5 µs of
 * dependent latency (load a, reduce, publish, load b, add), 8 a layer with an adapter on
 * every projection: 0.38 of l1b's decode tok/s (session 4). Folded, a projection and its
 * deltas are ONE launch: the grid's first S blocks are shrink blocks (each runs nvs copies of
 * the two-launch shrink, one per 256-thread group, on the same (row, 16-rank tile, K chunk)
 * work items), the rest are the projection's tiles. A tile block loads its slice of B (16
 * outputs x the ranks of its projection) into shared memory before it waits for the
 * previous kernel; one warp (an extra one when the block has 8 or 16 warps) waits until
 * every shrink item has published its partials, sums them in chunk order into t; after the
 * block's reduction warp 0 adds each output's delta (sum over terms and ranks in order of
 * t * b, then one add) to the value it stores. The shrink items are the two-launch path's
 * (same blocks of work, same order of sums) and the expand is its FMA chain, so a folded
 * delta is bit-identical to the two-launch one: a call the fold declines (too many rows or
 * ranks, a graph capture before the counters are known clean) gives the same bits.
 * Counters (scratch CU_SCRATCH_LORA, CU_LK_HDR bytes at its front; zero between launches):
 * [LKM_C0] shrink items published, [LKM_C0 + 1] blocks (and items) finished; the last one
 * sets both back to zero. Shrink blocks have the lowest block indices, so they are dispatched
 * before any tile block that waits for them; a wait that lasts ~2^26 polls traps (a CUDA
 * error, never a hang).
 *
 * Level 4 (cu_lkm.pre; CINFER_CUDA_LORA_FOLD=4): the shrink items leave the grid. They run
 * as their own launch just before the projection (k_lk_shrink_pre, cuda_lora_sg.cu: it
 * waits for the kernel before it, then lets the projection launch), and the projection
 * streams its weights and x BEFORE its own PDL wait: x is the output of a kernel that has
 * finished by the time the projection launches (the shrink let it launch only after its
 * own wait returned), so the shrink runs beside the projection's main loop instead of
 * before it. The tiles wait (griddepcontrol.wait: the shrink has finished and its
 * partials are visible) only after their main loop, then gather t and add the deltas in
 * the epilogue as levels 1-3 do: no counters, no polling, the same bits. A layer with an
 * adapter on every projection then has 4 extra launches (the shrinks), none of them
 * between x and the projection's weight streaming, where the two-launch path has 8 (+ the
 * rope and act_mul the adapter path unfuses) in series.
 *
 * Level 6 (CINFER_CUDA_LORA_FOLD=6): level 4 without most of its shrink launches. When the
 * call recorded just before a folded projection C is a folded projection P that writes C's
 * x (an ADD: the residual o -> gate/up, down -> next q/k/v; a GLU: gate/up -> down), the
 * recorder (cuda_graph.cu, at flush) hands C's shrink to P: P's grid gets trailing host
 * blocks (struct cu_lkh) after its tiles. Each tile block counts itself finished
 * ([LKM_C0 + 2], after its stores and a fence); a host block prefetches its rows of a
 * into L2, waits until every tile is finished (acquire), then runs C's shrink items
 * (lk_shrink_item, the same items and order: the same partials, at the address C's
 * cu_lkm_prep gives) and counts them ([LKM_C0 + 3]; the last sets both back to zero).
 * Host blocks have the highest block indices: every tile block has been dispatched
 * before one spins. C then launches no shrink: its tiles (LK 3, k_sglh) wait at their
 * start (C's x is P's output; the host blocks' partials are visible once P finished)
 * and gather t after the loop. The o projection's shrink (x from the attention) and the
 * first layer's q/k/v keep level 4's launch, as does any C whose P declined at run time
 * (a run-time token: C's shrink is skipped only when P launched host blocks for it).
 *
 * Level 8 (CINFER_CUDA_LORA_FOLD=8, cu_lkm.pre 4; bf16 weights): no shrink launch and no
 * partials. The projection waits for the kernel before it at its start (as without an
 * adapter: it launches early and loads its B slabs meanwhile); then its first S8 blocks
 * (the lowest indices: dispatched before any block that waits for them) each compute one
 * slice of t = x a^T — kc8 columns of K for every (row, rank) of the call (lk8_slice) —
 * and add it to the call's accumulator of that (row, rank) with ONE 64-bit atomic: a count
 * of 1 at bit 56 plus the slice's sum in fixed point (2^-24). Integer sums do not depend on
 * the order the slices land in (nor on the other rows of the batch), and the count in the
 * same word says when all S8 slices are in: the tile's gathering warp reads its rows'
 * accumulators after the main loop (lk8_gather; one plain load each, re-read while a count
 * is short) with no counter and no fence. With the norm chained (NI), x is the producer's
 * x * gamma and the row's 1 / rms multiplies the delta in the epilogue. The accumulators
 * (LK8_SLOT a call) are zeroed by one memset at the start of each recorded list that has
 * level-8 calls (cuda_graph.cu), so nothing resets them inside a kernel. What it buys over
 * level 4: the projection is not held behind a shrink launch; measured on an H100 (session
 * 14) that was worth ~1 µs a layer of l1b (0.205 of a step at batch 1 against level 4's
 * 0.2145): the tiles' own extra time is the larger part. Its bits are its own (t in fixed
 * point, the 1/rms after the sum), the same at any batch of up to LKM_COLS rows.
 */
#ifndef CINFER_BACKEND_CUDA_LORA_MM_CUH
#define CINFER_BACKEND_CUDA_LORA_MM_CUH

#include "backend/cuda/cuda_lora.cuh"

enum {
    LK_KC = 512, /* columns of K per shrink item */
    LK_TJ = 16,  /* ranks per shrink item */
    LK_ST = 256, /* threads of a shrink item */
    LKM_NG = 4,  /* shrink items a block runs at once (1024 threads) */
    LKM_R = 32,  /* most group rows of a folded call (one warp's lanes) */
    LKM_RS = 64, /* most ranks of one projection of one group */
    LKM_BS = 256, /* most ranks of a tile's projections over all groups (its B slab: 16 KiB) */
    LKM_COLS = 8,  /* x rows of a tile block (k_sgl: steps of up to 8 rows, one n8 tile) */
    LKM_C0 = 40,   /* first counter (unsigned index into the header; the fused kernel's are
                    * at the front); level 6's host blocks use LKM_C0 + 2 and LKM_C0 + 3 */
    LKH_PART = 64 << 10, /* level 6: most partials bytes of a hosted shrink; every level-6
                          * call asks for at least this much scratch, so that a host's
                          * request never moves the buffer between P and C */
    LK8_SLOT = LKM_COLS * CU_LK_PROJ * LKM_RS, /* level 8: accumulators of one call (R x Tmax) */
    LK8_SMAX = 127, /* level 8: most slices (the count field of an accumulator) */
    LK8_TPP = 8,    /* level 8: threads of one (row, rank) pair of a slice */
};

/* Barrier of the 256 threads of shrink item group sg (named barrier 1 + sg). */
#ifndef LK_BAR
#define LK_BAR(sg) asm volatile("bar.sync %0, 256;" ::"r"(1 + (sg)) : "memory") /* (256 = LK_ST) */
#endif

/* Element i of a (dtype dt: f32, f16, bf16) in two steps, so that a thread issues all of
 * its loads before it uses any (a load used at once stalls the thread for a memory round
 * trip; 16 of those in a row were most of a step on the H100): lk_raw loads the bits,
 * lk_cvt turns them into the float (exact). */
static __device__ __forceinline__ uint32_t lk_raw(const void *a, int dt, int64_t i)
{
    return dt == DT_F32 ? __float_as_uint(((const float *)a)[i]) : ((const uint16_t *)a)[i];
}
static __device__ __forceinline__ float lk_cvt(uint32_t v, int dt)
{
    return dt == DT_F32    ? __uint_as_float(v)
           : dt == DT_BF16 ? cu_bf16((uint16_t)v)
                           : cu_f16((uint16_t)v);
}

/* One shrink item: row bi of the call (groups in order), ranks [by * LK_TJ, + LK_TJ) of its
 * group, columns [bz * LK_KC, + LK_KC) of K, by the 256 threads tid of group sg (barrier
 * LK_BAR(sg)); writes part[(bz * R + bi) * Tmax + j]. Each thread walks its chunk's columns
 * (stride LK_ST, ascending) with one accumulator per rank of the tile (one x load feeds
 * LK_TJ FMAs), then the group sums lane order (warp butterfly) and warp order (ascending).
 * With d.norm, x is normed on the fly (1 / rms of the whole row, as the op rmsnorm).
 * WIDE: both columns' loads before their FMAs (fewer round trips, more registers); the
 * arithmetic is the same either way. */
template <int WIDE>
static __device__ __forceinline__ void lk_shrink_item(const struct cu_lk &d, float *part, int R,
                                                      int Tmax, int bi, int by, int bz, int tid,
                                                      int sg)
{
    __shared__ const char *s_a[LKM_NG][LK_TJ];
    __shared__ int s_dt[LKM_NG][LK_TJ];
    __shared__ float s_red[LKM_NG][LK_ST / 32][LK_TJ];
    __shared__ float s_inv[LKM_NG];
    int gi = 0, base = 0;
    const int i = bi;
    while (gi + 1 < d.n_grp && i >= base + d.g[gi].n_rows)
        base += d.g[gi].n_rows, gi++;
    const struct cu_lk_grp &g = d.g[gi];
    const int j0 = by * LK_TJ;
    if (j0 >= g.T) /* (uniform in the group) */
        return;
    const int nv = g.T - j0 < LK_TJ ? g.T - j0 : LK_TJ;
    if (tid < LK_TJ) {
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
        s_a[sg][tid] = ap;
        s_dt[sg][tid] = dt;
    }
    const float *x = d.x + (int64_t)g.rows[i - base] * d.K;
    const int lane = tid & 31, warp = tid >> 5;
    float inv = 1.0f; /* with d.norm: 1 / rms of the whole row, as the op rmsnorm */
    if (d.norm) {
        float ss = 0.0f;
        for (int e0 = tid; e0 < d.K; e0 += 8 * LK_ST) { /* 8 loads out, then the sums */
            float v[8];
#pragma unroll
            for (int u = 0; u < 8; u++)
                v[u] = e0 + u * LK_ST < d.K ? x[e0 + u * LK_ST] : 0.0f;
#pragma unroll
            for (int u = 0; u < 8; u++)
                if (e0 + u * LK_ST < d.K)
                    ss = __fadd_rn(ss, __fmul_rn(v[u], v[u]));
        }
        ss = cu_warp_sum(ss);
        if (lane == 0)
            s_red[sg][warp][0] = ss;
        LK_BAR(sg);
        if (tid == 0) {
            float s = s_red[sg][0][0];
            for (int w = 1; w < LK_ST / 32; w++)
                s = __fadd_rn(s, s_red[sg][w][0]);
            s_inv[sg] = 1.0f / sqrtf(s / (float)d.K + d.eps);
        }
    }
    LK_BAR(sg);
    if (d.norm)
        inv = s_inv[sg];
    const int k0 = bz * LK_KC, k1 = d.K < k0 + LK_KC ? d.K : k0 + LK_KC;
    float acc[LK_TJ];
    const char *ap[LK_TJ]; /* WIDE: the rank rows in registers (else read from shared memory) */
    int dt[LK_TJ];
#pragma unroll
    for (int j = 0; j < LK_TJ; j++) {
        acc[j] = 0.0f;
        ap[j] = WIDE ? s_a[sg][j] : NULL;
        dt[j] = WIDE ? s_dt[sg][j] : 0;
    }
#define LK_AP(j) (WIDE ? ap[j] : s_a[sg][j])
#define LK_DT(j) (WIDE ? dt[j] : s_dt[sg][j])
    for (int e = k0 + tid; e < k1; e += 2 * LK_ST) { /* two columns a step (e, e + LK_ST) */
        const int e2 = e + LK_ST, has2 = e2 < k1;
        uint32_t raw[LK_TJ], raw2[LK_TJ]; /* WIDE: every load of both columns first */
#pragma unroll
        for (int j = 0; j < LK_TJ; j++) {
            raw[j] = j < nv ? lk_raw(LK_AP(j), LK_DT(j), e) : 0u;
            if (WIDE)
                raw2[j] = j < nv && has2 ? lk_raw(LK_AP(j), LK_DT(j), e2) : 0u;
        }
        float xv = x[e], xv2 = has2 ? x[e2] : 0.0f;
        if (d.norm) {
            xv = __fmul_rn(__fmul_rn(xv, inv), d.norm[e]);
            if (has2)
                xv2 = __fmul_rn(__fmul_rn(xv2, inv), d.norm[e2]);
        }
#pragma unroll
        for (int j = 0; j < LK_TJ; j++)
            if (j < nv)
                acc[j] = __fmaf_rn(xv, lk_cvt(raw[j], LK_DT(j)), acc[j]);
        if (has2) {
            if (!WIDE)
#pragma unroll
                for (int j = 0; j < LK_TJ; j++)
                    raw2[j] = j < nv ? lk_raw(LK_AP(j), LK_DT(j), e2) : 0u;
#pragma unroll
            for (int j = 0; j < LK_TJ; j++)
                if (j < nv)
                    acc[j] = __fmaf_rn(xv2, lk_cvt(raw2[j], LK_DT(j)), acc[j]);
        }
    }
#undef LK_AP
#undef LK_DT
    LK_BAR(sg); /* (s_red is reused) */
#pragma unroll
    for (int j = 0; j < LK_TJ; j++) {
        const float v = cu_warp_sum(acc[j]);
        if (lane == 0)
            s_red[sg][warp][j] = v;
    }
    LK_BAR(sg);
    if (tid < nv) {
        float s = s_red[sg][0][tid];
        for (int w = 1; w < LK_ST / 32; w++)
            s = __fadd_rn(s, s_red[sg][w][tid]);
        part[((int64_t)bz * R + i) * Tmax + j0 + tid] = s;
    }
}

/* The folded call (the kernel's parameter; cu_lkm_prep fills it). */
struct cu_lkm {
    struct cu_lk d;
    float *part;   /* (ksplit, R, Tmax) partials */
    unsigned *cnt; /* the two counters (CU_LK_HDR header of the scratch) */
    int R, Tmax, nty, ksplit;
    int nsv;   /* shrink items: R * nty * ksplit */
    int nvs;   /* shrink items a block runs at once (its threads / 256) */
    int S;     /* shrink blocks (the grid's first) */
    int units; /* nsv + tile blocks: what finishes before the counters go back to zero */
    /* pre: 1 (level 4), no shrink blocks (S = nsv = 0) and no counters; the shrink ran as its
     * own launch just before (cu_lk_shrink_pre); the tiles (k_sglp) read x before their PDL
     * wait and wait only before gathering t. 2 (level 5, a measurement): the same launch,
     * but the tiles (k_sgl) wait for it at their start (the counters count the tiles only) */
    int pre;
    int8_t pw[3];                   /* projection of d of the kernel's weight w (-1: none) */
    uint8_t eg[LKM_R];              /* group of row entry i (groups in order) */
    uint8_t ei[LKM_R];              /* its index in its group's rows */
    int16_t rs[CU_LK_PROJ][CU_LK_GRP]; /* ranks of projection p in group gi */
    int16_t bo[CU_LK_PROJ][CU_LK_GRP]; /* their first rank in projection p's B slab */
    int16_t rst[CU_LK_PROJ];           /* ranks of projection p's B slab */
    /* level 8 (pre 4): the call's accumulators (R x Tmax, cu_lk.acc8), its slices and
     * their columns */
    unsigned long long *acc8;
    int S8, kc8;
    int lead8; /* 1: the slices run in S8 leading blocks of their own (the grid's first, no
                * tile), not in the first tiles (CINFER_CUDA_LORA_FOLD8_LEAD) */
};

/* Level 6: the shrink of the next folded call C run by a producer's trailing blocks
 * (cu_lkh_prep fills it; nsv == 0: none). */
struct cu_lkh {
    struct cu_lk d; /* C's call (its shrink's fields) */
    float *part;    /* C's partials: the address C's cu_lkm_prep gives */
    unsigned *cnt;  /* the scratch header ([LKM_C0 + 2], [LKM_C0 + 3]) */
    int R, Tmax, nty, ksplit;
    int nsv;   /* C's shrink items: R * nty * ksplit */
    int nvs;   /* items a host block runs at once (its threads / 256) */
    int S;     /* host blocks (after the tiles) */
    int tiles; /* tile blocks of the producer's grid */
};

/* Shared memory of a tile block; slot 0, or 0 and 1 for the two weights of a GLU tile
 * (gate, up: their slabs one after the other). */
struct lkm_smem {
    float b[LKM_BS * 16];         /* B slab: (rank of the slab, the tile's 16 outputs) */
    float t[2][LKM_COLS][LKM_RS]; /* t * scale of each x row of the block (its group's ranks) */
    int gi[2][LKM_COLS];          /* the x row's group, -1: no delta */
};

/* CINFER_CUDA_LORA_FOLD (with the default two-launch kernels; read once): 1, the recorder
 * folds a lora call into the projection recorded just before it (cuda_graph.cu); 2, also
 * the act_mul after a gate/up call (one GLU pass) and the norm chain across an o/down delta
 * (the ADD gathers after its delta; the next q/k/v or gate/up takes the chain); 3, also
 * the rope + K/V store after a q/k/v call (the RoPE epilogue after the deltas); 4, what 3
 * folds, with the shrink as its own launch before the projection, which streams its
 * weights while the shrink runs (cu_lkm.pre); 5 (measurements), the same shrink launch
 * with the projection waiting for it before its loop; 6, level 4 with the shrink of a
 * call whose x the call before writes run by that call's trailing blocks; 0 none. */
int cu_lkm_on(void);
/* 1 when CINFER_CUDA_LORA_FOLD8_LEAD=1 (measurements): level 8's slices run in leading
 * slice-only blocks (a grid of S8 + tiles blocks) instead of in its first tiles. Read once. */
int cu_lk8_lead(void);
/* Level 8's slices of a call with K columns (from K and the device alone: a row's bits
 * never depend on its batch): kc8 columns each (a multiple of LK8_TPP), at most smax
 * slices (LK8_SMAX, and no more than the SMs: every slice block is resident before any
 * block waits for the slices, one block an SM). */
static inline int lk8_kc(int K, int smax)
{
    smax = smax < 1 ? 1 : smax > LK8_SMAX ? LK8_SMAX : smax;
    int kc = (K + smax - 1) / smax;
    kc = (kc + LK8_TPP - 1) / LK8_TPP * LK8_TPP;
    return kc < 2 * LK8_TPP ? 2 * LK8_TPP : kc;
}
/* Levels 4 and 5: launches the shrink of L (L->pre; its items, partials into L->part) as its
 * own kernel, the launch just before L's projection (cuda_lora_sg.cu). */
void cu_lk_shrink_pre(struct cu_be *cb, const struct cu_lkm *L);
/* Level 6: fills H for the shrink of d (the next folded call) run by the trailing blocks
 * of a producer grid of tiles tile blocks of nvs * 256 threads (or more); takes the
 * scratch with clean counters. 0, or -1 when it does not fit (no host blocks: d's own
 * call runs its shrink). cuda_lora_sg.cu. */
int cu_lkh_prep(struct cu_be *cb, const struct cu_lk *d, int nvs, int tiles, struct cu_lkh *H);
/* Level 6: the projection m with d's deltas folded in as cu_matmul_fused_lk, where hosted
 * says the recorder gave d's shrink to the call before (it is skipped only if that call
 * launched it) and host (or NULL) is the next call's shrink to run in trailing blocks.
 * Same returns as cu_matmul_fused_lk (which is this with 0, NULL). cuda_mmf_lk.cu. */
int cu_matmul_fused_lk6(struct be *b, const struct be_mm *m, const struct cu_lk *d, int hosted,
                        const struct cu_lk *host);
/* Fills L for d folded into a skinny projection with outputs ys[0..n_w) of ms rows, blocks
 * of nvs * 256 threads (or more) and tiles tile blocks; takes the scratch. 0, or -1 when d
 * does not fit the fold (the caller runs the projection, then cu_lk_run), -2 out of memory
 * (latched). */
int cu_lkm_prep(struct cu_be *cb, const struct cu_lk *d, float *const ys[3], const int ms[3],
                int n_w, int nvs, int tiles, struct cu_lkm *L);

/* The projection m (matmul_fused) with the call d's deltas folded in (m->rope: the rope and
 * K/V store after the deltas): 1 when launched (or an error latched), 0 when it does not
 * fit (the caller runs cu_matmul_fused(m without rope), cu_lk_run(d), then
 * cu_rope_kv_store). cuda_mmf_lk.cu. */
int cu_matmul_fused_lk(struct be *b, const struct be_mm *m, const struct cu_lk *d);

/* ---- the fold's device side (bench/lora/emu/run.sh leaves it out from here) ---- */

static __device__ __forceinline__ unsigned lkm_ld_acquire(const unsigned *p)
{
    unsigned v;
#ifdef LKM_EMU /* (bench/lora/emu: on the host) */
    v = __atomic_load_n(p, __ATOMIC_ACQUIRE);
#else
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
#endif
    return v;
}

/* A unit (shrink item or tile block) is finished: the last one resets the counters. */
static __device__ __forceinline__ void lkm_done(const struct cu_lkm &L)
{
    if (atomicAdd(&L.cnt[LKM_C0 + 1], 1u) == (unsigned)L.units - 1u) {
        atomicExch(&L.cnt[LKM_C0], 0u);
        atomicExch(&L.cnt[LKM_C0 + 1], 0u);
    }
}

/* L2 prefetch of shrink item (bi, by, bz)'s rows of a (128-byte lines; never changes a
 * value) by its 256 threads tid: level 6's host blocks issue it before they wait. (Issued
 * by every shrink before its PDL wait it changed no measured figure on the H100, session
 * 11, so only level 6 does.) */
static __device__ __forceinline__ void lk_prefetch_item(const struct cu_lk &d, int bi, int by,
                                                        int bz, int tid)
{
#ifndef LKM_EMU
    int gi = 0, base = 0;
    while (gi + 1 < d.n_grp && bi >= base + d.g[gi].n_rows)
        base += d.g[gi].n_rows, gi++;
    const struct cu_lk_grp &g = d.g[gi];
    const int j0 = by * LK_TJ, k0 = bz * LK_KC, k1 = d.K < k0 + LK_KC ? d.K : k0 + LK_KC;
    const int jr = j0 + tid / 16, part = tid % 16; /* 16 threads a rank row */
    if (tid < 16 * LK_TJ && jr < g.T)
        for (int p = 0; p < d.n_proj; p++)
            for (int k = g.t0[p]; k < g.t0[p] + g.nt[p]; k++) {
                const struct cu_lk_term &t = d.t[k];
                if (jr < t.roff || jr >= t.roff + t.rank)
                    continue;
                const int es = t.dtype == DT_F32 ? 4 : 2;
                const char *row = (const char *)t.a + (size_t)(jr - t.roff) * d.K * es;
                for (int o = k0 * es + part * 128; o < k1 * es; o += 16 * 128)
                    asm volatile("prefetch.global.L2 [%0];" ::"l"(row + o));
            }
#else
    (void)d, (void)bi, (void)by, (void)bz, (void)tid;
#endif
}

/* The shrink role of block blk (< L.S), all its threads. */
static __device__ __forceinline__ void lkm_shrink_block(const struct cu_lkm &L, int blk)
{
    cu_pdl_trigger();
    cu_pdl_wait();
    const int sg = threadIdx.x / LK_ST, vb = blk * L.nvs + sg;
    if (sg >= L.nvs || vb >= L.nsv) /* (whole 256-thread groups) */
        return;
    const int tid = threadIdx.x % LK_ST;
    lk_shrink_item<0>(L.d, L.part, L.R, L.Tmax, vb % L.R, (vb / L.R) % L.nty, vb / (L.R * L.nty),
                   tid, sg);
    __threadfence();
    LK_BAR(sg);
    if (tid == 0) {
        atomicAdd(&L.cnt[LKM_C0], 1u);
        lkm_done(L);
    }
}

/* Tile block of projection p (-1: none), outputs row(0) .. row(15) of M (row0 + r; a RoPE
 * tile's are its rope pairs): its B slab into sm->b from rank sb on (before the PDL wait:
 * adapters are never written by a kernel). All threads. */
template <typename RowF>
static __device__ __forceinline__ void lkm_load_b(const struct cu_lkm &L, int p, RowF row, int M,
                                                  int sb, struct lkm_smem *sm)
{
    if (p < 0)
        return;
    const int n = L.rst[p] * 16;
    float *const b = sm->b + sb * 16;
    for (int idx = threadIdx.x; idx < n; idx += blockDim.x) {
        const int jt = idx >> 4, r = idx & 15;
        int gi = 0;
        while (gi + 1 < L.d.n_grp && jt >= L.bo[p][gi + 1])
            gi++;
        int j = jt - L.bo[p][gi], k = L.d.g[gi].t0[p];
        while (j >= L.d.t[k].rank)
            j -= L.d.t[k].rank, k++;
        const struct cu_lk_term &t = L.d.t[k];
        b[idx] = lk_cvt(lk_raw(t.bt, t.dtype, (int64_t)j * M + row(r)), t.dtype);
    }
}

/* One warp of a tile block of projections lp (slot 0) and lq (slot 1; -1: none) whose x
 * rows are col0 .. col0 + ncol - 1 (< n), once the shrink items are published: t of each x
 * row into sm (chunk order, then the scale: the two-launch expand's arithmetic). Every
 * (slot, row, rank) is one item of a flat list spread over the lanes, its ksplit partials
 * loaded 4 at a time before they are added in chunk order, so the warp's loads of all its
 * rows and both projections are in flight together (one row and one projection at a time
 * cost a round trip each: at batch 8 a gate/up tile waited ~25 us for them). lkm_items walks
 * the list (row: lane i < L.R holds row entry i's x row) and stores item(e, index of the
 * rank in entry e's t vector) * the term's scale; lkm_t's item sums the partials, level 8's
 * (lk8_gather) reads an accumulator. */
template <typename ItemF>
static __device__ __forceinline__ void lkm_items(const struct cu_lkm &L, int lp, int lq, int col0,
                                                 int ncol, struct lkm_smem *sm, int row,
                                                 ItemF item)
{
    const int lane = threadIdx.x & 31;
    int ent = -1; /* lane cc < LKM_COLS: the row entry of x row col0 + cc */
    for (int cc = 0; cc < LKM_COLS; cc++) {
        const unsigned m = __ballot_sync(0xffffffffu, cc < ncol && lane < L.R && row == col0 + cc);
        if (lane == cc)
            ent = m ? __ffs(m) - 1 : -1;
    }
    /* items per (slot, column): rs of its group's ranks in that projection (0: none) */
    int nit = 0; /* lane < 2 * LKM_COLS: slot lane / LKM_COLS, column lane % LKM_COLS */
    {
        const int sl = lane / LKM_COLS, cc = lane % LKM_COLS;
        const int e = __shfl_sync(0xffffffffu, ent, cc), p = sl == 0 ? lp : lq;
        if (lane < 2 * LKM_COLS && p >= 0 && e >= 0)
            nit = L.rs[p][L.eg[e]];
        if (lane < 2 * LKM_COLS)
            sm->gi[sl][cc] = nit > 0 ? (int)L.eg[e] : -1;
    }
    /* exclusive prefix of nit over lanes 0 .. 15 (slot-major) */
    int pre = nit;
    for (int o = 1; o < 2 * LKM_COLS; o <<= 1) {
        const int v = __shfl_up_sync(0xffffffffu, pre, o);
        if (lane >= o)
            pre += v;
    }
    const int total = __shfl_sync(0xffffffffu, pre, 2 * LKM_COLS - 1);
    pre -= nit;
    for (int f0 = 0; f0 < total; f0 += 32) { /* (uniform: every lane shuffles) */
        const int f = f0 + lane;
        int q = 0; /* the (slot, column) lane of item f: the last whose items start <= f */
        for (int u = 1; u < 2 * LKM_COLS; u++)
            q = f >= __shfl_sync(0xffffffffu, pre, u) ? u : q;
        const int sl = q / LKM_COLS, cc = q % LKM_COLS;
        const int e = __shfl_sync(0xffffffffu, ent, cc);
        const int jr = f - __shfl_sync(0xffffffffu, pre, q);
        if (f >= total)
            continue;
        const int p = sl == 0 ? lp : lq;
        const struct cu_lk_grp &g = L.d.g[L.eg[e]];
        int j = jr, k = g.t0[p];
        while (j >= L.d.t[k].rank)
            j -= L.d.t[k].rank, k++;
        /* t * scale of slot sl, x row cc, rank jr of its projection: entry e's accumulator
         * index roff + j of term k */
        sm->t[sl][cc][jr] = __fmul_rn(item(e, L.d.t[k].roff + j), L.d.t[k].scale);
    }
}

static __device__ __forceinline__ void lkm_t(const struct cu_lkm &L, int lp, int lq, int col0,
                                              int ncol, struct lkm_smem *sm)
{
    const int lane = threadIdx.x & 31;
    const int row = lane < L.R ? L.d.g[L.eg[lane]].rows[L.ei[lane]] : -1;
    const int64_t zs = (int64_t)L.R * L.Tmax;
    lkm_items(L, lp, lq, col0, ncol, sm, row, [&](int e, int jt) {
        const float *pp = L.part + (int64_t)e * L.Tmax + jt;
        float s = 0.0f;
        for (int z0 = 0; z0 < L.ksplit; z0 += 4) { /* 4 loads out, then the adds in order */
            float v[4];
#pragma unroll
            for (int u = 0; u < 4; u++)
                v[u] = z0 + u < L.ksplit ? __ldcg(pp + (z0 + u) * zs) : 0.0f;
#pragma unroll
            for (int u = 0; u < 4; u++)
                if (z0 + u < L.ksplit)
                    s = z0 + u == 0 ? v[0] : __fadd_rn(s, v[u]);
        }
        return s;
    });
}

/* The gathering warp of a tile block (projections lp, and lq for a GLU tile's up; -1:
 * none): waits until every shrink item is published, counts the block as finished with
 * the counters (the last unit sets them back to zero: every tile block has passed its wait
 * by then; the atomic's reply is awaited only after the loads of t are out), then t into
 * sm (slots 0 and 1). */
static __device__ __forceinline__ void lkm_gather(const struct cu_lkm &L, int lp, int lq,
                                                  int col0, int ncol, struct lkm_smem *sm)
{
    const int lane = threadIdx.x & 31;
    if (lane == 0 && (lp >= 0 || lq >= 0)) {
        long long spins = 0;
        while (lkm_ld_acquire(&L.cnt[LKM_C0]) < (unsigned)L.nsv) {
            __nanosleep(32);
            if (++spins > (1ll << 26))
                __trap();
        }
    }
    __syncwarp();
    unsigned old = 0;
    if (lane == 0)
        old = atomicAdd(&L.cnt[LKM_C0 + 1], 1u);
    lkm_t(L, lp, lq, col0, ncol, sm);
    if (lane == 0 && old == (unsigned)L.units - 1u) {
        atomicExch(&L.cnt[LKM_C0], 0u);
        atomicExch(&L.cnt[LKM_C0 + 1], 0u);
    }
}

/* Level 6's host blocks: lk_shrink_item<0>'s item with its LK_TJ ranks in two passes of
 * half as many (x read twice). A rank's FMA chain (columns in the same order), its sums
 * (lane butterfly, then warps in order) and the norm's are lk_shrink_item's, so the
 * partials are the same bits; with half the accumulators and rank pointers live, the tile
 * kernel that hosts it keeps its registers (the 16-rank item inside k_sgl spills). */
static __device__ __forceinline__ void lkh_shrink_item(const struct cu_lk &d, float *part, int R,
                                                       int Tmax, int bi, int by, int bz, int tid,
                                                       int sg)
{
    constexpr int HJ = LK_TJ / 2;
    __shared__ const char *h_a[LKM_NG][LK_TJ];
    __shared__ int h_dt[LKM_NG][LK_TJ];
    __shared__ float h_red[LKM_NG][LK_ST / 32][LK_TJ];
    __shared__ float h_inv[LKM_NG];
    int gi = 0, base = 0;
    const int i = bi;
    while (gi + 1 < d.n_grp && i >= base + d.g[gi].n_rows)
        base += d.g[gi].n_rows, gi++;
    const struct cu_lk_grp &g = d.g[gi];
    const int j0 = by * LK_TJ;
    if (j0 >= g.T) /* (uniform in the group) */
        return;
    const int nv = g.T - j0 < LK_TJ ? g.T - j0 : LK_TJ;
    if (tid < LK_TJ) {
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
        h_a[sg][tid] = ap;
        h_dt[sg][tid] = dt;
    }
    const float *x = d.x + (int64_t)g.rows[i - base] * d.K;
    const int lane = tid & 31, warp = tid >> 5;
    float inv = 1.0f; /* with d.norm: 1 / rms of the whole row, as lk_shrink_item */
    if (d.norm) {
        float ss = 0.0f;
        for (int e0 = tid; e0 < d.K; e0 += 8 * LK_ST) {
            float v[8];
#pragma unroll
            for (int u = 0; u < 8; u++)
                v[u] = e0 + u * LK_ST < d.K ? x[e0 + u * LK_ST] : 0.0f;
#pragma unroll
            for (int u = 0; u < 8; u++)
                if (e0 + u * LK_ST < d.K)
                    ss = __fadd_rn(ss, __fmul_rn(v[u], v[u]));
        }
        ss = cu_warp_sum(ss);
        if (lane == 0)
            h_red[sg][warp][0] = ss;
        LK_BAR(sg);
        if (tid == 0) {
            float s = h_red[sg][0][0];
            for (int w = 1; w < LK_ST / 32; w++)
                s = __fadd_rn(s, h_red[sg][w][0]);
            h_inv[sg] = 1.0f / sqrtf(s / (float)d.K + d.eps);
        }
    }
    LK_BAR(sg);
    if (d.norm)
        inv = h_inv[sg];
    const int k0 = bz * LK_KC, k1 = d.K < k0 + LK_KC ? d.K : k0 + LK_KC;
    for (int jb = 0; jb < nv; jb += HJ) { /* (uniform in the group) */
        float acc[HJ];
#pragma unroll
        for (int j = 0; j < HJ; j++)
            acc[j] = 0.0f;
        for (int e = k0 + tid; e < k1; e += 2 * LK_ST) { /* two columns a step, as the item */
            const int e2 = e + LK_ST, has2 = e2 < k1;
            uint32_t raw[HJ], raw2[HJ];
#pragma unroll
            for (int j = 0; j < HJ; j++)
                raw[j] = jb + j < nv ? lk_raw(h_a[sg][jb + j], h_dt[sg][jb + j], e) : 0u;
            float xv = x[e], xv2 = has2 ? x[e2] : 0.0f;
            if (d.norm) {
                xv = __fmul_rn(__fmul_rn(xv, inv), d.norm[e]);
                if (has2)
                    xv2 = __fmul_rn(__fmul_rn(xv2, inv), d.norm[e2]);
            }
#pragma unroll
            for (int j = 0; j < HJ; j++)
                if (jb + j < nv)
                    acc[j] = __fmaf_rn(xv, lk_cvt(raw[j], h_dt[sg][jb + j]), acc[j]);
            if (has2) {
#pragma unroll
                for (int j = 0; j < HJ; j++)
                    raw2[j] = jb + j < nv ? lk_raw(h_a[sg][jb + j], h_dt[sg][jb + j], e2) : 0u;
#pragma unroll
                for (int j = 0; j < HJ; j++)
                    if (jb + j < nv)
                        acc[j] = __fmaf_rn(xv2, lk_cvt(raw2[j], h_dt[sg][jb + j]), acc[j]);
            }
        }
        LK_BAR(sg); /* (h_red is reused) */
#pragma unroll
        for (int j = 0; j < HJ; j++) {
            const float v = cu_warp_sum(acc[j]);
            if (lane == 0)
                h_red[sg][warp][jb + j] = v;
        }
        LK_BAR(sg);
        if (tid >= jb && tid < jb + HJ && tid < nv) {
            float s = h_red[sg][0][tid];
            for (int w = 1; w < LK_ST / 32; w++)
                s = __fadd_rn(s, h_red[sg][w][tid]);
            part[((int64_t)bz * R + i) * Tmax + j0 + tid] = s;
        }
    }
}

/* Level 6: a tile block of a grid with host blocks is finished (all its threads, after its
 * stores: warp 0 stores y; the other warps wrote nothing global). */
static __device__ __forceinline__ void lkh_tile_done(const struct cu_lkh &H)
{
    if (H.nsv == 0)
        return;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
        atomicAdd(&H.cnt[LKM_C0 + 2], 1u);
}

/* Level 6: host block hb of a producer grid, all its threads: prefetch its items' rows of a
 * into L2, wait for every tile block, then the items (lkh_shrink_item: k_lk_shrink's
 * partials). */
static __device__ __forceinline__ void lkh_host_block(const struct cu_lkh &H, int hb)
{
    cu_pdl_trigger();
    const int sg = threadIdx.x / LK_ST, vb = hb * H.nvs + sg;
    if (sg >= H.nvs || vb >= H.nsv) /* (whole 256-thread groups) */
        return;
    const int tid = threadIdx.x % LK_ST;
    const int bi = vb % H.R, by = (vb / H.R) % H.nty, bz = vb / (H.R * H.nty);
    lk_prefetch_item(H.d, bi, by, bz, tid);
    cu_pdl_wait();
    if (tid == 0) {
        long long spins = 0;
        while (lkm_ld_acquire(&H.cnt[LKM_C0 + 2]) < (unsigned)H.tiles) {
            __nanosleep(32);
            if (++spins > (1ll << 26))
                __trap();
        }
    }
    LK_BAR(sg);
    lkh_shrink_item(H.d, H.part, H.R, H.Tmax, bi, by, bz, tid, sg);
    __threadfence();
    LK_BAR(sg);
    if (tid == 0 && atomicAdd(&H.cnt[LKM_C0 + 3], 1u) == (unsigned)H.nsv - 1u) {
        atomicExch(&H.cnt[LKM_C0 + 2], 0u);
        atomicExch(&H.cnt[LKM_C0 + 3], 0u);
    }
}

/* lkm_gather of levels 4 and 6 (L.pre: the shrink was its own launch or a producer's host
 * blocks, this warp has passed its PDL wait; no counters): t into sm (slots 0 and 1). */
static __device__ __forceinline__ void lkm_gather_pre(const struct cu_lkm &L, int lp, int lq,
                                                      int col0, int ncol, struct lkm_smem *sm)
{
    lkm_t(L, lp, lq, col0, ncol, sm);
}

/* ---- level 8 (cu_lkm.pre 4) ---- */

/* Fixed point of level 8's accumulators: a slice's sum times 2^24, clamped to 2^24 in
 * magnitude (2^48: 127 of them stay below 2^55, clear of the count at bit 56). */
static __device__ __forceinline__ unsigned long long lk8_word(float s)
{
    s = fminf(fmaxf(s, -16777216.0f), 16777216.0f); /* (NaN: the projection's own output is
                                                    * NaN then; the clamp keeps the count) */
    return (1ull << 56) + (unsigned long long)__float2ll_rn(s * 16777216.0f);
}

/* Slice blk (< L.S8) of level 8's shrink, all threads of a tile block after its PDL wait:
 * columns [blk * kc8, + kc8) of x (the projection's own x: with NI the producer's x * gamma)
 * times each (row entry, rank) pair's row of a; LK8_TPP threads a pair, each summing its
 * columns in order (stride LK8_TPP), then a 3-step butterfly; one atomic a pair. */
#ifdef LKM_EMU
#define LK8_NOINLINE inline
#else
#define LK8_NOINLINE __noinline__ /* (the slice's registers apart from the projection loop's;
                                   * the 8-warp gate/up tile, held to 64, spills either way) */
#endif
static __device__ LK8_NOINLINE void lk8_slice(const struct cu_lkm &L, const float *x, int K,
                                             int blk)
{
    const int k0 = blk * L.kc8, k1 = K < k0 + L.kc8 ? K : k0 + L.kc8;
    int np = 0;
    for (int e = 0; e < L.R; e++)
        np += L.d.g[L.eg[e]].T;
    const int per = (int)blockDim.x / LK8_TPP, sub = (int)threadIdx.x % LK8_TPP;
    for (int p0 = 0; p0 < np; p0 += per) { /* (uniform: every lane shuffles) */
        const int pi = p0 + (int)threadIdx.x / LK8_TPP;
        float s = 0.0f;
        int e = 0, j = pi;
        if (pi < np) {
            while (e + 1 < L.R && j >= L.d.g[L.eg[e]].T)
                j -= L.d.g[L.eg[e]].T, e++;
            const struct cu_lk_grp &g = L.d.g[L.eg[e]];
            const char *ap = NULL;
            int dt = DT_F32;
            for (int p = 0; p < L.d.n_proj; p++)
                for (int k = g.t0[p]; k < g.t0[p] + g.nt[p]; k++) {
                    const struct cu_lk_term &t = L.d.t[k];
                    if (j >= t.roff && j < t.roff + t.rank) {
                        const size_t es = t.dtype == DT_F32 ? 4 : 2;
                        ap = (const char *)t.a + (size_t)(j - t.roff) * (size_t)K * es;
                        dt = t.dtype;
                    }
                }
            const float *xr = x + (int64_t)g.rows[L.ei[e]] * K;
            for (int c0 = k0 + sub; ap && c0 < k1; c0 += 8 * LK8_TPP) {
                uint32_t raw[8];
                float xv[8];
#pragma unroll
                for (int u = 0; u < 8; u++) { /* 8 columns' loads out, then their FMAs */
                    const int c = c0 + u * LK8_TPP;
                    raw[u] = c < k1 ? lk_raw(ap, dt, c) : 0u;
                    xv[u] = c < k1 ? xr[c] : 0.0f;
                }
#pragma unroll
                for (int u = 0; u < 8; u++)
                    if (c0 + u * LK8_TPP < k1)
                        s = __fmaf_rn(xv[u], lk_cvt(raw[u], dt), s);
            }
        }
        s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, 1));
        s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, 2));
        s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, 4));
        if (pi < np && sub == 0)
            atomicAdd(L.acc8 + (int64_t)e * L.Tmax + j, lk8_word(s));
    }
}

/* Level 8: slice blk's rows of a into L2 (128-byte lines; never changes a value), by its
 * block before the PDL wait (adapters are never written by a kernel), so that the slice
 * after the wait finds them there. */
static __device__ __forceinline__ void lk8_prefetch(const struct cu_lkm &L, int K, int blk)
{
#ifndef LKM_EMU
    const int k0 = blk * L.kc8, k1 = K < k0 + L.kc8 ? K : k0 + L.kc8;
    for (int e = 0; e < L.R; e++) {
        const struct cu_lk_grp &g = L.d.g[L.eg[e]];
        for (int j = (int)threadIdx.x; j < g.T; j += (int)blockDim.x)
            for (int p = 0; p < L.d.n_proj; p++)
                for (int k = g.t0[p]; k < g.t0[p] + g.nt[p]; k++) {
                    const struct cu_lk_term &t = L.d.t[k];
                    if (j < t.roff || j >= t.roff + t.rank)
                        continue;
                    const int es = t.dtype == DT_F32 ? 4 : 2;
                    const char *row = (const char *)t.a + (size_t)(j - t.roff) * (size_t)K * es;
                    for (int o = (k0 * es) & ~127; o < k1 * es; o += 128)
                        asm volatile("prefetch.global.L2 [%0];" ::"l"(row + o));
                }
    }
#else
    (void)L, (void)K, (void)blk;
#endif
}

/* Level 8's gathering warp (projections lp, and lq for a GLU tile's up; -1: none): t * scale
 * of the block's x rows into sm from the accumulators, each read until its count says all
 * S8 slices are in (lkm_t's items; no counters, no fence: the count is in the word). */
static __device__ __forceinline__ void lk8_gather(const struct cu_lkm &L, int lp, int lq,
                                                  int col0, int ncol, struct lkm_smem *sm)
{
    const int lane = threadIdx.x & 31;
    const int row = lane < L.R ? L.d.g[L.eg[lane]].rows[L.ei[lane]] : -1;
    const long long full = (long long)L.S8 << 56;
    lkm_items(L, lp, lq, col0, ncol, sm, row, [&](int e, int jt) {
        const unsigned long long *ap = L.acc8 + (int64_t)e * L.Tmax + jt;
        long long v;
        long long spins = 0;
        for (;;) {
#ifdef LKM_EMU
            v = (long long)__atomic_load_n(ap, __ATOMIC_RELAXED);
#else
            asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(ap) : "memory");
#endif
            if (((v + (1ll << 55)) >> 56) == (long long)L.S8)
                break;
            __nanosleep(32);
            if (++spins > (1ll << 26))
                __trap();
        }
        return __fmul_rn((float)(v - full), 1.0f / 16777216.0f);
    });
}

/* sum over j < rs of t[j] * b[16 j], one FMA chain in j order (the two-launch expand's), its
 * shared-memory loads 8 at a time ahead of their FMAs (one by one, each FMA waited for its
 * two loads: ~16 round trips to shared memory a delta in the epilogue's serial tail). */
static __device__ __forceinline__ float lkm_dot(const float *t, const float *b, int rs)
{
    float acc = 0.0f;
    for (int j0 = 0; j0 < rs; j0 += 8) {
        float tv[8], bv[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
            tv[u] = j0 + u < rs ? t[j0 + u] : 0.0f;
            bv[u] = j0 + u < rs ? b[(j0 + u) * 16] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < 8; u++)
            if (j0 + u < rs)
                acc = __fmaf_rn(tv[u], bv[u], acc);
    }
    return acc;
}

/* v plus the delta of output r (0..15) of the tile for its x row cc (sm slot sl filled, the
 * projection's slab from rank sb): the two-launch expand's FMA chain (terms, then ranks,
 * in order), then one add. */
static __device__ __forceinline__ float lkm_add(const struct cu_lkm &L, int p,
                                                const struct lkm_smem *sm, int sl, int sb, int cc,
                                                int r, float v)
{
    const int gi = sm->gi[sl][cc];
    if (gi < 0)
        return v;
    const int rs = L.rs[p][gi];
    const float *b = sm->b + (sb + (int)L.bo[p][gi]) * 16 + r, *t = sm->t[sl][cc];
    return __fadd_rn(v, lkm_dot(t, b, rs));
}

/* Level 8's lkm_add: the delta times mul (NI: the row's 1 / rms; else 1) before the add. */
static __device__ __forceinline__ float lk8_add(const struct cu_lkm &L, int p,
                                                const struct lkm_smem *sm, int sl, int sb, int cc,
                                                int r, float v, float mul)
{
    const int gi = sm->gi[sl][cc];
    if (gi < 0)
        return v;
    const int rs = L.rs[p][gi];
    const float *b = sm->b + (sb + (int)L.bo[p][gi]) * 16 + r, *t = sm->t[sl][cc];
    return __fadd_rn(v, __fmul_rn(lkm_dot(t, b, rs), mul));
}

#endif
