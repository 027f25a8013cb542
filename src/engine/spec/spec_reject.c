/* spec_reject.c — full speculative rejection sampling for two-model drafts of sampled rows
 * (spec.h: spec_req_sampled, spec_reject) and the draft side's q (spec_int.h: spec_q_draw).
 *
 * The draft model samples each draft token from q, its softmax at the request's temperature
 * restricted to its SPEC_Q_TOP most likely ids (renormalised: q is exactly the distribution
 * the token was drawn from, which is all the rule needs). The target accepts draft d with
 * probability min(1, p(d) / q(d)) and otherwise draws from norm(max(0, p - q)), so that each
 * emitted token is distributed as p (Leviathan et al. 2023, Theorem 1; Chen et al. 2023).
 * The uniforms are functions of (the request's seed, the position, a stream): the same seed
 * gives the same output, and no uniform is used twice.
 */
#include <math.h>
#include <string.h>

#include "engine/spec/spec_int.h"

#define SALT 0x9e3779b97f4a7c15ull
enum { STREAM_DRAFT = 4, STREAM_ACCEPT = 5, STREAM_RESIDUAL = 6 };

int spec_req_sampled(const struct spec_req *q, int j)
{
    return q && q->sampled && j >= 0 && j < q->qn && q->qk[j] > 0;
}

int32_t spec_q_draw(struct spec_req *q, int j, const float *lg, int n_vocab, float scale, int pos)
{
    /* the top SPEC_Q_TOP logits, descending (ties: lower id first) */
    int32_t *id = q->qid[j];
    float top[SPEC_Q_TOP];
    int k = 0;
    for (int i = 0; i < n_vocab; i++) {
        float v = lg[i];
        if (v != v || !(v > -INFINITY) || (k == SPEC_Q_TOP && !(v > top[k - 1])))
            continue;
        int t = k < SPEC_Q_TOP ? k++ : k - 1;
        while (t > 0 && v > top[t - 1]) {
            top[t] = top[t - 1];
            id[t] = id[t - 1];
            t--;
        }
        top[t] = v;
        id[t] = i;
    }
    q->qk[j] = k;
    if (k == 0)
        return q->qdraft[j] = 0;
    float inv_t = 1.0f / (q->temp * (scale > 0 ? scale : 1.0f));
    double w[SPEC_Q_TOP], sum = 0;
    for (int t = 0; t < k; t++)
        sum += w[t] = isfinite(top[0]) ? exp((double)(top[t] - top[0]) * inv_t) : (t == 0);
    double u = sampler_uniform(q->seed ^ SALT, (uint64_t)pos, STREAM_DRAFT) * sum, c = 0;
    int pick = -1;
    for (int t = 0; t < k; t++) {
        q->qp[j][t] = (float)(w[t] / sum);
        c += w[t];
        if (pick < 0 && u < c)
            pick = t;
    }
    return q->qdraft[j] = id[pick < 0 ? k - 1 : pick];
}

/* The support of draft j's q, by ascending id (for a walk beside the vocabulary). */
static int support_sorted(const struct spec_req *q, int j, int32_t *ids, double *qp)
{
    int k = q->qk[j];
    for (int t = 0; t < k; t++) {
        int32_t x = q->qid[j][t];
        double v = q->qp[j][t];
        int u = t;
        while (u > 0 && ids[u - 1] > x) {
            ids[u] = ids[u - 1];
            qp[u] = qp[u - 1];
            u--;
        }
        ids[u] = x;
        qp[u] = v;
    }
    return k;
}

int32_t spec_reject(const struct spec_req *q, int j, const float *lg, int n_vocab, int pos,
                    int *accepted, double *lse)
{
    *accepted = 0;
    float mx = -INFINITY;
    for (int i = 0; i < n_vocab; i++)
        mx = lg[i] > mx ? lg[i] : mx;
    if (!isfinite(mx)) {
        *lse = mx;
        return sampler_argmax(lg, n_vocab);
    }
    double inv_t = 1.0 / q->temp, zp = 0, z1 = 0;
    for (int i = 0; i < n_vocab; i++)
        if (lg[i] > -INFINITY) {
            zp += exp((double)(lg[i] - mx) * inv_t);
            z1 += exp((double)(lg[i] - mx));
        }
    *lse = (double)mx + log(z1);
    int32_t ids[SPEC_Q_TOP];
    double qp[SPEC_Q_TOP], q_d = 0;
    int k = support_sorted(q, j, ids, qp);
    int32_t d = q->qdraft[j];
    for (int t = 0; t < k; t++)
        if (ids[t] == d)
            q_d = qp[t];
    double p_d =
        d >= 0 && d < n_vocab && lg[d] > -INFINITY ? exp((double)(lg[d] - mx) * inv_t) / zp : 0;
    if (q_d > 0 && sampler_uniform(q->seed ^ SALT, (uint64_t)pos, STREAM_ACCEPT) * q_d < p_d) {
        *accepted = 1;
        return d;
    }
    /* the residual r = max(0, p - q), q nonzero on its support only: r = p off the
     * support; its sum = 1 - sum over the support of min(p, q) */
    double rsum = 1;
    for (int t = 0; t < k; t++) {
        int32_t x = ids[t];
        double p = lg[x] > -INFINITY ? exp((double)(lg[x] - mx) * inv_t) / zp : 0;
        rsum -= p < qp[t] ? p : qp[t];
    }
    double v = sampler_uniform(q->seed ^ SALT, (uint64_t)pos, STREAM_RESIDUAL) * rsum, c = 0;
    int32_t last = -1;
    for (int i = 0, t = 0; i < n_vocab; i++) {
        if (!(lg[i] > -INFINITY))
            continue;
        double r = exp((double)(lg[i] - mx) * inv_t) / zp;
        while (t < k && ids[t] < i)
            t++;
        if (t < k && ids[t] == i)
            r -= qp[t];
        if (r <= 0)
            continue;
        last = i;
        c += r;
        if (v < c)
            return i;
    }
    return last >= 0 ? last : sampler_argmax(lg, n_vocab);
}
