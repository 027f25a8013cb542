/* cuda_sample.cu — sampling helpers on the device: argmax of logit rows (the optional op
 * argmax), so a greedy step copies back one id per row instead of the whole vocabulary, and
 * the sampling candidates of a row (the optional op topcand: max, sum of e^(x - max), argmax
 * and the ids within a span of the max, ranked), so a sampled step copies back a few KB.
 * One block per row, or, for rows of 8192 or more, slices of the row over blocks (both ops);
 * ties go to the lowest index and NaN never wins, as sampler_argmax.
 */
#include <math.h>

#include "backend/be_sample.h"
#include "backend/cuda/cuda_gmask.cuh"
#include "backend/cuda/cuda_int.cuh"

enum { AM_THREADS = 1024 };

/* (v, i) beats (bv, bi): larger value, or equal value and lower index; NaN never wins. */
__device__ __forceinline__ bool am_better(float v, int i, float bv, int bi)
{
    return v > bv || (v == bv && i < bi);
}

/* The warp's best (value, index) in every lane (xor butterfly). */
__device__ __forceinline__ void am_warp(float &bv, int &bi)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (am_better(ov, oi, bv, bi))
            bv = ov, bi = oi;
    }
}

__global__ void __launch_bounds__(AM_THREADS) k_argmax(int32_t *out, const float *x, int n)
{
    __shared__ float sv[AM_THREADS / 32];
    __shared__ int si[AM_THREADS / 32];
    cu_pdl_wait();
    const float *r = x + (size_t)blockIdx.x * n;
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int i = threadIdx.x; i < n; i += AM_THREADS) {
        float v = r[i];
        if (am_better(v, i, bv, bi))
            bv = v, bi = i;
    }
    am_warp(bv, bi);
    if ((threadIdx.x & 31) == 0)
        sv[threadIdx.x >> 5] = bv, si[threadIdx.x >> 5] = bi;
    __syncthreads();
    if (threadIdx.x >= 32)
        return;
    bv = sv[threadIdx.x], bi = si[threadIdx.x];
    am_warp(bv, bi);
    if (threadIdx.x == 0)
        out[blockIdx.x] = bi == 0x7fffffff ? 0 : bi;
}

/* A long row split over up to AM_SPLITS blocks (rows <= AM_SPLIT_ROWS): each block writes
 * its slice's best to am_buf, and the last block of the row to arrive (a counter, reset by
 * that block, so it is zero between calls and across graph replays) reduces them. The best
 * of (value, index) pairs does not depend on the order, so the result is the one-block
 * kernel's. A row of 128256 logits: one block took ~11 µs on the H200 (latency-bound). */
enum { AM_SPLITS = 32, AM_SPLIT_ROWS = 256, AM_SPLIT_THREADS = 256, AM_SLICE_MIN = 4096 };
struct am_part {
    float v;
    int i;
};

__global__ void __launch_bounds__(AM_SPLIT_THREADS)
    k_argmax_split(int32_t *out, const float *x, int n, unsigned *cnt, struct am_part *part)
{
    __shared__ float sv[AM_SPLIT_THREADS / 32];
    __shared__ int si[AM_SPLIT_THREADS / 32];
    __shared__ bool last;
    cu_pdl_wait();
    const int row = blockIdx.y, S = gridDim.x, s = blockIdx.x;
    const int per = (n + S - 1) / S, lo = s * per, hi = min(n, lo + per);
    const float *r = x + (size_t)row * n;
    float bv = -INFINITY;
    int bi = 0x7fffffff;
#pragma unroll 4
    for (int i = lo + (int)threadIdx.x; i < hi; i += AM_SPLIT_THREADS) {
        float v = r[i];
        if (am_better(v, i, bv, bi))
            bv = v, bi = i;
    }
    am_warp(bv, bi);
    if ((threadIdx.x & 31) == 0)
        sv[threadIdx.x >> 5] = bv, si[threadIdx.x >> 5] = bi;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < AM_SPLIT_THREADS / 32; w++)
            if (am_better(sv[w], si[w], bv, bi))
                bv = sv[w], bi = si[w];
        part[row * AM_SPLITS + s].v = bv;
        part[row * AM_SPLITS + s].i = bi;
        __threadfence();
        last = atomicAdd(&cnt[row], 1u) == (unsigned)S - 1;
    }
    __syncthreads();
    if (!last || threadIdx.x >= 32)
        return;
    __threadfence();
    bv = -INFINITY, bi = 0x7fffffff;
    if ((int)threadIdx.x < S) {
        const volatile struct am_part *p = part + row * AM_SPLITS + threadIdx.x;
        bv = p->v, bi = p->i;
    }
    am_warp(bv, bi);
    if (threadIdx.x == 0) {
        out[row] = bi == 0x7fffffff ? 0 : bi;
        cnt[row] = 0;
    }
}

