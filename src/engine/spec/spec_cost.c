/* spec_cost.c — see spec.h: what a step costs and the policy that sizes drafts by it.
 *
 * The engine reports the time of every decode-only step with its token count
 * (spec_step_time). Per token count a robust low quantile of the recent times is kept; the
 * curve T(n) the policy uses goes through those sizes (made non-decreasing, linear between
 * them, continued past the largest size with the steeper of the fitted line's slope and the
 * last segment's), so what one more token costs is read where the step is — on a 2-core CPU
 * a token more in an 8-row step costs nearly what a decoded token does, in a one-row step a
 * fraction of it. The policy picks the number of draft tokens that maximises the expected
 * tokens emitted per second of the step. No machine constants: before two sizes were seen
 * the backend's default slope stands in (and the drafts it lets through measure the curve).
 */
#include <stdlib.h>
#include <string.h>

#include "engine/spec/spec.h"
#include "engine/spec/spec_int.h"
#include "util/log.h"

#define SPEC_STEP_TTL 512 /* decode steps after which a size's time is forgotten */

float spec_draft_cost(const struct spec *s)
{
    if (s->c.draft_cost > 0)
        return s->c.draft_cost;
    if (s->t1 > 0 && s->dqc[1] >= 4) {
        double r = s->dq[1] / s->t1;
        return (float)(r < 0.02 ? 0.02 : r > 4 ? 4 : r);
    }
    return s->c.draft_cost_default > 0 ? s->c.draft_cost_default : 0.5f;
}

float spec_step_cost(const struct spec *s)
{
    if (s->c.step_cost > 0)
        return s->c.step_cost;
    if (s->beta > 0)
        return s->beta;
    return s->c.step_cost_default > 0 ? s->c.step_cost_default : 0.25f;
}

void spec_lowq(double *t, int *cnt, double sec)
{
    if (*cnt == 0)
        *t = sec;
    else if (*cnt < 3 && sec < *t)
        *t = sec; /* a size's first steps carry one-time costs (on CUDA a new shape's first
                   * launches: 10x a step on the H100): the least of them */
    else if (sec < *t)
        *t -= 0.2 * (*t - sec);
    else
        *t += 0.02 * ((sec < 2 * *t ? sec : 2 * *t) - *t);
    if (*cnt < 64)
        (*cnt)++;
}

/* Whether size n's time is recent and seen at least twice. */
static int live(const struct spec *s, int n)
{
    return s->sc[n] >= 2 && s->step_no - s->st_last[n] <= SPEC_STEP_TTL;
}

void spec_step_time(struct spec *s, int n_tok, double sec)
{
    if (n_tok <= 0 || n_tok > SPEC_STEP_SIZES || !(sec > 0))
        return;
    log_debug("spec: decode step of %d tokens: %.2f ms", n_tok, sec * 1e3);
    s->step_no++;
    if (s->step_no - s->st_last[n_tok] > SPEC_STEP_TTL) /* stale: start this size afresh */
        s->sc[n_tok] = 0;
    s->st_last[n_tok] = s->step_no;
    /* a robust per-size estimate, a low quantile of the recent times: down quickly, up
     * slowly and by at most 2% a step (a step the OS stalled on a shared machine must not
     * read as the cost of its size; a lasting slowdown is followed within ~35 steps) */
    if (s->sc[n_tok] >= 3) { /* (a size's first steps carry one-time costs: a new shape's
                              * plain launches and its graph capture) */
        double ex = sec - s->st[n_tok];
        ex = ex < 0 ? 0 : ex > s->st[n_tok] ? s->st[n_tok] : ex;
        s->jit = s->jitc ? s->jit + 0.05 * (ex - s->jit) : ex;
        s->jitc++;
    }
    spec_lowq(&s->st[n_tok], &s->sc[n_tok], sec);
    /* weighted least squares through the live sizes */
    double w = 0, sn = 0, stt = 0, snn = 0, snt = 0;
    for (int n = 1; n <= SPEC_STEP_SIZES; n++) {
        if (!live(s, n))
            continue;
        double wi = s->sc[n] < 16 ? s->sc[n] : 16;
        w += wi;
        sn += wi * n;
        stt += wi * s->st[n];
        snn += wi * n * (double)n;
        snt += wi * n * s->st[n];
    }
    if (live(s, 1))
        s->t1 = s->st[1];
    if (w <= 0)
        return;
    double var = snn / w - (sn / w) * (sn / w);
    if (var < 0.25) { /* one size only: no slope to see */
        if (!live(s, 1) && sn / w < 1.5)
            s->t1 = stt / w;
        return;
    }
    double b = (snt / w - (sn / w) * (stt / w)) / var;
    double a = stt / w - b * sn / w;
    if (!live(s, 1))
        s->t1 = a + b > 0 ? a + b : stt / w;
    double t1 = s->t1 > 0 ? s->t1 : a + b;
    double beta = t1 > 0 ? b / t1 : 1;
    s->beta = (float)(beta < 0.05 ? 0.05 : beta > 1 ? 1 : beta);
    s->bsec = s->beta * t1;
}

