/* test_sampler_cands.c — sampling from the candidates of a row (sampler_sample_cands) against
 * sampler_sample on the whole row.
 *
 * For many seeds, temperatures, top_p / top_k / min_p / XTC settings and logprob requests,
 * on random rows of n = 1000 and n = 128256 built so that the span holds from one to more
 * than cap ids: (1) with the candidates (the span cut to the top cap) and the exact mx/sum
 * sampler_sample computes (sampler_cands_build), every answered row gives the same id and
 * bit-identical logprobs,
 * and the path asks for the full row exactly when a reference predicate says it must;
 * (2) with the CPU backend's topcand op (float sum), the same ids and logprobs within 1e-5,
 * except draws on a top_p / XTC bound that the float rounding of the sum flips (at most 0.5%
 * of these adversarial rows, and only where the two sums differ).
 */
#include "harness.h"

#include <stdint.h>

#include "backend/backend.h"
#include "engine/sampler.h"

static uint64_t g_rng;
static uint64_t rng_u64(void)
{
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double rng_u(void) { return (double)(rng_u64() >> 11) * (1.0 / 9007199254740992.0); }
static int rng_i(int n) { return (int)(rng_u64() % (uint64_t)n); }

/* A row whose max is near 10: nh ids spread over [mx - 24, mx] (some quantized to tie),
 * the rest far below the span (a few close to its edge). */
static void gen_row(float *x, int n)
{
    static const int hot[] = {0, 2, 10, 60, 400, 2500, 6000};
    int nh = hot[rng_i(7)], quant = rng_i(3) == 0;
    float top = 8.0f + (float)rng_u() * 4.0f;
    for (int i = 0; i < n; i++)
        x[i] = top - 26.0f - (float)rng_u() * 10.0f;
    for (int j = 0; j < nh; j++) {
        float v = top - (float)(rng_u() * rng_u()) * 24.0f;
        x[rng_i(n)] = quant ? floorf(v * 4.0f) / 4.0f : v;
    }
    x[rng_i(n)] = top;
    if (rng_i(4) == 0)
        x[rng_i(n)] = top; /* a tie at the max */
}

struct stats {
    long cases, answered, full, must_checked, xtc_answered, lp_answered, narrowed, op_mismatch;
};

/* The reference predicate: must sampler_sample_cands ask for the full row? -1 = cannot tell
 * here (XTC fired, or a filter bound within rounding of its threshold). */
static int must_full(const struct sampler_params *p, int n, const struct sampler_cands *c,
                     uint64_t step)
{
    int want_lp = p->top_logprobs >= 0, k = p->top_logprobs < n ? p->top_logprobs : n;
    int lp_short = want_lp && (c->nc < 0 || (c->nc < k && c->nc < n));
    if (!(p->temperature > 0) || !isfinite(c->mx))
        return lp_short || (want_lp && !isfinite(c->mx));
    int top_p_on = p->top_p > 0 && p->top_p < 1, min_p_on = p->min_p > 0;
    int top_k_on = p->top_k > 0 && p->top_k < n;
    if (c->nc < 0 || !(top_p_on || min_p_on || top_k_on) || lp_short)
        return 1;
    if (p->xtc_probability > 0 && sampler_uniform(p->seed, step, 1) <= p->xtc_probability)
        return -1;
    if (c->nc == n)
        return 0;
    if (top_p_on || min_p_on) {
        double cum = 0, lmin = min_p_on ? log((double)p->min_p) : 0;
        for (int j = 0; j < c->nc; j++) {
            if (top_p_on && j > 0 && fabs(cum - p->top_p) < 1e-6)
                return -1;
            if (top_p_on && j > 0 && cum >= p->top_p)
                return 0;
            double d = (double)c->c[j].logit - c->mx;
            if (min_p_on && j > 0 && fabs(d - lmin) < 1e-5)
                return -1;
            if (min_p_on && j > 0 && d < lmin)
                return 0;
            cum += exp(d) / c->sum;
        }
        if (top_p_on && fabs(cum - p->top_p) < 1e-6)
            return -1;
        return !(top_p_on && cum >= p->top_p);
    }
    return c->nc < p->top_k;
}

static void rand_params(struct sampler_params *p, uint64_t seed)
{
    static const float temps[] = {0.0f, 0.3f, 0.7f, 1.0f, 1.6f};
    static const float top_ps[] = {1.0f, 0.9f, 0.5f, 0.99999994f, 0.0f};
    static const int top_ks[] = {0, 0, 1, 5, 40, 5000};
    static const float min_ps[] = {0.0f, 0.0f, 0.05f, 0.3f, 1e-9f};
    static const float xtc_ps[] = {0.0f, 0.0f, 0.5f, 1.0f};
    static const int lps[] = {-1, -1, 0, 3, 11};
    sampler_params_default(p);
    p->temperature = temps[rng_i(5)];
    p->top_p = top_ps[rng_i(5)];
    p->top_k = top_ks[rng_i(6)];
    p->min_p = min_ps[rng_i(5)];
    p->xtc_probability = xtc_ps[rng_i(4)];
    p->xtc_threshold = 0.05f + 0.1f * (float)rng_i(3);
    p->top_logprobs = lps[rng_i(5)];
    if (rng_i(25) == 0)
        p->repetition_penalty = 1.3f; /* a processor: never from candidates */
    p->seed = seed;
}

static int lp_same(const struct sampler_logprob *a, const struct sampler_logprob *b, float tol)
{
    if (a->id != b->id || a->n_top != b->n_top || !(fabsf(a->logprob - b->logprob) <= tol))
        return 0;
    for (int i = 0; i < a->n_top; i++)
        if (a->top_id[i] != b->top_id[i] || !(fabsf(a->top_lp[i] - b->top_lp[i]) <= tol))
            return 0;
    return 1;
}

/* One vocabulary size: `cases` parameter sets of `steps` rows each. */
static void run_size(struct be *be, int n, int cap, int cases, uint64_t seed0, struct stats *st)
{
    float *row = malloc(sizeof(float) * (size_t)n), *work = malloc(sizeof(float) * (size_t)n);
    struct be_topcand_ent *buf = malloc(sizeof *buf * (size_t)cap);
    size_t stride = be_topcand_stride(cap);
    void *dev = be->ops->alloc(be, stride), *host = malloc(stride);
    float *drow = be->ops->alloc(be, sizeof(float) * (size_t)n);
    const int32_t hist[3] = {1, 2, 3};
    for (int ci = 0; ci < cases; ci++) {
        g_rng = seed0 + (uint64_t)ci * 7919u;
        struct sampler_params p;
        rand_params(&p, seed0 ^ ((uint64_t)ci << 20));
        struct sampler *full = NULL, *cand = NULL, *op = NULL;
        struct cerr e = {0};
        if (sampler_new(&full, &p, n, &e) || sampler_new(&cand, &p, n, &e) ||
            sampler_new(&op, &p, n, &e)) {
            CHECK_MSG(0, "sampler_new: %s", e.msg);
            break;
        }
        int32_t exempt[2] = {(int32_t)rng_i(n), (int32_t)rng_i(n)};
        sampler_set_xtc_exempt(full, exempt, 2), sampler_set_xtc_exempt(cand, exempt, 2);
        sampler_set_xtc_exempt(op, exempt, 2);
        sampler_prime(full, hist, 3), sampler_prime(cand, hist, 3), sampler_prime(op, hist, 3);
        CHECK(sampler_wants_cands(cand) ==
              (p.repetition_penalty == 1.0f &&
               (p.temperature == 0 || (p.top_p > 0 && p.top_p < 1) || p.min_p > 0 ||
                (p.top_k > 0 && p.top_k < n))));
        for (int step = 0; step < 3; step++) {
            gen_row(row, n);
            st->cases++;
            struct sampler_logprob la, lb, lc;
            memset(&la, 0, sizeof la), memset(&lb, 0, sizeof lb), memset(&lc, 0, sizeof lc);
            memcpy(work, row, sizeof(float) * (size_t)n);
            int32_t ida = sampler_sample(full, work, &la);
            /* (1) the candidates with sampler_sample's own mx and sum */
            struct sampler_cands c;
            sampler_cands_build(cand, row, cap, buf, &c);
            int must = must_full(&p, n, &c, (uint64_t)step);
            if (p.repetition_penalty != 1.0f)
                must = 1;
            int32_t idb = sampler_sample_cands(cand, &c, &lb);
            int asked = idb == SAMPLER_NEED_FULL;
            if (must >= 0) {
                st->must_checked++;
                CHECK_MSG(asked == must, "n %d case %d step %d: asked %d, must %d (T %g top_p %g "
                          "top_k %d min_p %g nc %d lp %d)", n, ci, step, asked, must,
                          p.temperature, p.top_p, p.top_k, p.min_p, c.nc, p.top_logprobs);
            }
            if (asked) {
                st->full++;
                memcpy(work, row, sizeof(float) * (size_t)n);
                idb = sampler_sample(cand, work, &lb);
            } else {
                st->answered++;
                st->xtc_answered += p.xtc_probability > 0 && p.temperature > 0;
                st->lp_answered += p.top_logprobs >= 0;
            }
            CHECK_MSG(ida == idb, "n %d case %d step %d: id %d, full row %d", n, ci, step, idb,
                      ida);
            if (p.top_logprobs >= 0)
                CHECK_MSG(lp_same(&la, &lb, 0.0f), "n %d case %d step %d: logprobs differ", n,
                          ci, step);
            /* (2) the CPU backend's op: its float sum */
            be->ops->upload(be, drow, row, sizeof(float) * (size_t)n, NULL);
            be->ops->topcand(be, dev, drow, 1, n, SAMPLER_CAND_SPAN, cap);
            be->ops->download(be, host, dev, stride, NULL);
            const struct be_topcand_hdr *h = host;
            struct sampler_cands co = {.mx = h->mx, .sum = h->sum, .argmax = h->argmax,
                                       .nc = h->nc, .c = (const struct be_topcand_ent *)(h + 1)};
            CHECK(h->argmax == c.argmax);
            if (h->nc >= 0 && c.nc >= 0) /* two complete prefixes: one begins the other */
                CHECK(memcmp(h + 1, c.c, sizeof *c.c * (size_t)(h->nc < c.nc ? h->nc : c.nc)) ==
                      0);
            int in_span = 0;
            for (int i = 0; i < n; i++)
                in_span += row[i] >= c.mx - SAMPLER_CAND_SPAN;
            st->narrowed += isfinite(c.mx) && in_span > cap;
            CHECK_MSG(fabs(co.sum - c.sum) <= 1e-6 * c.sum, "sum %.9g vs %.9g", co.sum, c.sum);
            int32_t idc = sampler_sample_cands(op, &co, &lc);
            if (idc == SAMPLER_NEED_FULL) {
                memcpy(work, row, sizeof(float) * (size_t)n);
                idc = sampler_sample(op, work, &lc);
            }
            /* the float sum may flip a draw sitting on a top_p / XTC bound (e.g. two ids
             * tied at the max with top_p 0.5: cum 0.4999999988 or 0.5); nothing else may */
            if (ida != idc) {
                st->op_mismatch++;
                CHECK_MSG(co.sum != c.sum, "n %d case %d step %d: op id %d, full row %d with "
                          "the same sum", n, ci, step, idc, ida);
            } else if (p.top_logprobs >= 0) {
                CHECK_MSG(lp_same(&la, &lc, 1e-5f), "n %d case %d step %d: op logprobs differ",
                          n, ci, step);
            }
            sampler_accept(full, ida), sampler_accept(cand, ida), sampler_accept(op, ida);
        }
        sampler_free(full), sampler_free(cand), sampler_free(op);
    }
    be->ops->free(be, dev), be->ops->free(be, drow);
    free(row), free(work), free(buf), free(host);
}

static struct be *g_be;

static void report(const char *what, const struct stats *st)
{
    printf("%s: %ld rows, %ld from candidates (%ld with XTC, %ld with logprobs), %ld asked for "
           "the full row, %ld held more than cap in the span, %ld checked against the "
           "predicate; with the op's "
           "float sum %ld ids differ\n",
           what, st->cases, st->answered, st->xtc_answered, st->lp_answered, st->full,
           st->narrowed, st->must_checked, st->op_mismatch);
}

static void test_small_vocab(void)
{
    struct stats st = {0};
    run_size(g_be, 1000, 256, 1500, 11, &st);
    report("n=1000 cap=256", &st);
    CHECK(st.answered > st.cases / 4 && st.full > st.cases / 10 && st.narrowed > 0);
    CHECK(st.xtc_answered > 20 && st.lp_answered > 50 && st.must_checked > st.cases / 2);
    CHECK(st.op_mismatch * 200 <= st.cases);
}

static void test_llama3_vocab(void)
{
    struct stats st = {0};
    run_size(g_be, 128256, 4096, 60, 77, &st);
    report("n=128256 cap=4096", &st);
    CHECK(st.answered > st.cases / 5 && st.full > 0 && st.narrowed > 0);
    CHECK(st.op_mismatch * 200 <= st.cases);
}

/* Rows where nothing is finite or a value is +inf: greedy from the header, logprobs full. */
static void test_non_finite(void)
{
    struct sampler_params p;
    sampler_params_default(&p);
    p.temperature = 1.0f;
    p.top_p = 0.9f;
    struct sampler *s = NULL;
    CHECK(sampler_new(&s, &p, 10, NULL) == 0);
    struct sampler_cands c = {.mx = INFINITY, .sum = 0, .argmax = 7, .nc = -1};
    CHECK_EQ_INT(sampler_sample_cands(s, &c, NULL), 7);
    struct sampler_logprob lp;
    sampler_free(s);
    p.top_logprobs = 2;
    CHECK(sampler_new(&s, &p, 10, NULL) == 0);
    c.mx = -INFINITY, c.argmax = 0;
    CHECK_EQ_INT(sampler_sample_cands(s, &c, &lp), SAMPLER_NEED_FULL);
    CHECK_EQ_INT(sampler_sample_cands(s, &c, NULL), 0); /* no logprobs asked: the argmax */
    sampler_free(s);
}

int main(void)
{
    struct be_config cfg = {.n_threads = 1};
    struct cerr e = {0};
    g_be = be_new("cpu", &cfg, &e);
    if (!g_be || !g_be->ops->topcand) {
        fprintf(stderr, "cpu backend: %s\n", g_be ? "no topcand op" : e.msg);
        return 1;
    }
    RUN(test_non_finite);
    RUN(test_small_vocab);
    RUN(test_llama3_vocab);
    be_free(g_be);
    return harness_done();
}
