/* cuda_attn_tc.cu — tensor-core attention for long (prefill) steps over the paged KV cache.
 *
 * FlashAttention-2 style: a block owns BM query rows = (token, head) pairs of TQ
 * consecutive tokens and GH query heads of one KV head, so each K/V tile it stages serves
 * GH heads. Each warp owns MT slices of 16 rows (16 tokens of one head). Q is staged once
 * as fp16 (pre-scaled); K/V tiles of BN positions are copied from the paged cache into
 * shared memory (cp.async, double-buffered; an fp32 cache is converted on the way), scores
 * and P.V run on mma.sync m16n8k16 (fp16 in, fp32 accumulate) with an online softmax in
 * fp32 registers. Each distinct sequence of the tile is its own pass over the union of its
 * rows' visible positions, in KV tiles at multiples of BN (so a row's arithmetic does not
 * depend on the other rows of the step); rows of other sequences and positions a row does
 * not see are masked, tiles no row of a warp sees are skipped by that warp. Steps of at
 * most 64 tokens and head_dim outside {64, 80, 96, 128, 256} are declined (the general
 * kernel runs). CINFER_ATTN_TC=0 turns the path off; 2, 3 pick other tilings (benchmarks).
 */
#include <limits.h>
#include <stdlib.h>

#include "backend/cuda/cuda_int.cuh"

#define TC_LOG2E 1.4426950408889634f

enum { TC_MIN_TOK = 64 }; /* steps of at most this many tokens are the decode paths' */

struct tc_args {
    int n_tok, n_head, n_kv_head;
    float scale, softcap;
    int window;
    const int32_t *pos, *seq, *block_tables;
    int max_blocks, block_size;
    const void *k_cache, *v_cache;
    int gh, tq, nsub; /* query heads per block, tokens per block, blocks per KV head */
};

/* ---- PTX wrappers ---- */

__device__ __forceinline__ uint32_t tc_smem(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void tc_ldsm4(uint32_t r[4], const __half *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(tc_smem(p)));
}

__device__ __forceinline__ void tc_ldsm4_t(uint32_t r[4], const __half *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(tc_smem(p)));
}

/* c (16x8 f32) += a (16x16 f16, row) * b (16x8 f16, col) */
__device__ __forceinline__ void tc_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* 16 bytes global -> shared; ok == false fills zeros (the source is not read). */
__device__ __forceinline__ void tc_cp16(__half *dst, const __half *src, bool ok)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :
                 : "r"(tc_smem(dst)), "l"(src), "r"(ok ? 16 : 0));
}
__device__ __forceinline__ void tc_commit(void) { asm volatile("cp.async.commit_group;\n"); }
template <int N> __device__ __forceinline__ void tc_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" : : "n"(N));
}

__device__ __forceinline__ uint32_t tc_pack(float lo, float hi)
{
    __half2 h = __floats2half2_rn(lo, hi);
    return *(uint32_t *)&h;
}

/* Positions [lo, hi) a token at pos sees (window rule of struct be_attn). */
__device__ __forceinline__ void tc_range(const tc_args &a, int pos, int &lo, int &hi)
{
    hi = pos + 1;
    lo = a.window > 0 && pos - a.window + 1 > 0 ? pos - a.window + 1 : 0;
}

/* Stages BN cache rows (rows[j] = cache row of tile position j, -1 = none: zeros) of KV
 * head kvh into kst / vst (row stride HD + 8 halves). F16: cp.async (caller commits);
 * F32: converted through registers. */
