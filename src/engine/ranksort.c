/* ranksort.c — see ranksort.h. */
#include "engine/ranksort.h"

#include <string.h>

/* A candidate as one 64-bit key whose ascending order is the rank order (larger logit, then smaller id):
 * the logit's bits mapped to an order-preserving integer and inverted (larger first), then
 * the id (smaller first). The key holds both, so the candidate is rebuilt from it. */
static uint64_t rank_key(const struct rank_cand *c)
{
    uint32_t u;
    memcpy(&u, &c->logit, 4);
    if (u == 0x80000000u)
        u = 0; /* -0 ties with +0, as the sampler ranks them */
    u = (u & 0x80000000u) ? ~u : u | 0x80000000u; /* ascending with the float */
    return ((uint64_t)~u << 32) | (uint32_t)c->id;
}

static struct rank_cand key_cand(uint64_t k)
{
    uint32_t u = ~(uint32_t)(k >> 32);
    u = (u & 0x80000000u) ? u & 0x7fffffffu : ~u;
    struct rank_cand c;
    memcpy(&c.logit, &u, 4);
    c.id = (int32_t)(uint32_t)k;
    return c;
}

size_t rank_sort_scratch_bytes(int n)
{
    return 2 * (size_t)n * sizeof(uint64_t) + ((size_t)1 << 16) * sizeof(uint32_t);
}

/* LSD radix sort, 16-bit digits; a digit that every key shares is skipped. */
void rank_sort(struct rank_cand *c, int n, void *scratch)
{
    if (n <= 0)
        return;
    uint64_t *a = scratch, *b = a + n;
    uint32_t *cnt = (uint32_t *)(b + n);
    for (int i = 0; i < n; i++)
        a[i] = rank_key(&c[i]);
    for (int shift = 0; shift < 64; shift += 16) {
        memset(cnt, 0, (1u << 16) * sizeof *cnt);
        for (int i = 0; i < n; i++)
            cnt[(a[i] >> shift) & 0xffff]++;
        if (cnt[(a[0] >> shift) & 0xffff] == (uint32_t)n)
            continue; /* every key has this digit */
        uint32_t sum = 0;
        for (int d = 0; d < 1 << 16; d++) {
            uint32_t t = cnt[d];
            cnt[d] = sum;
            sum += t;
        }
        for (int i = 0; i < n; i++)
            b[cnt[(a[i] >> shift) & 0xffff]++] = a[i];
        uint64_t *t = a;
        a = b;
        b = t;
    }
    for (int i = 0; i < n; i++)
        c[i] = key_cand(a[i]);
}

