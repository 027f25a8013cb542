/* sampler.c — see sampler.h.
 *
 * The processors are sparse: logit_bias walks its list, each penalty walks the count map of
 * its window (distinct ids in the last W tokens, kept up to date by accept). Truncation pops a
 * max-heap of the vocabulary only as far as the filters need (O(n + kept log n)); with no
 * active filter the draw walks the ids in order. The draw and XTC each use one uniform derived
 * from (seed, step, stream), so nothing but the step counter is carried between tokens.
 */
#include "engine/sampler.h"

#include "backend/be_sample.h"
#include "engine/grammar/gram_row.h"
#include "engine/ranksort.h"

#include <math.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- count map: id -> occurrences, open addressing with linear probing ---- */

struct cmap {
    int32_t *key; /* (cap) -1 = empty */
    int32_t *cnt; /* (cap) */
    uint32_t cap; /* power of two */
    uint32_t n;
};

static uint32_t cmap_hash(int32_t id)
{
    uint32_t x = (uint32_t)id * 0x9e3779b1u;
    return x ^ (x >> 16);
}

static int cmap_alloc(struct cmap *m, uint32_t cap)
{
    m->key = malloc((size_t)cap * sizeof *m->key);
    m->cnt = malloc((size_t)cap * sizeof *m->cnt);
    if (!m->key || !m->cnt) {
        free(m->key);
        free(m->cnt);
        m->key = m->cnt = NULL;
        return CERR_NOMEM;
    }
    memset(m->key, 0xff, (size_t)cap * sizeof *m->key);
    m->cap = cap;
    m->n = 0;
    return 0;
}

static void cmap_free(struct cmap *m)
{
    free(m->key);
    free(m->cnt);
    m->key = m->cnt = NULL;
}

/* Slot of id, or of the empty slot where it would go. */
static uint32_t cmap_slot(const struct cmap *m, int32_t id)
{
    uint32_t mask = m->cap - 1, i = cmap_hash(id) & mask;
    while (m->key[i] != -1 && m->key[i] != id)
        i = (i + 1) & mask;
    return i;
}

static int cmap_grow(struct cmap *m)
{
    struct cmap g;
    if (cmap_alloc(&g, m->cap * 2))
        return CERR_NOMEM;
    for (uint32_t i = 0; i < m->cap; i++)
        if (m->key[i] != -1) {
            uint32_t j = cmap_slot(&g, m->key[i]);
            g.key[j] = m->key[i];
            g.cnt[j] = m->cnt[i];
            g.n++;
        }
    cmap_free(m);
    *m = g;
    return 0;
}

static int cmap_inc(struct cmap *m, int32_t id)
{
    uint32_t i = cmap_slot(m, id);
    if (m->key[i] == id) {
        m->cnt[i]++;
        return 0;
    }
    if ((m->n + 1) * 2 > m->cap) {
        if (cmap_grow(m))
            return CERR_NOMEM;
        i = cmap_slot(m, id);
    }
    m->key[i] = id;
    m->cnt[i] = 1;
    m->n++;
    return 0;
}

/* Decrements id; at zero removes it with a backward shift (no tombstones). */
static void cmap_dec(struct cmap *m, int32_t id)
{
    uint32_t mask = m->cap - 1, i = cmap_slot(m, id);
    if (m->key[i] != id || --m->cnt[i] > 0)
        return;
    m->n--;
    for (uint32_t j = i;;) {
        j = (j + 1) & mask;
        if (m->key[j] == -1)
            break;
        uint32_t k = cmap_hash(m->key[j]) & mask;
        /* the entry at j may move to i only if its home k is not cyclically in (i, j] */
        if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
            continue;
        m->key[i] = m->key[j];
        m->cnt[i] = m->cnt[j];
        i = j;
    }
    m->key[i] = -1;
}

/* ---- state ---- */

struct cand {
    float logit;
    int32_t id; /* < 0 (-1 - id) once XTC removed it */
};

struct win {
    int size; /* tokens; 0 = whole history */
    struct cmap m;
};

