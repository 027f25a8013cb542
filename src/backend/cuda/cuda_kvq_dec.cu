/* cuda_kvq_dec.cu — decode-step attention over quantized KV blocks (steps of <= 64 tokens:
 * batch-1 and small-batch decode, verify), built to stream the blocks at memory bandwidth.
 * Two kernels: k_kvq_mm (cuda_kvq_mma.cuh: both products on the tensor cores) for 8-bit
 * affine K with 8-bit affine or 4-bit Lloyd-Max V (k8v4) in groups of 32 at head_dim 64 / 128
 * by default, and k_kvq_sd, described
 * here, for everything else (and for every case with CINFER_KVQ_DEC=sd or tc).
 *
 * The layout of cuda_attn_dec.cu (the f16 decode kernel): a block serves one token, one KV
 * head and HG (<= 4) of its query heads over one split of the token's positions; positions
 * go in rounds of KD_ROUND (64, absolute); a team of head_dim/8 lanes owns one position at
 * a time, a lane 8 elements; a score is 8 FMAs per lane and head plus a butterfly
 * reduce-scatter over the team; every warp runs each head's online softmax over the round
 * itself (the same operations, so the same bits in every warp: no block barrier between the
 * scores and V); each team accumulates its own positions' V and the teams are summed in a
 * fixed order at the end. NT threads a block: 256 by default (head_dim 128: 16 teams of 16,
 * 4 positions a lane per round, 128 registers, two blocks an SM), CINFER_KVQ_NT=128 for 8
 * teams (the first version; 3 blocks an SM of 168 registers).
 * What differs is the load: a round's head records (K and V of 64 positions, the raw bytes:
 * f16 group headers and packed codes) are copied into shared memory with cp.async in
 * 16-byte pieces (8 or 4 when the record size needs it), double-buffered so the next round
 * streams in while this one is computed (CINFER_KVQ_STAGES=3 or 4, opt-in, for measurement:
 * that many buffers, the next 2 or 3 rounds in flight, one cp.async commit group a round;
 * the same arithmetic, so the same bits; where that many do not fit the dynamic shared
 * memory limit, the most that do, 2 at least); a lane then decodes its 8 elements from shared
 * memory into registers (affine: m + d q; Lloyd-Max: s c[q]; f16 as is) — no byte loads from
 * global memory, no float copy of the cache anywhere. 8-bit and 4-bit affine codes have their
 * own decoders; other codes are extracted with a funnel shift from three 32-bit words (the
 * widths of 3- and 4-bit Lloyd-Max values fixed at compile time beside 8-bit keys: k8v3,
 * k8v4; any other pair reads its formats at run time). The row of each position (block table lookup) is computed
 * a round ahead. A rotated K side is met by rotating q once, a rotated V side by unrotating
 * the output once (in the block for a one-split token, in the merge kernel otherwise); q's
 * rotation is a warp's shuffles (kq_rotate's operations in its order: the same bits).
 * A round that leaves a head's running max unchanged skips that head's rescale (the factor
 * is exactly 1). CINFER_KVQ_SOFT=lean (opt-in, for measurement; other bits, within
 * tolerance): each lane's part of the running sum rescaled in registers and summed over the
 * warp once at the end (no shuffle sum a head and round), the running max in shared memory
 * by round parity (no __syncwarp a head and round), the exponentials by __expf (ex2.approx
 * of x log2 e: a few ulp, more for large |x|); plain instances at 256 threads only (with
 * CINFER_KVQ_MERGE=fused, STORE=attn, DEC=tc or NT=128 the default softmax runs).
 * CINFER_KVQ_SOFT=one (opt-in, for measurement; the default's bits; the same instances as
 * lean): the softmax is run once a head, not once a warp: after the scores' barrier warp h
 * (h < HG) alone runs head h's online softmax over the round (kd_soft_one: the default's
 * operations in its order, expf, cu_warp_max / cu_warp_sum, the same skip of an unchanged
 * max) into the one copy of the probabilities and the head's factor, keeping the head's
 * running max and sum in registers; a second barrier, then every warp rescales its
 * accumulators by the factors (skipped where 1) and accumulates V from the shared
 * probabilities. Each value is the one every warp computed in the default, so the output
 * is bit for bit the default's (an extra barrier a round; no per-warp copies of the
 * probabilities, max and sum). Neither depends on the batch.
 *
 * A token's splits depend only on its own attended range (at most CINFER_KVQ_SPLITS,
 * default 32, splits of whole rounds), never on the batch or the context capacity (the grid
 * follows the capacity: a captured graph replays it at every position); the splits are
 * merged in split order by k_kvq_sd_merge. So a token's result is the same alone or in any
 * step. Taken for head_dim 64 / 128 / 256 when both sides are quantized or f16 and every
 * head record is a multiple of 4 bytes (groups of 32: every scheme); anything else, and
 * CINFER_KVQ_ATTN=general, runs the general kernel (cuda_kvq.cu).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_kvq_dec.cuh"
#include "backend/cuda/cuda_kvq_mma.cuh"

/* The decode kernel's online softmax (CINFER_KVQ_SOFT; the file's header) */
enum { KS_DEF = 0, KS_LEAN = 1, KS_ONE = 2 };

static struct {
    int on, target, nt, smem_lim; /* smem_lim: the dynamic shared memory any instance may take */
    int fmerge, fstore;           /* CINFER_KVQ_MERGE=fused, CINFER_KVQ_STORE=attn */
    int tc;                       /* CINFER_KVQ_DEC=tc: the keys' scores on the tensor cores */
    int mma;                      /* k_kvq_mm (cuda_kvq_mma.cuh) where it applies; off with
                                   * CINFER_KVQ_DEC=sd or tc */
    int stages;                   /* CINFER_KVQ_STAGES: round buffers (2 .. KD_MAX_STAGES) */
    int soft;                     /* CINFER_KVQ_SOFT: KS_LEAN or KS_ONE (the SL instances) */
    int bulk;                     /* k_kvq_mm's copies as cp.async.bulk where they fit (sm_90+;
                                   * off with CINFER_KVQ_BULK=0) */
} g_kd = {1, 0, 256, 0, 0, 0, 0, 1, 2, KS_ONE, 0};

/* FU: an instance that may also merge its splits (a.fmerge) and store the new token
 * (a.fstore); 0 is the default path, bit for bit. SL: the online softmax, KS_DEF (the
 * default), KS_LEAN (CINFER_KVQ_SOFT=lean) or KS_ONE (CINFER_KVQ_SOFT=one: the default's
 * bits); the file's header; the others than KS_DEF plain instances only. */