/* am_buf: the split path's counters (zeroed once) and partials, allocated on first use
 * outside a capture; NULL (allocation failed, or first use inside a capture): one block. */
static int am_ready(struct cu_be *cb)
{
    if (cb->am_buf)
        return 1;
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(cb->stream, &cs) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    if (cs != cudaStreamCaptureStatusNone)
        return 0;
    const size_t cb_bytes = AM_SPLIT_ROWS * sizeof(unsigned);
    void *p = NULL;
    if (cudaMalloc(&p, cb_bytes + (size_t)AM_SPLIT_ROWS * AM_SPLITS * sizeof(struct am_part)) !=
        cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    if (cudaMemsetAsync(p, 0, cb_bytes, cb->stream) != cudaSuccess) {
        cudaGetLastError();
        cudaFree(p);
        return 0;
    }
    cb->last_kernel = 0;
    cb->am_buf = p;
    return 1;
}

void cu_argmax(struct be *b, int32_t *out, const float *x, int rows, int n)
{
    struct cu_be *cb = cu_be(b);
    if (rows <= 0 || n <= 0)
        return;
    const int S = n / AM_SLICE_MIN < AM_SPLITS ? n / AM_SLICE_MIN : AM_SPLITS;
    if (S >= 2 && rows <= AM_SPLIT_ROWS && cb->am_split && am_ready(cb)) {
        unsigned *cnt = (unsigned *)cb->am_buf;
        struct am_part *part = (struct am_part *)(cnt + AM_SPLIT_ROWS);
        cu_launch(cb, k_argmax_split, dim3((unsigned)S, (unsigned)rows), dim3(AM_SPLIT_THREADS),
                  0, out, x, n, cnt, part);
    } else {
        cu_launch(cb, k_argmax, dim3((unsigned)rows), dim3(AM_THREADS), 0, out, x, n);
    }
    cu_after_launch(cb, "argmax");
}

/* ---- topcand (backend.h): three passes over the row, one block per row ----
 * 1. max and argmax (the argmax rule above);
 * 2. sum of e^(x - mx): each thread adds its elements i = tid, tid + TC_THREADS, ... in
 *    order, then a warp butterfly and one over the warps: a fixed order that depends only
 *    on n; the same pass counts the values within the span by bound (hist[k]: the values
 *    whose smallest bound at or below them is cut(k); lanes of a warp with the same k add
 *    once), and one thread picks the last bound K that keeps at most cap;
 * 3. the values >= cut(K) go to shared memory as (rank key, id) (a slot each, warp-
 *    aggregated), a bitonic sort ranks them (a total order: descending value, then
 *    ascending id), and the ranked (logit, id) pairs are written out. */

enum { TC_THREADS = 1024 };

/* Ascending-order key of a float's value (-0 maps to +0's key), inverted: ascending keys
 * give descending values. */
__device__ __forceinline__ uint32_t tc_desc_key(float v)
{
    uint32_t u = __float_as_uint(v == 0.0f ? 0.0f : v);
    uint32_t asc = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ~asc;
}

/* be_topcand_cut with explicit roundings (no contraction): the host's bounds, bit for bit. */
__device__ __forceinline__ float tc_cut(float mx, float span, int k)
{
    return __fsub_rn(mx, __fdiv_rn(__fmul_rn(span, (float)k), (float)BE_TOPCAND_BINS));
}

/* The smallest k with x >= cut[k], for mx >= x >= cut[BE_TOPCAND_BINS]: a guess from the
 * distance (inv = BE_TOPCAND_BINS / span), then exact comparisons with the bounds. */
__device__ __forceinline__ int tc_bin(float x, float mx, float inv, const float *cut)
{
    int k = (int)(__fsub_rn(mx, x) * inv);
    k = min(max(k, 0), (int)BE_TOPCAND_BINS);
    while (k > 0 && x >= cut[k - 1])
        k--;
    while (k < BE_TOPCAND_BINS && x < cut[k])
        k++;
    return k;
}

/* Warp-aggregated slot: lanes with `take` get consecutive slots from *cnt. */
__device__ __forceinline__ int tc_slot(int *cnt, bool take, int lane)
{
    unsigned m = __ballot_sync(0xffffffffu, take);
    int base = 0;
    if (lane == 0 && m)
        base = atomicAdd(cnt, __popc(m));
    base = __shfl_sync(0xffffffffu, base, 0);
    return base + __popc(m & ((1u << lane) - 1u));
}

/* Ranks the nc keys in shared memory (every thread of the TC_THREADS block; keys: pow2 >=
 * nc slots; a bitonic sort, the keys unique by id, so any gather order gives these bytes)
 * and writes the (logit, id) pairs after the header. */
__device__ __forceinline__ void tc_sort_out(const float *r, int nc, unsigned long long *tc_keys,
                                            struct be_topcand_ent *c)
{
    const int tid = threadIdx.x;
    int p2 = 1;
    while (p2 < nc)
        p2 <<= 1;
    for (int i = nc + tid; i < p2; i += TC_THREADS)
        tc_keys[i] = ~0ull;
    __syncthreads();
    for (int k = 2; k <= p2; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int t = tid; t < p2 / 2; t += TC_THREADS) {
                int a = (t / j) * 2 * j + (t % j), bq = a + j;
                unsigned long long ka = tc_keys[a], kb = tc_keys[bq];
                if ((ka > kb) == ((a & k) == 0))
                    tc_keys[a] = kb, tc_keys[bq] = ka;
            }
            __syncthreads();
        }
    for (int j = tid; j < nc; j += TC_THREADS) {
        int id = (int)(uint32_t)tc_keys[j];
        c[j].logit = r[id];
        c[j].id = id;
    }
}