template <int HD, int BN, int NT, int F16>
__device__ __forceinline__ void tc_issue(__half *kst, __half *vst, const int *rows,
                                         const tc_args &a, int kvh)
{
    constexpr int LDS = HD + 8, CPR = HD / 8, N = BN * CPR;
    const size_t kvd = (size_t)a.n_kv_head * HD;
#pragma unroll
    for (int it = 0; it < (N + NT - 1) / NT; it++) {
        const int idx = threadIdx.x + it * NT;
        if (N % NT != 0 && idx >= N)
            break;
        const int j = idx / CPR, c = idx % CPR, row = rows[j];
        const size_t off = (size_t)(row < 0 ? 0 : row) * kvd + (size_t)kvh * HD + 8 * c;
        __half *kd = kst + j * LDS + 8 * c, *vd = vst + j * LDS + 8 * c;
        if (F16) {
            tc_cp16(kd, (const __half *)a.k_cache + off, row >= 0);
            tc_cp16(vd, (const __half *)a.v_cache + off, row >= 0);
        } else {
            uint4 ku = make_uint4(0, 0, 0, 0), vu = make_uint4(0, 0, 0, 0);
            if (row >= 0) {
                const float4 *kp = (const float4 *)((const float *)a.k_cache + off);
                const float4 *vp = (const float4 *)((const float *)a.v_cache + off);
                float4 k0 = kp[0], k1 = kp[1], v0 = vp[0], v1 = vp[1];
                ku = make_uint4(tc_pack(k0.x, k0.y), tc_pack(k0.z, k0.w), tc_pack(k1.x, k1.y),
                                tc_pack(k1.z, k1.w));
                vu = make_uint4(tc_pack(v0.x, v0.y), tc_pack(v0.z, v0.w), tc_pack(v1.x, v1.y),
                                tc_pack(v1.z, v1.w));
            }
            *(uint4 *)kd = ku;
            *(uint4 *)vd = vu;
        }
    }
}

/* Shared memory of one block: Q (BM rows), 2 stages of K and V (BN rows each), row stride
 * HD + 8 halves (conflict-free ldmatrix); token positions / sequences; a tile's cache rows. */
static size_t tc_smem_bytes(int hd, int bn, int bm)
{
    return (size_t)(bm + 4 * bn) * (hd + 8) * 2 + (size_t)(2 * bm + bn) * 4;
}

