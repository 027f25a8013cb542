/* cuda_kvq.cu — quantized KV cache rows on the GPU (the formats of backend/kvq.h): the K/V
 * store that quantizes rows, and attention that reads the quantized blocks directly.
 *
 * Store: a block per (token, KV head, side). The head's row is rotated in shared memory when
 * that side is rotated (the same sign diagonal, butterfly order and scale as kvq_rotate), a
 * group leader computes the group's header (affine: f16 scale and minimum; Lloyd-Max: f16
 * RMS, summed in double in element order), every thread codes one element, and a thread per
 * 8 elements packs their codes (8 codes per b bytes, little-endian). Every operation is the
 * CPU's (kvq_quant_group), IEEE-rounded, so the stored bytes equal kvq_store_row's.
 *
 * Attention: the general kernel's scheme (cuda_attn.cu: a block serves one token tile, one
 * KV head and up to 8 of its query heads, one warp each; positions stream through shared
 * memory in chunks of 32 rows; an online softmax per warp), with the chunk loader decoding
 * the quantized rows into float in shared memory — no full-precision copy of the cache
 * exists. A rotated K side is met by rotating the block's q rows once in shared memory
 * (q.k = Hq.Hk); a rotated V side by unrotating each output row once (sum p Hv = H sum p v),
 * in the warp's shared q row when the token has one split, else in the merge kernel. Steps
 * of up to KQ_SPLIT_MAX_TOK tokens split every context into absolute position ranges of
 * KQ_SPLIT positions (a token's result never depends on the batch or the context capacity),
 * merged in split order by a second kernel; longer steps run one split per token, tiles of up
 * to KQ_TQ tokens of one sequence sharing each decoded chunk. head_dim <= 256, a multiple of 8
 * (kvq_code's rule).
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_kvq.cuh"

enum {
    KQ_CH = 32,            /* positions per shared-memory chunk */
    KQ_MAX_HG = 8,         /* query heads (warps) per block */
    KQ_SPLIT = 128,        /* positions per split in split mode */
    KQ_SPLIT_MAX_TOK = 64, /* steps of at most this many tokens use split mode */
    KQ_TQ = 8,             /* most tokens per block in longer steps */
    KQ_MAX_WARPS = 16,     /* warps (tokens x heads) per block */
};

/* The codebooks, one after another (offsets: kq_lm_off), copied in at cu_kvq_init. */
__constant__ float c_kq_lm[KQ_LM_N];

__device__ __forceinline__ float kq_h2f(const uint8_t *p) { return cu_f16(cu_ld16(p)); }

/* Elements e .. e+7 (e a multiple of 8) of the head record hp (its first group) into y; cb:
 * the side's codebook (Lloyd-Max formats), best in shared memory (lanes index it freely). */
__device__ __forceinline__ void kq_dec8(const kq_side &s, int G, const uint8_t *hp, int e,
                                        float *y, const float *cb)
{
    const uint8_t *gp = hp + (size_t)(e / G) * s.gb;
    const int o = (e % G) / 8;
    if (s.fmt == KVF_F32) {
        const float *f = (const float *)gp + 8 * o;
#pragma unroll
        for (int i = 0; i < 8; i++)
            y[i] = f[i];
        return;
    }
    if (s.fmt == KVF_F16) {
        const uint16_t *h = (const uint16_t *)gp + 8 * o;
#pragma unroll
        for (int i = 0; i < 8; i++)
            y[i] = cu_f16(h[i]);
        return;
    }
    const uint8_t *c = gp + s.hdr + o * s.bits;
    uint64_t acc = 0;
#pragma unroll
    for (int j = 0; j < 8; j++)
        if (j < s.bits)
            acc |= (uint64_t)c[j] << (8 * j);
    const uint32_t mask = (1u << s.bits) - 1u;
    if (s.hdr == 2) {
        const float sc = kq_h2f(gp);
#pragma unroll
        for (int i = 0; i < 8; i++)
            y[i] = __fmul_rn(sc, cb[(acc >> (i * s.bits)) & mask]);
    } else {
        const float d = kq_h2f(gp), m = kq_h2f(gp + 2);
#pragma unroll
        for (int i = 0; i < 8; i++)
            y[i] = __fadd_rn(m, __fmul_rn(d, (float)((acc >> (i * s.bits)) & mask)));
    }
}

