/* be_sample.c — see be_sample.h. */
#include "backend/be_sample.h"

#include <math.h>
#include <stdlib.h>

_Static_assert(sizeof(struct be_sample_row) == BE_SAMPLE_ROW_WORDS * 4,
               "a row's parameters are BE_SAMPLE_ROW_WORDS words");

int32_t be_sample_draw(const float *w, int n, uint64_t u53)
{
    uint64_t total = 0;
    for (int i = 0; i < n; i++)
        total += be_sample_q(w[i]);
    if (total == 0)
        return 0;
    uint64_t r = be_sample_target(u53, total), c = 0;
    for (int i = 0; i < n; i++) {
        c += be_sample_q(w[i]);
        if (c > r)
            return i;
    }
    return n - 1; /* not reached: r < total */
}

/* One penalty over the last W ids of the history h (hn ids) on the row x: op 0 repetition,
 * 1 presence, 2 frequency, applied once per distinct id (frequency times its count). */
static void penalize(float *x, int n, const int32_t *h, int hn, int W, int op, float pen)
{
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF /* the device rounds pen * cnt before the subtraction */
#endif
    int lo = W > 0 && W < hn ? hn - W : 0;
    for (int k = lo; k < hn; k++) {
        int32_t id = h[k];
        if (id < 0 || id >= n)
            continue;
        int first = 1, cnt = 0;
        for (int j = lo; j < hn; j++)
            if (h[j] == id) {
                first &= j >= k;
                cnt++;
            }
        if (!first)
            continue;
        float *l = &x[id];
        if (op == 0)
            *l = *l < 0 ? *l * pen : *l / pen;
        else if (op == 1)
            *l -= pen;
        else
            *l -= pen * (float)cnt;
    }
}

void be_sample_ref(int32_t *out, float *x, int rows, int n, const void *params,
                   const int32_t *prev)
{
    const int32_t *blob = (const int32_t *)params;
    for (int r = 0; r < rows; r++) {
        struct be_sample_row p;
        memcpy(&p, blob + (size_t)r * BE_SAMPLE_ROW_WORDS, sizeof p);
        float *lg = x + (size_t)r * n;
        if (p.skip) {
            out[r] = -1;
            continue;
        }
        for (int i = 0; i < p.n_bias; i++) {
            int32_t id = blob[p.bias_off + 2 * i];
            if (id >= 0 && id < n)
                lg[id] += be_u2f((uint32_t)blob[p.bias_off + 2 * i + 1]);
        }
        int hn = p.n_hist + (p.use_prev != 0);
        int32_t hbuf[256];
        int32_t *h = hn <= 256 ? hbuf : malloc((size_t)hn * sizeof *h);
        if (hn > 0 && h) {
            memcpy(h, blob + p.hist_off, (size_t)p.n_hist * sizeof *h);
            if (p.use_prev)
                h[p.n_hist] = prev ? prev[r] : -1;
            const int32_t wv[3] = {p.rep_w, p.pres_w, p.freq_w};
            const float pv[3] = {p.rep, p.pres, p.freq};
            for (int op = 0; op < 3; op++)
                if (wv[op] >= 0)
                    penalize(lg, n, h, hn, wv[op], op, pv[op]);
        }
        if (h != hbuf)
            free(h);
        if (p.mask_off > 0) { /* the grammar mask, after the penalties */
            const uint32_t *mk = (const uint32_t *)(blob + p.mask_off);
            for (int i = 0; i < n; i++)
                if (!((mk[i >> 5] >> (i & 31)) & 1u))
                    lg[i] = -INFINITY;
        }
        /* max and argmax: larger value, lower index on ties, NaN never wins */
        float mx = -INFINITY;
        int best = -1;
        for (int i = 0; i < n; i++)
            if (lg[i] > mx || (best < 0 && lg[i] == mx))
                mx = lg[i], best = i;
        if (!(p.inv_t > 0) || !isfinite(mx)) {
            out[r] = best < 0 ? 0 : best;
            continue;
        }
        uint64_t u53 = (uint64_t)p.u_hi << 32 | p.u_lo, total = 0;
        for (int i = 0; i < n; i++)
            total += be_sample_q(be_fast_exp((lg[i] - mx) * p.inv_t));
        uint64_t t = be_sample_target(u53, total), c = 0;
        int32_t id = n - 1;
        for (int i = 0; i < n; i++) {
            c += be_sample_q(be_fast_exp((lg[i] - mx) * p.inv_t));
            if (c > t) {
                id = i;
                break;
            }
        }
        out[r] = id;
    }
}
