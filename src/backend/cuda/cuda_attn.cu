/* cuda_attn.cu — attention over the paged KV cache on the GPU (flash-decoding).
 *
 * A block serves one token, one KV head and hg of its query heads (one warp each), over one
 * split of the token's positions. Positions stream through shared memory in chunks of
 * AT_CH rows (K and V converted to float); per chunk a lane scores one position, the warp
 * updates its online softmax once, and each lane accumulates head_dim/32 output dims.
 * Steps of up to AT_SPLIT_MAX_TOK tokens split every context into absolute position
 * ranges of AT_SPLIT positions (so a token's result never depends on the rest of the batch
 * or on the context capacity); a second kernel merges the splits. Longer steps (prefill)
 * run one split per token, and a block serves a tile of up to AT_TQ consecutive tokens
 * (one warp per token and head): each run of tokens of one sequence in the tile loads a
 * K/V chunk once for all of them, each warp masking the positions its token does not see.
 * head_dim is limited to 256. Steps of up to cu_be.inv_rows tokens (CINFER_CUDA_INVARIANT_ROWS)
 * run as consecutive ranges of AT_SPLIT_MAX_TOK tokens on the short-step kernels (the decode
 * kernel of cuda_attn_dec.cu or split mode here), so a verify row or a short prompt chunk
 * gets a decode step's bits; only longer steps take the tensor-core or long-step paths.
 */
#include <limits.h>
#include <math.h>

#include "backend/cuda/cuda_int.cuh"

extern "C" {
#include "backend/kvq.h"
}

enum {
    AT_CH = 32,              /* positions per shared-memory chunk */
    AT_MAX_HD = 256,         /* largest head_dim (8 dims per lane) */
    AT_MAX_HG = 8,           /* query heads (warps) per block */
    AT_SPLIT = 64,           /* positions per split in split mode */
    AT_SPLIT_MAX_TOK = 64,   /* steps of at most this many tokens use split mode */
    AT_TQ = 8,               /* most tokens per block in longer steps */
    AT_MAX_WARPS = 16,       /* warps (tokens x heads) per block (<= 128 registers a thread) */
};

struct at_args {
    int n_tok, n_head, n_kv_head, head_dim;
    float scale, softcap;
    int window;
    const int32_t *pos, *seq, *block_tables;
    int max_blocks, block_size;
    const void *k_cache, *v_cache;
};

/* Loads positions c0 .. c0+nrow of kv head g into shared memory as float: K with rows
 * hd+1 apart (conflict-free row-wise dots), V with rows hd apart. Row indices come first
 * (one block-table read per row, in parallel); then each thread issues up to AT_LD
 * independent 8-element loads before storing any (the loads do not wait on each other). */
