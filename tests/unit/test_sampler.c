/* test_sampler.c — the sampler against a sort-the-vocabulary oracle written from the
 * definitions (inventory §4.2): processors applied by scanning the history window, filters as
 * masks over the full ranking, then one draw with the documented per-step uniform. The same
 * seed must draw the same ids, greedy must be argmax (lowest id on ties), logprobs must be the
 * log-softmax of the processed logits, and bad parameters give the reference's messages. */
#include "harness.h"

#include <jansson.h>
#include <stdint.h>

#include "engine/sampler.h"

static uint64_t lcg(uint64_t *x)
{
    *x = *x * 6364136223846793005ull + 1442695040888963407ull;
    return *x >> 33;
}

static double frand(uint64_t *x) /* [0, 1) */
{
    return (double)lcg(x) / 2147483648.0;
}

static struct sampler_params mk(float temp, float top_p, int top_k, float min_p, uint64_t seed)
{
    struct sampler_params p;
    sampler_params_default(&p);
    p.temperature = temp, p.top_p = top_p, p.top_k = top_k, p.min_p = min_p, p.seed = seed;
    return p;
}

/* ---- the oracle ---- */

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

enum { MAXV = 6000 };

struct oracle {
    const int32_t *hist;
    int hn;
    const int32_t *exempt;
    int n_exempt;
    /* scratch */
    struct oc c[MAXV];
    float w[MAXV];
    int cnt[MAXV], keep[MAXV];
};

/* Applies logit_bias and the three penalties to lg by their definitions. */
static void oracle_process(struct oracle *o, float *lg, int n, const struct sampler_params *p)
{
    for (int i = 0; i < p->n_logit_bias; i++)
        lg[p->logit_bias[i].id] += p->logit_bias[i].bias;
    const float pen[3] = {p->repetition_penalty, p->presence_penalty, p->frequency_penalty};
    const int ctx[3] = {p->repetition_context_size, p->presence_context_size,
                        p->frequency_context_size};
    for (int k = 0; k < 3; k++) {
        if (pen[k] == 0 || (k == 0 && pen[k] == 1))
            continue;
        int from = ctx[k] == 0 || ctx[k] > o->hn ? 0 : o->hn - ctx[k];
        memset(o->cnt, 0, (size_t)n * sizeof o->cnt[0]);
        for (int i = from; i < o->hn; i++)
            o->cnt[o->hist[i]]++;
        for (int id = 0; id < n; id++) {
            if (!o->cnt[id])
                continue;
            if (k == 0)
                lg[id] = lg[id] < 0 ? lg[id] * pen[0] : lg[id] / pen[0];
            else if (k == 1)
                lg[id] -= pen[1];
            else
                lg[id] -= pen[2] * (float)o->cnt[id];
        }
    }
}

static int oracle_exempt(const struct oracle *o, int32_t id)
{
    for (int i = 0; i < o->n_exempt; i++)
        if (o->exempt[i] == id)
            return 1;
    return 0;
}