template <int HD, int HG, int KC, int VC, int NT, int FU, int TC = 0, int SL = KS_DEF>
__global__ void __launch_bounds__(NT, HD == 256 ? 1 : NT == 256 ? 2 : 3)
    k_kvq_sd(struct kd_args a, int vw)
{
    constexpr int TS = HD / 8, TEAMS = NT / TS, RPT = KD_ROUND / TEAMS;
    constexpr int N = RPT * HG, NF = N >= TS ? N / TS : 1;
    static_assert(TEAMS * RPT == KD_ROUND && NT / 32 >= HG && TS <= 32, "layout");
    static_assert(SL == KS_DEF || (!FU && !TC), "lean / one: the plain instances");
    constexpr int PW = SL == KS_ONE ? 1 : NT / 32; /* copies of the probabilities, max, sum */
    extern __shared__ __align__(16) uint8_t kd_sm[];
    __shared__ float sc[2][HG][KD_ROUND]; /* scores (by round parity) */
    __shared__ float pws[PW][HG][KD_ROUND]; /* each warp's copy of the probabilities (one:
                                             * the only copy, written by the head's warp) */
    __shared__ float mls[PW][2][HG]; /* each warp's copy of each head's max and sum (one: the
                                      * heads' warps' values, written after the last round) */
    __shared__ float mxs[SL == KS_LEAN ? NT / 32 : 1][2][HG]; /* lean: each warp's max, by
                                                               * round parity */
    __shared__ float fsh[SL == KS_ONE ? HG : 1]; /* one: each head's rescale factor */
    __shared__ int rows[KD_MAX_STAGES][KD_ROUND];  /* a round's cache rows (by buffer) */
    __shared__ __align__(16) float qs[HG * HD];
    constexpr bool LMS = KC == KC_ANY || KC >= KC_LM || VC == KC_ANY || VC >= KC_LM;
    __shared__ float cbs[2][LMS ? 256 : 1];
    /* TC (CINFER_KVQ_DEC=tc): q's digits, each head's 1 / 2^e and group sums of q */
    static_assert(!TC || (NT == 256 && KC == KC_A8 && HD % 32 == 0 && HD <= 128), "tc");
    __shared__ __align__(16) int8_t qd[TC ? KT_ROWS * HD : 4];
    __shared__ float qinv[TC ? HG : 1], qgs[TC ? HG * HD / 32 : 1];

    cu_pdl_trigger();
    cu_pdl_wait(); /* launched with PDL: the previous kernel (q, K/V) is complete */
    const int z = blockIdx.x, t = blockIdx.z;
    const int g = blockIdx.y / a.nsub, sub = blockIdx.y % a.nsub;
    const int h0 = g * (a.n_head / a.n_kv_head) + sub * HG;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, team = tid / TS;
    const int e0 = (tid % TS) * 8;
    const int pos = a.pos[t], sq = a.seq[t];
    int lo = 0, rb = 0, per = 1;
    const int n = cu_dec_splits<KD_ROUND>(pos, a.window, a.target,
                                         a.max_blocks * a.block_size, &lo, &rb, &per);
    float *orow = a.out + ((size_t)t * a.n_head + h0) * HD; /* head h0 + h at orow + h * HD */
    /* FU with fstore: the block of the split holding the new position stores it */
    const bool st = FU && a.fstore && z == (n > 0 ? n - 1 : 0);
    if constexpr (FU)
        if (st)
            kd_store_new<HD, NT>(a, t, g, sub, pos, kd_sm, kd_sm + a.stg);
    if (n == 0 && z == 0)
        for (int i = tid; i < HG * HD; i += NT)
            orow[i] = 0.0f;
    if (z >= n)
        return;
    int r0 = 0, r1 = 0;
    kd_rounds(pos, rb, per, z, &r0, &r1);
    const int32_t *bt = a.bt + (size_t)sq * a.max_blocks;
    const int bs = a.block_size, bsh = a.bs_shift;
    const size_t hk = (size_t)g * a.s[0].hb, hv = (size_t)g * a.s[1].hb;
    const size_t bufsz = ((size_t)KD_ROUND * (a.s[0].hb + a.s[1].hb) + 32) & ~(size_t)15;
    const int kbo = KD_ROUND * a.s[0].hb; /* V records after K's in a buffer */
    /* row of round rd's position j: a position outside [lo, pos] reads pos's row (finite
     * bytes, weighted by zero; FU: one before lo reads lo's, stored before the step, since
     * pos's may be being written by another block) */
    auto row_of = [&](int rd, int j) { return kd_row(bt, bs, bsh, lo, pos, rd, j, FU); };
    /* ns round buffers: round rd in buffer (rd - r0) % ns, its rows in rows[] of the same
     * index; rounds rd + 1 .. rd + ns - 1 stream in while rd is computed. One commit group a
     * round, empty past r1, so round rd's is always followed by ns - 2 at its wait. */
    const int ns = a.stages;
    /* tid < 64: the row of round rd + ns's position tid, loaded a round early */
    int nrow = kd_prime_rows(rows, ns, r0, r1, tid, row_of);
    __syncthreads();
    for (int i = 0; i < ns - 1; i++) { /* rounds r0 .. r0 + ns - 2 into buffers 0 .. ns - 2 */
        if (r0 + i < r1)
            kd_issue<NT>(a, vw, kd_sm + i * bufsz, kd_sm + i * bufsz + kbo, rows[i], hk, hv);
        else
            kd_cp_commit();
    }
    /* q (rotated when the keys are), the codebooks, the lane's offsets */
    if (warp < HG) { /* warp h: head h0 + h's row */
        float v[HD / 32];
        const float *qr = a.q + ((size_t)t * a.n_head + h0 + warp) * HD;
        if (FU && a.fstore) { /* q unroped: the rope's pairs in this warp's row of qs */
            float *qh = qs + warp * HD;
#pragma unroll
            for (int k = 0; k < HD / 32; k++)
                qh[lane + 32 * k] = qr[lane + 32 * k];
            __syncwarp();
            for (int i = lane; i < a.rp.half; i += 32)
                kq_rope_pair(qh, i, a.rp, (float)pos);
            __syncwarp();
#pragma unroll
            for (int k = 0; k < HD / 32; k++)
                v[k] = qh[lane + 32 * k];
            __syncwarp();
        } else {
#pragma unroll
            for (int k = 0; k < HD / 32; k++)
                v[k] = qr[lane + 32 * k];
        }
        if (a.rot_k)
            kd_rot_warp<HD>(v, lane);
#pragma unroll
        for (int k = 0; k < HD / 32; k++)
            qs[warp * HD + lane + 32 * k] = v[k];
    }
    for (int i = tid; i < PW * HG; i += NT)
        mls[i / HG][0][i % HG] = -INFINITY, mls[i / HG][1][i % HG] = 0.0f;
    if constexpr (SL == KS_LEAN)
        for (int i = tid; i < NT / 32 * 2 * HG; i += NT)
            (&mxs[0][0][0])[i] = -INFINITY;
    if (LMS)
        for (int w = 0; w < 2; w++)
            if (a.s[w].hdr == 2)
                for (int i = tid; i < (1 << a.s[w].bits); i += NT)
                    cbs[w][i] = c_kd_lm[a.s[w].lmo + i];
    __syncthreads();
    uint32_t qa[TC ? HD / 32 : 1][4]; /* TC: the digits' A fragments, a group each */
    if constexpr (TC) {
        kd_tc_prep<HD, HG>(qs, qd, qinv, qgs, warp, lane);
        __syncthreads();
#pragma unroll
        for (int gi = 0; gi < HD / 32; gi++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                qa[gi][r] = *(const uint32_t *)(qd + kt_a_row(lane, r) * HD + gi * KT_G +
                                                kt_a_col(lane, r));
    }
    float qv[HG][8];
#pragma unroll
    for (int h = 0; h < HG; h++)
#pragma unroll
        for (int k = 0; k < 8; k++)
            qv[h][k] = qs[h * HD + e0 + k];
    int khoff, kcoff, vhoff, vcoff;
    kd_offs(a.s[0], a.G, e0, &khoff, &kcoff);
    kd_offs(a.s[1], a.G, e0, &vhoff, &vcoff);
    const float *cbk = cbs[0], *cbv = cbs[1];
    float acc[HG][8];
#pragma unroll
    for (int h = 0; h < HG; h++)
#pragma unroll
        for (int k = 0; k < 8; k++)
            acc[h][k] = 0.0f;
    float lp[SL == KS_LEAN ? HG : 1]; /* lean: the lane's part of each head's sum */
#pragma unroll
    for (int h = 0; h < (SL == KS_LEAN ? HG : 1); h++)
        lp[h] = 0.0f;
    float hm = -INFINITY, hl = 0.0f; /* one, warp h < HG: head h's running max and sum */
    int buf = 0;
    for (int rd = r0; rd < r1; rd++, buf = buf + 1 == ns ? 0 : buf + 1) {
        const int sp = rd & 1;    /* the scores' parity */
        kd_cp_wait_ahead(ns - 2); /* this thread's copies of round rd have landed */
        __syncthreads();          /* everyone's; and round rd - 1's buffer is free */
        uint8_t *kb = kd_sm + buf * bufsz, *vb = kb + kbo;
        if (FU && st && rd == r1 - 1) { /* the new position's records (and the positions
                                          * that read its row) are the fresh bytes */
            const int wk = a.s[0].hb / 4, wv = a.s[1].hb / 4;
            const uint8_t *stg = kd_sm + a.stg;
            for (int i = tid; i < KD_ROUND * (wk + wv); i += NT) {
                const bool isk = i < KD_ROUND * wk;
                const int ii = isk ? i : i - KD_ROUND * wk, w = isk ? wk : wv;
                const int j = ii / w, c = ii - j * w, p = rd * KD_ROUND + j;
                const int pc = p >= lo && p <= pos ? p : p < lo ? lo : pos;
                if (pc == pos)
                    ((uint32_t *)(isk ? kb + j * a.s[0].hb : vb + j * a.s[1].hb))[c] =
                        ((const uint32_t *)(isk ? stg : stg + 2 * HD))[c];
            }
            __syncthreads();
        }
        /* round rd + ns - 1 into round rd - 1's buffer (free now), or an empty group */
        const int pb = buf == 0 ? ns - 1 : buf - 1;
        if (rd + ns - 1 < r1) {
            uint8_t *nb = kd_sm + pb * bufsz;
            kd_issue<NT>(a, vw, nb, nb + kbo, rows[pb], hk, hv);
        } else {
            kd_cp_commit();
        }
        if (rd + ns < r1 && tid < KD_ROUND) { /* rows[buf] was read by round rd's issue */
            rows[buf][tid] = nrow;
            if (rd + ns + 1 < r1)
                nrow = row_of(rd + ns + 1, tid); /* used next round: its latency is hidden */
        }
        if constexpr (TC)
            kd_tc_scores<HD, HG>(a, kb, qa, qinv, qgs, warp, lane, rd, lo, pos, &sc[sp][0][0]);
        else {
        /* partial dots of this lane's 8 dims, then summed over the team */
        float s[N];
#pragma unroll
        for (int r = 0; r < RPT; r++) {
            float kf[8];
            kd_dec<KC>(kb + (r * TEAMS + team) * a.s[0].hb, a.s[0], khoff, kcoff, cbk, kf);
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
            const int p = rd * KD_ROUND + j;
            float x = s[i] * a.scale;
            if (a.softcap > 0.0f)
                x = a.softcap * tanhf(x / a.softcap);
            sc[sp][h][j] = p >= lo && p <= pos ? x : -INFINITY;
        }
        }
        __syncthreads();
        float *pw = &pws[SL == KS_ONE ? 0 : warp][0][0];
        if constexpr (SL == KS_ONE) {
            /* warp h alone runs head h's online softmax (kd_soft_one: the default's
             * operations, so its bits) into the one copy of the probabilities and the
             * head's factor; after the barrier every warp rescales and accumulates from them.
             * No parity needed for pws / fsh: every warp reads round rd's before it reaches
             * round rd + 1's first barrier (the wait at the loop's top), and round rd + 1's
             * softmax writes them only after that round's second (its scores'). sc[sp] is
             * read here, before the barrier below, and next written in round rd + 2.
             * An unchanged max (f == 1) skips the rescale, as below. */
            if (warp < HG)
                kd_soft_one(sc[sp][warp], pws[0][warp], &fsh[warp], &hm, &hl, lane);
            __syncthreads();
#pragma unroll
            for (int h = 0; h < HG; h++) {
                const float f = fsh[h];
                if (f != 1.0f) {
#pragma unroll
                    for (int k = 0; k < 8; k++)
                        acc[h][k] *= f;
                }
            }
        } else {
        /* every warp runs each head's online softmax over the round (the same operations in
         * every warp, so the same bits) into its own copy of the probabilities: no barrier
         * between the scores and V. f is the same in every lane of a warp: 1 (an unchanged
         * max) skips the rescale (x * 1 == x: acc holds no NaN but the canonical one) */
#pragma unroll
        for (int h = 0; h < HG; h++) {
            const float s0 = sc[sp][h][lane], s1 = sc[sp][h][lane + 32];
            float f = 1.0f, p0 = 0.0f, p1 = 0.0f;
            if constexpr (SL == KS_LEAN) { /* the max by parity (no __syncwarp), the sum per
                                            * lane, __expf */
                const float mo = mxs[warp][sp ^ 1][h];
                const float mn = fmaxf(mo, cu_warp_max(fmaxf(s0, s1)));
                if (mn != -INFINITY)
                    f = __expf(mo - mn), p0 = __expf(s0 - mn), p1 = __expf(s1 - mn);
                if (lane == 0)
                    mxs[warp][sp][h] = mn;
                lp[h] = fmaf(lp[h], f, p0 + p1);
            } else {
                const float mo = mls[warp][0][h], lo_ = mls[warp][1][h];
                const float mn = fmaxf(mo, cu_warp_max(fmaxf(s0, s1)));
                if (mn != -INFINITY)
                    f = expf(mo - mn), p0 = expf(s0 - mn), p1 = expf(s1 - mn);
                const float ln = lo_ * f + cu_warp_sum(p0 + p1);
                __syncwarp(); /* every lane has read mls before lane 0 writes it */
                if (lane == 0)
                    mls[warp][0][h] = mn, mls[warp][1][h] = ln;
            }
            pw[h * KD_ROUND + lane] = p0, pw[h * KD_ROUND + lane + 32] = p1;
            if (f != 1.0f) {
#pragma unroll
                for (int k = 0; k < 8; k++)
                    acc[h][k] *= f;
            }
        }
        __syncwarp();
        }
#pragma unroll
        for (int r = 0; r < RPT; r++) {
            float vf[8];
            const int j = r * TEAMS + team;
            kd_dec<VC>(vb + j * a.s[1].hb, a.s[1], vhoff, vcoff, cbv, vf);
#pragma unroll
            for (int h = 0; h < HG; h++) {
                const float pr = pw[h * KD_ROUND + j];
#pragma unroll
                for (int k = 0; k < 8; k++)
                    acc[h][k] = fmaf(pr, vf[k], acc[h][k]);
            }
        }
    }
    if constexpr (SL == KS_ONE)
        if (warp < HG && lane == 0) /* head h's max and sum, in mls[0] (read below) */
            mls[0][0][warp] = hm, mls[0][1][warp] = hl;
    if constexpr (SL == KS_LEAN) {
        if (warp == 0) { /* the lanes' parts of each head's sum, in mls[0] (read below) */
#pragma unroll
            for (int h = 0; h < HG; h++) {
                const float L = cu_warp_sum(lp[h]);
                if (lane == 0) /* (lane 0 wrote the last round's max) */
                    mls[0][0][h] = mxs[0][(r1 - 1) & 1][h], mls[0][1][h] = L;
            }
        }
    }
    __syncthreads(); /* the buffers are free (only empty groups are pending): the team sums */
    const float *msh = mls[0][0], *lsh = mls[0][1]; /* (every warp holds the same) */
    float *red = (float *)kd_sm; /* (TEAMS, HG, HD) */
#pragma unroll
    for (int h = 0; h < HG; h++) {
        float4 *rp = (float4 *)&red[((size_t)team * HG + h) * HD + e0];
        rp[0] = make_float4(acc[h][0], acc[h][1], acc[h][2], acc[h][3]);
        rp[1] = make_float4(acc[h][4], acc[h][5], acc[h][6], acc[h][7]);
    }
    __syncthreads();
    for (int i = tid; i < HG * HD; i += NT) {
        const int h = i / HD, d = i % HD;
        float o = 0.0f;
#pragma unroll
        for (int tm = 0; tm < TEAMS; tm++)
            o += red[((size_t)tm * HG + h) * HD + d];
        if (n == 1) {
            const float L = lsh[h];
            qs[i] = L > 0.0f ? o * (1.0f / L) : 0.0f;
        } else {
            const size_t pr = ((size_t)t * a.n_head + h0 + h) * a.maxs + z;
            a.part[pr * HD + d] = o;
            if (d == 0)
                a.ml[pr] = make_float2(msh[h], lsh[h]);
        }
    }
    if (n > 1) {
        if constexpr (FU)
            if (a.fmerge)
                kd_merge_last<HD, HG, NT>(a, t, h0, n, orow, qs);
        return;
    }
    if (a.rot_v) /* values are stored rotated: unrotate the rows once */
        kq_rotate_rows(qs, HG, HD, 1);
    else
        __syncthreads();
    for (int i = tid; i < HG * HD; i += NT)
        orow[i] = qs[i];
}

/* out row (t, h) = the merge of the token's splits in split order (unrotated when the
 * values are stored rotated); tokens of one split were written by k_kvq_sd itself. Built
 * for latency (session 15): every split's max, sum and partial of the thread's dim are
 * loaded at once (KD_MAX_TARGET registers, predicated), the max over the splits is a warp
 * reduction (fmaxf of the same values: the same max in any order; a NaN max is skipped as
 * the sequential fmaxf from -inf skipped it), and the sums run in split order with the
 * same fmaf chain as before: the same bits. */
template <int HD>
__global__ void __launch_bounds__(HD) k_kvq_sd_merge(struct kd_args a)
{
    __shared__ float sl[KD_MAX_TARGET], sf[KD_MAX_TARGET], x[HD], wm[HD / 32];
    static_assert(KD_MAX_TARGET <= HD, "a thread a split");
    const int h = blockIdx.x, t = blockIdx.y, d = threadIdx.x;
    int lo = 0, rb = 0, per = 1;
    const int n = cu_dec_splits<KD_ROUND>(a.pos[t], a.window, a.target,
                                         a.max_blocks * a.block_size, &lo, &rb, &per);
    /* pos was written before the step: readable now */
    cu_pdl_trigger();
    cu_pdl_wait();
    if (n <= 1)
        return;
    const size_t row = ((size_t)t * a.n_head + h) * a.maxs;
    float2 v = make_float2(-INFINITY, 0.0f);
    if (d < n) /* thread z: split z's max and sum */
        v = a.ml[row + d];
    float ov[KD_MAX_TARGET];
#pragma unroll
    for (int k = 0; k < KD_MAX_TARGET; k++)
        ov[k] = k < n ? a.part[(row + k) * HD + d] : 0.0f;
    float m = d < n && v.y > 0.0f ? fmaxf(-INFINITY, v.x) : -INFINITY;
    m = cu_warp_max(m);
    if ((d & 31) == 0)
        wm[d >> 5] = m;
    if (d < n)
        sl[d] = v.y;
    __syncthreads();
    float mx = wm[0];
#pragma unroll
    for (int w = 1; w < HD / 32; w++)
        mx = fmaxf(mx, wm[w]);
    /* each split's factor once (thread z), not once a thread: the same values */
    if (d < n)
        sf[d] = v.y > 0.0f ? expf(v.x - mx) : 0.0f;
    __syncthreads();
    float L = 0.0f, o = 0.0f;
#pragma unroll
    for (int z = 0; z < KD_MAX_TARGET; z++) {
        if (z < n && sl[z] > 0.0f) {
            const float f = sf[z];
            L = fmaf(f, sl[z], L);
            o = fmaf(f, ov[z], o);
        }
    }
    x[d] = L > 0.0f ? o * (1.0f / L) : 0.0f;
    if (a.rot_v)
        kq_rotate_rows(x, 1, HD, 1);
    else
        __syncthreads();
    a.out[((size_t)t * a.n_head + h) * HD + d] = x[d];
}

/* ---- host side ---- */

typedef void (*kd_kernel)(struct kd_args, int);

template <int HD, int HG, int NT, int FU, int SL = KS_DEF>
static kd_kernel kd_pick(int kc, int vc)
{
    if (kc == KC_A8 && vc == KC_A8) /* the fixed decoders; any other pair: the any-width one */
        return k_kvq_sd<HD, HG, KC_A8, KC_A8, NT, FU, 0, SL>;
    if (kc == KC_A4 && vc == KC_A4)
        return k_kvq_sd<HD, HG, KC_A4, KC_A4, NT, FU, 0, SL>;
    if (kc == KC_A8 && vc == KC_L4)
        return k_kvq_sd<HD, HG, KC_A8, KC_L4, NT, FU, 0, SL>;
    if (kc == KC_A8 && vc == KC_L3)
        return k_kvq_sd<HD, HG, KC_A8, KC_L3, NT, FU, 0, SL>;
    return k_kvq_sd<HD, HG, KC_ANY, KC_ANY, NT, FU, 0, SL>;
}

template <int HD, int NT, int FU, int SL = KS_DEF>
static kd_kernel kd_pick_hg(int hg, int kc, int vc)
{
    return hg == 4   ? kd_pick<HD, 4, NT, FU, SL>(kc, vc)
           : hg == 2 ? kd_pick<HD, 2, NT, FU, SL>(kc, vc)
                     : kd_pick<HD, 1, NT, FU, SL>(kc, vc);
}

/* TC: 8-bit affine keys (groups of 32), the value decoders of kd_pick */
template <int HD, int HG, int FU>
static kd_kernel kd_pick_tc(int vc)
{
    if (vc == KC_A8)
        return k_kvq_sd<HD, HG, KC_A8, KC_A8, 256, FU, 1>;
    if (vc == KC_L4)
        return k_kvq_sd<HD, HG, KC_A8, KC_L4, 256, FU, 1>;
    if (vc == KC_L3)
        return k_kvq_sd<HD, HG, KC_A8, KC_L3, 256, FU, 1>;
    return k_kvq_sd<HD, HG, KC_A8, KC_ANY, 256, FU, 1>;
}

template <int HD, int FU>
static kd_kernel kd_pick_tc_hg(int hg, int vc)
{
    return hg == 4 ? kd_pick_tc<HD, 4, FU>(vc) : hg == 2 ? kd_pick_tc<HD, 2, FU>(vc)
                                                : kd_pick_tc<HD, 1, FU>(vc);
}

/* The softmax instances (KS_LEAN, KS_ONE) of a plain kernel at 256 threads */
template <int SL>
static kd_kernel kd_pick_soft(int hd, int hg, int kc, int vc)
{
    return hd == 64    ? kd_pick_hg<64, 256, 0, SL>(hg, kc, vc)
           : hd == 128 ? kd_pick_hg<128, 256, 0, SL>(hg, kc, vc)
                       : kd_pick_hg<256, 256, 0, SL>(hg, kc, vc);
}

/* fu: the instance with the fused merge and store (only head_dim 64 / 128 at 256 threads:
 * NULL otherwise); tc: the keys' scores on the tensor cores (8-bit keys, head_dim 64 / 128
 * at 256 threads: NULL otherwise); sl: the softmax, KS_DEF, or KS_LEAN / KS_ONE
 * (CINFER_KVQ_SOFT=lean / one: plain instances at 256 threads, every head_dim; NULL with
 * fu or tc or at 128 threads) */
static kd_kernel kd_kernel_of(int hd, int hg, int kc, int vc, int nt, int fu, int tc, int sl)
{
    if (sl != KS_DEF) {
        if (fu || tc || nt != 256)
            return NULL;
        return sl == KS_ONE ? kd_pick_soft<KS_ONE>(hd, hg, kc, vc)
                            : kd_pick_soft<KS_LEAN>(hd, hg, kc, vc);
    }
    if (tc) {
        if (nt != 256 || kc != KC_A8 || !(hd == 64 || hd == 128))
            return NULL;
        if (fu)
            return hd == 64 ? kd_pick_tc_hg<64, 1>(hg, vc) : kd_pick_tc_hg<128, 1>(hg, vc);
        return hd == 64 ? kd_pick_tc_hg<64, 0>(hg, vc) : kd_pick_tc_hg<128, 0>(hg, vc);
    }
    if (fu)
        return nt != 256 ? NULL
               : hd == 64 ? kd_pick_hg<64, 256, 1>(hg, kc, vc)
               : hd == 128 ? kd_pick_hg<128, 256, 1>(hg, kc, vc)
                           : NULL;
    if (hd == 256)
        return kd_pick_hg<256, 256, 0>(hg, kc, vc);
    if (nt == 128)
        return hd == 64 ? kd_pick_hg<64, 128, 0>(hg, kc, vc) : kd_pick_hg<128, 128, 0>(hg, kc, vc);
    return hd == 64 ? kd_pick_hg<64, 256, 0>(hg, kc, vc) : kd_pick_hg<128, 256, 0>(hg, kc, vc);
}

/* k_kvq_mm (the default where it applies) of head_dim 64 / 128 and hg 1 / 2 / 4 */
/* bulk: the round copies as cp.async.bulk (head_dim 128 on sm_90+: kd_decode decides) */
template <int VL4>
static kd_kernel km_kernel_vl(int hd, int hg, int bulk)
{
    if (hd == 64)
        return hg == 4 ? k_kvq_mm<64, 4, 0, VL4> : hg == 2 ? k_kvq_mm<64, 2, 0, VL4> : k_kvq_mm<64, 1, 0, VL4>;
    if (bulk)
        return hg == 4 ? k_kvq_mm<128, 4, 1, VL4> : hg == 2 ? k_kvq_mm<128, 2, 1, VL4> : k_kvq_mm<128, 1, 1, VL4>;
    return hg == 4 ? k_kvq_mm<128, 4, 0, VL4> : hg == 2 ? k_kvq_mm<128, 2, 0, VL4> : k_kvq_mm<128, 1, 0, VL4>;
}
/* vl4: 4-bit Lloyd-Max values (k8v4), else 8-bit affine */
static kd_kernel km_kernel_of(int hd, int hg, int bulk, int vl4)
{
    return vl4 ? km_kernel_vl<1>(hd, hg, bulk) : km_kernel_vl<0>(hd, hg, bulk);
}

/* k8v4's V records as bulk copies (km_vslot: from the 16-byte boundary at or before a record,
 * a 16-byte multiple): the cache's base and rows 16-byte multiples, records of a multiple of
 * 8 bytes (so a copy starts 0 or 8 bytes before its record), and the last head's copy ending
 * within its row */
static int km_bulk_v_ok(const void *base, const kd_side *v, int n_kv_head)
{
    const size_t last = (size_t)(n_kv_head - 1) * (size_t)v->hb;
    return (uintptr_t)base % 16 == 0 && v->rb % 16 == 0 && v->hb % 8 == 0 &&
           last - last % 16 + (size_t)km_vslot(v->hb, 1) <= v->rb;
}

static int kd_class(const kd_side &s, int which)
{
    if (s.fmt == KVF_F16)
        return KC_F16;
    if (s.fmt == KVF_A8)
        return KC_A8;
    if (s.fmt == KVF_A4)
        return KC_A4;
    if (which && s.fmt == KVF_L4)
        return KC_L4;
    if (which && s.fmt == KVF_L3)
        return KC_L3;
    return KC_ANY;
}

cudaError_t cu_kvq_decode_init(struct cu_be *cb)
{
    const char *m = getenv("CINFER_KVQ_ATTN"), *sp = getenv("CINFER_KVQ_SPLITS");
    const char *nt = getenv("CINFER_KVQ_NT"), *mg = getenv("CINFER_KVQ_MERGE");
    const char *so = getenv("CINFER_KVQ_STORE"), *dc = getenv("CINFER_KVQ_DEC");
    const char *stg = getenv("CINFER_KVQ_STAGES"), *sm = getenv("CINFER_KVQ_SOFT");
    g_kd.on = !(m && !strcmp(m, "general"));
    /* CINFER_KVQ_SOFT: unset or "one", one warp a head's softmax (the default since session
     * 12: the bits of "warp", every warp running every head's); "lean"; "warp" */
    g_kd.soft = !sm                   ? KS_ONE
                : !strcmp(sm, "lean") ? KS_LEAN
                : !strcmp(sm, "warp") ? KS_DEF
                                      : KS_ONE;
    g_kd.stages = 2;
    if (stg) {
        const long v = strtol(stg, NULL, 10);
        if (v >= 2 && v <= KD_MAX_STAGES)
            g_kd.stages = (int)v;
    }
    g_kd.fmerge = mg && !strcmp(mg, "fused");
    g_kd.fstore = so && !strcmp(so, "attn");
    /* CINFER_KVQ_DEC: unset or "mma", k_kvq_mm where it applies; "sd", k_kvq_sd for every
     * case; "tc", k_kvq_sd with the keys' scores on the tensor cores */
    g_kd.tc = dc && !strcmp(dc, "tc");
    g_kd.mma = !(dc && (!strcmp(dc, "tc") || !strcmp(dc, "sd")));
    g_kd.nt = nt && !strcmp(nt, "128") ? 128 : 256;
    g_kd.target = 0; /* (unset: KD_TARGET, or KM_TARGET for k_kvq_mm with bulk copies) */
    if (sp) {
        const long v = strtol(sp, NULL, 10);
        if (v >= 1 && v <= KD_MAX_TARGET)
            g_kd.target = (int)v;
    }
    float lm[KQ_LM_N];
    static const int bits[5] = {2, 3, 4, 5, 8};
    for (int i = 0; i < 5; i++) {
        const float *c = kvq_lm_codebook(bits[i], NULL);
        for (int k = 0; k < (1 << bits[i]); k++)
            lm[kq_lm_off(bits[i]) + k] = c[k];
    }
    cudaError_t rc = cudaMemcpyToSymbol(c_kd_lm, lm, sizeof lm);
    /* every instance may take up to ~92 KB (its static arrays beside it stay under the
     * opt-in limit); a scheme needing more (f16 sides at head_dim 256) runs the general kernel */
    static const int hds[3] = {64, 128, 256}, hgs[3] = {1, 2, 4};
    static const int kcs[6][2] = {{KC_A8, KC_A8}, {KC_A4, KC_A4}, {KC_A8, KC_L4}, {KC_A8, KC_L3},
                                  {KC_ANY, KC_ANY}, {KC_A8, KC_ANY} /* (tc: 8-bit keys, any values) */};
    const int lim = (int)(cb->smem_optin < 100000 ? cb->smem_optin : 100000) - 8192;
    g_kd.smem_lim = lim;
    for (int i = 0; rc == cudaSuccess && i < 3; i++)
        for (int j = 0; rc == cudaSuccess && j < 3; j++)
            for (int k = 0; rc == cudaSuccess && k < 6; k++)
                for (int n = 128; rc == cudaSuccess && n <= 256; n += 128)
                    /* fu: fu | tc << 1 | sl << 2 (sl: KS_DEF, KS_LEAN, KS_ONE) */
                    for (int fu = 0; rc == cudaSuccess && fu < 12; fu++) {
                        kd_kernel kk = kd_kernel_of(hds[i], hgs[j], kcs[k][0], kcs[k][1], n, fu & 1,
                                                    (fu >> 1) & 1, fu >> 2);
                        if (kk)
                            rc = cudaFuncSetAttribute(kk, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                      lim);
                    }
    for (int i = 0; rc == cudaSuccess && i < 18; i++)
        rc = cudaFuncSetAttribute(km_kernel_of(i % 9 < 3 ? 64 : 128, hgs[i % 3], i % 9 >= 6, i >= 9),
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, lim);
    /* k_kvq_mm's k8v4 tables: the f16 hi and lo parts of 64 x the 4-bit codebook's 8
     * magnitudes (cb[8 + k]; cb[15 - c] = -cb[c]), as byte planes (cuda_kvq_mma.cuh) */
    uint32_t l4[2][4] = {{0}};
    const float *c4 = kvq_lm_codebook(4, NULL);
    for (int k = 0; k < 8; k++) {
        const float v = 64.0f * c4[8 + k];
        const __half h = __float2half_rn(v);
        const __half l = __float2half_rn(v - __half2float(h));
        const unsigned short hb = __half_as_ushort(h), lb = __half_as_ushort(l);
        const unsigned short t2[2] = {hb, lb};
        for (int t = 0; t < 2; t++) {
            l4[t][k / 4] |= (uint32_t)(t2[t] & 0xFFu) << (8 * (k % 4));
            l4[t][2 + k / 4] |= (uint32_t)(t2[t] >> 8) << (8 * (k % 4));
        }
    }
    if (rc == cudaSuccess)
        rc = cudaMemcpyToSymbol(c_km_l4, l4, sizeof l4);
    /* CINFER_KVQ_BULK=0: k_kvq_mm's round copies as cp.async pieces everywhere (measurement);
     * bulk copies need compute capability 9.0 */
    int major = 0;
    if (rc == cudaSuccess)
        rc = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, cb->device);
    const char *bk = getenv("CINFER_KVQ_BULK");
    g_kd.bulk = major >= 9 && !(bk && !strcmp(bk, "0"));
    return rc;
}

