/* spec_engine.c — speculation's hooks into the engine (engine_int.h): set-up, the per-step
 * draft plan, and the counters. The verify step itself (sampling each of a row's k + 1
 * logits rows in order, keeping the drafts it reproduces, rolling back the rest) lives in
 * eng_spec_verify (the verify step, on the plain sampling path eng_sample_row).
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_int.h"
#include "engine/spec/spec.h"
#include "util/log.h"

/* Draft tokens a step may hold in all (it sizes the logits rows): the per-row maximum for
 * each row, up to 64 (at least one row's worth). */
static int step_drafts(const struct engine *g, int n_draft)
{
    long d = (long)g->c.max_seqs * n_draft;
    long cap = n_draft > 64 ? n_draft : 64;
    return (int)(d < cap ? d : cap);
}

int eng_spec_init(struct engine *g, struct cerr *e)
{
    struct spec_config c = g->c.spec;
    if (c.kind == SPEC_NONE)
        return 0;
    if (c.step_cost <= 0) { /* else measured (spec_step_time) */
        const char *v = getenv("CINFER_SPEC_STEP_COST");
        c.step_cost = v && *v ? (float)atof(v) : 0;
    }
    /* until measured, a token more in a step: ~1/4 of a decode on the CPU, little on a GPU,
     * where decode reads the weights and waits */
    c.step_cost_default = !strcmp(g->m->be->ops->name, "cpu") ? 0.25f : 0.05f;
    if (c.kind == SPEC_TWO_MODEL && c.draft_cost <= 0) { /* else measured (spec_draft.c) */
        const char *v = getenv("CINFER_SPEC_DRAFT_COST");
        c.draft_cost = v && *v ? (float)atof(v) : 0;
    }
    if (c.kind == SPEC_TWO_MODEL && c.draft)
        c.draft_cost_default = (float)model_weight_bytes(c.draft) / (float)model_weight_bytes(g->m);
    c.max_seqs = g->c.max_seqs;
    c.n_ctx = g->c.n_ctx;
    /* verify steps padded to bucketed sizes (pad_to_bucket): where steps are queued (a GPU,
     * whose recorded graphs are keyed by the step's shape); CINFER_SPEC_BUCKET=0/1 */
    const char *sb = getenv("CINFER_SPEC_BUCKET");
    c.bucket = sb && *sb ? strcmp(sb, "0") != 0 : model_queue_async(g->m);
    const char *bc = getenv("CINFER_SPEC_BURST_COST"); /* spec_set_burst_base */
    c.burst_cost = !(bc && !strcmp(bc, "0"));
    int rc = spec_new(&g->spec, &c, g->m->hp.n_vocab, e);
    if (rc)
        return rc;
    g->max_out = g->c.max_seqs + step_drafts(g, spec_config_of(g->spec)->n_draft);
    if (g->max_out > g->c.max_step_tokens) /* a logits row is a token of the step */
        g->max_out = g->c.max_step_tokens;
    return 0;
}

/* Per step scratch: the offers of each decode row. */
struct offer {
    int row, m;
    float p[SPEC_MAX_DRAFT];
};

/* The draft plan of a step of g->rows[0..n_rows) as eng_spec_plan makes it, without
 * changing the rows: k[i] = the drafts row i would take (0 for rows that are not decode
 * rows). drafts: where row i's proposal goes (NULL: after its tokens, r->tokens +
 * r->n_tokens, where the verify step reads it; else drafts + i * SPEC_MAX_DRAFT). Returns
 * the rows that take drafts, or -1 when nothing was planned (no budget, out of memory).
 * offered (or NULL): each row's proposal (its k a prefix of it); *budget_left (or NULL):
 * the tokens the step could still take. burst_base: without drafts the step would run in
 * a decode burst (the policy then holds drafts to a burst step, spec_set_burst_base). */