/* One step: processes lg in place and returns the id the definition draws at `step`. */
static int32_t oracle_sample(struct oracle *o, float *lg, int n, const struct sampler_params *p,
                             uint64_t step)
{
    oracle_process(o, lg, n, p);
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (lg[i] > lg[best])
            best = i;
    if (p->temperature == 0)
        return best;
    double mx = lg[best], sum = 0;
    for (int i = 0; i < n; i++)
        sum += exp(lg[i] - mx);
    for (int i = 0; i < n; i++)
        o->c[i].l = lg[i], o->c[i].id = i, o->keep[i] = 1; /* keep[] is by rank */
    qsort(o->c, (size_t)n, sizeof o->c[0], oc_cmp);
    int top_p_on = p->top_p > 0 && p->top_p<1, min_p_on = p->min_p> 0;
    int top_k_on = p->top_k > 0 && p->top_k < n;
    if (top_p_on) { /* keep a token when the mass ranked above it is below top_p */
        double above = 0;
        for (int r = 0; r < n; r++) {
            o->keep[r] &= r == 0 || above < p->top_p;
            above += exp(o->c[r].l - mx) / sum;
        }
    }
    if (min_p_on)
        for (int r = 1; r < n; r++)
            o->keep[r] &= (double)o->c[r].l - mx >= log((double)p->min_p);
    int xtc = p->xtc_probability > 0 && sampler_uniform(p->seed, step, 1) <= p->xtc_probability;
    if (xtc) {
        double sk = 0, qmin = INFINITY;
        for (int r = 0; r < n; r++)
            if (o->keep[r])
                sk += exp(o->c[r].l - mx);
        int above = 0;
        for (int r = 0; r < n; r++) {
            double q = exp(o->c[r].l - mx) / sk;
            if (o->keep[r] && q > p->xtc_threshold) {
                above++;
                qmin = q < qmin ? q : qmin;
            }
        }
        for (int r = 0; r < n && above >= 2; r++)
            if (o->keep[r] && exp(o->c[r].l - mx) / sk > qmin && !oracle_exempt(o, o->c[r].id))
                o->keep[r] = 0;
    }
    if (top_k_on)
        for (int r = 0, k = 0; r < n; r++)
            if (o->keep[r] && ++k > p->top_k)
                o->keep[r] = 0;
    double fmx = -INFINITY;
    for (int r = 0; r < n && fmx == -INFINITY; r++)
        if (o->keep[r])
            fmx = o->c[r].l;
    int ranked = top_p_on || min_p_on || top_k_on;
    /* weights in draw order: the ranking when a prefix filter ran, else the ids in order */
    int32_t ord[MAXV];
    double t = 0;
    for (int i = 0; i < n; i++) {
        int r = i;
        if (!ranked) { /* find the rank of id i */
            for (r = 0; o->c[r].id != i; r++)
                ;
        }
        ord[i] = o->c[r].id;
        o->w[i] = o->keep[r] ? (float)exp((o->c[r].l - fmx) / p->temperature) : 0.0f;
        t += o->w[i];
    }
    double r = sampler_uniform(p->seed, step, 0) * t, acc = 0;
    int last = 0;
    for (int i = 0; i < n; i++) {
        if (o->w[i] > 0)
            last = i;
        acc += o->w[i];
        if (r < acc)
            return ord[i];
    }
    return ord[last];
}

/* ---- tests ---- */

static int g_peaked; /* a few leaders 20..45 nats above the rest: filters reach past them */

static void random_logits(float *lg, int n, uint64_t *x)
{
    for (int i = 0; i < n; i++) /* logits with some exact ties */
        lg[i] = (float)((int)(lcg(x) % 2000) - 1000) / 100.0f * (i % 7 == 0 ? 1.5f : 1.0f);
    for (int k = 0; g_peaked && k < 3; k++)
        lg[lcg(x) % (uint64_t)n] = 35.0f + (float)(lcg(x) % 1000) / 100.0f;
}

/* Runs `steps` steps of sampler and oracle side by side on random logits and a random
 * history; returns the number of differing ids (and checks processed logits bit for bit). */
static int compare_run(const struct sampler_params *p, int V, int steps, const int32_t *exempt,
                       int n_exempt, uint64_t x)
{
    static struct oracle o;
    static float lg[MAXV], lo[MAXV];
    static int32_t hist[4096];
    int hn = 0, bad = 0, bad_logits = 0;
    struct sampler *s = NULL;
    struct cerr e;
    if (sampler_new(&s, p, V, &e)) {
        CHECK_MSG(0, "sampler_new: %s", e.msg);
        return steps;
    }
    CHECK_EQ_INT(sampler_set_xtc_exempt(s, exempt, n_exempt), 0);
    int np = 30 + (int)(lcg(&x) % 40); /* a prompt drawn from a small alphabet: repeats */
    for (; hn < np; hn++)
        hist[hn] = (int32_t)(lcg(&x) % 50);
    CHECK_EQ_INT(sampler_prime(s, hist, hn), 0);
    o.hist = hist, o.exempt = exempt, o.n_exempt = n_exempt;
    for (int step = 0; step < steps; step++) {
        random_logits(lg, V, &x);
        memcpy(lo, lg, (size_t)V * sizeof lg[0]);
        o.hn = hn;
        int32_t b = oracle_sample(&o, lo, V, p, (uint64_t)step);
        int32_t a = sampler_sample(s, lg, NULL);
        bad += a != b;
        if (a != b && getenv("SAMPLER_DEBUG"))
            fprintf(stderr, "step %d: sampler %d oracle %d\n", step, a, b);
        bad_logits += memcmp(lg, lo, (size_t)V * sizeof lg[0]) != 0;
        /* history grows with a mix of sampled and small-alphabet ids */
        int32_t acc = step % 3 ? a : (int32_t)(lcg(&x) % 50);
        if (hn < 4096)
            hist[hn++] = acc;
        CHECK_EQ_INT(sampler_accept(s, acc), 0);
    }
    CHECK_EQ_INT(bad_logits, 0);
    sampler_free(s);
    return bad;
}