/* The key of candidate value v at index i: ascending keys rank descending values, then
 * ascending ids. */
__device__ __forceinline__ unsigned long long tc_key(float v, int i)
{
    return ((unsigned long long)tc_desc_key(v) << 32) | (uint32_t)i;
}

/* Pass 3 (every thread of the TC_THREADS block): the values >= cut in ranked order after
 * the header (*s_cnt zero and visible to all on entry; keys: pow2 >= cap slots). */
__device__ __forceinline__ void tc_rank(const float *r, int n, int cap, float cut, int *s_cnt,
                                        unsigned long long *tc_keys, struct be_topcand_ent *c,
                                        struct be_topcand_hdr *h)
{
    const int tid = threadIdx.x, lane = tid & 31;
    for (int i0 = 0; i0 < n; i0 += TC_THREADS) {
        int i = i0 + tid;
        float v = i < n ? r[i] : __int_as_float(0x7fc00000);
        bool cand = v >= cut;
        if (!__any_sync(0xffffffffu, cand))
            continue;
        int slot = tc_slot(s_cnt, cand, lane);
        if (cand && slot < cap)
            tc_keys[slot] = tc_key(v, i);
    }
    __syncthreads();
    int nc = *s_cnt; /* = s_nc <= cap (the bounds are compared the same way twice) */
    if (nc > cap) { /* not reached; never write past the keys */
        if (tid == 0)
            h->nc = -1;
        return;
    }
    tc_sort_out(r, nc, tc_keys, c);
}

__global__ void __launch_bounds__(TC_THREADS)
    k_topcand(char *out, const float *x, int n, float span, int cap, size_t stride)
{
    extern __shared__ unsigned long long tc_keys[]; /* (pow2 >= cap) */
    __shared__ float sv[TC_THREADS / 32];
    __shared__ int si[TC_THREADS / 32];
    __shared__ int hist[BE_TOPCAND_BINS + 1];
    __shared__ float s_cut[BE_TOPCAND_BINS + 1];
    __shared__ float s_mx;
    __shared__ int s_am, s_cnt, s_k, s_nc;
    cu_pdl_wait();
    const float *r = x + (size_t)blockIdx.x * n;
    struct be_topcand_hdr *h = (struct be_topcand_hdr *)(out + (size_t)blockIdx.x * stride);
    struct be_topcand_ent *c = (struct be_topcand_ent *)(h + 1);
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    float bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int i = tid; i < n; i += TC_THREADS) {
        float v = r[i];
        if (am_better(v, i, bv, bi))
            bv = v, bi = i;
    }
    am_warp(bv, bi);
    if (lane == 0)
        sv[warp] = bv, si[warp] = bi;
    for (int k = tid; k <= BE_TOPCAND_BINS; k += TC_THREADS)
        hist[k] = 0;
    if (tid == 0)
        s_cnt = 0;
    __syncthreads();
    if (warp == 0) {
        bv = sv[lane], bi = si[lane];
        am_warp(bv, bi);
        if (lane == 0)
            s_mx = bv, s_am = bi == 0x7fffffff ? 0 : bi;
    }
    __syncthreads();
    float mx = s_mx;
    if (!isfinite(mx)) {
        if (tid == 0)
            h->mx = mx, h->sum = 0.0f, h->argmax = s_am, h->nc = -1;
        return;
    }
    for (int k = tid; k <= BE_TOPCAND_BINS; k += TC_THREADS)
        s_cut[k] = tc_cut(mx, span, k);
    __syncthreads();
    float lo = s_cut[BE_TOPCAND_BINS], inv = span > 0.0f ? (float)BE_TOPCAND_BINS / span : 0.0f;

    float sum = 0.0f;
    for (int i0 = 0; i0 < n; i0 += TC_THREADS) { /* warp-uniform trip count */
        int i = i0 + tid;
        float v = i < n ? r[i] : __int_as_float(0x7fc00000); /* NaN: neither term nor candidate */
        if (v == v)
            sum = __fadd_rn(sum, expf(__fsub_rn(v, mx)));
        bool in = v >= lo;
        if (!__any_sync(0xffffffffu, in))
            continue;
        int k = in ? tc_bin(v, mx, inv, s_cut) : -1 - lane; /* outsiders: a key of their own */
        unsigned same = __match_any_sync(0xffffffffu, k);
        if (in && lane == __ffs(same) - 1)
            atomicAdd(&hist[k], __popc(same));
    }
    sum = cu_warp_sum(sum);
    __syncthreads(); /* hist final; sv free again */
    if (lane == 0)
        sv[warp] = sum;
    if (tid == 0) {
        int k_end = -1, nc = 0;
        for (int k = 0; k <= BE_TOPCAND_BINS && nc + hist[k] <= cap; k++)
            nc += hist[k], k_end = k;
        s_k = k_end, s_nc = nc;
    }
    __syncthreads();
    int k_end = s_k;
    if (warp == 0) {
        float t = cu_warp_sum(sv[lane]);
        if (lane == 0)
            h->mx = mx, h->sum = t, h->argmax = s_am, h->nc = k_end < 0 ? -1 : s_nc;
    }
    if (k_end < 0)
        return;

    tc_rank(r, n, cap, s_cut[k_end], &s_cnt, tc_keys, c, h);
}