static int plan_drafts(struct engine *g, int n_rows, int32_t *drafts, int *k, int *offered,
                       int *budget_left, int burst_base)
{
    for (int i = 0; i < n_rows; i++)
        k[i] = 0;
    if (offered)
        for (int i = 0; i < n_rows; i++)
            offered[i] = 0;
    int used = 0, outs = 0;
    for (int i = 0; i < n_rows; i++) {
        const struct row *w = &g->rows[i];
        used += w->n;
        outs += eng_plp_row(w->r) ? w->n /* prompt scoring: a row per token */
                                  : w->r->n_past + w->n == w->r->n_tokens;
    }
    int n_dec = 0;
    for (int i = 0; i < n_rows; i++)
        n_dec += g->rows[i].n == 1 && g->rows[i].r->n_tokens - g->rows[i].r->n_past == 1;
    if (!spec_step_wants(g->spec, n_dec, used))
        return -1;
    int budget = g->c.max_step_tokens - used;
    if (budget > g->max_out - outs)
        budget = g->max_out - outs;
    /* the one-token rows and the drafts run as the step's lead group (model_batch.n_lead):
     * within the backend's exact rows their bits are a decode step's (CUDA: a greedy output
     * does not change with speculation) */
    const int exact = model_exact_rows(g->ws);
    if (exact > 0) {
        int n1 = 0;
        for (int i = 0; i < n_rows; i++)
            n1 += g->rows[i].n == 1;
        if (budget > exact - n1)
            budget = exact - n1;
    }
    if (budget <= 0)
        return -1;
    size_t nr = (size_t)n_rows;
    struct offer *of = malloc(nr * sizeof *of);
    int *m = malloc(nr * sizeof *m), *kk = malloc(nr * sizeof *kk);
    const float **pp = malloc(nr * sizeof *pp);
    struct spec_req **rq = malloc(nr * sizeof *rq);
    const int32_t **tk = malloc(nr * sizeof *tk);
    int32_t **ob = malloc(nr * sizeof *ob);
    float **pw = malloc(nr * sizeof *pw);
    int *nt = malloc(nr * sizeof *nt), *mx = malloc(nr * sizeof *mx);
    int n_of = 0, n_k = -1;
    if (!of || !m || !kk || !pp || !rq || !tk || !ob || !pw || !nt || !mx)
        goto out;
    for (int i = 0; i < n_rows; i++) {
        struct row *w = &g->rows[i];
        struct ereq *r = w->r;
        if (w->n != 1 || r->n_tokens - r->n_past != 1 || !r->spec)
            continue;
        /* never past max_tokens or the context: the last token emitted is never a draft
         * (spec_propose drafts at most --num-draft-tokens <= SPEC_MAX_DRAFT of these) */
        int max = r->max_tokens - r->n_gen - 1;
        if (max > g->c.n_ctx - r->n_tokens - 1)
            max = g->c.n_ctx - r->n_tokens - 1;
        of[n_of].row = i;
        rq[n_of] = r->spec;
        tk[n_of] = r->tokens;
        nt[n_of] = r->n_tokens;
        mx[n_of] = max;
        ob[n_of] = drafts ? drafts + (size_t)i * SPEC_MAX_DRAFT : r->tokens + r->n_tokens;
        pw[n_of] = of[n_of].p;
        pp[n_of] = of[n_of].p;
        n_of++;
    }
    spec_propose_rows(g->spec, n_of, rq, tk, nt, mx, ob, pw, m, used);
    spec_set_burst_base(g->spec, burst_base);
    spec_policy(g->spec, n_of, m, pp, used, budget, kk);
    n_k = 0;
    for (int j = 0; j < n_of; j++) {
        k[of[j].row] = kk[j];
        n_k += kk[j] > 0;
        budget -= kk[j];
        if (offered)
            offered[of[j].row] = m[j];
    }
    if (budget_left)
        *budget_left = budget;
out:
    free(of);
    free(m);
    free(kk);
    free(pp);
    free(rq);
    free(tk);
    free(ob);
    free(pw);
    free(nt);
    free(mx);
    return n_k;
}

/* Pads a decode-only step with drafts (rows i, k[i] planned, offered[i] proposed) to its
 * bucket: first with the rows' own further proposals (real drafts, in row order), then
 * with filler tokens (a row's last draft repeated, or its last token; counted in pad[i]),
 * each row up to its most drafts (--num-draft-tokens, and what it may still generate),
 * within budget. Where the bucket is out of reach the step is padded to the most it can
 * take (a size of its own that repeats too). Verification keeps only the drafts the target
 * reproduces, so any padding leaves the ids unchanged. */
