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

/* a ranks before b: larger logit, then smaller id (a total order, so draws are exact) */
static int cand_before(const struct cand *a, const struct cand *b)
{
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static void sift_down(struct cand *h, int n, int i)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, top = i;
        if (l < n && cand_before(&h[l], &h[top]))
            top = l;
        if (r < n && cand_before(&h[r], &h[top]))
            top = r;
        if (top == i)
            return;
        struct cand t = h[i];
        h[i] = h[top];
        h[top] = t;
        i = top;
    }
}

/* Draws from probs[0..n) (unnormalised, sum tsum) with one uniform from the RNG. */
static int draw(struct sampler *s, const float *w, int n, double tsum)
{
    double r = rng_uniform(s->rng) * tsum, c = 0;
    for (int i = 0; i < n; i++) {
        c += w[i];
        if (r < c)
            return i;
    }
    return n - 1;
}

int32_t sampler_sample(struct sampler *s, const float *logits)
{
    const struct sampler_params *p = &s->p;
    int n = s->n_vocab;
    if (!(p->temperature > 0))
        return sampler_argmax(logits, n);
    float mx = logits[sampler_argmax(logits, n)];
    int trunc = (p->top_p > 0 && p->top_p < 1) || p->min_p > 0 || p->top_k > 0;
    if (!trunc) { /* the whole vocabulary: no ordering needed */
        double tsum = 0;
        for (int i = 0; i < n; i++)
            tsum += (s->probs[i] = (float)exp((logits[i] - mx) / p->temperature));
        return draw(s, s->probs, n, tsum);
    }
    /* Truncation keeps a prefix of the tokens ranked by logit: pop them from a heap until a
     * filter stops (O(n + kept * log n) instead of sorting the vocabulary). */
    double sum = 0;
    for (int i = 0; i < n; i++) {
        s->cands[i].logit = logits[i];
        s->cands[i].id = i;
        sum += exp(logits[i] - mx);
    }
    for (int i = n / 2 - 1; i >= 0; i--)
        sift_down(s->cands, n, i);
    struct cand *h = s->cands;
    int hn = n, keep = 0;
    double cum = 0, thr = p->min_p > 0 ? p->min_p : 0; /* relative to the top probability 1 */
    while (hn > 0) {
        if (p->top_k > 0 && keep >= p->top_k)
            break;
        if (p->top_p > 0 && p->top_p < 1 && keep > 0 && cum >= p->top_p)
            break;
        double pr = exp(h[0].logit - mx); /* probability x sum */
        if (keep > 0 && pr < thr)
            break;
        cum += pr / sum;
        /* move the top to the kept prefix, which grows at the heap's end */
        struct cand top = h[0];
        h[0] = h[--hn];
        sift_down(h, hn, 0);
        h[n - 1 - keep] = top;
        keep++;
    }
    /* kept tokens sit at h[n-1], h[n-2], ... in rank order */
    double tsum = 0;
    for (int i = 0; i < keep; i++)
        tsum += (s->probs[i] = (float)exp((h[n - 1 - i].logit - mx) / p->temperature));
    return h[n - 1 - draw(s, s->probs, keep, tsum)].id;
}