/* ---- topcand of a long row split over blocks (n >= 2 * AM_SLICE_MIN; the choice depends on
 * n only, so a row gives the same bytes alone or in any batch) ----
 * k_tc_max: slice s of row r writes its best (value, index) to part[r][s];
 * k_tc_sum: every block reduces those to the row's max, then adds e^(x - max) over its slice
 *   (each thread its strided elements in order, warps in order) and counts its slice's
 *   values within the span by bound, to sums[r][s] and hists[r][s][];
 * k_tc_gather: every block adds the slices' counts, picks the bound as k_topcand does and
 *   gathers its slice's values at or above it (keys with slots from the row's counter);
 * k_tc_pick: one block a row adds the slices' sums in slice order, writes the header, and
 *   ranks the gathered keys (a total order, so the gather order does not matter).
 * The slices' sums are added in another order than k_topcand's, so the sum differs from the
 * one-block kernel's in the last bits (both within the CPU op's 1e-5); everything else is
 * the same bytes. */
struct tc_slices {
    unsigned long long *keys; /* (rows, cap) the gathered candidates' keys, in any order */
    struct am_part *part;     /* (rows, S) */
    float *sums;              /* (rows, S) */
    int *hists;               /* (rows, S, BE_TOPCAND_BINS + 1) */
    int *cnt;                 /* (rows) keys gathered (zeroed by k_tc_max) */
};

/* The row's best over its S slices' (value, index) (the argmax rule); every lane gets it. */
__device__ __forceinline__ void tc_row_max(const struct am_part *p, int S, float &bv, int &bi)
{
    const int lane = threadIdx.x & 31;
    bv = -INFINITY, bi = 0x7fffffff;
    if (lane < S)
        bv = p[lane].v, bi = p[lane].i;
    am_warp(bv, bi);
}

__global__ void __launch_bounds__(AM_SPLIT_THREADS) k_tc_max(const float *x, int n,
                                                             struct tc_slices t)
{
    __shared__ float sv[AM_SPLIT_THREADS / 32];
    __shared__ int si[AM_SPLIT_THREADS / 32];
    cu_pdl_wait();
    const int row = blockIdx.y, S = gridDim.x, s = blockIdx.x;
    const int per = (n + S - 1) / S, lo = s * per, hi = min(n, lo + per);
    const float *r = x + (size_t)row * n;
    float bv = -INFINITY;
    int bi = 0x7fffffff;
#pragma unroll 4
    for (int i = lo + (int)threadIdx.x; i < hi; i += AM_SPLIT_THREADS) {
        float v = r[i];
        if (am_better(v, i, bv, bi))
            bv = v, bi = i;
    }
    am_warp(bv, bi);
    if ((threadIdx.x & 31) == 0)
        sv[threadIdx.x >> 5] = bv, si[threadIdx.x >> 5] = bi;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < AM_SPLIT_THREADS / 32; w++)
            if (am_better(sv[w], si[w], bv, bi))
                bv = sv[w], bi = si[w];
        t.part[row * S + s].v = bv;
        t.part[row * S + s].i = bi;
        if (s == 0)
            t.cnt[row] = 0;
    }
}

