/* spec.c — see spec.h: configuration, refusals, the draft-size policy, per-request
 * acceptance estimates and the ngram proposer. The suffix proposer is in spec_suffix.c and
 * the draft model in spec_draft.c.
 */
#include "engine/spec/spec.h"

#include <stdlib.h>
#include <string.h>

#include "engine/spec/spec_int.h"
#include "util/log.h"

/* ---- configuration -------------------------------------------------------------------- */

void spec_config_default(struct spec_config *c, int kind)
{
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->n_draft = kind == SPEC_TWO_MODEL ? 3 : 10;
    c->ngram_min = 1;
    c->ngram_max = 3;
    c->adaptive = 1;
    c->burst_cost = 1;
    c->lookup = kind == SPEC_TWO_MODEL;
    c->lookup_draft = 10;
    c->kv_dtype = DT_F16;
    c->block_size = 16;
}

const char *spec_kind_name(int kind)
{
    switch (kind) {
    case SPEC_NGRAM:
        return "ngram";
    case SPEC_SUFFIX:
        return "suffix";
    case SPEC_TWO_MODEL:
        return "two-model";
    default:
        return "none";
    }
}

int spec_kind_parse(const char *s, struct cerr *e)
{
    if (!s || !*s)
        return cerr_set(e, CERR_INVALID, "--draft-kind expects ngram|suffix|two-model"), -1;
    if (!strcmp(s, "ngram"))
        return SPEC_NGRAM;
    if (!strcmp(s, "suffix"))
        return SPEC_SUFFIX;
    if (!strcmp(s, "two-model") || !strcmp(s, "draft") || !strcmp(s, "model"))
        return SPEC_TWO_MODEL;
    if (!strcmp(s, "none"))
        return SPEC_NONE;
    static const char *const model_kinds[] = {"assistant", "dspark", "deepspec", "mtp",
                                              "eagle",     "eagle3", "medusa"};
    for (size_t i = 0; i < sizeof model_kinds / sizeof *model_kinds; i++)
        if (!strcmp(s, model_kinds[i]))
            return cerr_set(e, CERR_INVALID,
                            "--draft-kind %s needs a drafter architecture that cinfer does not "
                            "load (draft heads or a model-specific speculator); use ngram, "
                            "suffix, or two-model with --draft-model PATH",
                            s),
                   -1;
    return cerr_set(e, CERR_INVALID,
                    "--draft-kind expects ngram|suffix|two-model (or none), got '%s'", s),
           -1;
}

int spec_config_check(const struct spec_config *c, const struct model *target, int tok_same,
                      struct cerr *e)
{
    if (c->kind == SPEC_NONE)
        return 0;
    if ((c->kind == SPEC_NGRAM || c->kind == SPEC_SUFFIX) && c->draft)
        return cerr_set(e, CERR_INVALID,
                        "--draft-kind %s drafts without a model: drop --draft-model, or use "
                        "--draft-kind two-model",
                        spec_kind_name(c->kind));
    if (c->kind == SPEC_TWO_MODEL && !c->draft)
        return cerr_set(e, CERR_INVALID,
                        "--draft-kind two-model needs --draft-model PATH (a smaller model with "
                        "the target's tokenizer)");
    if (c->n_draft < 1 || c->n_draft > SPEC_MAX_DRAFT)
        return cerr_set(e, CERR_INVALID, "--num-draft-tokens must be in [1, %d], got %d",
                        SPEC_MAX_DRAFT, c->n_draft);
    if (c->ngram_min < 1 || c->ngram_max < c->ngram_min || c->ngram_max > 16)
        return cerr_set(e, CERR_INVALID,
                        "--ngram-min/--ngram-max must satisfy 1 <= min <= max <= 16, got %d/%d",
                        c->ngram_min, c->ngram_max);
    if (c->kind == SPEC_TWO_MODEL) {
        if (c->draft->hp.n_vocab != target->hp.n_vocab || !tok_same)
            return cerr_set(e, CERR_INVALID,
                            "--draft-model %s does not share the target's tokenizer (vocabulary "
                            "%d vs %d%s): the draft must use the same token ids",
                            c->draft->path, c->draft->hp.n_vocab, target->hp.n_vocab,
                            c->draft->hp.n_vocab == target->hp.n_vocab ? ", different pieces" : "");
    }
    return 0;
}