static void test_matches_oracle(void)
{
    const struct sampler_params cases[] = {
        mk(0.7f, 1.0f, 0, 0.0f, 1),  mk(1.0f, 0.9f, 0, 0.0f, 2),   mk(0.8f, 1.0f, 40, 0.0f, 3),
        mk(1.2f, 1.0f, 0, 0.05f, 4), mk(0.6f, 0.95f, 20, 0.1f, 5), mk(2.0f, 0.5f, 0, 0.0f, 6),
        mk(0.9f, 1.0f, 1, 0.0f, 7),  mk(1.0f, 0.0f, 0, 0.0f, 8),   mk(0.0f, 0.9f, 5, 0.1f, 9),
    };
    int mismatches = 0;
    for (g_peaked = 0; g_peaked < 2; g_peaked++)
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
            mismatches += compare_run(&cases[k], 1000, 300, NULL, 0, 42 + k);
    g_peaked = 0;
    CHECK_EQ_INT(mismatches, 0);
    /* filters that reach far down the ranking: top_p ~ 1, min_p ~ 0, top_k past the leaders,
     * an XTC threshold of 0 */
    struct sampler_params far[] = {mk(1.0f, 0.99999f, 0, 0.0f, 11), mk(1.0f, 1.0f, 0, 1e-12f, 12),
                                   mk(0.7f, 1.0f, 50, 0.0f, 13), mk(1.0f, 1.0f, 0, 0.0f, 14)};
    far[3].xtc_probability = 1.0f, far[3].xtc_threshold = 0.0f;
    const int32_t ex[] = {5, 6, 7};
    mismatches = 0;
    for (g_peaked = 0; g_peaked < 2; g_peaked++)
        for (size_t k = 0; k < sizeof far / sizeof far[0]; k++)
            mismatches += compare_run(&far[k], 1000, 100, ex, 3, 77 + k);
    g_peaked = 0;
    CHECK_EQ_INT(mismatches, 0);
    /* a vocabulary wide enough that the sampler sorts its candidates instead of popping a
     * heap (SORT_MIN): the same draws as the definition */
    struct sampler_params wide[] = {mk(1.0f, 0.9f, 0, 0.0f, 21), mk(1.3f, 0.99f, 30, 0.0f, 22),
                                    mk(0.8f, 1.0f, 0, 1e-9f, 23), mk(1.0f, 0.97f, 0, 0.0f, 24)};
    wide[3].xtc_probability = 1.0f, wide[3].xtc_threshold = 0.001f;
    mismatches = 0;
    for (g_peaked = 0; g_peaked < 2; g_peaked++)
        for (size_t k = 0; k < sizeof wide / sizeof wide[0]; k++)
            mismatches += compare_run(&wide[k], 6000, 30, ex, 3, 91 + k);
    g_peaked = 0;
    CHECK_EQ_INT(mismatches, 0);
}

/* Every processor, alone and together, at random windows (0 = whole history). */
static void test_processors_match_oracle(void)
{
    uint64_t x = 7;
    int mismatches = 0;
    for (int k = 0; k < 40; k++) {
        struct sampler_params p = mk(k % 4 == 0 ? 0.0f : 1.0f, 1.0f, 0, 0.0f, 100 + (uint64_t)k);
        struct sampler_bias bias[6];
        int which = k % 5; /* 0 rep, 1 pres, 2 freq, 3 bias, 4 all */
        const int sizes[] = {0, 1, 5, 20, 64, 3000};
        if (which == 0 || which == 4) {
            p.repetition_penalty = 0.5f + (float)frand(&x) * 1.5f;
            p.repetition_context_size = sizes[lcg(&x) % 6];
        }
        if (which == 1 || which == 4) {
            p.presence_penalty = -2.0f + (float)frand(&x) * 4.0f;
            p.presence_context_size = sizes[lcg(&x) % 6];
        }
        if (which == 2 || which == 4) {
            p.frequency_penalty = -2.0f + (float)frand(&x) * 4.0f;
            p.frequency_context_size = sizes[lcg(&x) % 6];
        }
        if (which == 3 || which == 4) {
            for (int i = 0; i < 6; i++)
                bias[i].id = (int32_t)(lcg(&x) % 300), bias[i].bias = (float)(frand(&x) * 20 - 10);
            p.logit_bias = bias;
            p.n_logit_bias = 6;
        }
        mismatches += compare_run(&p, 300, 150, NULL, 0, x + (uint64_t)k);
    }
    CHECK_EQ_INT(mismatches, 0);
}