__global__ void __launch_bounds__(AM_SPLIT_THREADS) k_tc_sum(const float *x, int n, float span,
                                                             struct tc_slices t)
{
    __shared__ int hist[BE_TOPCAND_BINS + 1];
    __shared__ float s_cut[BE_TOPCAND_BINS + 1];
    __shared__ float sv[AM_SPLIT_THREADS / 32];
    cu_pdl_wait();
    const int row = blockIdx.y, S = gridDim.x, s = blockIdx.x;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    float mx;
    {
        float bv;
        int bi;
        tc_row_max(t.part + row * S, S, bv, bi);
        mx = bv;
    }
    int *hs = t.hists + ((size_t)row * S + s) * (BE_TOPCAND_BINS + 1);
    if (!isfinite(mx)) { /* the pick writes the header; nothing to count */
        if (tid == 0)
            t.sums[row * S + s] = 0.0f;
        return;
    }
    for (int k = tid; k <= BE_TOPCAND_BINS; k += AM_SPLIT_THREADS)
        hist[k] = 0, s_cut[k] = tc_cut(mx, span, k);
    __syncthreads();
    const float lo_v = s_cut[BE_TOPCAND_BINS];
    const float inv = span > 0.0f ? (float)BE_TOPCAND_BINS / span : 0.0f;
    const int per = (n + S - 1) / S, lo = s * per, hi = min(n, lo + per);
    const float *r = x + (size_t)row * n;
    float sum = 0.0f;
    for (int i0 = lo; i0 < hi; i0 += AM_SPLIT_THREADS) { /* warp-uniform trip count */
        int i = i0 + tid;
        float v = i < hi ? r[i] : __int_as_float(0x7fc00000); /* NaN: neither term nor count */
        if (v == v)
            sum = __fadd_rn(sum, expf(__fsub_rn(v, mx)));
        bool in = v >= lo_v;
        if (!__any_sync(0xffffffffu, in))
            continue;
        int k = in ? tc_bin(v, mx, inv, s_cut) : -1 - lane;
        unsigned same = __match_any_sync(0xffffffffu, k);
        if (in && lane == __ffs(same) - 1)
            atomicAdd(&hist[k], __popc(same));
    }
    sum = cu_warp_sum(sum);
    if (lane == 0)
        sv[warp] = sum;
    __syncthreads();
    for (int k = tid; k <= BE_TOPCAND_BINS; k += AM_SPLIT_THREADS)
        hs[k] = hist[k];
    if (tid == 0) {
        float a = 0.0f;
        for (int w = 0; w < AM_SPLIT_THREADS / 32; w++)
            a = __fadd_rn(a, sv[w]);
        t.sums[row * S + s] = a;
    }
}

/* The bound of a row from its slices' counts: the last k that keeps at most cap values
 * (-1: none), as k_topcand picks it; *nc the values it keeps. Thread 0 of the block. */
__device__ __forceinline__ int tc_pick_k(const int *hs, int S, int cap, int *hist, int *nc)
{
    for (int k = threadIdx.x; k <= BE_TOPCAND_BINS; k += blockDim.x) {
        int a = 0;
        for (int s = 0; s < S; s++)
            a += hs[s * (BE_TOPCAND_BINS + 1) + k];
        hist[k] = a;
    }
    __syncthreads();
    int k_end = -1, c = 0;
    if (threadIdx.x == 0)
        for (int k = 0; k <= BE_TOPCAND_BINS && c + hist[k] <= cap; k++)
            c += hist[k], k_end = k;
    *nc = c;
    return k_end;
}

/* Pass 3 over slice s: the values >= the row's bound, their keys to t.keys (slots from the
 * row's counter: any order; the ranking makes it a total one). */
__global__ void __launch_bounds__(AM_SPLIT_THREADS)
    k_tc_gather(const float *x, int n, float span, int cap, struct tc_slices t)
{
    __shared__ int hist[BE_TOPCAND_BINS + 1];
    __shared__ int s_k;
    cu_pdl_wait();
    const int row = blockIdx.y, S = gridDim.x, s = blockIdx.x, lane = threadIdx.x & 31;
    float mx;
    {
        float bv;
        int bi;
        tc_row_max(t.part + row * S, S, bv, bi);
        mx = bv;
    }
    if (!isfinite(mx))
        return;
    int nc;
    const int k0 = tc_pick_k(t.hists + (size_t)row * S * (BE_TOPCAND_BINS + 1), S, cap, hist,
                             &nc);
    if (threadIdx.x == 0)
        s_k = k0;
    __syncthreads();
    const int k_end = s_k;
    if (k_end < 0)
        return;
    const float cut = tc_cut(mx, span, k_end);
    const int per = (n + S - 1) / S, lo = s * per, hi = min(n, lo + per);
    const float *r = x + (size_t)row * n;
    unsigned long long *keys = t.keys + (size_t)row * cap;
    for (int i0 = lo; i0 < hi; i0 += AM_SPLIT_THREADS) { /* warp-uniform trip count */
        int i = i0 + (int)threadIdx.x;
        float v = i < hi ? r[i] : __int_as_float(0x7fc00000);
        bool cand = v >= cut;
        if (!__any_sync(0xffffffffu, cand))
            continue;
        int slot = tc_slot(t.cnt + row, cand, lane);
        if (cand && slot < cap)
            keys[slot] = tc_key(v, i);
    }
}

