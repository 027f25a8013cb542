/* promptlp.c — prompt logprobs (engine_req.prompt_logprobs: completions `echo` with
 * `logprobs`, evaluation harnesses scoring a continuation).
 *
 * A scoring request reads no prefix from the cache (every position needs its logits) and
 * feeds its prompt in chunks whose every token has a logits row: at most ENG_PLP_ROWS rows
 * a step over all scoring requests, rows the engine keeps beyond one per sequence (or, when
 * max_out reaches the step's token budget, as many as the tokens; speculation counts them
 * before it offers drafts), so the other requests' rows and steps are those they would have
 * without it (a step that holds
 * a scoring row downloads its logits whole instead of argmax ids or candidates). After the
 * forward each position p answers prompt token p + 1 with the raw log-softmax of its row
 * (no logit_bias or penalties: the model's own distribution) and the top alternatives.
 * A preempted request computes its prompt again; what it already answered is not repeated.
 */
#include <math.h>

#include "engine/engine_int.h"

int eng_plp_row(const struct ereq *r) { return r->plp && r->n_past < r->n_prompt - 1; }

int eng_plp_budget(const struct engine *g)
{
    /* every logits row is a token of the step: when max_out reaches the step's tokens, the
     * token budget bounds the rows; else the rows kept beyond one per sequence */
    if (g->max_out >= g->c.max_step_tokens)
        return g->c.max_step_tokens;
    int left = g->max_out - g->c.max_seqs;
    return left < ENG_PLP_ROWS ? left : ENG_PLP_ROWS;
}

int eng_plp_chunk(const struct ereq *r, int c, int *left)
{
    if (!eng_plp_row(r))
        return c;
    if (c > *left)
        c = *left;
    *left -= c;
    return c;
}

/* The log-softmax of logits row lg (n ids) at id, and the k best ids (descending, ties:
 * lower id) into lp, in double as the sampler's logprobs. */
static void plp_score(const float *lg, int n, int32_t id, int k, struct sampler_logprob *lp)
{
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        if (lg[i] > mx)
            mx = lg[i];
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += exp((double)lg[i] - (double)mx);
    double lse = (double)mx + log(sum);
    sampler_logprob_fill(lg, n, lse, id, k, lp);
}

void eng_plp_emit(struct engine *g, const struct row *w)
{
    struct ereq *r = w->r;
    int V = g->m->hp.n_vocab;
    int k = r->plp_k;
    for (int j = 0; j < w->n; j++) {
        int t = r->n_past + j + 1; /* the prompt token row j predicts */
        if (t < r->plp_done || t >= r->n_prompt)
            continue;
        struct sampler_logprob lp;
        plp_score(g->logits + (size_t)(w->plp + j) * V, V, r->tokens[t], k, &lp);
        struct engine_event ev = {.type = ENGINE_EV_PROMPT, .token = r->tokens[t], .text = "",
                                  .lp = &lp, .stop_index = -1};
        ev.n_prompt = r->n_prompt;
        r->cb(r->ud, &ev);
        r->plp_done = t + 1;
    }
}