/* XTC alone, with the other filters, with exempt ids; the whole pipeline at once. */
static void test_xtc_matches_oracle(void)
{
    const int32_t exempt[] = {3, 17, 64, 250};
    int mismatches = 0;
    for (int k = 0; k < 16; k++) {
        struct sampler_params p = mk(0.5f + 0.1f * (float)k, (k & 1) ? 0.9f : 1.0f,
                                     (k & 2) ? 30 : 0, (k & 4) ? 0.02f : 0.0f, 500 + (uint64_t)k);
        p.xtc_probability = (k & 8) ? 1.0f : 0.5f;
        p.xtc_threshold = 0.02f * (float)(k % 6);
        if (k >= 12) {
            p.repetition_penalty = 1.3f;
            p.presence_penalty = 0.5f, p.presence_context_size = 0;
            p.frequency_penalty = 0.25f;
        }
        /* flat-ish logits so that several tokens clear the threshold */
        int mm = compare_run(&p, 256, 200, exempt, 4, 900 + (uint64_t)k);
        if (mm && getenv("SAMPLER_DEBUG"))
            fprintf(stderr, "xtc case %d: %d mismatches\n", k, mm);
        mismatches += mm;
    }
    CHECK_EQ_INT(mismatches, 0);
}

static void test_greedy_and_filters(void)
{
    float lg[6] = {1.0f, 3.0f, 3.0f, -1.0f, 2.0f, 0.0f};
    CHECK_EQ_INT(sampler_argmax(lg, 6), 1);
    float nanfirst[3] = {NAN, -5.0f, -7.0f};
    CHECK_EQ_INT(sampler_argmax(nanfirst, 3), 1);
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
    /* ids outside the vocabulary in the history are ignored */
    p = mk(0.0f, 1.0f, 0, 0.0f, 3);
    p.presence_penalty = 2.0f, p.presence_context_size = 0;
    CHECK_EQ_INT(sampler_new(&s, &p, 6, &e), 0);
    int32_t junk[4] = {-1, 6, 1000000, 2};
    CHECK_EQ_INT(sampler_prime(s, junk, 4), 0);
    float l2[6] = {1.0f, 3.0f, 3.0f, -1.0f, 2.0f, 0.0f};
    CHECK_EQ_INT(sampler_sample(s, l2, NULL), 1);
    CHECK(l2[2] == 1.0f && l2[1] == 3.0f);
    sampler_free(s);
}

/* At T = 1 with nothing else the draws follow the softmax. */
static void test_distribution(void)
{
    float base[4] = {0.0f, 1.0f, 2.0f, -1.0f}, lg[4];
    struct sampler_params p = mk(1.0f, 1.0f, 0, 0.0f, 77);
    struct sampler *s = NULL;
    struct cerr e;
    CHECK_EQ_INT(sampler_new(&s, &p, 4, &e), 0);
    int seen[4] = {0}, N = 40000;
    for (int i = 0; i < N; i++) {
        memcpy(lg, base, sizeof lg);
        seen[sampler_sample(s, lg, NULL)]++;
    }
    double z = 0;
    for (int i = 0; i < 4; i++)
        z += exp(base[i]);
    for (int i = 0; i < 4; i++) {
        double pr = exp(base[i]) / z, sd = sqrt(pr * (1 - pr) / N);
        CHECK_NEAR((double)seen[i] / N, pr, 5 * sd);
    }
    sampler_free(s);
}

/* Draw ids for `steps` steps on a fixed logit sequence. */
static void draw_ids(const struct sampler_params *p, int32_t *ids, int steps, int accept_junk)
{
    enum { V = 500 };
    static float lg[V];
    struct sampler *s = NULL;
    struct cerr e;
    CHECK_EQ_INT(sampler_new(&s, p, V, &e), 0);
    if (!s)
        return;
    uint64_t x = 1234;
    for (int i = 0; i < steps; i++) {
        for (int j = 0; j < V; j++)
            lg[j] = (float)frand(&x) * 4.0f;
        ids[i] = sampler_sample(s, lg, NULL);
        sampler_accept(s, accept_junk ? (int32_t)(i * 7 % V) : ids[i]);
    }
    sampler_free(s);
}