/* One block a row: the header (max, argmax, the slices' sums added in slice order, the
 * count), then the gathered keys ranked and written. */
__global__ void __launch_bounds__(TC_THREADS)
    k_tc_pick(char *out, const float *x, int n, float span, int cap, size_t stride, int S,
              struct tc_slices t)
{
    extern __shared__ unsigned long long tc_keys[]; /* (pow2 >= cap) */
    __shared__ int hist[BE_TOPCAND_BINS + 1];
    __shared__ int s_k, s_nc;
    cu_pdl_wait();
    const int row = blockIdx.x, tid = threadIdx.x;
    const float *r = x + (size_t)row * n;
    struct be_topcand_hdr *h = (struct be_topcand_hdr *)(out + (size_t)row * stride);
    struct be_topcand_ent *c = (struct be_topcand_ent *)(h + 1);
    (void)span;
    float mx;
    int am;
    {
        float bv;
        int bi;
        tc_row_max(t.part + row * S, S, bv, bi);
        mx = bv, am = bi == 0x7fffffff ? 0 : bi;
    }
    if (!isfinite(mx)) {
        if (tid == 0)
            h->mx = mx, h->sum = 0.0f, h->argmax = am, h->nc = -1;
        return;
    }
    int nc;
    const int k0 = tc_pick_k(t.hists + (size_t)row * S * (BE_TOPCAND_BINS + 1), S, cap, hist,
                             &nc);
    if (tid == 0) {
        float a = 0.0f;
        for (int s = 0; s < S; s++)
            a = __fadd_rn(a, t.sums[row * S + s]);
        s_k = k0, s_nc = nc;
        h->mx = mx, h->sum = a, h->argmax = am, h->nc = k0 < 0 ? -1 : nc;
    }
    __syncthreads();
    if (s_k < 0)
        return;
    nc = t.cnt[row]; /* = s_nc <= cap (the bounds are compared the same way twice) */
    if (nc != s_nc || nc > cap) { /* not reached; never write past the keys */
        if (tid == 0)
            h->nc = -1;
        return;
    }
    const unsigned long long *keys = t.keys + (size_t)row * cap;
    for (int j = tid; j < nc; j += TC_THREADS)
        tc_keys[j] = keys[j];
    tc_sort_out(r, nc, tc_keys, c); /* (its first barrier orders these stores too) */
}

void cu_topcand_launch(struct be *b, void *out, const float *x, int rows, int n, float span,
                       int cap)
{
    struct cu_be *cb = cu_be(b);
    if (rows <= 0 || n <= 0 || cap < 1 || cap > BE_TOPCAND_CAP_MAX)
        return;
    int p2 = 1;
    while (p2 < cap)
        p2 <<= 1;
    const size_t keys = (size_t)p2 * sizeof(unsigned long long);
    /* slices: by n alone (never by rows), so a row's bytes do not depend on the batch */
    const int S = n / AM_SLICE_MIN < AM_SPLITS ? n / AM_SLICE_MIN : AM_SPLITS;
    if (S >= 2 && cb->tc_split) {
        const size_t per = (size_t)rows * S;
        const size_t kb = (size_t)rows * cap * sizeof(unsigned long long);
        const size_t need = kb + per * (sizeof(struct am_part) + sizeof(float) +
                                        (BE_TOPCAND_BINS + 1) * sizeof(int)) +
                            (size_t)rows * sizeof(int);
        /* grow-only scratch: a step's first run (plain) grows it, so its capture (the second
         * run of the same list) never allocates */
        char *p = (char *)cu_scratch(cb, CU_SCRATCH_TC, need);
        if (!p)
            return; /* out of memory: latched */
        struct tc_slices t;
        t.keys = (unsigned long long *)p;
        t.part = (struct am_part *)(p + kb);
        t.sums = (float *)(p + kb + per * sizeof(struct am_part));
        t.hists = (int *)(p + kb + per * (sizeof(struct am_part) + sizeof(float)));
        t.cnt = t.hists + per * (BE_TOPCAND_BINS + 1);
        cu_launch(cb, k_tc_max, dim3((unsigned)S, (unsigned)rows), dim3(AM_SPLIT_THREADS), 0, x,
                  n, t);
        cu_launch(cb, k_tc_sum, dim3((unsigned)S, (unsigned)rows), dim3(AM_SPLIT_THREADS), 0, x,
                  n, span, t);
        cu_launch(cb, k_tc_gather, dim3((unsigned)S, (unsigned)rows), dim3(AM_SPLIT_THREADS), 0,
                  x, n, span, cap, t);
        cu_launch(cb, k_tc_pick, dim3((unsigned)rows), dim3(TC_THREADS), keys, (char *)out, x,
                  n, span, cap, be_topcand_stride(cap), S, t);
    } else {
        cu_launch(cb, k_topcand, dim3((unsigned)rows), dim3(TC_THREADS), keys, (char *)out, x, n,
                  span, cap, be_topcand_stride(cap));
    }
    cu_after_launch(cb, "topcand");
}