/* ---- store ---- */

struct kq_store_args {
    uint8_t *kc, *vc;
    const float *k, *v;
    const int32_t *slots;
    int kvd, hd, G;
    kq_side s[2];
};

/* grid (n_tok, n_kv_head, 2: K then V), block: head_dim rounded up to 32 threads (thread i
 * holds element i: kq_quant_head in cuda_kvq.cuh). */

/* Token t's KV head g of side w (0 K, 1 V) quantized into the cache (every thread of the
 * block calls it; the source row is read through L2: it may have been written by this
 * block just before, behind a barrier). */
__device__ void kq_store_head(const kq_store_args &a, int t, int g, int w, kq_store_sm &sm)
{
    const int i = threadIdx.x;
    const int hd = a.hd, G = a.G, ng = hd / G;
    const kq_side s = w ? a.s[1] : a.s[0]; /* (not a.s[w]: no local copy of the array) */
    const float *src = (w ? a.v : a.k) + (size_t)t * a.kvd + (size_t)g * hd;
    uint8_t *dst = (w ? a.vc : a.kc) + (size_t)a.slots[t] * s.rb + (size_t)g * ng * s.gb;
    const float v = i < hd ? __ldcg(src + i) : 0.0f;
    kq_quant_head(s, hd, G, v, dst, c_kq_lm + s.lmo, sm);
}

__global__ void k_kvq_store(kq_store_args a)
{
    __shared__ kq_store_sm sm;
    kq_store_head(a, blockIdx.x, blockIdx.y, blockIdx.z, sm);
}

/* rope(q), rope(k), kv_store(k, v) in one launch. grid (n_tok, n_head + 2 n_kv_head), block:
 * head_dim rounded up to 32 threads. Block (t, h < n_head) rotates q head h in place; block
 * (t, n_head + g) rotates k head g in place, then quantizes and stores that head's K; block
 * (t, n_head + n_kv_head + g) quantizes and stores head g's V (session 15: V in blocks of its
 * own, beside K's, not after it in the same block: the launch's longest block is one side's
 * store; the same functions, so the same bytes). */
__global__ void k_kvq_rope_store(kq_store_args a, kq_rope_args r)
{
    __shared__ kq_store_sm sm;
    const int t = blockIdx.x, hh = blockIdx.y;
    const float pos = (float)r.pos[t];
    if (hh < r.n_head) {
        float *qh = r.q + ((size_t)t * r.n_head + hh) * a.hd;
        for (int i = threadIdx.x; i < r.half; i += blockDim.x)
            kq_rope_pair(qh, i, r, pos);
        return;
    }
    const int n_kv = a.kvd / a.hd;
    if (hh >= r.n_head + n_kv) {
        kq_store_head(a, t, hh - r.n_head - n_kv, 1, sm);
        return;
    }
    const int g = hh - r.n_head;
    float *kh = r.k + (size_t)t * a.kvd + (size_t)g * a.hd;
    for (int i = threadIdx.x; i < r.half; i += blockDim.x)
        kq_rope_pair(kh, i, r, pos);
    __syncthreads(); /* this head's k rotated (read back through L2 by the store) */
    kq_store_head(a, t, g, 0, sm);
}

static int g_kq_fuse_rope = 1; /* CINFER_KVQ_ROPE_STORE=split: three launches (measurement) */