int cu_kvq_store_attn_on(void) { return g_kd.fstore; }

static int kd_pow2_div(size_t x, int w) { return x % (size_t)w == 0; }

/* The dynamic shared memory of an instance with ns round buffers; fu: an FU instance, the new
 * records after the buffers (at *stg, with room for the store's scratch before them). */
static size_t kd_need(const kd_side *s, int hd, int hg, int nt, int ns, int fu, size_t *stg)
{
    size_t smem = kd_smem(s, hd, hg, nt, ns);
    *stg = 0;
    if (fu) {
        size_t o = (smem + 15) & ~(size_t)15;
        const size_t scr = ((sizeof(kq_store_sm) + 15) & ~(size_t)15) + (size_t)hd * 4;
        o = o > scr ? o : scr;
        *stg = o;
        smem = o + 4 * (size_t)hd;
    }
    return smem;
}

/* CINFER_KVQ_STAGES' round buffers, or fewer where they do not fit smem_lim (2 at least:
 * whether that fits is the caller's check) */
static int kd_fit_stages(const kd_side *s, int hd, int hg, int nt, int fu)
{
    int ns = g_kd.stages;
    size_t stg = 0;
    while (ns > 2 && kd_need(s, hd, hg, nt, ns, fu, &stg) > (size_t)g_kd.smem_lim)
        ns--;
    return ns;
}