/* ---- the step-time curve -------------------------------------------------------------- */

/* The curve's points: the live sizes, their times made non-decreasing by pooling adjacent
 * violators (weighted by their counts), so a noisy size does not read as a step that costs
 * less than a smaller one. Returns the count (0 when the step cost is pinned or fewer than
 * two sizes are live: the linear model then). */
static int curve(const struct spec *s, int *x, double *y)
{
    if (s->c.step_cost > 0 || !(s->bsec > 0))
        return 0;
    double wt[SPEC_STEP_SIZES];
    int n = 0;
    for (int i = 1; i <= SPEC_STEP_SIZES; i++) {
        if (!live(s, i))
            continue;
        x[n] = i;
        y[n] = s->st[i];
        wt[n] = s->sc[i];
        n++;
        /* pool while the last block is below the one before it */
        while (n >= 2 && y[n - 1] < y[n - 2]) {
            double ww = wt[n - 2] + wt[n - 1];
            y[n - 2] = (wt[n - 2] * y[n - 2] + wt[n - 1] * y[n - 1]) / ww;
            wt[n - 2] = ww;
            x[n - 2] = x[n - 1]; /* the pooled block ends at the larger size */
            n--;
        }
    }
    /* a pooled block is a plateau: its value holds from its first size to its last; keeping
     * the block's last size (above) and interpolating from the block before is the
     * conservative reading (the plateau's start reads a little dearer) */
    return n >= 2 ? n : 0;
}

/* T(n) on the curve (seconds), or on the linear model 1 + c (n - 1) (one-token steps) when
 * np = 0. */
static double curve_at(const struct spec *s, const int *x, const double *y, int np, int n)
{
    if (np == 0)
        return 1 + (double)spec_step_cost(s) * (n - 1);
    if (n <= x[0]) { /* below the smallest size: the fitted slope, yet no less per token
                      * than there (a step's fixed part only shrinks its tokens' share) */
        double t = y[0] - (x[0] - n) * s->bsec, lo = y[0] * n / x[0];
        return t > lo ? t : lo;
    }
    for (int i = 1; i < np; i++)
        if (n <= x[i])
            return y[i - 1] + (y[i] - y[i - 1]) * (n - x[i - 1]) / (double)(x[i] - x[i - 1]);
    double last = (y[np - 1] - y[np - 2]) / (double)(x[np - 1] - x[np - 2]);
    return y[np - 1] + (n - x[np - 1]) * (last > s->bsec ? last : s->bsec);
}

double spec_step_at(const struct spec *s, int n)
{
    int x[SPEC_STEP_SIZES];
    double y[SPEC_STEP_SIZES];
    int np = curve(s, x, y);
    return curve_at(s, x, y, np, n);
}

float spec_step_marginal(const struct spec *s, int n)
{
    if (n < 1)
        n = 1;
    int x[SPEC_STEP_SIZES];
    double y[SPEC_STEP_SIZES];
    int np = curve(s, x, y);
    double t1 = curve_at(s, x, y, np, 1),
           d = curve_at(s, x, y, np, n + 1) - curve_at(s, x, y, np, n);
    if (!(t1 > 0))
        return spec_step_cost(s);
    double c = d / t1;
    return (float)(c < 0.01 ? 0.01 : c > 4 ? 4 : c);
}

/* ---- decode bursts ----------------------------------------------------------------------- */

void spec_burst_time(struct spec *s, int n_tok, double sec)
{
    if (n_tok <= 0 || n_tok > SPEC_STEP_SIZES || !(sec > 0))
        return;
    spec_lowq(&s->bt[n_tok], &s->bc[n_tok], sec);
}

void spec_gap_time(struct spec *s, double sec)
{
    if (sec >= 0 && sec < 0.25) /* longer: the engine was idle, not working */
        spec_lowq(&s->gap, &s->gapc, sec > 1e-7 ? sec : 1e-7);
}