int cu_kvq_rope_store(struct cu_be *cb, const struct be_rope_kv *r)
{
    const int hd = kvq_head_dim_of(r->kv_dtype), kvd = r->n_kv_head * r->head_dim;
    if (!g_kq_fuse_rope || hd != r->head_dim || hd > KQ_MAX_HD || r->rot_dim > hd ||
        r->rot_dim % 2 || (long long)r->n_head + 2ll * r->n_kv_head > 65535)
        return 0;
    if (r->n_tok <= 0)
        return 1;
    kq_store_args x;
    x.kc = (uint8_t *)r->k_cache, x.vc = (uint8_t *)r->v_cache, x.k = r->k, x.v = r->v;
    x.slots = r->slots, x.kvd = kvd, x.hd = hd, x.G = kvq_group_of(r->kv_dtype);
    x.s[0] = kq_side_of(r->kv_dtype, 0, kvd);
    x.s[1] = kq_side_of(r->kv_dtype, 1, kvd);
    kq_rope_args ra;
    ra.q = r->q, ra.k = r->k, ra.pos = r->pos, ra.n_head = r->n_head, ra.half = r->rot_dim / 2;
    ra.neox = r->mode == BE_ROPE_NEOX, ra.inv_freq = r->inv_freq, ra.mscale = r->mscale;
    k_kvq_rope_store<<<dim3((unsigned)r->n_tok, (unsigned)(r->n_head + 2 * r->n_kv_head)),
                       (hd + 31) / 32 * 32, 0, cb->stream>>>(x, ra);
    cu_after_launch(cb, "rope + kv_store (quantized)");
    return 1;
}

void cu_kvq_store(struct cu_be *cb, void *k_cache, void *v_cache, int kv_dtype, const float *k,
                  const float *v, const int32_t *slots, int n_tok, int kv_dim)
{
    const int hd = kvq_head_dim_of(kv_dtype);
    if (n_tok <= 0)
        return;
    if (hd <= 0 || hd > KQ_MAX_HD || kv_dim % hd) {
        cu_latch(cb, "kv_store (quantized: bad head_dim)", cudaErrorInvalidValue);
        return;
    }
    kq_store_args x;
    x.kc = (uint8_t *)k_cache, x.vc = (uint8_t *)v_cache, x.k = k, x.v = v, x.slots = slots;
    x.kvd = kv_dim, x.hd = hd, x.G = kvq_group_of(kv_dtype);
    x.s[0] = kq_side_of(kv_dtype, 0, kv_dim);
    x.s[1] = kq_side_of(kv_dtype, 1, kv_dim);
    k_kvq_store<<<dim3((unsigned)n_tok, (unsigned)(kv_dim / hd), 2), (hd + 31) / 32 * 32, 0,
                  cb->stream>>>(x);
    cu_after_launch(cb, "kv_store (quantized)");
}

/* ---- attention ---- */

struct kq_args {
    int n_tok, n_head, n_kv_head, head_dim, G;
    float scale, softcap;
    int window;
    const int32_t *pos, *seq, *block_tables;
    int max_blocks, block_size;
    const uint8_t *k_cache, *v_cache;
    kq_side s[2];
};

/* Decodes positions c0 .. c0+nrow of kv head g into shared memory as float: K with rows hd+1
 * apart (conflict-free row-wise dots), V with rows hd apart. A thread per 8 elements. */
__device__ __forceinline__ void kq_load(float *ks, float *vs, int *rows, const kq_args &a,
                                        const int32_t *bt, int c0, int nrow, int g,
                                        const float *cbk, const float *cbv)
{
    const int hd = a.head_dim;
    if (threadIdx.x < nrow) {
        int p = c0 + threadIdx.x;
        rows[threadIdx.x] = bt[p / a.block_size] * a.block_size + p % a.block_size;
    }
    __syncthreads();
    const int vpr = hd / 8, nv = nrow * vpr, ng = hd / a.G;
    const size_t kh = (size_t)g * ng * a.s[0].gb, vh = (size_t)g * ng * a.s[1].gb;
    for (int idx = threadIdx.x; idx < nv; idx += blockDim.x) {
        const int j = idx / vpr, c = idx - j * vpr;
        float kf[8], vf[8];
        kq_dec8(a.s[0], a.G, a.k_cache + (size_t)rows[j] * a.s[0].rb + kh, 8 * c, kf, cbk);
        kq_dec8(a.s[1], a.G, a.v_cache + (size_t)rows[j] * a.s[1].rb + vh, 8 * c, vf, cbv);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            ks[j * (hd + 1) + 8 * c + i] = kf[i];
            vs[j * hd + 8 * c + i] = vf[i];
        }
    }
    __syncthreads();
}