enum { AT_LD = 4 };
template <int F16>
__device__ __forceinline__ void at_load(float *ks, float *vs, int *rows, const at_args &a,
                                        const int32_t *bt, int c0, int nrow, int g)
{
    const int hd = a.head_dim, kvd = a.n_kv_head * hd;
    if (threadIdx.x < nrow) {
        int p = c0 + threadIdx.x;
        rows[threadIdx.x] = bt[p / a.block_size] * a.block_size + p % a.block_size;
    }
    __syncthreads();
    if (hd % 8 == 0) {
        const int vpr = hd / 8, nv = nrow * vpr;
        for (int base = threadIdx.x; base < nv; base += AT_LD * blockDim.x) {
            float kf[AT_LD][8], vf[AT_LD][8];
#pragma unroll
            for (int u = 0; u < AT_LD; u++) {
                int idx = base + u * blockDim.x;
                if (idx >= nv)
                    break;
                int j = idx / vpr, c = idx - j * vpr;
                size_t off = (size_t)rows[j] * kvd + (size_t)g * hd + 8 * c;
                if (F16) {
                    uint4 kk = *(const uint4 *)((const __half *)a.k_cache + off);
                    uint4 vv = *(const uint4 *)((const __half *)a.v_cache + off);
                    const __half2 *kh = (const __half2 *)&kk, *vh = (const __half2 *)&vv;
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        float2 k2 = __half22float2(kh[i]), v2 = __half22float2(vh[i]);
                        kf[u][2 * i] = k2.x, kf[u][2 * i + 1] = k2.y;
                        vf[u][2 * i] = v2.x, vf[u][2 * i + 1] = v2.y;
                    }
                } else {
                    const float4 *kp = (const float4 *)((const float *)a.k_cache + off);
                    const float4 *vp = (const float4 *)((const float *)a.v_cache + off);
                    float4 k0 = kp[0], k1 = kp[1], v0 = vp[0], v1 = vp[1];
                    kf[u][0] = k0.x, kf[u][1] = k0.y, kf[u][2] = k0.z, kf[u][3] = k0.w;
                    kf[u][4] = k1.x, kf[u][5] = k1.y, kf[u][6] = k1.z, kf[u][7] = k1.w;
                    vf[u][0] = v0.x, vf[u][1] = v0.y, vf[u][2] = v0.z, vf[u][3] = v0.w;
                    vf[u][4] = v1.x, vf[u][5] = v1.y, vf[u][6] = v1.z, vf[u][7] = v1.w;
                }
            }
#pragma unroll
            for (int u = 0; u < AT_LD; u++) {
                int idx = base + u * blockDim.x;
                if (idx >= nv)
                    break;
                int j = idx / vpr, c = idx - j * vpr;
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    ks[j * (hd + 1) + 8 * c + i] = kf[u][i];
                    vs[j * hd + 8 * c + i] = vf[u][i];
                }
            }
        }
    } else {
        for (int idx = threadIdx.x; idx < nrow * hd; idx += blockDim.x) {
            int j = idx / hd, d = idx - j * hd;
            size_t off = (size_t)rows[j] * kvd + (size_t)g * hd + d;
            ks[j * (hd + 1) + d] = F16 ? __half2float(((const __half *)a.k_cache)[off])
                                       : ((const float *)a.k_cache)[off];
            vs[j * hd + d] = F16 ? __half2float(((const __half *)a.v_cache)[off])
                                 : ((const float *)a.v_cache)[off];
        }
    }
    __syncthreads();
}