struct sampler {
    struct sampler_params p;
    int n_vocab;
    uint64_t step;
    struct sampler_bias *bias; /* (p.n_logit_bias) */
    int32_t *exempt;           /* (n_exempt) sorted */
    int n_exempt;
    struct win win[3];
    int n_win;
    int rep_w, pres_w, freq_w; /* index into win, -1 = off */
    int32_t *hist;             /* recent tokens, only when a finite window exists */
    size_t hn, hcap, hkeep;    /* hkeep = the largest finite window */
    struct cand *cands;        /* (n_vocab) */
    void *rkeys;               /* rank_sort's scratch for n_vocab candidates, allocated at
                                  first need */
    float *probs;              /* (n_vocab) */
    struct gram_row *gram;     /* constrained decoding, or NULL (engine/grammar/gram_row.h) */
};

void sampler_params_default(struct sampler_params *p)
{
    memset(p, 0, sizeof *p);
    p->temperature = 0.7f;
    p->top_p = 1.0f;
    p->repetition_penalty = 1.0f;
    p->repetition_context_size = 20;
    p->presence_context_size = 20;
    p->frequency_context_size = 20;
    p->top_logprobs = -1;
}

/* ---- lifecycle ---- */

/* Window index for a penalty of context size `size`, sharing equal windows. */
static int win_for(struct sampler *s, int size)
{
    for (int i = 0; i < s->n_win; i++)
        if (s->win[i].size == size)
            return i;
    s->win[s->n_win].size = size;
    return s->n_win++;
}

int sampler_new(struct sampler **out, const struct sampler_params *p, int n_vocab, struct cerr *e)
{
    *out = NULL;
    if (n_vocab <= 0)
        return cerr_set(e, CERR_INVALID, "sampler: empty vocabulary");
    int rc = sampler_params_check(p, n_vocab, e);
    if (rc)
        return rc;
    struct sampler *s = calloc(1, sizeof *s);
    if (!s)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    s->rep_w = s->pres_w = s->freq_w = -1;
    if (p->repetition_penalty != 0.0f && p->repetition_penalty != 1.0f)
        s->rep_w = win_for(s, p->repetition_context_size);
    if (p->presence_penalty != 0.0f)
        s->pres_w = win_for(s, p->presence_context_size);
    if (p->frequency_penalty != 0.0f)
        s->freq_w = win_for(s, p->frequency_context_size);
    int bad = 0;
    for (int i = 0; i < s->n_win; i++) {
        int w = s->win[i].size;
        uint32_t cap = 16;
        while (w > 0 && cap < (uint32_t)w * 2 && cap < (1u << 20))
            cap *= 2;
        bad |= cmap_alloc(&s->win[i].m, cap) != 0;
        if (w > 0 && (size_t)w > s->hkeep)
            s->hkeep = (size_t)w;
    }
    if (p->n_logit_bias > 0) {
        s->bias = malloc((size_t)p->n_logit_bias * sizeof *s->bias);
        bad |= !s->bias;
        if (s->bias)
            memcpy(s->bias, p->logit_bias, (size_t)p->n_logit_bias * sizeof *s->bias);
    }
    s->p.logit_bias = s->bias;
    s->cands = malloc((size_t)n_vocab * sizeof *s->cands);
    s->probs = malloc((size_t)n_vocab * sizeof *s->probs);
    if (bad || !s->cands || !s->probs) {
        sampler_free(s);
        return cerr_set(e, CERR_NOMEM, "out of memory");
    }
    *out = s;
    return 0;
}