static void pad_to_bucket(struct engine *g, int n_rows, int *k, const int *offered, int *pad,
                          int budget)
{
    int n_tok = 0, any = 0;
    for (int i = 0; i < n_rows; i++) {
        const struct row *w = &g->rows[i];
        if (w->n != 1 || w->r->n_tokens - w->r->n_past != 1)
            return; /* a prompt chunk: the step's shape will not repeat anyway */
        n_tok += 1 + k[i];
        any |= k[i] > 0;
    }
    if (!any)
        return; /* a plain step (bursts and graphs take it as it is) */
    const int n_draft = spec_config_of(g->spec)->n_draft;
    int room = 0, *cap = malloc((size_t)n_rows * sizeof *cap);
    if (!cap)
        return;
    for (int i = 0; i < n_rows; i++) {
        const struct ereq *r = g->rows[i].r;
        int c = r->max_tokens - r->n_gen - 1;
        if (c > g->c.n_ctx - r->n_tokens - 1)
            c = g->c.n_ctx - r->n_tokens - 1;
        if (c > n_draft)
            c = n_draft;
        cap[i] = r->spec && c > k[i] ? c : k[i];
        room += cap[i] - k[i];
    }
    int want = spec_bucket_size(n_tok) - n_tok;
    if (want > room)
        want = room;
    if (want > budget)
        want = 0; /* (a partial pad would be a shape of its own) */
    for (int i = 0; i < n_rows && want > 0; i++) { /* the rows' own proposals first */
        int t = offered[i] - k[i];
        t = t < cap[i] - k[i] ? t : cap[i] - k[i];
        t = t < want ? t : want;
        if (t > 0)
            k[i] += t, want -= t;
    }
    for (int i = 0; i < n_rows && want > 0; i++) { /* then filler */
        int t = cap[i] - k[i] < want ? cap[i] - k[i] : want;
        if (t <= 0)
            continue;
        int32_t *d = g->rows[i].r->tokens + g->rows[i].r->n_tokens;
        int32_t fill = k[i] > 0 ? d[k[i] - 1] : d[-1];
        for (int j = 0; j < t; j++)
            d[k[i] + j] = fill;
        k[i] += t, pad[i] += t, want -= t;
    }
    free(cap);
}

void eng_spec_plan(struct engine *g, int n_rows)
{
    if (!g->spec || n_rows <= 0)
        return;
    int *k = malloc((size_t)n_rows * sizeof *k), *off = malloc((size_t)n_rows * sizeof *off);
    int *pad = calloc((size_t)n_rows, sizeof *pad), budget = 0;
    const int burst = eng_burst_ok(g, n_rows) != 0; /* (rows without drafts yet) */
    if (!k || !off || !pad || plan_drafts(g, n_rows, NULL, k, off, &budget, burst) < 0) {
        free(k);
        free(off);
        free(pad);
        return;
    }
    if (spec_config_of(g->spec)->bucket)
        pad_to_bucket(g, n_rows, k, off, pad, budget);
    for (int i = 0; i < n_rows; i++) {
        struct row *w = &g->rows[i];
        if (w->n != 1 || w->r->n_tokens - w->r->n_past != 1 || !w->r->spec)
            continue; /* not a decode row: no offer */
        w->k = k[i];
        w->n = 1 + k[i];
        w->pad = pad[i];
        if (!k[i]) /* a plain step: the draft model forgets what it drafted */
            spec_observe(g->spec, w->r->spec, 0, 0, w->r->n_tokens);
    }
    free(k);
    free(off);
    free(pad);
    /* plain decode rows first, then the rows with drafts, then prompt chunks: the leading
     * one-token rows run as a group of their own where the backend's kernels depend on the
     * row count (model_batch.n_lead), as they would without speculation */
    struct row *tmp = malloc((size_t)n_rows * sizeof *tmp);
    if (tmp) {
        int t = 0;
        for (int pass = 0; pass < 3; pass++)
            for (int i = 0; i < n_rows; i++) {
                const struct row *w = &g->rows[i];
                int cls = w->k > 0 ? 1 : w->n == 1 ? 0 : 2;
                if (cls == pass)
                    tmp[t++] = *w;
            }
        memcpy(g->rows, tmp, (size_t)n_rows * sizeof *tmp);
        free(tmp);
    }
}

int eng_spec_burst_ok(const struct engine *g)
{
    /* the model-free kinds: their proposal is a lookup the host can make between steps
     * (a draft model's would be a forward of its own) */
    int kind = spec_config_of(g->spec)->kind;
    return g->spec_burst && (kind == SPEC_NGRAM || kind == SPEC_SUFFIX);
}