/* out rows of block (tile, KV head slice): see the file header. */
template <int HD, int BN, int NW, int MT, int F16>
__global__ void __launch_bounds__(NW * 32, NW == 4 ? 2 : 1)
    k_attn_tc(float *out, const float *q, struct tc_args a)
{
    constexpr int BM = NW * 16 * MT, LDS = HD + 8, NT = NW * 32, KD = HD / 16;
    constexpr bool QREG = MT == 1 && HD <= 128; /* Q fragments live in registers */
    extern __shared__ __align__(16) unsigned char tc_sm[];
    __half *qs = (__half *)tc_sm;
    __half *ks = qs + BM * LDS, *vs = ks + 2 * BN * LDS;
    int *tpos = (int *)(vs + 2 * BN * LDS), *tseq = tpos + BM, *rows = tseq + BM;

    const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31, gq = lane >> 2, tg = lane & 3;
    const int tq = a.tq, group = a.n_head / a.n_kv_head;
    const int kvh = blockIdx.y / a.nsub, h0 = kvh * group + (int)(blockIdx.y % a.nsub) * a.gh;
    const int t0 = (int)(gridDim.x - 1 - blockIdx.x) * tq; /* late (long) tiles first */

    for (int i = tid; i < tq; i += NT) {
        const int t = t0 + i;
        tpos[i] = t < a.n_tok ? a.pos[t] : 0;
        tseq[i] = t < a.n_tok ? a.seq[t] : -1;
    }
    /* row r = (token t0 + r % tq, head h0 + r / tq), as fp16 q * scale (* log2 e) */
    const float qscale = a.softcap > 0.0f ? a.scale : a.scale * TC_LOG2E;
    for (int idx = tid; idx < BM * (HD / 4); idx += NT) {
        const int r = idx / (HD / 4), c = idx % (HD / 4), t = t0 + r % tq;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (t < a.n_tok)
            v = *(const float4 *)(q + ((size_t)t * a.n_head + h0 + r / tq) * HD + 4 * c);
        *(uint2 *)(qs + r * LDS + 4 * c) =
            make_uint2(tc_pack(v.x * qscale, v.y * qscale), tc_pack(v.z * qscale, v.w * qscale));
    }
    __syncthreads();

    int rb[MT]; /* first row of each 16-row slice of this warp */
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
        rb[mt] = (w * MT + mt) * 16;
    uint32_t qf[QREG ? KD : 1][4];
    if constexpr (QREG) {
#pragma unroll
        for (int kk = 0; kk < KD; kk++)
            tc_ldsm4(qf[kk], qs + (rb[0] + (lane & 7) + ((lane >> 3) & 1) * 8) * LDS + kk * 16 +
                                 (lane >> 4) * 8);
    }
    float o[MT][HD / 8][4], m[MT][2], l[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int d = 0; d < HD / 8; d++)
            o[mt][d][0] = o[mt][d][1] = o[mt][d][2] = o[mt][d][3] = 0.0f;
        m[mt][0] = m[mt][1] = -INFINITY;
        l[mt][0] = l[mt][1] = 0.0f;
    }

    /* one pass per distinct sequence of the tile, in increasing sequence order */
    for (int s_prev = -1;;) {
        int s = INT_MAX;
        for (int i = 0; i < tq; i++)
            if (tseq[i] > s_prev && tseq[i] < s)
                s = tseq[i];
        if (s == INT_MAX)
            break;
        s_prev = s;
        int b0 = INT_MAX, b1 = 0; /* union of the pass's visible ranges */
        for (int i = 0; i < tq; i++)
            if (tseq[i] == s) {
                int lo, hi;
                tc_range(a, tpos[i], lo, hi);
                if (lo < hi)
                    b0 = lo < b0 ? lo : b0, b1 = hi > b1 ? hi : b1;
            }
        if (b0 >= b1)
            continue;
        /* this thread's rows (gq, gq + 8 of each slice): visible range, empty = [0, 0) */
        int lo_r[MT][2], hi_r[MT][2], wlo = INT_MAX, whi = 0;
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int ti = rb[mt] % tq + gq + 8 * r;
                lo_r[mt][r] = hi_r[mt][r] = 0;
                if (tseq[ti] == s)
                    tc_range(a, tpos[ti], lo_r[mt][r], hi_r[mt][r]);
                if (lo_r[mt][r] < hi_r[mt][r]) {
                    wlo = lo_r[mt][r] < wlo ? lo_r[mt][r] : wlo;
                    whi = hi_r[mt][r] > whi ? hi_r[mt][r] : whi;
                }
            }
        wlo = __reduce_min_sync(0xffffffffu, wlo);
        whi = __reduce_max_sync(0xffffffffu, whi);

        /* tiles start at multiples of BN (a row's arithmetic does not depend on the other
         * rows of the tile); positions outside [b0, b1) are staged as zeros, unread */
        const int32_t *bt = a.block_tables + (size_t)s * a.max_blocks;
        const int bsz = a.block_size, cb0 = b0 / BN * BN, ntile = (b1 - cb0 + BN - 1) / BN;
        if (tid < BN) {
            const int p = cb0 + tid;
            rows[tid] = p >= b0 && p < b1 ? bt[p / bsz] * bsz + p % bsz : -1;
        }
        __syncthreads();
        tc_issue<HD, BN, NT, F16>(ks, vs, rows, a, kvh);
        tc_commit();
        int rn = -1; /* cache row of this thread's position in the next tile to issue */
        if (tid < BN) {
            const int p = cb0 + BN + tid;
            rn = p < b1 ? bt[p / bsz] * bsz + p % bsz : -1;
        }
        for (int it = 0; it < ntile; it++) {
            const int st = it & 1, c0 = cb0 + it * BN;
            if (it + 1 < ntile) {
                /* every thread is done reading rows for the previous issue (before the loop,
                 * no barrier came since; later, the one at the end of the last iteration). F32
                 * caches stage with plain loads, so a slow thread could still be reading rows
                 * (racecheck: WAR on rows, wrong rows for the first tile now and then) */
                if (it == 0)
                    __syncthreads();
                if (tid < BN)
                    rows[tid] = rn;
                __syncthreads();
                tc_issue<HD, BN, NT, F16>(ks + (st ^ 1) * BN * LDS, vs + (st ^ 1) * BN * LDS,
                                          rows, a, kvh);
                tc_commit();
                if (tid < BN) {
                    const int p = c0 + 2 * BN + tid;
                    rn = p < b1 ? bt[p / bsz] * bsz + p % bsz : -1;
                }
                tc_wait<1>();
            } else {
                tc_wait<0>();
            }
            __syncthreads();
            if (c0 < whi && c0 + BN > wlo) { /* warp-uniform: some row of this warp sees it */
                const __half *kst = ks + st * BN * LDS, *vst = vs + st * BN * LDS;
                bool fm = true; /* every row of this thread sees the whole tile */
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int r = 0; r < 2; r++)
                        fm = fm && lo_r[mt][r] <= c0 && c0 + BN <= hi_r[mt][r];
                const bool full = __all_sync(0xffffffffu, fm);

                /* S = Q K^T: (16 x BN) per slice */
                float sc[MT][BN / 8][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int n = 0; n < BN / 8; n++)
                        sc[mt][n][0] = sc[mt][n][1] = sc[mt][n][2] = sc[mt][n][3] = 0.0f;
#pragma unroll
                for (int kk = 0; kk < KD; kk++) {
                    uint32_t af[MT][4];
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        if constexpr (QREG) {
                            af[mt][0] = qf[kk][0], af[mt][1] = qf[kk][1];
                            af[mt][2] = qf[kk][2], af[mt][3] = qf[kk][3];
                        } else {
                            tc_ldsm4(af[mt], qs + (rb[mt] + (lane & 7) + ((lane >> 3) & 1) * 8) *
                                                      LDS + kk * 16 + (lane >> 4) * 8);
                        }
                    }
#pragma unroll
                    for (int np = 0; np < BN / 16; np++) {
                        uint32_t b[4];
                        tc_ldsm4(b, kst + (np * 16 + (lane & 7) + (lane >> 4) * 8) * LDS +
                                        kk * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
                        for (int mt = 0; mt < MT; mt++) {
                            tc_mma(sc[mt][2 * np], af[mt], b[0], b[1]);
                            tc_mma(sc[mt][2 * np + 1], af[mt], b[2], b[3]);
                        }
                    }
                }

                /* softcap, mask, online softmax (log2 domain) */
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    if (a.softcap > 0.0f) {
                        const float cap = a.softcap, inv = 1.0f / a.softcap;
#pragma unroll
                        for (int n = 0; n < BN / 8; n++)
#pragma unroll
                            for (int e = 0; e < 4; e++)
                                sc[mt][n][e] = cap * tanhf(sc[mt][n][e] * inv) * TC_LOG2E;
                    }
                    if (!full) {
#pragma unroll
                        for (int n = 0; n < BN / 8; n++)
#pragma unroll
                            for (int e = 0; e < 4; e++) {
                                const int p = c0 + n * 8 + 2 * tg + (e & 1), r = e >> 1;
                                if (!(p >= lo_r[mt][r] && p < hi_r[mt][r]))
                                    sc[mt][n][e] = -INFINITY;
                            }
                    }
#pragma unroll
                    for (int r = 0; r < 2; r++) {
                        float mx = -INFINITY;
#pragma unroll
                        for (int n = 0; n < BN / 8; n++)
                            mx = fmaxf(mx, fmaxf(sc[mt][n][2 * r], sc[mt][n][2 * r + 1]));
                        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                        const float mn = fmaxf(m[mt][r], mx);
                        const float base = mn == -INFINITY ? 0.0f : mn;
                        const float alpha = exp2f(m[mt][r] - base);
                        m[mt][r] = mn;
                        float sum = 0.0f;
#pragma unroll
                        for (int n = 0; n < BN / 8; n++) {
                            sc[mt][n][2 * r] = exp2f(sc[mt][n][2 * r] - base);
                            sc[mt][n][2 * r + 1] = exp2f(sc[mt][n][2 * r + 1] - base);
                            sum += sc[mt][n][2 * r] + sc[mt][n][2 * r + 1];
                        }
                        l[mt][r] = l[mt][r] * alpha + sum;
#pragma unroll
                        for (int d = 0; d < HD / 8; d++)
                            o[mt][d][2 * r] *= alpha, o[mt][d][2 * r + 1] *= alpha;
                    }
                }

                /* O += P V */