static void test_seed_reproducible(void)
{
    enum { N = 64 };
    int32_t a[N], b[N], c[N], d[N];
    struct sampler_params p = mk(1.0f, 0.95f, 50, 0.0f, 2024);
    draw_ids(&p, a, N, 0);
    draw_ids(&p, b, N, 0);
    CHECK(memcmp(a, b, sizeof a) == 0);
    draw_ids(&p, d, N, 1); /* a different history (no penalties): the same ids */
    CHECK(memcmp(a, d, sizeof a) == 0);
    p.seed = 2025;
    draw_ids(&p, c, N, 0);
    int diff = 0;
    for (int i = 0; i < N; i++)
        diff += a[i] != c[i];
    CHECK(diff > N / 4);
    /* the uniforms: in range, different per step and per stream, equal for equal inputs */
    CHECK(sampler_uniform(1, 0, 0) == sampler_uniform(1, 0, 0));
    CHECK(sampler_uniform(1, 0, 0) != sampler_uniform(1, 1, 0));
    CHECK(sampler_uniform(1, 0, 0) != sampler_uniform(1, 0, 1));
    CHECK(sampler_uniform(1, 0, 0) != sampler_uniform(2, 0, 0));
    double m = 0;
    for (uint64_t i = 0; i < 10000; i++) {
        double u = sampler_uniform(99, i, 0);
        CHECK(u >= 0 && u < 1);
        m += u;
    }
    CHECK_NEAR(m / 10000, 0.5, 0.01);
    CHECK(sampler_seed_auto() != sampler_seed_auto());
}

static void test_logit_bias(void)
{
    enum { V = 100 };
    float lg[V];
    uint64_t x = 5;
    struct sampler_bias force = {37, 100.0f}, ban[2] = {{0, -INFINITY}, {1, -100.0f}};
    struct sampler_params p = mk(1.0f, 1.0f, 0, 0.0f, 3);
    p.logit_bias = &force, p.n_logit_bias = 1;
    struct sampler *s = NULL;
    struct cerr e;
    CHECK_EQ_INT(sampler_new(&s, &p, V, &e), 0);
    force.id = 38; /* copied: changing the caller's array changes nothing */
    int forced = 0;
    for (int i = 0; i < 200; i++) {
        for (int j = 0; j < V; j++)
            lg[j] = (float)frand(&x) * 10.0f;
        forced += sampler_sample(s, lg, NULL) == 37;
    }
    CHECK_EQ_INT(forced, 200);
    sampler_free(s);
    /* banned ids: the two leaders never come out, at any temperature or greedy */
    for (int t = 0; t < 2; t++) {
        p = mk(t ? 2.0f : 0.0f, 1.0f, 0, 0.0f, 4);
        p.logit_bias = ban, p.n_logit_bias = 2;
        CHECK_EQ_INT(sampler_new(&s, &p, V, &e), 0);
        int hit = 0;
        for (int i = 0; i < 500; i++) {
            for (int j = 0; j < V; j++)
                lg[j] = j < 2 ? 5.0f : (float)frand(&x);
            int32_t id = sampler_sample(s, lg, NULL);
            hit += id == 0 || id == 1;
        }
        CHECK_EQ_INT(hit, 0);
        sampler_free(s);
    }
}

/* XTC with probability 1: of the tokens above the threshold only the least likely is left;
 * exempt ids are never removed; with one token above the threshold nothing changes. */
static void test_xtc_exempt(void)
{
    /* probs ~ 0.47, 0.26, 0.17, then a tail: three above threshold 0.1 */
    float base[8] = {3.0f, 2.4f, 2.0f, 0.0f, 0.0f, -1.0f, -1.0f, -2.0f}, lg[8];
    struct sampler_params p = mk(1.0f, 1.0f, 0, 0.0f, 11);
    p.xtc_probability = 1.0f, p.xtc_threshold = 0.1f;
    struct sampler *s = NULL;
    struct cerr e;
    CHECK_EQ_INT(sampler_new(&s, &p, 8, &e), 0);
    int seen[8] = {0};
    for (int i = 0; i < 3000; i++) {
        memcpy(lg, base, sizeof lg);
        seen[sampler_sample(s, lg, NULL)]++;
    }
    CHECK_EQ_INT(seen[0] + seen[1], 0);
    CHECK(seen[2] > 0 && seen[3] > 0);
    int32_t ex[2] = {0, 999}; /* 999 is outside the vocabulary: ignored */
    CHECK_EQ_INT(sampler_set_xtc_exempt(s, ex, 2), 0);
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < 3000; i++) {
        memcpy(lg, base, sizeof lg);
        seen[sampler_sample(s, lg, NULL)]++;
    }
    CHECK(seen[0] > 0);
    CHECK_EQ_INT(seen[1], 0);
    sampler_free(s);
    /* threshold 0.5: at most one token can be above it, XTC is a no-op; probability 0: off */
    for (int k = 0; k < 2; k++) {
        p.xtc_threshold = k ? 0.1f : 0.5f;
        p.xtc_probability = k ? 0.0f : 1.0f;
        CHECK_EQ_INT(sampler_new(&s, &p, 8, &e), 0);
        memset(seen, 0, sizeof seen);
        for (int i = 0; i < 3000; i++) {
            memcpy(lg, base, sizeof lg);
            seen[sampler_sample(s, lg, NULL)]++;
        }
        CHECK(seen[0] > 1000);
        sampler_free(s);
    }
}