/* ---- sample (backend.h, backend/be_sample.h): one block per row ----
 * 1. the processors, in the documented order: the thread of an id's first logit_bias
 *    entry adds that id's entries in list order; then per penalty (repetition, presence, frequency) each thread takes entries of
 *    the window, and the thread holding an id's first occurrence applies it (with its
 *    count): distinct ids, so no two threads write one logit; a barrier between penalties;
 * 2. max and argmax (the argmax rule above): the argmax is the id when inv_t is 0 or the
 *    max is not finite;
 * 3. the exact draw: the row cut into at most SP_SEGS segments of a multiple of 32; each
 *    warp sums the integer weights of its segments, the block scans the segment sums, the
 *    thread whose segment holds the target r names it, and warp 0 scans that segment.
 *    Integer sums do not depend on their order, so the id is be_sample_ref's. */

enum { SP_THREADS = 512, SP_SEGS = SP_THREADS, SP_WARPS = SP_THREADS / 32 };

/* be_fast_exp with each rounding spelled out (no contraction into fma). */
__device__ __forceinline__ float sp_exp(float x)
{
    const bool ok = x >= -87.0f; /* false for NaN */
    const float xc = ok ? (x > 88.0f ? 88.0f : x) : -87.0f;
    const float n = __fsub_rn(__fadd_rn(__fmul_rn(xc, 1.44269504088896341f), 12582912.0f),
                              12582912.0f);
    float r = __fsub_rn(xc, __fmul_rn(n, 0.693359375f));
    r = __fsub_rn(r, __fmul_rn(n, -2.12194440e-4f));
    float p = 1.9875691500e-4f;
    p = __fadd_rn(__fmul_rn(p, r), 1.3981999507e-3f);
    p = __fadd_rn(__fmul_rn(p, r), 8.3334519073e-3f);
    p = __fadd_rn(__fmul_rn(p, r), 4.1665795894e-2f);
    p = __fadd_rn(__fmul_rn(p, r), 1.6666665459e-1f);
    p = __fadd_rn(__fmul_rn(p, r), 5.0000001201e-1f);
    p = __fadd_rn(__fadd_rn(__fmul_rn(__fmul_rn(p, r), r), r), 1.0f);
    const float y = __fmul_rn(p, __uint_as_float((uint32_t)((int)n + 127) << 23));
    return ok ? y : 0.0f;
}

/* be_sample_q of the weight of logit v. */
__device__ __forceinline__ unsigned long long sp_q(float v, float mx, float inv_t)
{
    const float w = sp_exp(__fmul_rn(__fsub_rn(v, mx), inv_t));
    return __float2ull_rz(__fmul_rn(w, 1099511627776.0f));
}

__device__ __forceinline__ unsigned long long sp_warp_sum(unsigned long long v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Inclusive prefix sum over the warp's lanes. */
__device__ __forceinline__ unsigned long long sp_warp_scan(unsigned long long v, int lane)
{
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        unsigned long long u = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o)
            v += u;
    }
    return v;
}