#pragma unroll
                for (int kk = 0; kk < BN / 16; kk++) {
                    uint32_t pa[MT][4];
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        pa[mt][0] = tc_pack(sc[mt][2 * kk][0], sc[mt][2 * kk][1]);
                        pa[mt][1] = tc_pack(sc[mt][2 * kk][2], sc[mt][2 * kk][3]);
                        pa[mt][2] = tc_pack(sc[mt][2 * kk + 1][0], sc[mt][2 * kk + 1][1]);
                        pa[mt][3] = tc_pack(sc[mt][2 * kk + 1][2], sc[mt][2 * kk + 1][3]);
                    }
#pragma unroll
                    for (int dp = 0; dp < KD; dp++) {
                        uint32_t b[4];
                        tc_ldsm4_t(b, vst + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LDS +
                                          dp * 16 + (lane >> 4) * 8);
#pragma unroll
                        for (int mt = 0; mt < MT; mt++) {
                            tc_mma(o[mt][2 * dp], pa[mt], b[0], b[1]);
                            tc_mma(o[mt][2 * dp + 1], pa[mt], b[2], b[3]);
                        }
                    }
                }
            }
            __syncthreads(); /* stage st is refilled by the issue two tiles on */
        }
    }

    /* out = O / l; rows that saw nothing are 0 */
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float ls = l[mt][r];
            ls += __shfl_xor_sync(0xffffffffu, ls, 1);
            ls += __shfl_xor_sync(0xffffffffu, ls, 2);
            const float inv = ls > 0.0f ? 1.0f / ls : 0.0f;
            const int t = t0 + rb[mt] % tq + gq + 8 * r, h = h0 + rb[mt] / tq;
            if (t >= a.n_tok)
                continue;
            float *op = out + ((size_t)t * a.n_head + h) * HD + 2 * tg;