/* Logprobs: the log-softmax of the processed logits; top list descending; sums to 1. */
static void test_logprobs(void)
{
    enum { V = 11 };
    float base[V], lg[V];
    uint64_t x = 99;
    struct sampler_bias b = {4, 3.0f};
    for (int t = 0; t < 2; t++) {
        struct sampler_params p = mk(t ? 0.8f : 0.0f, t ? 0.9f : 1.0f, t ? 5 : 0, 0.0f, 8);
        p.top_logprobs = 11, p.logit_bias = &b, p.n_logit_bias = 1;
        p.presence_penalty = 1.0f;
        struct sampler *s = NULL;
        struct cerr e;
        CHECK_EQ_INT(sampler_new(&s, &p, V, &e), 0);
        int32_t prompt[3] = {1, 2, 2};
        sampler_prime(s, prompt, 3);
        for (int step = 0; step < 20; step++) {
            for (int j = 0; j < V; j++)
                base[j] = lg[j] = (float)frand(&x) * 6.0f - 3.0f;
            struct sampler_logprob lp;
            int32_t id = sampler_sample(s, lg, &lp);
            sampler_accept(s, id);
            /* lg now holds the processed logits: check them, then their log-softmax */
            CHECK(fabsf(lg[4] - (base[4] + 3.0f)) < 1e-6f ||
                  fabsf(lg[4] - (base[4] + 2.0f)) < 1e-6f); /* minus presence when seen */
            double mx = lg[0], z = 0;
            for (int j = 1; j < V; j++)
                mx = lg[j] > mx ? lg[j] : mx;
            for (int j = 0; j < V; j++)
                z += exp(lg[j] - mx);
            double lse = mx + log(z), tot = 0;
            CHECK_EQ_INT(lp.id, id);
            CHECK_NEAR(lp.logprob, lg[id] - lse, 1e-5);
            CHECK_EQ_INT(lp.n_top, V);
            for (int j = 0; j < lp.n_top; j++) {
                CHECK_NEAR(lp.top_lp[j], lg[lp.top_id[j]] - lse, 1e-5);
                if (j)
                    CHECK(lp.top_lp[j] <= lp.top_lp[j - 1]);
                tot += exp(lp.top_lp[j]);
            }
            CHECK_NEAR(tot, 1.0, 1e-5);
            if (t == 0)
                CHECK_EQ_INT(lp.top_id[0], id);
        }
        sampler_free(s);
    }
    /* k alternatives from a larger vocabulary; 0 = the sampled token only; NULL lp is fine */
    enum { W = 1000 };
    static float big[W];
    for (int j = 0; j < W; j++)
        big[j] = (float)(j % 13) * 0.5f; /* ties: lower id first */
    struct sampler_params p = mk(0.0f, 1.0f, 0, 0.0f, 1);
    p.top_logprobs = 3;
    struct sampler *s = NULL;
    struct cerr e;
    CHECK_EQ_INT(sampler_new(&s, &p, W, &e), 0);
    struct sampler_logprob lp;
    CHECK_EQ_INT(sampler_sample(s, big, &lp), 12);
    CHECK_EQ_INT(lp.n_top, 3);
    CHECK_EQ_INT(lp.top_id[0], 12);
    CHECK_EQ_INT(lp.top_id[1], 25);
    CHECK_EQ_INT(lp.top_id[2], 38);
    CHECK(lp.top_lp[0] == lp.top_lp[1] && lp.top_lp[1] == lp.top_lp[2]);
    sampler_free(s);
    p.top_logprobs = 0;
    CHECK_EQ_INT(sampler_new(&s, &p, W, &e), 0);
    lp.n_top = 99;
    CHECK_EQ_INT(sampler_sample(s, big, &lp), 12);
    CHECK_EQ_INT(lp.n_top, 0);
    CHECK_EQ_INT(sampler_sample(s, big, NULL), 12);
    sampler_free(s);
}

/* A long run with a whole-history window and a finite one: the count maps stay exact. */
static void test_long_history(void)
{
    struct sampler_params p = mk(0.0f, 1.0f, 0, 0.0f, 1);
    p.presence_penalty = 1.0f, p.presence_context_size = 0;
    p.frequency_penalty = 0.5f, p.frequency_context_size = 37;
    p.repetition_penalty = 1.1f, p.repetition_context_size = 500;
    int mism = compare_run(&p, 2000, 3000, NULL, 0, 31337);
    CHECK_EQ_INT(mism, 0);
}

/* Goldens from scripts/sampler_reference.py (numpy, the reference's definitions): ids,
 * logprobs of the sampled token and the top-k alternatives over multi-step runs. */
