/* sampler_rng.c — the sampler's randomness (sampler.h): a counter-based uniform per (seed,
 * step, stream), so a row's draws do not depend on its neighbours or on how steps are
 * batched, and the automatic seed of requests that send none.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "engine/sampler.h"

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t sampler_uniform_bits(uint64_t seed, uint64_t step, int stream)
{
    uint64_t k = mix64(seed + 0x9e3779b97f4a7c15ull);
    k = mix64(k ^ (step * 0xd1b54a32d192ed03ull + 0x8cb92ba72f3d8dd7ull));
    k = mix64(k + (uint64_t)(stream + 1) * 0x9e3779b97f4a7c15ull);
    return k >> 11;
}

double sampler_uniform(uint64_t seed, uint64_t step, int stream)
{
    return (double)sampler_uniform_bits(seed, step, stream) * (1.0 / 9007199254740992.0);
}

uint64_t sampler_seed_auto(void)
{
    static atomic_uint_fast64_t weyl;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t ms = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
    uint64_t w = atomic_fetch_add(&weyl, 1) + 1;
    return ms ^ (w * 0x9e3779b97f4a7c15ull);
}

