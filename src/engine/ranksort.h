/* ranksort.h — sorts sampling candidates into the sampler's rank order: larger logit first,
 * then smaller id (a total order, so draws over a ranking are exact). An LSD radix sort on
 * one 64-bit key per candidate (the logit's bits made order-preserving and inverted, then
 * the id): linear in n, where popping most of a large heap costs n log n with cache misses
 * (a flat 152k-token row: ~18 ms of CPU by heap, ~3 ms sorted). -0 ranks as +0. Any thread;
 * the scratch is the caller's.
 */
#ifndef CINFER_ENGINE_RANKSORT_H
#define CINFER_ENGINE_RANKSORT_H

#include <stddef.h>
#include <stdint.h>

struct rank_cand {
    float logit; /* not NaN */
    int32_t id;  /* >= 0 */
};

/* Bytes of scratch rank_sort needs for up to n candidates. */
size_t rank_sort_scratch_bytes(int n);
/* Sorts c[0..n) (n <= the scratch's capacity) into rank order, in place. */
void rank_sort(struct rank_cand *c, int n, void *scratch);

#endif