static double jnum(json_t *o, const char *k)
{
    return json_number_value(json_object_get(o, k));
}

static void test_numpy_goldens(void)
{
    json_error_t je;
    json_t *root = json_load_file(repo_path("tests/data/sampler/golden.json"), 0, &je);
    CHECK_MSG(root != NULL, "golden.json: %s", je.text);
    if (!root)
        return;
    json_t *cases = json_object_get(root, "cases");
    size_t ci, n_steps = 0;
    json_t *c;
    int bad_id = 0, bad_lp = 0;
    json_array_foreach(cases, ci, c)
    {
        json_t *jp = json_object_get(c, "params");
        int V = (int)json_integer_value(json_object_get(c, "n_vocab"));
        struct sampler_params p;
        sampler_params_default(&p);
        p.temperature = (float)jnum(jp, "temperature");
        p.top_p = (float)jnum(jp, "top_p");
        p.top_k = (int)jnum(jp, "top_k");
        p.min_p = (float)jnum(jp, "min_p");
        p.xtc_probability = (float)jnum(jp, "xtc_probability");
        p.xtc_threshold = (float)jnum(jp, "xtc_threshold");
        p.repetition_penalty = (float)jnum(jp, "repetition_penalty");
        p.repetition_context_size = (int)jnum(jp, "repetition_context_size");
        p.presence_penalty = (float)jnum(jp, "presence_penalty");
        p.presence_context_size = (int)jnum(jp, "presence_context_size");
        p.frequency_penalty = (float)jnum(jp, "frequency_penalty");
        p.frequency_context_size = (int)jnum(jp, "frequency_context_size");
        p.seed = (uint64_t)json_integer_value(json_object_get(jp, "seed"));
        p.top_logprobs = (int)jnum(jp, "top_logprobs");
        struct sampler_bias bias[8];
        json_t *jb = json_object_get(jp, "logit_bias"), *x;
        size_t i;
        json_array_foreach(jb, i, x)
        {
            if (i < 8) {
                bias[i].id = (int32_t)json_integer_value(json_array_get(x, 0));
                bias[i].bias = (float)json_number_value(json_array_get(x, 1));
                p.n_logit_bias = (int)i + 1;
            }
        }
        p.logit_bias = bias;
        struct sampler *s = NULL;
        struct cerr e;
        if (sampler_new(&s, &p, V, &e)) {
            CHECK_MSG(0, "case %zu: %s", ci, e.msg);
            continue;
        }
        int32_t ids[64];
        int ne = 0;
        json_array_foreach(json_object_get(c, "exempt"), i, x)
        {
            if (ne < 64)
                ids[ne++] = (int32_t)json_integer_value(x);
        }
        sampler_set_xtc_exempt(s, ids, ne);
        json_array_foreach(json_object_get(c, "history"), i, x)
        {
            sampler_accept(s, (int32_t)json_integer_value(x));
        }
        json_t *st;
        size_t si;
        json_array_foreach(json_object_get(c, "steps"), si, st)
        {
            float lg[64];
            json_array_foreach(json_object_get(st, "logits"), i, x)
            {
                if (i < 64)
                    lg[i] = (float)json_integer_value(x) / 100.0f;
            }
            struct sampler_logprob lp;
            int32_t id = sampler_sample(s, lg, &lp), want = (int32_t)jnum(st, "id");
            n_steps++;
            if (id != want) {
                bad_id++;
                fprintf(stderr, "case %zu step %zu: id %d, numpy %d\n", ci, si, id, want);
            }
            if (p.top_logprobs >= 0) {
                json_t *tid = json_object_get(st, "top_id"), *tlp = json_object_get(st, "top_lp");
                int ok = lp.id == id && fabs(lp.logprob - jnum(st, "logprob")) < 1e-5 &&
                         lp.n_top == (int)json_array_size(tid);
                for (int k = 0; ok && k < lp.n_top; k++)
                    ok = lp.top_id[k] ==
                             (int32_t)json_integer_value(json_array_get(tid, (size_t)k)) &&
                         fabs(lp.top_lp[k] - json_number_value(json_array_get(tlp, (size_t)k))) <
                             1e-5;
                if (!ok) {
                    bad_lp++;
                    fprintf(stderr, "case %zu step %zu: logprobs differ\n", ci, si);
                }
            }
            sampler_accept(s, want);
        }
        sampler_free(s);
    }
    CHECK(n_steps >= 100);
    CHECK_EQ_INT(bad_id, 0);
    CHECK_EQ_INT(bad_lp, 0);
    json_decref(root);
}