__global__ void __launch_bounds__(SP_THREADS)
    k_sample(int32_t *out, float *x, int n, const int32_t *blob, const int32_t *prev)
{
    __shared__ float sv[SP_WARPS];
    __shared__ int si[SP_WARPS];
    __shared__ unsigned long long seg[SP_SEGS], wsum[32];
    __shared__ int s_seg;
    __shared__ unsigned long long s_base;
    cu_pdl_wait();
    const int row = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const struct be_sample_row p =
        *(const struct be_sample_row *)(blob + (size_t)row * BE_SAMPLE_ROW_WORDS);
    float *lg = x + (size_t)row * n;
    if (p.skip) {
        if (tid == 0)
            out[row] = -1;
        return;
    }
    /* 1. processors */
    if (p.n_bias > 0) { /* the thread of an id's first entry adds all its entries, in order */
        const int32_t *bl = blob + p.bias_off;
        for (int i = tid; i < p.n_bias; i += SP_THREADS) {
            const int id = bl[2 * i];
            bool first = id >= 0 && id < n;
            for (int j = 0; j < i && first; j++)
                first = bl[2 * j] != id;
            if (!first)
                continue;
            float v = lg[id];
            for (int j = i; j < p.n_bias; j++)
                if (bl[2 * j] == id)
                    v = __fadd_rn(v, __int_as_float(bl[2 * j + 1]));
            lg[id] = v;
        }
        __syncthreads();
    }
    const int hn = p.n_hist + (p.use_prev != 0);
    const int32_t *h = blob + p.hist_off;
    const int prev_id = p.use_prev && prev ? prev[row] : -1;
    for (int op = 0; op < 3 && hn > 0; op++) {
        const int W = op == 0 ? p.rep_w : op == 1 ? p.pres_w : p.freq_w;
        const float pen = op == 0 ? p.rep : op == 1 ? p.pres : p.freq;
        if (W < 0)
            continue;
        const int lo = W > 0 && W < hn ? hn - W : 0;
        for (int k = lo + tid; k < hn; k += SP_THREADS) {
            const int id = k < p.n_hist ? h[k] : prev_id;
            if (id < 0 || id >= n)
                continue;
            bool first = true;
            int cnt = 0;
            for (int j = lo; j < hn; j++)
                if ((j < p.n_hist ? h[j] : prev_id) == id) {
                    first = first && j >= k;
                    cnt++;
                }
            if (!first)
                continue;
            const float v = lg[id];
            lg[id] = op == 0   ? (v < 0 ? __fmul_rn(v, pen) : __fdiv_rn(v, pen))
                     : op == 1 ? __fsub_rn(v, pen)
                               : __fsub_rn(v, __fmul_rn(pen, (float)cnt));
        }
        __syncthreads();
    }
    if (cu_gmask_apply(lg, n, blob, p.mask_off, tid, SP_THREADS)) /* the grammar's bitset */
        __syncthreads();
    /* 2. max and argmax */
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int i = tid; i < n; i += SP_THREADS) {
        const float v = lg[i];
        if (am_better(v, i, bv, bi))
            bv = v, bi = i;
    }
    am_warp(bv, bi);
    if (lane == 0)
        sv[warp] = bv, si[warp] = bi;
    __syncthreads();
    bv = lane < SP_WARPS ? sv[lane] : -INFINITY, bi = lane < SP_WARPS ? si[lane] : 0x7fffffff;
    am_warp(bv, bi); /* every warp reduces the partials: all threads agree */
    const float mx = bv;
    if (!(p.inv_t > 0.0f) || !isfinite(mx)) {
        if (tid == 0)
            out[row] = bi == 0x7fffffff ? 0 : bi;
        return;
    }
    /* 3. the exact draw */
    const int L = ((n + SP_SEGS - 1) / SP_SEGS + 31) & ~31, nseg = (n + L - 1) / L;
    for (int s = warp; s < nseg; s += SP_WARPS) {
        const int hi = min(n, (s + 1) * L);
        unsigned long long q = 0;
        for (int i = s * L + lane; i < hi; i += 32)
            q += sp_q(lg[i], mx, p.inv_t);
        q = sp_warp_sum(q);
        if (lane == 0)
            seg[s] = q;
    }
    __syncthreads();
    const unsigned long long v = tid < nseg ? seg[tid] : 0ull;
    unsigned long long inc = sp_warp_scan(v, lane);
    if (lane == 31)
        wsum[warp] = inc;
    __syncthreads();
    if (warp == 0) {
        const unsigned long long t = sp_warp_scan(lane < SP_WARPS ? wsum[lane] : 0ull, lane);
        wsum[lane] = t; /* inclusive over the warps */
    }
    __syncthreads();
    if (warp > 0)
        inc += wsum[warp - 1];
    const unsigned long long total = wsum[SP_WARPS - 1];
    const uint64_t u53 = (uint64_t)p.u_hi << 32 | p.u_lo;
    const unsigned long long r = __umul64hi(u53 << 11, total);
    if (tid < nseg && inc - v <= r && r < inc)
        s_seg = tid, s_base = inc - v;
    __syncthreads();
    if (warp != 0)
        return;
    const int s = s_seg, hi = min(n, (s + 1) * L);
    unsigned long long base = s_base;
    for (int i0 = s * L; i0 < hi; i0 += 32) {
        const int i = i0 + lane;
        const unsigned long long q = i < hi ? sp_q(lg[i], mx, p.inv_t) : 0ull;
        const unsigned long long c = base + sp_warp_scan(q, lane);
        const unsigned hit = __ballot_sync(0xffffffffu, c > r);
        if (hit) {
            if (lane == 0)
                out[row] = i0 + __ffs(hit) - 1;
            return;
        }
        base = __shfl_sync(0xffffffffu, c, 31);
    }
    if (lane == 0) /* not reached: r < total */
        out[row] = hi - 1;
}

void cu_sample(struct be *b, int32_t *out, float *x, int rows, int n, const void *params,
               const int32_t *prev)
{
    struct cu_be *cb = cu_be(b);
    if (rows <= 0 || n <= 0)
        return;
    cu_launch(cb, k_sample, dim3((unsigned)rows), dim3(SP_THREADS), 0, out, x, n,
              (const int32_t *)params, prev);
    cu_after_launch(cb, "sample");
}
