/* test_sampler.c — the sampler against a sort-the-vocabulary oracle: the same seed must draw
 * the same ids for every truncation setting, greedy must be argmax (lowest id on ties), and
 * the filters must keep exactly the tokens their definitions keep. */
#include "harness.h"

#include <stdint.h>

#include "engine/sampler.h"

struct oc {
    float l;
    int32_t id;
};

static int oc_cmp(const void *a, const void *b)
{
    const struct oc *x = a, *y = b;
    if (x->l != y->l)
        return x->l > y->l ? -1 : 1;
    return x->id - y->id;
}

static uint64_t lcg(uint64_t *x)
{
    *x = *x * 6364136223846793005ull + 1442695040888963407ull;
    return *x >> 33;
}

static struct sampler_params mk(float temp, float top_p, int top_k, float min_p, uint64_t seed)
{
    struct sampler_params p;
    sampler_params_default(&p);
    p.temperature = temp, p.top_p = top_p, p.top_k = top_k, p.min_p = min_p, p.seed = seed;
    return p;
}

/* The definition: rank by logit (ties: lower id), keep the top_p prefix, then the min_p
 * prefix, then top_k, then temperature and one uniform draw over the kept ranks (over ids
 * in order when nothing truncates). */
static int32_t oracle(const float *lg, int n, const struct sampler_params *p, double u,
                      struct oc *c, float *w)
{
    float mx = lg[0];
    for (int i = 1; i < n; i++)
        mx = lg[i] > mx ? lg[i] : mx;
    int trunc = (p->top_p > 0 && p->top_p < 1) || p->min_p > 0 || p->top_k > 0;
    int keep = n;
    for (int i = 0; i < n; i++)
        c[i].l = lg[i], c[i].id = i;
    if (trunc) {
        qsort(c, (size_t)n, sizeof *c, oc_cmp);
        double sum = 0;
        for (int i = 0; i < n; i++)
            sum += exp(c[i].l - mx);
        if (p->top_p > 0 && p->top_p < 1) {
            double cum = 0;
            for (int i = 0; i < n; i++) {
                cum += exp(c[i].l - mx) / sum;
                if (cum >= p->top_p) {
                    keep = i + 1;
                    break;
                }
            }
        }
        int k = 1;
        while (p->min_p > 0 && k < keep && exp(c[k].l - mx) >= p->min_p)
            k++;
        if (p->min_p > 0)
            keep = k;
        if (p->top_k > 0 && p->top_k < keep)
            keep = p->top_k;
    }
    double t = 0;
    for (int i = 0; i < keep; i++)
        t += (w[i] = (float)exp((c[i].l - mx) / p->temperature));
    double r = u * t, acc = 0;
    for (int i = 0; i < keep; i++) {
        acc += w[i];
        if (r < acc)
            return c[i].id;
    }
    return c[keep - 1].id;
}

static void test_matches_oracle(void)
{
    enum { V = 1000 };
    static float lg[V], w[V];
    static struct oc c[V];
    const struct sampler_params cases[] = {
        mk(0.7f, 1.0f, 0, 0.0f, 1),  mk(1.0f, 0.9f, 0, 0.0f, 2),   mk(0.8f, 1.0f, 40, 0.0f, 3),
        mk(1.2f, 1.0f, 0, 0.05f, 4), mk(0.6f, 0.95f, 20, 0.1f, 5), mk(2.0f, 0.5f, 0, 0.0f, 6),
        mk(0.9f, 1.0f, 1, 0.0f, 7),
    };
    uint64_t x = 42;
    int mismatches = 0;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        struct sampler *s = NULL;
        struct cerr e;
        CHECK_EQ_INT(sampler_new(&s, &cases[k], V, &e), 0);
        for (int draw = 0; draw < 300; draw++) {
            for (int i = 0; i < V; i++) /* peaked logits with some exact ties */
                lg[i] = (float)((int)(lcg(&x) % 2000) - 1000) / 100.0f * (i % 7 == 0 ? 1.5f : 1.0f);
            double u = sampler_uniform(cases[k].seed, (uint64_t)draw, 0);
            int32_t b = oracle(lg, V, &cases[k], u, c, w), a = sampler_sample(s, lg, NULL);
            mismatches += a != b;
        }
        sampler_free(s);
    }
    CHECK_EQ_INT(mismatches, 0);
}

static void test_greedy_and_filters(void)
{
    float lg[6] = {1.0f, 3.0f, 3.0f, -1.0f, 2.0f, 0.0f};
    CHECK_EQ_INT(sampler_argmax(lg, 6), 1);
    struct sampler_params p = mk(0.0f, 1.0f, 0, 0.0f, 0);
    struct sampler *s = NULL;
    struct cerr e;
    CHECK_EQ_INT(sampler_new(&s, &p, 6, &e), 0);
    CHECK_EQ_INT(sampler_sample(s, lg, NULL), 1);
    sampler_free(s);
    /* top_k 2 at any temperature only ever draws the two tied leaders */
    p = mk(5.0f, 1.0f, 2, 0.0f, 9);
    CHECK_EQ_INT(sampler_new(&s, &p, 6, &e), 0);
    int seen[6] = {0};
    for (int i = 0; i < 2000; i++)
        seen[sampler_sample(s, lg, NULL)]++;
    CHECK(seen[1] > 0 && seen[2] > 0);
    CHECK_EQ_INT(seen[0] + seen[3] + seen[4] + seen[5], 0);
    sampler_free(s);
    /* min_p 0.5: keeps tokens with p >= 0.5 p_max: ids 1, 2 (e^-1 = 0.37 drops id 4) */
    p = mk(1.0f, 1.0f, 0, 0.5f, 3);
    CHECK_EQ_INT(sampler_new(&s, &p, 6, &e), 0);
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < 2000; i++)
        seen[sampler_sample(s, lg, NULL)]++;
    CHECK_EQ_INT(seen[0] + seen[3] + seen[4] + seen[5], 0);
    sampler_free(s);
    CHECK(sampler_new(&s, &p, 0, &e) < 0);
}

int main(void)
{
    RUN(test_matches_oracle);
    RUN(test_greedy_and_filters);
    return harness_done();
}