static void check_msg(struct sampler_params p, const char *want)
{
    struct cerr e = {0};
    int rc = sampler_params_check(&p, 100, &e);
    CHECK_EQ_INT(rc, CERR_INVALID);
    CHECK_STR(e.msg, want);
    struct sampler *s = (struct sampler *)&e;
    CHECK(sampler_new(&s, &p, 100, &e) < 0 && s == NULL);
}

static void test_validation(void)
{
    struct sampler_params p = mk(0.7f, 1.0f, 0, 0.0f, 0);
    struct cerr e;
    CHECK_EQ_INT(sampler_params_check(&p, 100, &e), 0);
    p.temperature = 5.5f;
    check_msg(p, "temperature must be a number in [0, 5], got 5.5");
    p = mk(-1.0f, 1.0f, 0, 0.0f, 0);
    check_msg(p, "temperature must be a number in [0, 5], got -1.0");
    p = mk(NAN, 1.0f, 0, 0.0f, 0);
    check_msg(p, "temperature must be a number in [0, 5], got nan");
    p = mk(1.0f, 1.1f, 0, 0.0f, 0);
    check_msg(p, "top_p must be a number in [0, 1], got 1.1");
    p = mk(1.0f, 1.0f, -3, 0.0f, 0);
    check_msg(p, "top_k must be a non-negative integer, got -3");
    p = mk(1.0f, 1.0f, 0, 1.5f, 0);
    check_msg(p, "`min_p` has to be a float in the [0, 1] interval, but is 1.5");
    p = mk(1.0f, 1.0f, 0, 0.0f, 0);
    p.xtc_probability = 0.5f, p.xtc_threshold = 0.6f;
    check_msg(p, "`threshold` has to be a float in the [0, 0.5] interval, but is 0.6");
    p.xtc_probability = 2.0f, p.xtc_threshold = 0.1f;
    check_msg(p, "`probability` has to be a float in the [0, 1] interval, but is 2.0");
    p = mk(1.0f, 1.0f, 0, 0.0f, 0);
    p.repetition_penalty = -0.5f;
    check_msg(p, "penalty must be a non-negative float, got -0.5");
    p = mk(1.0f, 1.0f, 0, 0.0f, 0);
    p.presence_penalty = 2.5f;
    check_msg(p, "presence_penalty must be a number in [-2, 2], got 2.5");
    p = mk(1.0f, 1.0f, 0, 0.0f, 0);
    p.frequency_penalty = -3.0f;
    check_msg(p, "frequency_penalty must be a number in [-2, 2], got -3.0");
    p = mk(1.0f, 1.0f, 0, 0.0f, 0);
    p.frequency_context_size = -1;
    check_msg(p, "frequency_context_size must be a non-negative integer, got -1");
    p = mk(1.0f, 1.0f, 0, 0.0f, 0);
    p.top_logprobs = 12;
    check_msg(p, "top_logprobs must be at most 11");
    p.top_logprobs = -2;
    check_msg(p, "top_logprobs must be at least 0");
    struct sampler_bias b = {100, 1.0f};
    p = mk(1.0f, 1.0f, 0, 0.0f, 0);
    p.logit_bias = &b, p.n_logit_bias = 1;
    check_msg(p, "logit_bias token id 100 is out of range (the vocabulary has 100 ids)");
    b.id = 5, b.bias = NAN;
    check_msg(p, "logit_bias must be a dict of int to float");
    /* edges are valid: greedy, top_p 0 (off), min_p 1, xtc threshold 0.5, penalties +-2 */
    p = mk(0.0f, 0.0f, 0, 1.0f, 0);
    p.xtc_probability = 1.0f, p.xtc_threshold = 0.5f;
    p.presence_penalty = -2.0f, p.frequency_penalty = 2.0f, p.repetition_penalty = 0.0f;
    p.top_logprobs = 11;
    CHECK_EQ_INT(sampler_params_check(&p, 100, &e), 0);
    p.xtc_probability = 0.0f, p.xtc_threshold = 0.7f; /* XTC off: its threshold is not read */
    CHECK_EQ_INT(sampler_params_check(&p, 100, &e), 0);
}

int main(void)
{
    RUN(test_matches_oracle);
    RUN(test_processors_match_oracle);
    RUN(test_xtc_matches_oracle);
    RUN(test_greedy_and_filters);
    RUN(test_distribution);
    RUN(test_seed_reproducible);
    RUN(test_logit_bias);
    RUN(test_xtc_exempt);
    RUN(test_logprobs);
    RUN(test_long_history);
    RUN(test_numpy_goldens);
    RUN(test_validation);
    return harness_done();
}