template <int F16>
__global__ void __launch_bounds__(AT_MAX_WARPS * 32, 1)
    k_attn(float *out, float *part, const float *q, struct at_args a, int hg, int nsub,
           int split_len, int n_split, int tq)
{
    extern __shared__ float sm[];
    __shared__ int rows[AT_CH];
    const int hd = a.head_dim;
    const int g = blockIdx.y / nsub, sub = blockIdx.y % nsub, group = a.n_head / a.n_kv_head;
    const int w = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int u = w / hg, wh = w % hg; /* this warp: token t0 + u, query head h0 + wh */
    const int t0 = blockIdx.x * tq, nt = a.n_tok - t0 < tq ? a.n_tok - t0 : tq;
    const int t = t0 + u, h0 = g * group + sub * hg, h = h0 + wh;
    const bool tok_ok = u < nt;
    float *qs = sm, *ks = sm + tq * hg * hd, *vs = ks + AT_CH * (hd + 1);
    for (int i = threadIdx.x; i < nt * hg * hd; i += blockDim.x) {
        int uu = i / (hg * hd), r = i - uu * hg * hd;
        qs[i] = q[((size_t)(t0 + uu) * a.n_head + h0) * hd + r];
    }
    /* this warp's positions in this split: [my0, my1) */
    const int z0 = blockIdx.z * split_len;
    int my0 = 0, my1 = 0;
    if (tok_ok) {
        int pos = a.pos[t], lo = a.window > 0 && pos - a.window + 1 > 0 ? pos - a.window + 1 : 0;
        my0 = z0 > lo ? z0 : lo;
        my1 = z0 + split_len < pos + 1 ? z0 + split_len : pos + 1;
    }
    float m = -INFINITY, l = 0.0f, acc[AT_MAX_HD / 32];
#pragma unroll
    for (int i = 0; i < AT_MAX_HD / 32; i++)
        acc[i] = 0.0f;
    /* runs of tokens of one sequence share each K/V chunk */
    for (int r0 = 0; r0 < nt;) {
        const int sq = a.seq[t0 + r0];
        int r1 = r0 + 1;
        while (r1 < nt && a.seq[t0 + r1] == sq)
            r1++;
        int b0 = INT_MAX, b1 = 0; /* union of the run's ranges (block-uniform) */
        for (int k = r0; k < r1; k++) {
            int p = a.pos[t0 + k], lo = a.window > 0 && p - a.window + 1 > 0 ? p - a.window + 1 : 0;
            int s0 = z0 > lo ? z0 : lo, s1 = z0 + split_len < p + 1 ? z0 + split_len : p + 1;
            if (s0 < s1)
                b0 = s0 < b0 ? s0 : b0, b1 = s1 > b1 ? s1 : b1;
        }
        const bool active = tok_ok && u >= r0 && u < r1; /* warp-uniform */
        const int32_t *bt = a.block_tables + (size_t)sq * a.max_blocks;
        for (int c0 = b0; c0 < b1; c0 += AT_CH) {
            const int nrow = b1 - c0 < AT_CH ? b1 - c0 : AT_CH;
            __syncthreads(); /* the previous chunk is consumed */
            at_load<F16>(ks, vs, rows, a, bt, c0, nrow, g);
            if (!active)
                continue;
            const int p = c0 + lane;
            const bool valid = lane < nrow && p >= my0 && p < my1;
            float s = -INFINITY;
            if (valid) {
                const float *kr = ks + lane * (hd + 1), *qr = qs + (u * hg + wh) * hd;
                float dot = 0.0f;
                for (int i = 0; i < hd; i++)
                    dot = fmaf(qr[i], kr[i], dot);
                s = dot * a.scale;
                if (a.softcap > 0.0f)
                    s = a.softcap * tanhf(s / a.softcap);
            }
            const float cm = cu_warp_max(s);
            if (cm == -INFINITY) /* no position of this chunk for this token */
                continue;
            const float mn = fmaxf(m, cm);
            const float f = expf(m - mn);
            const float pw = valid ? expf(s - mn) : 0.0f;
            l = l * f + cu_warp_sum(pw);
#pragma unroll
            for (int i = 0; i < AT_MAX_HD / 32; i++)
                acc[i] *= f;
            for (int j = 0; j < nrow; j++) {
                const float pj = __shfl_sync(0xffffffffu, pw, j);
                const float *vr = vs + j * hd;
#pragma unroll
                for (int i = 0; i < AT_MAX_HD / 32; i++)
                    if (lane + 32 * i < hd)
                        acc[i] = fmaf(pj, vr[lane + 32 * i], acc[i]);
            }
            m = mn;
        }
        r0 = r1;
    }
    if (!tok_ok)
        return;
    if (n_split == 1) {
        float inv = l > 0.0f ? 1.0f / l : 0.0f;
        float *o = out + ((size_t)t * a.n_head + h) * hd;
#pragma unroll
        for (int i = 0; i < AT_MAX_HD / 32; i++)
            if (lane + 32 * i < hd)
                o[lane + 32 * i] = acc[i] * inv;
        return;
    }
    float *pp = part + (((size_t)t * a.n_head + h) * n_split + blockIdx.z) * (hd + 2);
    if (lane == 0)
        pp[0] = m, pp[1] = l;
#pragma unroll
    for (int i = 0; i < AT_MAX_HD / 32; i++)
        if (lane + 32 * i < hd)
            pp[2 + lane + 32 * i] = acc[i];
}

/* out row (t, h) = merge of its n_split partial softmaxes, in split order. */
__global__ void k_attn_merge(float *out, const float *part, int hd, int n_split)
{
    const float *pp = part + (size_t)blockIdx.x * n_split * (hd + 2);
    float mx = -INFINITY;
    for (int z = 0; z < n_split; z++)
        if (pp[z * (hd + 2) + 1] > 0.0f)
            mx = fmaxf(mx, pp[z * (hd + 2)]);
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float L = 0.0f, o = 0.0f;
        for (int z = 0; z < n_split; z++) {
            const float *pz = pp + z * (hd + 2);
            if (pz[1] > 0.0f) {
                float f = expf(pz[0] - mx);
                L += f * pz[1];
                o += f * pz[2 + d];
            }
        }
        out[(size_t)blockIdx.x * hd + d] = L > 0.0f ? o * (1.0f / L) : 0.0f;
    }
}

static size_t at_smem(int hg, int hd) { return ((size_t)hg * hd + (size_t)AT_CH * (2 * hd + 1)) * 4; }

cudaError_t cu_attn_init(struct cu_be *cb)
{
    size_t need = at_smem(AT_MAX_WARPS, AT_MAX_HD);
    if (need > cb->smem_optin)
        need = cb->smem_optin;
    cudaError_t rc = cudaFuncSetAttribute(k_attn<0>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          (int)need);
    if (rc == cudaSuccess)
        rc = cudaFuncSetAttribute(k_attn<1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)need);
    if (rc == cudaSuccess)
        rc = cu_attn_decode_init(cb);
    if (rc == cudaSuccess)
        rc = cu_attn_tc_init(cb);
    if (rc == cudaSuccess)
        rc = cu_kvq_init(cb);
    return rc;
}

