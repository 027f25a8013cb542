/* sampler.c — see sampler.h. */
#include "engine/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct cand {
    float logit;
    int32_t id;
};

struct sampler {
    struct sampler_params p;
    int n_vocab;
    uint64_t rng[2];
    struct cand *cands; /* (n_vocab) */
    float *probs;       /* (n_vocab) */
};

void sampler_params_default(struct sampler_params *p)
{
    p->temperature = 0.7f;
    p->top_p = 1.0f;
    p->top_k = 0;
    p->min_p = 0.0f;
    p->seed = 0;
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* xoroshiro128+ : uniform double in [0, 1) */
static double rng_uniform(uint64_t s[2])
{
    uint64_t s0 = s[0], s1 = s[1], r = s0 + s1;
    s1 ^= s0;
    s[0] = ((s0 << 24) | (s0 >> 40)) ^ s1 ^ (s1 << 16);
    s[1] = (s1 << 37) | (s1 >> 27);
    return (double)(r >> 11) * (1.0 / 9007199254740992.0);
}

int sampler_new(struct sampler **out, const struct sampler_params *p, int n_vocab,
                struct cerr *e)
{
    *out = NULL;
    if (n_vocab <= 0)
        return cerr_set(e, CERR_INVALID, "sampler: empty vocabulary");
    struct sampler *s = calloc(1, sizeof *s);
    if (!s)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    s->cands = malloc((size_t)n_vocab * sizeof *s->cands);
    s->probs = malloc((size_t)n_vocab * sizeof *s->probs);
    if (!s->cands || !s->probs) {
        sampler_free(s);
        return cerr_set(e, CERR_NOMEM, "out of memory");
    }
    uint64_t x = p->seed;
    s->rng[0] = splitmix64(&x);
    s->rng[1] = splitmix64(&x);
    *out = s;
    return 0;
}

void sampler_free(struct sampler *s)
{
    if (!s)
        return;
    free(s->cands);
    free(s->probs);
    free(s);
}

int32_t sampler_argmax(const float *logits, int n)
{
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best])
            best = i;
    return best;
}

static int cand_cmp(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit > y->logit ? -1 : 1;
    return x->id - y->id;
}

int32_t sampler_sample(struct sampler *s, const float *logits)
{
    const struct sampler_params *p = &s->p;
    int n = s->n_vocab;
    if (!(p->temperature > 0))
        return sampler_argmax(logits, n);
    for (int i = 0; i < n; i++) {
        s->cands[i].logit = logits[i];
        s->cands[i].id = i;
    }
    qsort(s->cands, (size_t)n, sizeof *s->cands, cand_cmp);
    /* softmax at temperature 1 for the truncation filters */
    double sum = 0, mx = s->cands[0].logit;
    for (int i = 0; i < n; i++)
        sum += (s->probs[i] = (float)exp(s->cands[i].logit - mx));
    int keep = n;
    if (p->top_p > 0 && p->top_p < 1) {
        double c = 0;
        for (int i = 0; i < n; i++) {
            c += s->probs[i] / sum;
            if (c >= p->top_p) {
                keep = i + 1;
                break;
            }
        }
    }
    if (p->min_p > 0) {
        double thr = p->min_p * s->probs[0];
        int k = 1;
        while (k < keep && s->probs[k] >= thr)
            k++;
        keep = k;
    }
    if (p->top_k > 0 && p->top_k < keep)
        keep = p->top_k;
    /* temperature, then draw */
    double tsum = 0;
    for (int i = 0; i < keep; i++)
        tsum += (s->probs[i] = (float)exp((s->cands[i].logit - mx) / p->temperature));
    double r = rng_uniform(s->rng) * tsum, c = 0;
    for (int i = 0; i < keep; i++) {
        c += s->probs[i];
        if (r < c)
            return s->cands[i].id;
    }
    return s->cands[keep - 1].id;
}