__global__ void __launch_bounds__(KQ_MAX_WARPS * 32, 1)
    k_kvq_attn(float *out, float *part, const float *q, struct kq_args a, int hg, int nsub,
               int split_len, int n_split, int tq)
{
    extern __shared__ float sm[];
    __shared__ int rows[KQ_CH];
    __shared__ float cbs[2][256]; /* the sides' Lloyd-Max codebooks */
    const int hd = a.head_dim;
    if (n_split > 1) { /* a split past every token of the block: k_kvq_merge never reads it
                        * (the grid follows the capacity, the tokens are often far shorter) */
        const int tb = blockIdx.x * tq, ne = a.n_tok - tb < tq ? a.n_tok - tb : tq;
        bool any = false;
        for (int k = 0; k < ne; k++)
            any = any || (int)blockIdx.z * split_len <= a.pos[tb + k];
        if (!any)
            return;
    }
    for (int w2 = 0; w2 < 2; w2++)
        if (a.s[w2].hdr == 2)
            for (int i = threadIdx.x; i < (1 << a.s[w2].bits); i += blockDim.x)
                cbs[w2][i] = c_kq_lm[a.s[w2].lmo + i];
    const int g = blockIdx.y / nsub, sub = blockIdx.y % nsub, group = a.n_head / a.n_kv_head;
    const int w = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int u = w / hg, wh = w % hg; /* this warp: token t0 + u, query head h0 + wh */
    const int t0 = blockIdx.x * tq, nt = a.n_tok - t0 < tq ? a.n_tok - t0 : tq;
    const int t = t0 + u, h0 = g * group + sub * hg, h = h0 + wh;
    const bool tok_ok = u < nt;
    float *qs = sm, *ks = sm + tq * hg * hd, *vs = ks + KQ_CH * (hd + 1);
    for (int i = threadIdx.x; i < nt * hg * hd; i += blockDim.x) {
        int uu = i / (hg * hd), r = i - uu * hg * hd;
        qs[i] = q[((size_t)(t0 + uu) * a.n_head + h0) * hd + r];
    }
    if (a.s[0].rot) /* keys are stored rotated: so is q, once */
        kq_rotate_rows(qs, nt * hg, hd, 0);
    /* this warp's positions in this split: [my0, my1) */
    const int z0 = blockIdx.z * split_len;
    int my0 = 0, my1 = 0;
    if (tok_ok) {
        int pos = a.pos[t], lo = a.window > 0 && pos - a.window + 1 > 0 ? pos - a.window + 1 : 0;
        my0 = z0 > lo ? z0 : lo;
        my1 = z0 + split_len < pos + 1 ? z0 + split_len : pos + 1;
    }
    float m = -INFINITY, l = 0.0f, acc[KQ_MAX_HD / 32];
#pragma unroll
    for (int i = 0; i < KQ_MAX_HD / 32; i++)
        acc[i] = 0.0f;
    for (int r0 = 0; r0 < nt;) { /* runs of tokens of one sequence share each chunk */
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
        for (int c0 = b0; c0 < b1; c0 += KQ_CH) {
            const int nrow = b1 - c0 < KQ_CH ? b1 - c0 : KQ_CH;
            __syncthreads(); /* the previous chunk is consumed */
            kq_load(ks, vs, rows, a, bt, c0, nrow, g, cbs[0], cbs[1]);
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
            for (int i = 0; i < KQ_MAX_HD / 32; i++)
                acc[i] *= f;
            for (int j = 0; j < nrow; j++) {
                const float pj = __shfl_sync(0xffffffffu, pw, j);
                const float *vr = vs + j * hd;
#pragma unroll
                for (int i = 0; i < KQ_MAX_HD / 32; i++)
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
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        float *o = out + ((size_t)t * a.n_head + h) * hd;
        if (!a.s[1].rot) {
#pragma unroll
            for (int i = 0; i < KQ_MAX_HD / 32; i++)
                if (lane + 32 * i < hd)
                    o[lane + 32 * i] = acc[i] * inv;
            return;
        }
        /* values are stored rotated: unrotate the row in this warp's own q row (no other
         * warp reads it, and no block-wide barrier follows) */
        float *x = qs + (u * hg + wh) * hd;
        __syncwarp();
#pragma unroll
        for (int i = 0; i < KQ_MAX_HD / 32; i++)
            if (lane + 32 * i < hd)
                x[lane + 32 * i] = acc[i] * inv;
        __syncwarp();
        for (int hh = 1; hh < hd; hh *= 2) {
            for (int p = lane; p < hd / 2; p += 32) {
                const int j = (p / hh) * 2 * hh + p % hh;
                const float av = x[j], bv = x[j + hh];
                x[j] = av + bv;
                x[j + hh] = av - bv;
            }
            __syncwarp();
        }
        const float sc = 1.0f / sqrtf((float)hd);
        for (int d = lane; d < hd; d += 32)
            o[d] = x[d] * (sc * kq_sign(d));
        return;
    }
    float *pp = part + (((size_t)t * a.n_head + h) * n_split + blockIdx.z) * (hd + 2);
    if (lane == 0)
        pp[0] = m, pp[1] = l;
#pragma unroll
    for (int i = 0; i < KQ_MAX_HD / 32; i++)
        if (lane + 32 * i < hd)
            pp[2 + lane + 32 * i] = acc[i];
}

/* out row (t, h) = merge of its n_split partial softmaxes, in split order; unrotated when the
 * values are stored rotated. A block per row. With split_len > 0 (the general kernel's fixed
 * position ranges) only the splits up to the token's own position are read: the grid is
 * sized by the context capacity (a captured graph replays it at every position), the splits
 * past the token are empty (l = 0, skipped anyway), and reading them made the merge cost
 * grow with the capacity, one dependent load after another. The sum order is unchanged. */
__global__ void k_kvq_merge(float *out, const float *part, int hd, int n_split, int rot,
                            const int32_t *pos, int n_head, int split_len)
{
    __shared__ float x[KQ_MAX_HD];
    const float *pp = part + (size_t)blockIdx.x * n_split * (hd + 2);
    int ns = n_split;
    if (split_len > 0) {
        const int last = pos[blockIdx.x / n_head] / split_len + 1;
        ns = last < ns ? last : ns;
    }
    float mx = -INFINITY;
#pragma unroll 8
    for (int z = 0; z < ns; z++)
        if (pp[z * (hd + 2) + 1] > 0.0f)
            mx = fmaxf(mx, pp[z * (hd + 2)]);
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float L = 0.0f, o = 0.0f;
#pragma unroll 8
        for (int z = 0; z < ns; z++) {
            const float *pz = pp + z * (hd + 2);
            if (pz[1] > 0.0f) {
                float f = expf(pz[0] - mx);
                L += f * pz[1];
                o += f * pz[2 + d];
            }
        }
        x[d] = L > 0.0f ? o * (1.0f / L) : 0.0f;
    }
    if (rot)
        kq_rotate_rows(x, 1, hd, 1);
    else
        __syncthreads();
    for (int d = threadIdx.x; d < hd; d += blockDim.x)
        out[(size_t)blockIdx.x * hd + d] = x[d];
}

static size_t kq_smem(int hg, int hd)
{
    return ((size_t)hg * hd + (size_t)KQ_CH * (2 * hd + 1)) * 4;
}

cudaError_t cu_kvq_init(struct cu_be *cb)
{
    size_t need = kq_smem(KQ_MAX_WARPS, KQ_MAX_HD);
    if (need > cb->smem_optin)
        need = cb->smem_optin;
    cudaError_t rc = cudaFuncSetAttribute(k_kvq_attn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          (int)need);
    const char *rs = getenv("CINFER_KVQ_ROPE_STORE");
    g_kq_fuse_rope = !(rs && !strcmp(rs, "split"));
    if (rc == cudaSuccess)
        rc = cu_kvq_decode_init(cb);
    float lm[KQ_LM_N];
    static const int bits[5] = {2, 3, 4, 5, 8};
    for (int i = 0; i < 5; i++) {
        const float *c = kvq_lm_codebook(bits[i], NULL);
        for (int k = 0; k < (1 << bits[i]); k++)
            lm[kq_lm_off(bits[i]) + k] = c[k];
    }
    if (rc == cudaSuccess)
        rc = cudaMemcpyToSymbol(c_kq_lm, lm, sizeof lm);
    return rc;
}

int cu_kvq_attention_store(struct cu_be *cb, float *out, const float *q, const struct be_attn *a,
                           const struct be_rope_kv *r)
{
    const int hd = a->head_dim;
    if (a->n_tok <= 0 || a->n_tok > KQ_SPLIT_MAX_TOK || !a->one_per_seq || hd % 8 ||
        hd > KQ_MAX_HD || hd != kvq_head_dim_of(a->kv_dtype) || a->n_kv_head <= 0 ||
        a->n_head % a->n_kv_head || r->n_tok != a->n_tok || r->kv_dtype != a->kv_dtype)
        return 0;
    return cu_kvq_decode_store(cb, out, q, a, r);
}

void cu_kvq_attention(struct cu_be *cb, float *out, const float *q, const struct be_attn *a)
{
    const int hd = a->head_dim;
    if (hd % 8 || hd != kvq_head_dim_of(a->kv_dtype)) {
        cu_latch(cb, "attention (quantized KV: head_dim does not match the scheme)",
                 cudaErrorInvalidValue);
        return;
    }
    if (a->n_tok <= KQ_SPLIT_MAX_TOK && cu_kvq_decode(cb, out, q, a))
        return; /* the decode path (cuda_kvq_dec.cu) */
    int group = a->n_head / a->n_kv_head, hg = KQ_MAX_HG < group ? KQ_MAX_HG : group;
    while (group % hg)
        hg--;
    const int nsub = group / hg, ctx = a->max_blocks * a->block_size;
    const int split_len = a->n_tok <= KQ_SPLIT_MAX_TOK ? KQ_SPLIT : ctx;
    const int n_split = (ctx + split_len - 1) / split_len;
    kq_args x;
    x.n_tok = a->n_tok, x.n_head = a->n_head, x.n_kv_head = a->n_kv_head, x.head_dim = hd;
    x.G = kvq_group_of(a->kv_dtype);
    x.scale = a->scale, x.softcap = a->softcap, x.window = a->window;
    x.pos = a->pos, x.seq = a->seq, x.block_tables = a->block_tables;
    x.max_blocks = a->max_blocks, x.block_size = a->block_size;
    x.k_cache = (const uint8_t *)a->k_cache, x.v_cache = (const uint8_t *)a->v_cache;
    const int kvd = a->n_kv_head * hd;
    x.s[0] = kq_side_of(a->kv_dtype, 0, kvd);
    x.s[1] = kq_side_of(a->kv_dtype, 1, kvd);
    float *part = NULL;
    if (n_split > 1) {
        part = (float *)cu_scratch(cb, CU_SCRATCH_ATT, (size_t)a->n_tok * a->n_head * n_split *
                                                          (hd + 2) * sizeof(float));
        if (!part)
            return;
    }
    const int tq = n_split == 1 && a->n_tok > KQ_SPLIT_MAX_TOK
                       ? (KQ_TQ < KQ_MAX_WARPS / hg ? KQ_TQ : KQ_MAX_WARPS / hg)
                       : 1;
    dim3 grid((unsigned)((a->n_tok + tq - 1) / tq), (unsigned)(a->n_kv_head * nsub),
              (unsigned)n_split);
    k_kvq_attn<<<grid, tq * hg * 32, kq_smem(tq * hg, hd), cb->stream>>>(out, part, q, x, hg,
                                                                       nsub, split_len,
                                                                       n_split, tq);
    cu_after_launch(cb, "attention (quantized KV)");
    if (n_split > 1) {
        const int th = hd < 32 ? 32 : (hd + 31) / 32 * 32;
        k_kvq_merge<<<(unsigned)(a->n_tok * a->n_head), th, 0, cb->stream>>>(
            out, part, hd, n_split, x.s[1].rot, x.pos, x.n_head, split_len);
        cu_after_launch(cb, "attention merge (quantized KV)");
    }
}
