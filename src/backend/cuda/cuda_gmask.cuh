/* cuda_gmask.cuh — the grammar mask of the op sample on the device (backend/be_sample.h,
 * be_sample_row.mask_off): the structured-output bitset the host computed for a row
 * (engine/grammar) is applied to the row's logits where they lie, so a grammar row is
 * sampled on the device like any other instead of fetching its logits to the host.
 * Included by cuda_sample.cu only; called by every thread of the row's block after the
 * penalties, followed by the block's barrier before the max. */
#ifndef CINFER_BACKEND_CUDA_GMASK_CUH
#define CINFER_BACKEND_CUDA_GMASK_CUH

#include <stdint.h>

/* lg[i] = -inf for every id i of the row (n ids) whose bit is clear in the bitset at word
 * mask_off of blob; nothing when mask_off is 0. Returns true when it wrote (the caller then
 * synchronises the block). Threads stride the words, so one thread reads one mask word and
 * writes only the ids it rules out. */
__device__ __forceinline__ bool cu_gmask_apply(float *lg, int n, const int32_t *blob,
                                               int32_t mask_off, int tid, int n_threads)
{
    if (mask_off <= 0)
        return false;
    const uint32_t *mk = (const uint32_t *)(blob + mask_off);
    const int nw = (n + 31) >> 5;
    for (int w = tid; w < nw; w += n_threads) {
        uint32_t k = ~mk[w];
        const int base = w << 5;
        if (base + 32 > n) /* the last word: ids past n are not there */
            k &= (1u << (n - base)) - 1u;
        while (k) {
            const int b = __ffs(k) - 1;
            lg[base + b] = -INFINITY;
            k &= k - 1u;
        }
    }
    return true;
}

#endif