int eng_spec_burst_more(struct engine *g, int n_rows)
{
    int *k = malloc((size_t)n_rows * sizeof *k);
    int32_t *d = malloc((size_t)n_rows * SPEC_MAX_DRAFT * sizeof *d);
    int n_k = k && d ? plan_drafts(g, n_rows, d, k, NULL, NULL, 1) : 1;
    if (n_k == 0) /* a step without drafts, as eng_spec_plan counts it */
        for (int i = 0; i < n_rows; i++)
            if (g->rows[i].r->spec)
                spec_observe(g->spec, g->rows[i].r->spec, 0, 0, g->rows[i].r->n_tokens);
    free(k);
    free(d);
    return n_k <= 0;
}

int eng_spec_unplan(struct engine *g, int n_rows)
{
    int any = 0;
    for (int i = 0; i < n_rows; i++) {
        struct row *w = &g->rows[i];
        if (!w->k)
            continue;
        any = 1;
        spec_observe(g->spec, w->r->spec, 0, 0, w->r->n_tokens);
        kv_seq_trim(g->kv, &w->r->seq, w->r->n_past);
        if (g->kv_swa)
            kv_seq_trim(g->kv_swa, &w->r->seq_swa, w->r->n_past);
        w->n = 1;
        w->k = w->pad = 0;
    }
    return any;
}

void eng_spec_stats(struct engine *g)
{
    if (g->spec)
        spec_get_stats(g->spec, &g->st.spec);
}

/* Speculation: row w fed r's last token and k drafts and got k + 1 logits rows. Row j is
 * sampled exactly as a plain decode step at that position would be (the same sampler, in
 * order, with the history of the tokens before it), and the draft is kept while it equals
 * what was sampled: the output is that of decoding without drafts. For greedy rows this is
 * exact acceptance; for T > 0 it is speculative rejection sampling with a one-point
 * proposal (accepting draft d with probability p(d), else drawing from p without d), here
 * with the very uniform the plain decode would use. The K/V of the rejected drafts is
 * rolled back (blocks past the kept positions are released). */
void eng_spec_verify(struct engine *g, struct row *w, int use_am, int use_tc)
{
    struct ereq *r = w->r;
    int k = w->k, base = r->n_past, acc = 0;
    const int real = k - w->pad; /* the proposed drafts: the acceptance estimates learn from
                                  * those (filler after them is scored, not learnt from) */
    int32_t d[SPEC_MAX_DRAFT];
    memcpy(d, r->tokens + r->n_tokens, (size_t)k * sizeof *d);
    r->spec_drafted += k;
    r->spec_calls++;
    for (int j = 0; j <= k; j++) {
        /* positions base .. base + j hold the last token and the j drafts kept so far */
        r->n_past = base + 1 + j;
        kv_cache_commit(g->kv, &r->seq, r->root, r->tokens, r->n_past);
        if (g->kv_swa)
            kv_cache_commit(g->kv_swa, &r->seq_swa, r->root, r->tokens, r->n_past);
        struct sampler_logprob lp;
        int32_t id = eng_sample_row(g, r, w->out + j, use_am, use_tc, &lp);
        if (id < 0) {
            spec_observe(g->spec, NULL, real, acc < real ? acc : real, 0);
            return; /* the request failed */
        }
        int hit = j < k && id == d[j];
        if (j < k && !use_am && spec_req_sampled(r->spec, j)) {
            /* a draft sampled from the draft model's q: full rejection sampling on the
             * row the sampler just processed (its own draw is not used) */
            int V = g->m->hp.n_vocab;
            const float *lg = g->logits + (size_t)(w->out + j) * V;
            double lse;
            id = spec_reject(r->spec, j, lg, V, base + 1 + j, &hit, &lse);
            lp.id = id;
            lp.logprob = (float)((double)lg[id] - lse);
        }
        acc += hit;
        r->spec_accepted += hit;
        g->spec_gen += j > 0;
        if (eng_on_token(g, r, id, &lp)) {
            spec_observe(g->spec, NULL, real, acc < real ? acc : real, 0); /* r finished */
            return;
        }
        if (!hit)
            break;
    }
    kv_seq_trim(g->kv, &r->seq, r->n_past);
    if (g->kv_swa) { /* the sliding layers' pool: the same rollback, then what the window
                      * no longer reaches goes (as after a plain step) */
        kv_seq_trim(g->kv_swa, &r->seq_swa, r->n_past);
        kv_seq_drop_before(g->kv_swa, &r->seq_swa, r->n_past - g->window + 1);
    }
    spec_observe(g->spec, r->spec, real, acc < real ? acc : real, r->n_past);
}