/* The decode path; r: NULL, or the step's rope + K/V store to do in the kernel (fstore:
 * returns 0, having run nothing, when the FU instance cannot take the case). */
static int kd_decode(struct cu_be *cb, float *out, const float *q, const struct be_attn *a,
                     const struct be_rope_kv *r)
{
    const int hd = a->head_dim, dt = a->kv_dtype;
    if (!g_kd.on || a->n_tok > KD_MAX_TOK || !(hd == 64 || hd == 128 || hd == 256))
        return 0;
    if (a->block_size <= 0 || a->max_blocks <= 0)
        return 0;
    const long long cap = (long long)a->max_blocks * a->block_size;
    if (cap > (1ll << 30))
        return 0;
    const int kvd = a->n_kv_head * hd, G = kvq_group_of(dt);
    kd_side s[2];
    for (int w = 0; w < 2; w++) {
        const kq_side k = kq_side_of(dt, w, kvd);
        if (k.fmt == KVF_F32)
            return 0;
        s[w].fmt = k.fmt, s[w].bits = k.bits, s[w].hdr = k.hdr, s[w].gb = k.gb;
        s[w].hb = (int)(k.rb / (size_t)a->n_kv_head), s[w].lmo = k.lmo, s[w].rb = k.rb;
        if (s[w].hb % 4 || (size_t)s[w].hb * a->n_kv_head != k.rb ||
            (k.hdr == 4 && k.gb % 4) || (k.hdr == 2 && k.gb % 2) || G % 8)
            return 0; /* (the decoders read headers as aligned words) */
    }
    /* per side, the widest piece its records, rows and cache base allow (V records start
     * 64 K records into a buffer: 16-byte aligned whenever K's are 4-byte multiples) */
    int vw = 0;
    for (int w = 0; w < 2; w++) {
        const uintptr_t base = (uintptr_t)(w ? a->v_cache : a->k_cache);
        int pw = 16;
        while (pw > 4 && !(kd_pow2_div((size_t)s[w].hb, pw) && kd_pow2_div(base, pw)))
            pw /= 2;
        if (!kd_pow2_div(base, pw))
            return 0;
        vw |= pw << (8 * w);
    }
    const int group = a->n_head / a->n_kv_head;
    const int hg = group % 4 == 0 ? 4 : group % 2 == 0 ? 2 : 1, nsub = group / hg;
    if ((long long)a->n_kv_head * nsub > 65535)
        return 0;
    /* mma: 8-bit affine K and 8-bit affine or 4-bit Lloyd-Max V (k8v4) in groups of 32 at
     * head_dim 64 / 128 (k_kvq_mm: that fixes its records, hd / 32 groups of KM_GB or KM_LB
     * bytes, copied in their pieces), not with the fused merge or store */
    const int vl4 = kd_class(s[1], 1) == KC_L4;
    const int mma = g_kd.mma && !r && !g_kd.fmerge && (hd == 64 || hd == 128) && G == 32 &&
                    kd_class(s[0], 0) == KC_A8 && (kd_class(s[1], 1) == KC_A8 || vl4) &&
                    vw == (km_piece(s[0].hb) | km_piece(s[1].hb) << 8);
    const int nt = mma ? KM_NT : kd_nt_of(hd, g_kd.nt);
    /* bulk: K records of a multiple of 16 bytes (head_dim 128: 4 groups of 36), 16-byte
     * aligned in the cache (vw's pieces of 16 say so); 8-bit V the same; k8v4's 72-byte V
     * records copied from the 16-byte boundary at or before them, 80 bytes (km_vslot): the
     * V cache's base and rows 16-byte multiples, the last head's record ending its row (an
     * even KV head count) so that no copy reads past its row */
    const int bulk = mma && g_kd.bulk && hd == 128 && s[0].hb % 16 == 0 && (vw & 255) == 16 &&
                     (vl4 ? km_bulk_v_ok(a->v_cache, &s[1], a->n_kv_head) : vw == (16 | 16 << 8));
    /* the split target: CINFER_KVQ_SPLITS, else more splits for k_kvq_mm with bulk copies
     * (shorter splits pay off once a round's copies cost a few instructions) */
    const int target = g_kd.target ? g_kd.target : bulk ? KM_TARGET : KD_TARGET;
    const int rounds = (int)((cap + KD_ROUND - 1) / KD_ROUND);
    const int maxs = target < rounds ? target : rounds;
    const int fu_ok = kd_kernel_of(hd, hg, KC_A8, KC_A8, nt, 1, 0, 0) != NULL;
    /* tc: 8-bit affine keys in groups of 32 (one mma's k) where an instance exists */
    const int tc = g_kd.tc && G == KT_G && kd_class(s[0], 0) == KC_A8 &&
                   kd_kernel_of(hd, hg, KC_A8, kd_class(s[1], 1), nt, 0, 1, 0) != NULL;
    /* the new token's store: the FU instance, the store's geometry (groups of at most 32
     * lanes, a power of two; records within the staging of 2 head_dim bytes a side) */
    if (r && (!fu_ok || r->n_tok != a->n_tok || r->head_dim != hd || r->rot_dim > hd ||
              r->rot_dim < 0 || r->rot_dim % 2 || G > 32 || (G & (G - 1)) ||
              s[0].hb > 2 * hd || s[1].hb > 2 * hd || hd != kvq_head_dim_of(dt)))
        return 0;
    int fmerge = g_kd.fmerge && fu_ok && maxs > 1 && a->n_kv_head * nsub <= KD_CNT_Y;
    /* the round buffers: CINFER_KVQ_STAGES' count, or the most that fit (at least 2) */
    int ns = kd_fit_stages(s, hd, hg, nt, fmerge || r);
    size_t stg = 0, smem = kd_need(s, hd, hg, nt, ns, fmerge || r, &stg);
    if (smem > (size_t)g_kd.smem_lim) {
        if (r)
            return 0;
        fmerge = 0; /* (the plain instance's smaller need was checked below) */
        ns = kd_fit_stages(s, hd, hg, nt, 0);
        smem = kd_need(s, hd, hg, nt, ns, 0, &stg);
    }
    if (!fmerge && !r && smem > (size_t)g_kd.smem_lim)
        return 0;
    if (mma) { /* k_kvq_mm's buffers (k8v4's bulk copies: V slots wider than the records) */
        const size_t mb = (size_t)ns * km_bufsz(s[0].hb, km_vslot(s[1].hb, bulk));
        smem = smem > mb ? smem : mb;
        if (smem > (size_t)g_kd.smem_lim)
            return 0;
    }
    /* lean / one: where a plain instance runs (not with the fused merge or store, nor tc) */
    const int sl = !mma && g_kd.soft != KS_DEF && !fmerge && !r && !tc &&
                           kd_kernel_of(hd, hg, KC_A8, KC_A8, nt, 0, 0, g_kd.soft) != NULL
                       ? g_kd.soft
                       : KS_DEF;
    struct kd_args x;
    memset(&x, 0, sizeof x);
    x.q = q, x.out = out, x.part = NULL, x.ml = NULL;
    x.pos = a->pos, x.seq = a->seq, x.bt = a->block_tables;
    x.kc = (const uint8_t *)a->k_cache, x.vc = (const uint8_t *)a->v_cache;
    x.n_head = a->n_head, x.n_kv_head = a->n_kv_head, x.nsub = nsub;
    x.max_blocks = a->max_blocks, x.block_size = a->block_size, x.window = a->window;
    x.bs_shift = -1;
    for (int sh = 0; sh < 30; sh++)
        if (a->block_size == 1 << sh)
            x.bs_shift = sh;
    x.maxs = maxs, x.target = target, x.G = G, x.stages = ns;
    x.rot_k = kvq_rot_of(dt, 0), x.rot_v = kvq_rot_of(dt, 1);
    x.scale = a->scale, x.softcap = a->softcap;
    x.s[0] = s[0], x.s[1] = s[1];
    if (r) {
        x.fstore = 1;
        x.kn = r->k, x.vn = r->v, x.slots = r->slots;
        x.kcw = (uint8_t *)r->k_cache, x.vcw = (uint8_t *)r->v_cache;
        x.kvd = kvd, x.stg = (int)stg;
        x.rp.half = r->rot_dim / 2, x.rp.neox = r->mode == BE_ROPE_NEOX;
        x.rp.inv_freq = r->inv_freq, x.rp.mscale = r->mscale;
        x.ks[0] = kq_side_of(dt, 0, kvd), x.ks[1] = kq_side_of(dt, 1, kvd);
    }
    const size_t rows = (size_t)a->n_tok * a->n_head * maxs;
    const size_t need = rows * ((size_t)hd + 2) * sizeof(float);
    if (fmerge) {
        /* counters first (always zero between calls: the merging block resets its own), then
         * the partials; a new buffer has its counters zeroed, never inside a capture
         * (cuda_attn_dec.cu's fused merge, the same way) */
        const size_t cbytes = (size_t)KD_MAX_TOK * KD_CNT_Y * sizeof(unsigned);
        const size_t cap0 = cb->scratch_cap[CU_SCRATCH_KVQ];
        cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing(cb->stream, &cs) != cudaSuccess)
            cudaGetLastError(), cs = cudaStreamCaptureStatusActive;
        if (cap0 < cbytes + need && cs != cudaStreamCaptureStatusNone) {
            fmerge = 0;
        } else {
            char *p = (char *)cu_scratch(cb, CU_SCRATCH_KVQ, cbytes + need);
            if (!p)
                return 1; /* out of memory: latched */
            if (cb->scratch_cap[CU_SCRATCH_KVQ] != cap0) {
                cb->last_kernel = 0;
                cudaError_t rc = cudaMemsetAsync(p, 0, cbytes, cb->stream);
                if (rc != cudaSuccess) {
                    cudaGetLastError();
                    cu_latch(cb, "attention (quantized KV, decode) counters", rc);
                    return 1;
                }
            }
            x.fmerge = 1;
            x.cnt = (unsigned *)p;
            x.part = (float *)(p + cbytes);
            x.ml = (float2 *)(p + cbytes + rows * (size_t)hd * sizeof(float));
        }
    }
    if (maxs > 1 && !fmerge) {
        char *p = (char *)cu_scratch(cb, CU_SCRATCH_ATT, need);
        if (!p)
            return 1; /* out of memory: latched */
        x.part = (float *)p;
        x.ml = (float2 *)(p + rows * (size_t)hd * sizeof(float));
    }
    const kd_kernel k = mma ? km_kernel_of(hd, hg, bulk, vl4)
                            : kd_kernel_of(hd, hg, kd_class(s[0], 0), kd_class(s[1], 1), nt,
                                           fmerge || r, tc, sl);
    cu_launch(cb, k, dim3((unsigned)maxs, (unsigned)(a->n_kv_head * nsub), (unsigned)a->n_tok),
              dim3((unsigned)nt), smem, x, vw);
    cu_after_launch(cb, r ? "attention (quantized KV, decode, with the K/V store)"
                          : "attention (quantized KV, decode)");
    cb->n_kvq_fmerge += fmerge, cb->n_kvq_fstore += r != NULL, cb->n_kvq_tc += tc;
    cb->n_kvq_one += sl == KS_ONE;
    cb->n_kvq_mma += mma;
    cb->n_kvq_bulk += bulk;
    if (maxs > 1 && !fmerge) {
        void (*mk)(struct kd_args) = hd == 64    ? k_kvq_sd_merge<64>
                                     : hd == 128 ? k_kvq_sd_merge<128>
                                                 : k_kvq_sd_merge<256>;
        cu_launch(cb, mk, dim3((unsigned)a->n_head, (unsigned)a->n_tok), dim3((unsigned)hd), 0, x);
        cu_after_launch(cb, "attention merge (quantized KV, decode)");
    }
    return 1;
}

int cu_kvq_decode(struct cu_be *cb, float *out, const float *q, const struct be_attn *a)
{
    return kd_decode(cb, out, q, a, NULL);
}

int cu_kvq_decode_store(struct cu_be *cb, float *out, const float *q, const struct be_attn *a,
                        const struct be_rope_kv *r)
{
    return kd_decode(cb, out, q, a, r);
}