#pragma unroll
            for (int d = 0; d < HD / 8; d++)
                *(float2 *)(op + d * 8) = make_float2(o[mt][d][2 * r] * inv, o[mt][d][2 * r + 1] * inv);
        }
}

/* ---- dispatch ---- */

typedef void (*tc_fn)(float *, const float *, struct tc_args);

struct tc_kern {
    int cfg, hd, f16, nw, mt, bn;
    tc_fn fn;
};

/* cfg 1 is the default tiling; 2 (8 warps) and 3 (the other number of 16-row slices a warp)
 * exist for some head_dims with an fp16 cache (benchmarking; others fall back to 1). On the
 * H200 (bench/gpu/attn_tc_bench.c, 4096-token causal prefill, 32/8 heads): head_dim 128
 * 0.653 / 0.658 / 0.688 ms for cfg 1 / 2 / 3 (1 slice a warp wins); head_dim 64 0.384 ms
 * with 2 slices a warp (now cfg 1), 0.406 ms with 1 (now cfg 3), 0.434 ms with 8 warps. */
static const struct tc_kern g_tc_kerns[] = {
    {1, 64, 1, 4, 2, 64, k_attn_tc<64, 64, 4, 2, 1>},
    {1, 64, 0, 4, 1, 64, k_attn_tc<64, 64, 4, 1, 0>},
    {1, 80, 1, 4, 1, 64, k_attn_tc<80, 64, 4, 1, 1>},
    {1, 80, 0, 4, 1, 64, k_attn_tc<80, 64, 4, 1, 0>},
    {1, 96, 1, 4, 1, 64, k_attn_tc<96, 64, 4, 1, 1>},
    {1, 96, 0, 4, 1, 64, k_attn_tc<96, 64, 4, 1, 0>},
    {1, 128, 1, 4, 1, 64, k_attn_tc<128, 64, 4, 1, 1>},
    {1, 128, 0, 4, 1, 64, k_attn_tc<128, 64, 4, 1, 0>},
    {1, 256, 1, 4, 1, 32, k_attn_tc<256, 32, 4, 1, 1>},
    {1, 256, 0, 4, 1, 32, k_attn_tc<256, 32, 4, 1, 0>},
    {2, 64, 1, 8, 1, 64, k_attn_tc<64, 64, 8, 1, 1>},
    {3, 64, 1, 4, 1, 64, k_attn_tc<64, 64, 4, 1, 1>},
    {2, 128, 1, 8, 1, 64, k_attn_tc<128, 64, 8, 1, 1>},
    {3, 128, 1, 4, 2, 32, k_attn_tc<128, 32, 4, 2, 1>},
    {2, 256, 1, 8, 1, 32, k_attn_tc<256, 32, 8, 1, 1>},
};
enum { TC_N_KERNS = sizeof g_tc_kerns / sizeof g_tc_kerns[0] };