void sampler_free(struct sampler *s)
{
    if (!s)
        return;
    gram_row_free(s->gram);
    for (int i = 0; i < s->n_win; i++)
        cmap_free(&s->win[i].m);
    free(s->bias);
    free(s->exempt);
    free(s->hist);
    free(s->cands);
    free(s->rkeys);
    free(s->probs);
    free(s);
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int sampler_set_xtc_exempt(struct sampler *s, const int32_t *ids, int n)
{
    int32_t *v = n > 0 ? malloc((size_t)n * sizeof *v) : NULL;
    if (n > 0 && !v)
        return CERR_NOMEM;
    int k = 0;
    for (int i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < s->n_vocab)
            v[k++] = ids[i];
    if (k > 1)
        qsort(v, (size_t)k, sizeof *v, cmp_i32);
    free(s->exempt);
    s->exempt = v;
    s->n_exempt = k;
    return 0;
}

static int is_exempt(const struct sampler *s, int32_t id)
{
    return s->n_exempt > 0 &&
           bsearch(&id, s->exempt, (size_t)s->n_exempt, sizeof id, cmp_i32) != NULL;
}

/* ---- history ---- */

int sampler_accept(struct sampler *s, int32_t id)
{
    if (s->gram)
        gram_row_accept(s->gram, id);
    if (s->n_win == 0 || id < 0 || id >= s->n_vocab)
        return 0;
    /* make room first, so a failure leaves every window as it was */
    for (int i = 0; i < s->n_win; i++)
        if ((s->win[i].m.n + 1) * 2 > s->win[i].m.cap && cmap_grow(&s->win[i].m))
            return CERR_NOMEM;
    if (s->hkeep > 0 && s->hn == s->hcap) {
        if (s->hcap >= 2 * s->hkeep) { /* keep only the largest window's tail */
            memmove(s->hist, s->hist + s->hn - s->hkeep, s->hkeep * sizeof *s->hist);
            s->hn = s->hkeep;
        } else {
            size_t cap = s->hcap ? s->hcap * 2 : 64;
            if (cap > 2 * s->hkeep)
                cap = 2 * s->hkeep;
            int32_t *h = realloc(s->hist, cap * sizeof *h);
            if (!h)
                return CERR_NOMEM;
            s->hist = h;
            s->hcap = cap;
        }
    }
    if (s->hkeep > 0)
        s->hist[s->hn++] = id;
    for (int i = 0; i < s->n_win; i++) {
        struct win *w = &s->win[i];
        cmap_inc(&w->m, id); /* cannot fail: room was made above */
        if (w->size > 0 && s->hn > (size_t)w->size)
            cmap_dec(&w->m, s->hist[s->hn - 1 - (size_t)w->size]);
    }
    return 0;
}

int sampler_prime(struct sampler *s, const int32_t *ids, int n)
{
    struct gram_row *gm = s->gram; /* the prompt is history, not grammar text */
    s->gram = NULL;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++)
        if (sampler_accept(s, ids[i]))
            rc = CERR_NOMEM;
    s->gram = gm;
    return rc;
}

/* ---- sampling ---- */

/* Candidates further than this many nats below the max are ranked only when a filter needs
 * them (e^-20 = 2e-9 of the top token's probability each). */
#define CAND_SPAN SAMPLER_CAND_SPAN

/* Independent lanes for the full-vocabulary loops: the compiler can vectorise them without
 * reordering any one sum, so results do not depend on the ISA. */
#define LANES 16

/* e^x as the op sample computes it (backend/be_sample.h). */
#define fast_exp be_fast_exp

/* Largest value ignoring NaN (-inf when there is none). */
static float max_value(const float *x, int n)
{
    float m[LANES];
    for (int j = 0; j < LANES; j++)
        m[j] = -INFINITY;
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++)
            m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
    for (; i < n; i++)
        m[0] = x[i] > m[0] ? x[i] : m[0];
    float r = m[0];
    for (int j = 1; j < LANES; j++)
        r = m[j] > r ? m[j] : r;
    return r;
}

int sampler_is_plain_greedy(const struct sampler *s)
{
    const struct sampler_params *p = &s->p;
    return !(p->temperature > 0) && p->n_logit_bias == 0 && s->rep_w < 0 && s->pres_w < 0 &&
           s->freq_w < 0 && !s->gram; /* a waiting grammar too: a decode burst would queue the
                                       step after its trigger unmasked */
}

void sampler_skip(struct sampler *s) { s->step++; }

int32_t sampler_argmax(const float *logits, int n)
{
    float m = max_value(logits, n);
    for (int i = 0; i < n; i++)
        if (logits[i] == m)
            return i;
    return 0;
}

/* w[i] = e^((x[i] - mx) * scale) for all i; returns their sum (fixed order, double). */
static double exp_fill(const float *restrict x, int n, float mx, float scale, float *restrict w)
{
    double acc[LANES] = {0};
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) {
            w[i + j] = fast_exp((x[i + j] - mx) * scale);
            acc[j] += w[i + j];
        }
    for (; i < n; i++) {
        w[i] = fast_exp((x[i] - mx) * scale);
        acc[0] += w[i];
    }
    double sum = 0;
    for (int j = 0; j < LANES; j++)
        sum += acc[j];
    return sum;
}