void cu_attention(struct be *b, float *out, const float *q, const struct be_attn *a)
{
    struct cu_be *cb = cu_be(b);
    if (a->n_tok <= 0)
        return;
    if (a->head_dim > AT_MAX_HD || a->head_dim <= 0 || a->n_kv_head <= 0 ||
        a->n_head % a->n_kv_head) {
        cu_latch(cb, "attention (head_dim above 256 or bad head counts)", cudaErrorInvalidValue);
        return;
    }
    if (a->n_tok > AT_SPLIT_MAX_TOK && a->n_tok <= cb->inv_rows) {
        /* row invariant (cu_be.inv_rows): consecutive ranges of AT_SPLIT_MAX_TOK tokens, each
         * on the kernels of short steps, whose result for a token depends only on that
         * token (its position, sequence and the cache), never on the rest of the step */
        const size_t qd = (size_t)a->n_head * a->head_dim;
        for (int t0 = 0; t0 < a->n_tok; t0 += AT_SPLIT_MAX_TOK) {
            struct be_attn s = *a;
            s.n_tok = a->n_tok - t0 < AT_SPLIT_MAX_TOK ? a->n_tok - t0 : AT_SPLIT_MAX_TOK;
            s.pos = a->pos + t0;
            s.seq = a->seq + t0;
            cu_attention(b, out + (size_t)t0 * qd, q + (size_t)t0 * qd, &s);
        }
        return;
    }
    if (kvq_is(a->kv_dtype)) { /* quantized KV blocks: cuda_kvq.cu */
        cu_kvq_attention(cb, out, q, a);
        return;
    }
    if (cu_attn_decode(cb, out, q, a) || cu_attn_prefill_tc(cb, out, q, a))
        return;
    int group = a->n_head / a->n_kv_head, hg = AT_MAX_HG < group ? AT_MAX_HG : group;
    while (group % hg)
        hg--;
    int nsub = group / hg;
    int ctx = a->max_blocks * a->block_size;
    int split_len = a->n_tok <= AT_SPLIT_MAX_TOK ? AT_SPLIT : ctx;
    int n_split = (ctx + split_len - 1) / split_len;
    float *part = NULL;
    if (n_split > 1) {
        part = (float *)cu_scratch(cb, CU_SCRATCH_ATT, (size_t)a->n_tok * a->n_head * n_split *
                                                          (a->head_dim + 2) * sizeof(float));
        if (!part)
            return;
    }
    struct at_args x = {a->n_tok,   a->n_head,    a->n_kv_head, a->head_dim,
                        a->scale,   a->softcap,   a->window,    a->pos,
                        a->seq,     a->block_tables, a->max_blocks, a->block_size,
                        a->k_cache, a->v_cache};
    /* long steps: tiles of tq tokens share each K/V chunk (one warp per token and head) */
    int tq = n_split == 1 && a->n_tok > AT_SPLIT_MAX_TOK ? (AT_TQ < AT_MAX_WARPS / hg ? AT_TQ : AT_MAX_WARPS / hg) : 1;
    dim3 grid((unsigned)((a->n_tok + tq - 1) / tq), (unsigned)(a->n_kv_head * nsub),
              (unsigned)n_split);
    size_t smem = at_smem(tq * hg, a->head_dim);
    if (a->kv_dtype == DT_F16)
        k_attn<1><<<grid, tq * hg * 32, smem, cb->stream>>>(out, part, q, x, hg, nsub, split_len,
                                                          n_split, tq);
    else
        k_attn<0><<<grid, tq * hg * 32, smem, cb->stream>>>(out, part, q, x, hg, nsub, split_len,
                                                          n_split, tq);
    cu_after_launch(cb, "attention");
    if (n_split > 1) {
        int th = a->head_dim < 32 ? 32 : (a->head_dim + 31) / 32 * 32;
        k_attn_merge<<<(unsigned)(a->n_tok * a->n_head), th, 0, cb->stream>>>(out, part,
                                                                             a->head_dim, n_split);
        cu_after_launch(cb, "attention merge");
    }
}