/* ---- lifecycle ------------------------------------------------------------------------ */

int spec_new(struct spec **out, const struct spec_config *c, int n_vocab, struct cerr *e)
{
    *out = NULL;
    struct spec *s = calloc(1, sizeof *s);
    if (!s)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    s->c = *c;
    if (s->c.n_draft <= 0)
        s->c.n_draft = c->kind == SPEC_TWO_MODEL ? 3 : 10;
    if (s->c.n_draft > SPEC_MAX_DRAFT)
        s->c.n_draft = SPEC_MAX_DRAFT;
    s->n_vocab = n_vocab;
    for (int b = 0; b < SPEC_BUCKETS; b++) /* a prior of 1/2; 4/5 for a draft model */
        s->g_acc[b] = c->kind == SPEC_TWO_MODEL ? 4 : 1, s->g_rej[b] = 1;
    int rc = 0;
    if (c->kind == SPEC_TWO_MODEL)
        rc = spec_draft_new(s, e);
    if (rc) {
        spec_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

void spec_free(struct spec *s)
{
    if (!s)
        return;
    spec_draft_free(s);
    spec_corpus_free(s);
    free(s);
}

const struct spec_config *spec_config_of(const struct spec *s)
{
    return &s->c;
}

void spec_get_stats(const struct spec *s, struct spec_stats *out)
{
    memset(out, 0, sizeof *out);
    out->kind = s->c.kind;
    out->n_draft = s->c.n_draft;
    out->drafted = s->drafted;
    out->accepted = s->accepted;
    out->rounds = s->rounds;
    out->draft_calls = s->draft_calls;
    out->lookup_drafted = s->lk_drafted;
    out->lookup_accepted = s->lk_accepted;
    out->suffix_tokens = s->corpus_tokens;
    out->step_cost = spec_step_cost(s);
    out->draft_cost = s->c.kind == SPEC_TWO_MODEL ? spec_draft_cost(s) : 0;
    out->step_ms = (float)(s->t1 * 1e3);
    out->draft_ms = s->dqc[1] > 0 ? (float)(s->dq[1] * 1e3) : 0;
}

struct spec_req *spec_req_new(struct spec *s, const struct sampler_params *sp)
{
    struct spec_req *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    kv_seq_init(&q->dseq);
    /* the processed distribution is softmax(logits / T) over the whole vocabulary: full
     * rejection sampling needs p at every id, which the truncating filters would hide */
    if (sp && s->c.kind == SPEC_TWO_MODEL && sp->temperature > 0 &&
        !(sp->top_p > 0 && sp->top_p < 1) && !(sp->top_k > 0 && sp->top_k < s->n_vocab) &&
        !(sp->min_p > 0) && !(sp->xtc_probability > 0)) {
        q->sampled = 1;
        q->temp = sp->temperature;
        q->seed = sp->seed;
    }
    return q;
}

void spec_req_free(struct spec *s, struct spec_req *q)
{
    if (!q)
        return;
    spec_draft_release(s, q);
    free(q);
}

/* ---- acceptance estimates ------------------------------------------------------------- */

/* Per-token acceptance of bucket b for q: its own counts over a prior from every request's
 * (weight 2), so that a new request starts from what the server has seen. */
static float alpha(const struct spec *s, const struct spec_req *q, int b)
{
    double g = s->g_acc[b] / (s->g_acc[b] + s->g_rej[b]);
    double a = (q->acc[b] + 2 * g) / (q->acc[b] + q->rej[b] + 2);
    return (float)(a > 0.99 ? 0.99 : a);
}

/* A row that has not drafted for SPEC_PROBE steps times the rows of the last step probes:
 * it offers one token at probability 1, so a request whose text turns copyable is noticed.
 * Scaled by the rows, a full batch of rows with nothing to copy spends about one token per
 * SPEC_PROBE steps on probes in all (a token each per SPEC_PROBE steps would cost ~1/16 of
 * a token per row and step, a few % of a compute-bound step). A probe nothing of which was
 * kept doubles the row's interval (up to 2^SPEC_PROBE_BACKOFF times): prose with nothing to
 * copy probes every 64 steps, not 16 (on a GPU a probe also ends a decode burst); a kept
 * draft resets it. */
static int probe_due(const struct spec *s, const struct spec_req *q)
{
    int f = q->probe_fails < SPEC_PROBE_BACKOFF ? q->probe_fails : SPEC_PROBE_BACKOFF;
    return q->idle >= (SPEC_PROBE << f) * (s->n_rows > 1 ? s->n_rows : 1);
}

/* Fills p[0..m) with alpha^(j+1), or the probe (probe_due). */
static void fill_p(const struct spec *s, struct spec_req *q, int b, int m, float *p)
{
    float a = alpha(s, q, b), c = 1;
    for (int j = 0; j < m; j++)
        p[j] = c *= a;
    q->probing = m > 0 && probe_due(s, q);
    if (q->probing)
        p[0] = 1;
    q->bucket = b;
}

void spec_observe(struct spec *s, struct spec_req *q, int drafted, int accepted, int n_valid)
{
    if (q && s->c.kind == SPEC_TWO_MODEL)
        spec_draft_rollback(s, q, n_valid);
    if (drafted <= 0) {
        if (q)
            q->idle++, q->probing = 0;
        return;
    }
    int b = q ? q->bucket : 0, rej = accepted < drafted;
    if (q) {
        if (accepted > 0)
            q->probe_fails = 0;
        else if (q->probing)
            q->probe_fails++;
        q->probing = 0;
        q->idle = 0;
        q->acc[b] += accepted;
        q->rej[b] += rej;
        if (q->acc[b] + q->rej[b] > 64)
            q->acc[b] *= 0.5, q->rej[b] *= 0.5;
    }
    s->g_acc[b] += accepted;
    s->g_rej[b] += rej;
    if (s->g_acc[b] + s->g_rej[b] > 256)
        s->g_acc[b] *= 0.5, s->g_rej[b] *= 0.5;
    s->drafted += drafted;
    s->accepted += accepted;
    s->rounds++;
    if (s->c.kind == SPEC_TWO_MODEL && b > 0) /* buckets 1.. hold the lookup's drafts */
        s->lk_drafted += drafted, s->lk_accepted += accepted;
}

void spec_req_done(struct spec *s, struct spec_req *q, const int32_t *tokens, int n_prompt, int n)
{
    (void)q;
    if (s->c.kind == SPEC_SUFFIX && n > n_prompt)
        spec_corpus_add(s, tokens + n_prompt, n - n_prompt);
}

/* ---- ngram ---------------------------------------------------------------------------- */

/* Prompt lookup: the trailing k-gram (k = ngram_max .. ngram_min) found earliest in
 * tokens[0..n - 1); the tokens after it (at most max) into out. Returns their count, with k
 * in *k (0: no match). */
static int ngram_find(const struct spec *s, const int32_t *t, int n, int max, int32_t *out,
                      int *kf)
{
    *kf = 0;
    for (int k = s->c.ngram_max; k >= s->c.ngram_min; k--) {
        if (n < k + 1)
            continue;
        const int32_t *pat = t + n - k;
        for (int i = 0; i + k < n; i++) {
            if (t[i] != pat[0] || memcmp(t + i, pat, (size_t)k * sizeof *t))
                continue;
            int m = 0;
            for (int j = i + k; j < n && m < max; j++)
                out[m++] = t[j];
            *kf = k;
            return m;
        }
    }
    return 0;
}

static int propose_ngram(struct spec *s, struct spec_req *q, const int32_t *t, int n, int max,
                         int32_t *out, float *p)
{
    int k, m = ngram_find(s, t, n, max, out, &k);
    if (m > 0)
        fill_p(s, q, k - 1 < SPEC_BUCKETS - 1 ? k - 1 : SPEC_BUCKETS - 1, m, p);
    return m;
}

/* The most a row's draft of up to m tokens at per-token acceptance a can yield per unit of
 * step time, alone: (1 + a + .. + a^k) / (1 + c k + r k) at its best k, with c what a token
 * more costs a step and r what a draft token costs to make (both relative to a one-token
 * step). */
static double row_value(double a, int m, double c, double r)
{
    double v = 1, best = 1, pj = 1;
    for (int k = 1; k <= m; k++) {
        v += pj *= a;
        double x = v / (1 + (c + r) * k);
        best = x > best ? x : best;
    }
    return best;
}

/* Two-model with spec_config.lookup: row q's prompt-lookup proposal (out, p; the bucket of a
 * k-gram match is k, at most SPEC_BUCKETS - 1: bucket 0 is the draft model's) when it would
 * yield at least what the draft model's would (row_value: the lookup's drafts cost nothing to
 * make and may run to lookup_draft tokens, the model's cost a forward each and stop at
 * n_draft; each at its measured acceptance). Rows that sample from the draft (q->sampled)
 * keep the model. Returns its length (0: the draft model's turn). */
static int propose_lookup(struct spec *s, struct spec_req *q, const int32_t *t, int n, int max,
                          int32_t *out, float *p)
{
    if (!s->c.lookup || q->sampled || max <= 0)
        return 0;
    const int mm = max < s->c.n_draft ? max : s->c.n_draft;
    if (max > s->c.lookup_draft)
        max = s->c.lookup_draft;
    int k, m = ngram_find(s, t, n, max, out, &k);
    if (m <= 0)
        return 0;
    const int b = k < SPEC_BUCKETS - 1 ? k : SPEC_BUCKETS - 1;
    const double c = spec_step_cost(s), r = spec_draft_cost(s);
    const double vl = row_value(alpha(s, q, b), m, c, 0);
    if (!(vl > 1) || vl < row_value(alpha(s, q, 0), mm, c, r))
        return 0; /* (neither pays: the model's turn, whose plan prices its probes) */
    fill_p(s, q, b, m, p);
    return m;
}

int spec_propose(struct spec *s, struct spec_req *q, const int32_t *tokens, int n, int max,
                 int32_t *out, float *p)
{
    int left = max; /* what the request may still generate after the next token */
    if (max > s->c.n_draft)
        max = s->c.n_draft;
    if (max <= 0 || n <= 0)
        return 0;
    int m = 0;
    switch (s->c.kind) {
    case SPEC_NGRAM:
        m = propose_ngram(s, q, tokens, n, max, out, p);
        break;
    case SPEC_SUFFIX: {
        int len = 0;
        m = spec_suffix_propose(s, tokens, n, max, out, &len);
        int b = len < 3 ? 0 : len < 6 ? 1 : len < 12 ? 2 : 3;
        fill_p(s, q, b, m, p);
        break;
    }
    case SPEC_TWO_MODEL:
        spec_propose_rows(s, 1, &q, &tokens, &n, &left, &out, &p, &m, 1);
        return m;
    default:
        break;
    }
    if (!s->c.adaptive)
        for (int j = 0; j < m; j++)
            p[j] = 1;
    return m;
}

int spec_step_wants(const struct spec *s, int n_decode, int n_tok)
{
    if (s->c.kind != SPEC_TWO_MODEL || !s->c.adaptive)
        return 1;
    return n_decode > 0 && n_tok == n_decode;
}

/* ---- two-model: the rows' draft plan ------------------------------------------------ */

/* The two-model plan: which rows draft and how deep. Every draft position is one draft
 * forward over the rows that draft, so the rows are taken in order of acceptance and the
 * plan (the r best rows, depth K) maximises the expected tokens per second of the step:
 * (n_tok + sum over the rows of a^1 + .. + a^K) / (T(n_tok + their drafts) + K D(r)), with T
 * the target's measured step curve and D(r) a draft forward of r rows. Nothing pays: no
 * draft (a row due to probe drafts one token, where a sure token would pay). A row whose draft lags
 * behind what the request generated since its first proposal (it sat out while drafting did not
 * pay) drafts only when the plan's saving over the tokens it may still generate pays for computing
 * those. Writes each row's depth into kk. */
static void plan_two_model(struct spec *s, int n, struct spec_req *const *q,
                           const int32_t *const *t, const int *nt, const int *left, int n_tok,
                           int *kk)
{
    int ord[SPEC_DRAFT_ROWS], lim[SPEC_DRAFT_ROWS];
    float a[SPEC_DRAFT_ROWS];
    int nr = 0;
    for (int i = 0; i < n; i++) {
        kk[i] = 0;
        int l = left[i] < s->c.n_draft ? left[i] : s->c.n_draft;
        if (l <= 0 || nr >= SPEC_DRAFT_ROWS)
            continue;
        if (!s->c.adaptive) {
            kk[i] = l;
            continue;
        }
        float ai = alpha(s, q[i], 0);
        int at = nr++;
        while (at > 0 && a[at - 1] < ai) { /* insertion: by acceptance, highest first */
            a[at] = a[at - 1], lim[at] = lim[at - 1], ord[at] = ord[at - 1];
            at--;
        }
        a[at] = ai, lim[at] = l, ord[at] = i;
    }
    if (!s->c.adaptive || nr == 0)
        return;
    double unit = spec_step_at(s, 1), base = n_tok / spec_step_at(s, n_tok), best = base;
    int best_r = 0, best_k = 0;
    for (int r = 1; r <= nr; r++) {
        double dr = spec_draft_cost_rows(s, r) * unit;
        for (int k = 1; k <= s->c.n_draft; k++) {
            double value = n_tok;
            int toks = 0;
            for (int x = 0; x < r; x++) {
                double pj = 1;
                for (int j = 0; j < k && j < lim[x]; j++)
                    value += pj *= a[x];
                toks += k < lim[x] ? k : lim[x];
            }
            double v = value / (spec_step_at(s, n_tok + toks) + k * dr);
            if (v > best * (1 + 1e-9))
                best = v, best_r = r, best_k = k;
        }
    }
    for (int x = 0; x < best_r; x++)
        kk[ord[x]] = best_k < lim[x] ? best_k : lim[x];
    if (best_r == 0) {
        /* a row due to probe drafts one token, if a sure one would pay (else probing cannot
         * find a gain: a draft as costly as the target); the catch-up is held to that */
        double sure =
            (n_tok + 0.99) / (spec_step_at(s, n_tok + 1) + spec_draft_cost_rows(s, 1) * unit);
        if (sure > base * (1 + 1e-9)) {
            best = sure;
            for (int x = 0; x < nr; x++)
                kk[ord[x]] = probe_due(s, q[ord[x]]) ? 1 : 0;
        }
    }
    /* the catch-up of what the request generated while its draft sat out: time saved per
     * token of the step's rows against computing it (a prompt is computed in any case, as
     * a prefill: the draft's prefix cache keeps it for the request's next turns) */
    double save_tok = spec_step_at(s, n_tok) / n_tok * (1 - base / best);
    for (int i = 0; i < n; i++) {
        if (!kk[i])
            continue;
        spec_draft_pending(s, q[i], t[i], nt[i]);
        int gen = nt[i] - (q[i]->dpast > q[i]->n0 ? q[i]->dpast : q[i]->n0);
        double save = save_tok;
        int unpaid = 0;
        if (best_r == 0) {
            /* a probe: the draft must first see every token since it last drafted, which
             * costs the same per token whatever the probe interval, so a probe is priced at
             * the row's own acceptance, not at a sure token (a probe accepted now and then,
             * as prose gives a same-family draft, kept the draft catching up every ~20
             * tokens: ~6% of a CPU decode). One probe a request that does not pay is let
             * through with its catch-up held to twice the probe interval, so a request still
             * learns its own acceptance. */
            double ar = alpha(s, q[i], 0), v = (n_tok + ar) / (spec_step_at(s, n_tok + 1) +
                                                               spec_draft_cost_rows(s, 1) * unit);
            save = v > base ? spec_step_at(s, n_tok) / n_tok * (1 - base / v) : 0;
            unpaid = left[i] * save <= gen * spec_draft_catchup_cost(s) * unit;
            const int held = 2 * SPEC_PROBE * (s->n_rows > 1 ? s->n_rows : 1);
            if (unpaid && (q[i]->probes > 0 || gen > held))
                kk[i] = 0;
        } else if (gen > 1 && left[i] * save <= gen * spec_draft_catchup_cost(s) * unit)
            kk[i] = 0;
        if (kk[i] && unpaid)
            q[i]->probes++;
    }
}

void spec_propose_rows(struct spec *s, int n, struct spec_req *const *q, const int32_t *const *t,
                       const int *nt, const int *max, int32_t *const *out, float *const *p, int *m,
                       int n_tok)
{
    if (s->c.kind != SPEC_TWO_MODEL) {
        for (int i = 0; i < n; i++)
            m[i] = max[i] > 0 ? spec_propose(s, q[i], t[i], nt[i], max[i], out[i], p[i]) : 0;
        return;
    }
    int kk[SPEC_DRAFT_ROWS] = {0}, at[SPEC_DRAFT_ROWS], nm = 0, mm[SPEC_DRAFT_ROWS];
    struct spec_req *mq[SPEC_DRAFT_ROWS];
    const int32_t *mt[SPEC_DRAFT_ROWS];
    int mnt[SPEC_DRAFT_ROWS], mmax[SPEC_DRAFT_ROWS];
    int32_t *mo[SPEC_DRAFT_ROWS];
    for (int i = 0; i < n; i++)
        if (!q[i]->n0)
            q[i]->n0 = nt[i];
    for (int i = SPEC_DRAFT_ROWS; i < n; i++)
        m[i] = 0; /* rows beyond one draft forward's: no drafts */
    if (n > SPEC_DRAFT_ROWS)
        n = SPEC_DRAFT_ROWS;
    /* rows whose text repeats draft by lookup; the others are the draft model's */
    for (int i = 0; i < n; i++) {
        m[i] = propose_lookup(s, q[i], t[i], nt[i], max[i], out[i], p[i]);
        if (m[i] > 0)
            continue;
        at[nm] = i, mq[nm] = q[i], mt[nm] = t[i], mnt[nm] = nt[i], mmax[nm] = max[i];
        mo[nm] = out[i];
        nm++;
    }
    plan_two_model(s, nm, mq, mt, mnt, mmax, n_tok, kk);
    spec_draft_propose_rows(s, nm, mq, mt, mnt, kk, mo, mm);
    for (int x = 0; x < nm; x++) {
        const int i = at[x];
        m[i] = mm[x];
        fill_p(s, q[i], 0, m[i], p[i]);
    }
    if (!s->c.adaptive)
        for (int i = 0; i < n; i++)
            for (int j = 0; j < m[i]; j++)
                p[i][j] = 1;
}