/* Process-wide knob read at backend creation (CINFER_ATTN_TC): 0 off, 1 default, 2 or 3 an
 * alternative tiling where one exists. */
static int g_tc_cfg = 1;

cudaError_t cu_attn_tc_init(struct cu_be *cb)
{
    const char *env = getenv("CINFER_ATTN_TC");
    g_tc_cfg = env && *env ? atoi(env) : 1;
    for (int i = 0; i < TC_N_KERNS; i++) {
        const struct tc_kern *k = &g_tc_kerns[i];
        size_t need = tc_smem_bytes(k->hd, k->bn, k->nw * 16 * k->mt);
        if (need > cb->smem_optin)
            continue; /* declined at dispatch */
        cudaError_t rc = cudaFuncSetAttribute(k->fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              (int)need);
        if (rc != cudaSuccess)
            return rc;
    }
    return cudaSuccess;
}

static const struct tc_kern *tc_pick(int hd, int f16)
{
    const struct tc_kern *def = NULL;
    for (int i = 0; i < TC_N_KERNS; i++) {
        const struct tc_kern *k = &g_tc_kerns[i];
        if (k->hd != hd || k->f16 != f16)
            continue;
        if (k->cfg == g_tc_cfg)
            return k;
        if (k->cfg == 1)
            def = k;
    }
    return def;
}

int cu_attn_prefill_tc(struct cu_be *cb, float *out, const float *q, const struct be_attn *a)
{
    if (g_tc_cfg == 0 || a->n_tok <= TC_MIN_TOK)
        return 0;
    if (a->kv_dtype != DT_F16 && a->kv_dtype != DT_F32)
        return 0;
    if (((uintptr_t)q | (uintptr_t)out | (uintptr_t)a->k_cache | (uintptr_t)a->v_cache) % 16)
        return 0;
    const struct tc_kern *k = tc_pick(a->head_dim, a->kv_dtype == DT_F16);
    if (!k)
        return 0;
    const int bm = k->nw * 16 * k->mt;
    const size_t smem = tc_smem_bytes(k->hd, k->bn, bm);
    if (smem > cb->smem_optin)
        return 0;
    /* query heads per block: the most of the group that keeps >= 16 tokens per block */
    const int group = a->n_head / a->n_kv_head;
    int gh = 1;
    for (int c = 8; c > 1; c >>= 1)
        if (group % c == 0 && bm / c >= 16) {
            gh = c;
            break;
        }
    struct tc_args x = {a->n_tok,     a->n_head,     a->n_kv_head,   a->scale,
                        a->softcap,   a->window,     a->pos,         a->seq,
                        a->block_tables, a->max_blocks, a->block_size, a->k_cache,
                        a->v_cache,   gh,            bm / gh,        group / gh};
    dim3 grid((unsigned)((a->n_tok + x.tq - 1) / x.tq), (unsigned)(a->n_kv_head * x.nsub));
    k->fn<<<grid, k->nw * 32, smem, cb->stream>>>(out, q, x);
    cu_after_launch(cb, "attention (tensor cores)");
    return 1;
}