void spec_set_burst_base(struct spec *s, int on)
{
    s->burst_base = on;
}

/* What a waited step of n tokens costs on average: the curve (the sizes' low quantiles)
 * plus the mean excess of waited steps over it (a waited step on a GPU scatters above its
 * least: mean 1.39-1.54 ms where the least is 1.24-1.46 on the H100). One excess for all
 * sizes, measured on every waited step: a size the policy stopped drafting at cannot keep
 * an old reading (a per-size mean did: a cold server's first 4- and 8-token steps, graph
 * captures included, held suffix to plain steps through a whole code edit). */
static double waited_at(const struct spec *s, const int *x, const double *y, int np, int n)
{
    return curve_at(s, x, y, np, n) + (s->jitc >= 8 ? s->jit : 0);
}

/* ---- the policy ----------------------------------------------------------------------- */

int spec_bucket_size(int n)
{
    int b = 2;
    while (b < n)
        b *= 2;
    return b;
}

/* The size a step of n_tok fed tokens and d drafts runs at: padded to its bucket when
 * bucketing is on (at most the step's budget, as spec_engine.c pads), else n_tok + d. */
static int run_size(const struct spec *s, int n_tok, int d, int budget)
{
    if (!s->c.bucket || d <= 0)
        return n_tok + d;
    int b = spec_bucket_size(n_tok + d);
    return b < n_tok + budget ? b : n_tok + budget;
}

void spec_policy(struct spec *s, int n_rows, const int *m, const float *const *p, int n_tok,
                 int budget, int *k)
{
    s->n_rows = n_rows;
    for (int i = 0; i < n_rows; i++)
        k[i] = 0;
    if (budget <= 0 || n_rows <= 0)
        return;
    /* the draft tokens in the order a greedy pick takes them (the most probable next token
     * of any row; each row's probabilities fall along its draft, so every prefix of the
     * order is a set of row prefixes) */
    int *take = malloc((size_t)n_rows * sizeof *take),
        *order = malloc((size_t)budget * sizeof *order);
    if (!take || !order) {
        free(take);
        free(order);
        return;
    }
    memset(take, 0, (size_t)n_rows * sizeof *take);
    int x[SPEC_STEP_SIZES];
    double y[SPEC_STEP_SIZES];
    int np = curve(s, x, y);
    /* expected tokens emitted per unit of step time: every fed token is worth 1 (a decode
     * row's token is emitted, a prompt token is work done), each draft token its
     * probability of being accepted; keep the count of drafts that maximises it */
    double value = n_tok, best = value / curve_at(s, x, y, np, n_tok), gap = 0;
    const int vs_burst = np > 0 && s->c.burst_cost && s->burst_base && n_tok <= SPEC_STEP_SIZES &&
                         s->bc[n_tok] >= 4 && s->gapc >= 4;
    if (vs_burst) {
        /* without drafts the step would run in a burst (no host gap before it, at its
         * steady time); with drafts the host waits for it (at a waited step's mean) and
         * then works before the next (np > 0: the curve is in seconds, as the burst times
         * are) */
        best = value / s->bt[n_tok];
        gap = s->gap;
    }
    int n_best = 0, n_ord = 0;
    while (n_ord < budget) {
        int bi = -1;
        float bp = 0;
        for (int i = 0; i < n_rows; i++)
            if (take[i] < m[i] && p[i][take[i]] > bp)
                bp = p[i][take[i]], bi = i;
        if (bi < 0)
            break;
        order[n_ord++] = bi;
        take[bi]++;
        value += bp;
        const int sz = run_size(s, n_tok, n_ord, budget);
        double r = value / ((vs_burst ? waited_at(s, x, y, np, sz) : curve_at(s, x, y, np, sz)) +
                            gap);
        if (!s->c.adaptive || r > best * (1 + 1e-9))
            best = r, n_best = n_ord;
    }
    for (int j = 0; j < n_best; j++)
        k[order[j]]++;
    /* a row due to probe (its first probability is exactly 1: spec.c probe_due; alpha stops
     * at 0.99) drafts that token even where the curve says no: the probe re-measures the
     * curve too, which otherwise keeps a bad reading of a size it never tries again (on the
     * H100 a slow first verify step stopped all drafting for a whole 514-token request) */
    for (int i = 0; s->c.adaptive && i < n_rows && n_best < budget; i++)
        if (k[i] == 0 && m[i] > 0 && p[i][0] >= 1.0f)
            k[i] = 1, n_best++;
    free(take);
    free(order);
}