static void apply_processors(struct sampler *s, float *lg)
{
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF /* as the op sample: pen * cnt rounded before the subtraction */
#endif
    const struct sampler_params *p = &s->p;
    for (int i = 0; i < p->n_logit_bias; i++)
        lg[s->bias[i].id] += s->bias[i].bias;
    if (s->rep_w >= 0) {
        const struct cmap *m = &s->win[s->rep_w].m;
        float pen = p->repetition_penalty;
        for (uint32_t i = 0; i < m->cap; i++)
            if (m->key[i] >= 0 && m->key[i] < s->n_vocab) {
                float *l = &lg[m->key[i]];
                *l = *l < 0 ? *l * pen : *l / pen;
            }
    }
    if (s->pres_w >= 0) {
        const struct cmap *m = &s->win[s->pres_w].m;
        for (uint32_t i = 0; i < m->cap; i++)
            if (m->key[i] >= 0 && m->key[i] < s->n_vocab)
                lg[m->key[i]] -= p->presence_penalty;
    }
    if (s->freq_w >= 0) {
        const struct cmap *m = &s->win[s->freq_w].m;
        for (uint32_t i = 0; i < m->cap; i++)
            if (m->key[i] >= 0 && m->key[i] < s->n_vocab)
                lg[m->key[i]] -= p->frequency_penalty * (float)m->cnt[i];
    }
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

/* From this many candidates on, the ranking is sorted at once rather than popped from a
 * heap: popping most of a 150k-entry heap (a wide nucleus) costs ~100 ms, the sort ~2 ms. */
#define SORT_MIN 4096

/* Sorts s->cands[0..n) into rank order (ranksort.h); 0, or -1 without scratch memory. */
static int sorted_cands(struct sampler *s, int n)
{
    _Static_assert(sizeof(struct cand) == sizeof(struct rank_cand) &&
                       offsetof(struct cand, logit) == offsetof(struct rank_cand, logit) &&
                       offsetof(struct cand, id) == offsetof(struct rank_cand, id),
                   "struct cand is a struct rank_cand");
    if (!s->rkeys && !(s->rkeys = malloc(rank_sort_scratch_bytes(s->n_vocab))))
        return -1;
    rank_sort((struct rank_cand *)s->cands, n, s->rkeys);
    return 0;
}

/* Index drawn from weights w[0..n) (sum tsum) with the uniform u; never a zero weight
 * unless all are zero. */
static int draw(double u, const float *w, int n, double tsum)
{
    double r = u * tsum, c = 0;
    int last = -1;
    for (int i = 0; i < n; i++) {
        if (w[i] > 0)
            last = i;
        c += w[i];
        if (r < c)
            return i;
    }
    return last >= 0 ? last : 0;
}

void sampler_logprob_fill(const float *lg, int n, double lse, int32_t id, int k,
                          struct sampler_logprob *lp)
{
    int nt = 0;
    lp->id = id;
    lp->logprob = (float)((double)lg[id] - lse);
    if (k > SAMPLER_MAX_TOP_LOGPROBS)
        k = SAMPLER_MAX_TOP_LOGPROBS;
    if (k > n)
        k = n;
    float *tv = lp->top_lp;
    int32_t *ti = lp->top_id;
    for (int i = 0; i < n && k > 0; i++) {
        float v = lg[i];
        if (v != v || (nt == k && !(v > tv[nt - 1])))
            continue;
        int j = nt < k ? nt++ : k - 1; /* insertion into descending tv[0..nt) */
        while (j > 0 && v > tv[j - 1]) {
            tv[j] = tv[j - 1];
            ti[j] = ti[j - 1];
            j--;
        }
        tv[j] = v;
        ti[j] = i;
    }
    for (int j = 0; j < nt; j++)
        tv[j] = (float)((double)tv[j] - lse);
    lp->n_top = nt;
}

/* The candidates as a max-heap in h[0..hn); popped ones form the ranked prefix, stored from
 * the array's end: rank i sits at h[n - 1 - i]. */
struct pick {
    struct cand *h;
    int n, hn, keep;
    int all; /* the candidates are the whole vocabulary (else: those within CAND_SPAN) */
    int sorted; /* h[0..n) is the ranking itself (no heap): rank i at h[i], the next at
                   h[keep] (a wide nucleus pops most of a big heap: sorting is cheaper) */
};

#define RANKED(pk, i) ((pk)->h[(pk)->sorted ? (i) : (pk)->n - 1 - (i)])
#define NEED_MORE (-2)

/* The next candidate in rank order (not yet popped); the heap must not be empty. */
static const struct cand *next_cand(const struct pick *pk)
{
    return &pk->h[pk->sorted ? pk->keep : 0];
}

/* Pops the next ranked candidate: 1, or 0 when the heap is empty. */
static int pop(struct pick *pk)
{
    if (pk->hn == 0)
        return 0;
    if (pk->sorted) {
        pk->hn--;
        pk->keep++;
        return 1;
    }
    struct cand top = pk->h[0];
    pk->h[0] = pk->h[--pk->hn];
    sift_down(pk->h, pk->hn, 0);
    RANKED(pk, pk->keep) = top;
    pk->keep++;
    return 1;
}

/* The filters over the ranked candidates, then the draw. Returns the id, or NEED_MORE when a
 * filter reached past the candidate set (the caller then ranks the whole vocabulary).
 * lg = NULL: only the candidates are known; NEED_MORE also when the draw needs every logit. */
static int32_t filter_draw(struct sampler *s, float *lg, struct pick *pk, float mx, double sum,
                           double u, int xtc)
{
    const struct sampler_params *p = &s->p;
    int n = s->n_vocab;
    int top_p_on = p->top_p > 0 && p->top_p<1, min_p_on = p->min_p> 0;
    int top_k_on = p->top_k > 0 && p->top_k < n, prefix = top_p_on || min_p_on;
    /* top_p then min_p: both keep a prefix of the ranking, m tokens long */
    int m = 0;
    double skept = sum;
    if (prefix) {
        double cum = 0, lmin = min_p_on ? log((double)p->min_p) : 0;
        skept = 0;
        for (;;) {
            if (top_p_on && pk->keep > 0 && cum >= p->top_p)
                break;
            if (pk->hn == 0) {
                if (!pk->all)
                    return NEED_MORE;
                break;
            }
            double d = (double)next_cand(pk)->logit - mx;
            if (min_p_on && pk->keep > 0 && d < lmin)
                break;
            double e = fast_exp((float)d);
            cum += e / sum;
            skept += e;
            pop(pk);
        }
        m = pk->keep;
    }
    /* XTC: of the kept tokens above the threshold (renormalised over the kept set), remove
     * all but the least likely; ties with it stay, exempt ids stay */
    if (xtc) {
        double lim = (double)p->xtc_threshold * skept; /* prob > thr <=> e^(l - mx) > lim */
        /* pop until the last popped is at or below the threshold (with a prefix filter the
         * kept prefix, which holds all of them, is popped already) */
        while (!prefix && (pk->keep == 0 || fast_exp(RANKED(pk, pk->keep - 1).logit - mx) > lim))
            if (!pop(pk)) {
                if (!pk->all)
                    return NEED_MORE;
                break;
            }
        int a = 0;
        while (a < pk->keep && fast_exp(RANKED(pk, a).logit - mx) > lim)
            a++;
        if (a >= 2) {
            float lo = RANKED(pk, a - 1).logit;
            for (int i = 0; i < a - 1; i++) {
                struct cand *c = &RANKED(pk, i);
                if (c->logit > lo && !is_exempt(s, c->id))
                    c->id = -1 - c->id;
            }
        }
    }
    /* top_k over the survivors */
    int nf; /* ranked positions [0, nf) hold the final set (removed ones skipped) */
    if (top_k_on) {
        int have = 0;
        for (nf = 0; have < p->top_k; nf++) {
            if (prefix ? nf >= m : (nf == pk->keep && !pop(pk))) {
                if (!prefix && !pk->all)
                    return NEED_MORE;
                break;
            }
            have += RANKED(pk, nf).id >= 0;
        }
    } else if (prefix) {
        nf = m;
    } else { /* only XTC truncated: draw over the ids in order, removed ones weigh 0 */
        float fmx = -INFINITY;
        for (int i = 0; i < pk->keep; i++)
            if (RANKED(pk, i).id >= 0) {
                fmx = RANKED(pk, i).logit;
                break;
            }
        /* removed ids weigh 0: mask them in lg for the pass, then restore them */
        if (!lg) /* candidates only: this draw needs every logit */
            return NEED_MORE;
        for (int i = 0; i < pk->keep; i++)
            if (RANKED(pk, i).id < 0)
                lg[-1 - RANKED(pk, i).id] = -INFINITY;
        double tsum = exp_fill(lg, n, fmx, 1.0f / p->temperature, s->probs);
        for (int i = 0; i < pk->keep; i++)
            if (RANKED(pk, i).id < 0)
                lg[-1 - RANKED(pk, i).id] = RANKED(pk, i).logit;
        return draw(u, s->probs, n, tsum);
    }
    /* temperature and the draw over the ranked survivors (removed ones weigh 0) */
    float fmx = -INFINITY;
    for (int i = 0; i < nf; i++)
        if (RANKED(pk, i).id >= 0) {
            fmx = RANKED(pk, i).logit;
            break;
        }
    if (!(fmx > -INFINITY))
        return lg ? sampler_argmax(lg, n) : NEED_MORE;
    double tsum = 0;
    float inv_t = 1.0f / p->temperature;
    for (int i = 0; i < nf; i++) {
        const struct cand *c = &RANKED(pk, i);
        s->probs[i] = c->id < 0 ? 0.0f : fast_exp((c->logit - fmx) * inv_t);
        tsum += s->probs[i];
    }
    return RANKED(pk, draw(u, s->probs, nf, tsum)).id;
}

/* The T > 0 path with at least one filter active: rank the candidates within CAND_SPAN of
 * the max (a prefix of the full ranking), and the whole vocabulary only if a filter needs it. */
static int32_t sample_filtered(struct sampler *s, float *lg, float mx, double sum, double u,
                               int xtc)
{
    int n = s->n_vocab;
    for (int pass = 0; pass < 2; pass++) {
        float cut = pass == 0 ? mx - CAND_SPAN : -INFINITY;
        int nc = 0;
        for (int i = 0; i < n; i++)
            if (lg[i] >= cut) {
                s->cands[nc].logit = lg[i];
                s->cands[nc].id = i;
                nc++;
            }
        int sorted = nc >= SORT_MIN && sorted_cands(s, nc) == 0;
        for (int i = nc / 2 - 1; !sorted && i >= 0; i--)
            sift_down(s->cands, nc, i);
        struct pick pk = {s->cands, nc, nc, 0, pass == 1 || nc == n, sorted};
        int32_t id = filter_draw(s, lg, &pk, mx, sum, u, xtc);
        if (id != NEED_MORE)
            return id;
    }
    return sampler_argmax(lg, n); /* not reached: the second pass has every candidate */
}

int sampler_set_grammar(struct sampler *s, struct gram_matcher *m)
{
    return sampler_set_grammar_lazy(s, m, NULL, 0);
}

int sampler_set_grammar_lazy(struct sampler *s, struct gram_matcher *m, const char *trigger,
                             int after)
{
    gram_row_free(s->gram);
    s->gram = NULL;
    return m ? gram_row_new(&s->gram, m, s->n_vocab, trigger, after, NULL) : 0;
}

int sampler_set_grammar_reasoning(struct sampler *s, struct gram_matcher *m, const char *open,
                                  const char *close)
{
    gram_row_free(s->gram);
    s->gram = NULL;
    return m ? gram_row_new(&s->gram, m, s->n_vocab, close, 1, open) : 0;
}

int sampler_grammar_forced(struct sampler *s, int32_t *id)
{
    return s->gram && gram_row_forced(s->gram, id);
}

struct gram_matcher *sampler_grammar(const struct sampler *s)
{
    return s->gram ? gram_row_matcher(s->gram) : NULL;
}

int32_t sampler_sample(struct sampler *s, float *logits, struct sampler_logprob *lp)
{
    const struct sampler_params *p = &s->p;
    int n = s->n_vocab;
    uint64_t step = s->step++;
    apply_processors(s, logits);
    if (s->gram)
        gram_row_mask(s->gram, logits, n);
    int want_lp = lp && p->top_logprobs >= 0;
    float mx = max_value(logits, n);
    double sum = 0;
    int top_p_on = p->top_p > 0 && p->top_p<1, min_p_on = p->min_p> 0;
    int top_k_on = p->top_k > 0 && p->top_k < n;
    int greedy = !(p->temperature > 0) || !isfinite(mx);
    int xtc = !greedy && p->xtc_probability > 0 &&
              sampler_uniform(p->seed, step, 1) <= (double)p->xtc_probability;
    if (want_lp || (!greedy && (top_p_on || xtc)))
        sum = exp_fill(logits, n, mx, 1.0f, s->probs);
    int32_t id;
    if (greedy) {
        id = sampler_argmax(logits, n);
    } else if (top_p_on || min_p_on || top_k_on || xtc) {
        id = sample_filtered(s, logits, mx, sum, sampler_uniform(p->seed, step, 0), xtc);
    } else { /* the whole vocabulary: no ordering needed; the op sample's exact draw */
        exp_fill(logits, n, mx, 1.0f / p->temperature, s->probs);
        id = be_sample_draw(s->probs, n, sampler_uniform_bits(p->seed, step, 0));
    }
    if (want_lp)
        sampler_logprob_fill(logits, s->n_vocab, (double)mx + log(sum), id,
                             s->p.top_logprobs, lp);
    return id;
}

/* ---- sampling from candidates ---- */

int sampler_wants_cands(const struct sampler *s)
{
    const struct sampler_params *p = &s->p;
    if (p->n_logit_bias || s->rep_w >= 0 || s->pres_w >= 0 || s->freq_w >= 0 || (s->gram && gram_row_on(s->gram)))
        return 0;
    int top_p_on = p->top_p > 0 && p->top_p < 1, min_p_on = p->min_p > 0;
    int top_k_on = p->top_k > 0 && p->top_k < s->n_vocab;
    return !(p->temperature > 0) || top_p_on || min_p_on || top_k_on;
}

int32_t sampler_sample_cands(struct sampler *s, const struct sampler_cands *c,
                             struct sampler_logprob *lp)
{
    const struct sampler_params *p = &s->p;
    int n = s->n_vocab;
    if (!sampler_wants_cands(s))
        return SAMPLER_NEED_FULL;
    uint64_t step = s->step;
    int want_lp = lp && p->top_logprobs >= 0;
    float mx = c->mx;
    int greedy = !(p->temperature > 0) || !isfinite(mx);
    int k = p->top_logprobs < n ? p->top_logprobs : n;
    if (want_lp && (!isfinite(mx) || c->nc < 0 || (c->nc < k && c->nc < n)))
        return SAMPLER_NEED_FULL;
    int32_t id;
    if (greedy) {
        id = c->argmax;
    } else {
        if (c->nc < 0)
            return SAMPLER_NEED_FULL;
        int xtc = p->xtc_probability > 0 &&
                  sampler_uniform(p->seed, step, 1) <= (double)p->xtc_probability;
        for (int i = 0; i < c->nc; i++) { /* given in rank order */
            s->cands[i].logit = c->c[i].logit;
            s->cands[i].id = c->c[i].id;
        }
        struct pick pk = {s->cands, c->nc, c->nc, 0, c->nc == n, 1};
        id = filter_draw(s, NULL, &pk, mx, c->sum, sampler_uniform(p->seed, step, 0), xtc);
        if (id == NEED_MORE)
            return SAMPLER_NEED_FULL;
    }
    if (want_lp) {
        int j = 0;
        while (j < c->nc && c->c[j].id != id)
            j++;
        if (j == c->nc) /* not reached: the id is the argmax or a drawn candidate */
            return SAMPLER_NEED_FULL;
        double lse = (double)mx + log(c->sum);
        lp->id = id;
        lp->logprob = (float)((double)c->c[j].logit - lse);
        lp->n_top = k > SAMPLER_MAX_TOP_LOGPROBS ? SAMPLER_MAX_TOP_LOGPROBS : k;
        for (int i = 0; i < lp->n_top; i++) {
            lp->top_id[i] = c->c[i].id;
            lp->top_lp[i] = (float)((double)c->c[i].logit - lse);
        }
    }
    s->step++;
    return id;
}

void sampler_cands_build(struct sampler *s, const float *logits, int cap,
                         struct be_topcand_ent *buf, struct sampler_cands *out)
{
    int n = s->n_vocab;
    float mx = max_value(logits, n);
    out->mx = mx;
    out->sum = exp_fill(logits, n, mx, 1.0f, s->probs);
    out->argmax = sampler_argmax(logits, n);
    out->nc = -1;
    out->c = buf;
    if (!isfinite(mx))
        return;
    int nc = 0;
    for (int i = 0; i < n; i++)
        if (logits[i] >= mx - CAND_SPAN) {
            s->cands[nc].logit = logits[i];
            s->cands[nc].id = i;
            nc++;
        }
    for (int i = nc / 2 - 1; i >= 0; i--)
        sift_down(s->cands, nc, i);
    int k = 0;
    for (int hn = nc; k < nc && k < cap; k++) { /* pop in rank order */
        buf[k].logit = s->cands[0].logit;
        buf[k].id = s->cands[0].id;
        s->cands[0] = s->cands[--hn];
        sift_down(s->cands, hn, 0);
    }
    if (k < nc) /* cut at cap: drop the ids tied with the first one left out */
        while (k > 0 && buf[k - 1].logit == s->cands[0].logit)
            k--;
    out->nc = k > 0 ? k : -1;
}

/* ---- sampling on the device (the backend op sample) ---- */

const char *sampler_grammar_error(const struct sampler *s)
{
    if (!s->gram || !gram_row_over(s->gram))
        return NULL;
    return "the grammar is too ambiguous to enforce: its parse stacks grew past cinfer's work "
           "bound (a rule repeated inside its own repetition, like `root ::= . root*`, parses "
           "the same text in ever more ways); write it so that each text parses one way";
}

int sampler_device_masked(const struct sampler *s) { return s->gram && gram_row_on(s->gram); }

void sampler_device_mask(struct sampler *s, uint32_t *dst)
{
    size_t nw = ((size_t)s->n_vocab + 31) / 32;
    const uint32_t *bits = s->gram ? gram_row_bits(s->gram) : NULL;
    if (bits)
        memcpy(dst, bits, nw * sizeof *dst);
    else
        memset(dst, 0xff, nw * sizeof *dst);
}

int sampler_device_row(const struct sampler *s, int ahead, const int32_t *hist, int n_hist,
                       struct be_sample_row *row, int32_t *aux, int aux_cap, int aux_off,
                       int gram_ok)
{
    const struct sampler_params *p = &s->p;
    int n = s->n_vocab;
    uint64_t step = s->step + (uint64_t)ahead;
    int top_p_on = p->top_p > 0 && p->top_p < 1, min_p_on = p->min_p > 0;
    int top_k_on = p->top_k > 0 && p->top_k < n;
    int temp = p->temperature > 0;
    /* a grammar masks on the host unless the caller brings its bitset (a waiting one too:
     * a burst would queue the step after its trigger unmasked) */
    if (s->gram && (!gram_ok || ahead > 0 || !gram_row_on(s->gram)))
        return -1;

    if (temp && (top_p_on || min_p_on || top_k_on ||
                 (p->xtc_probability > 0 &&
                  sampler_uniform(p->seed, step, 1) <= (double)p->xtc_probability)))
        return -1;
    memset(row, 0, sizeof *row);
    row->inv_t = temp ? 1.0f / p->temperature : 0.0f;
    row->rep_w = row->pres_w = row->freq_w = -1;
    int used = 0;
    if (p->n_logit_bias > 0) {
        if (2 * p->n_logit_bias > aux_cap)
            return -1;
        for (int i = 0; i < p->n_logit_bias; i++) {
            aux[2 * i] = s->bias[i].id;
            aux[2 * i + 1] = (int32_t)be_f2u(s->bias[i].bias);
        }
        row->n_bias = p->n_logit_bias;
        row->bias_off = aux_off;
        used = 2 * p->n_logit_bias;
    }
    if (s->n_win > 0) {
        int need = 0;
        for (int i = 0; i < s->n_win; i++) {
            int w = s->win[i].size;
            int k = w == 0 || w > n_hist ? n_hist : w;
            need = k > need ? k : need;
        }
        if (need > aux_cap - used)
            return -1;
        memcpy(aux + used, hist + (n_hist - need), (size_t)need * sizeof *aux);
        row->n_hist = need;
        row->hist_off = aux_off + used;
        used += need;
        row->use_prev = ahead > 0;
        if (s->rep_w >= 0)
            row->rep_w = s->win[s->rep_w].size, row->rep = p->repetition_penalty;
        if (s->pres_w >= 0)
            row->pres_w = s->win[s->pres_w].size, row->pres = p->presence_penalty;
        if (s->freq_w >= 0)
            row->freq_w = s->win[s->freq_w].size, row->freq = p->frequency_penalty;
    }
    uint64_t u = sampler_uniform_bits(p->seed, step, 0);
    row->u_lo = (uint32_t)u;
    row->u_hi = (uint32_t)(u >> 32);
    return used;
}
