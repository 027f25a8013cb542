/* sampler_check.c — sampler_params_check (engine/sampler.h): every sampling field against its
 * range, with the reference's messages (floats printed as Python prints them). */
#include "engine/sampler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- validation ---- */

/* Python's repr of a float as the reference prints it: the shortest text that reads back to
 * the same float, with ".0" on integral values. */
static void fmt_py(char *buf, size_t n, float v)
{
    if (isnan(v)) {
        snprintf(buf, n, "nan");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, n, v > 0 ? "inf" : "-inf");
        return;
    }
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, n, "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v)
            break;
    }
    if (!strpbrk(buf, ".e"))
        strncat(buf, ".0", n - strlen(buf) - 1);
}

static int in_range(float v, float lo, float hi)
{
    return v >= lo && v <= hi; /* false for NaN */
}

int sampler_params_check(const struct sampler_params *p, int n_vocab, struct cerr *e)
{
    char v[48];
    if (!in_range(p->temperature, 0.0f, 5.0f)) {
        fmt_py(v, sizeof v, p->temperature);
        return cerr_set(e, CERR_INVALID, "temperature must be a number in [0, 5], got %s", v);
    }
    if (!in_range(p->top_p, 0.0f, 1.0f)) {
        fmt_py(v, sizeof v, p->top_p);
        return cerr_set(e, CERR_INVALID, "top_p must be a number in [0, 1], got %s", v);
    }
    if (p->top_k < 0)
        return cerr_set(e, CERR_INVALID, "top_k must be a non-negative integer, got %d", p->top_k);
    if (!in_range(p->min_p, 0.0f, 1.0f)) {
        fmt_py(v, sizeof v, p->min_p);
        return cerr_set(e, CERR_INVALID,
                        "`min_p` has to be a float in the [0, 1] interval, but is %s", v);
    }
    /* the reference checks XTC only when it is on, the threshold first */
    if (p->xtc_probability != 0.0f && !in_range(p->xtc_threshold, 0.0f, 0.5f)) {
        fmt_py(v, sizeof v, p->xtc_threshold);
        return cerr_set(e, CERR_INVALID,
                        "`threshold` has to be a float in the [0, 0.5] interval, but is %s", v);
    }
    if (!in_range(p->xtc_probability, 0.0f, 1.0f)) {
        fmt_py(v, sizeof v, p->xtc_probability);
        return cerr_set(e, CERR_INVALID,
                        "`probability` has to be a float in the [0, 1] interval, but is %s", v);
    }
    if (!(p->repetition_penalty >= 0.0f) || isinf(p->repetition_penalty)) {
        fmt_py(v, sizeof v, p->repetition_penalty);
        return cerr_set(e, CERR_INVALID, "penalty must be a non-negative float, got %s", v);
    }
    if (!in_range(p->presence_penalty, -2.0f, 2.0f)) {
        fmt_py(v, sizeof v, p->presence_penalty);
        return cerr_set(e, CERR_INVALID, "presence_penalty must be a number in [-2, 2], got %s", v);
    }
    if (!in_range(p->frequency_penalty, -2.0f, 2.0f)) {
        fmt_py(v, sizeof v, p->frequency_penalty);
        return cerr_set(e, CERR_INVALID, "frequency_penalty must be a number in [-2, 2], got %s",
                        v);
    }
    const struct {
        const char *name;
        int v;
    } ctx[3] = {{"repetition_context_size", p->repetition_context_size},
                {"presence_context_size", p->presence_context_size},
                {"frequency_context_size", p->frequency_context_size}};
    for (int i = 0; i < 3; i++)
        if (ctx[i].v < 0)
            return cerr_set(e, CERR_INVALID, "%s must be a non-negative integer, got %d",
                            ctx[i].name, ctx[i].v);
    if (p->top_logprobs < -1)
        return cerr_set(e, CERR_INVALID, "top_logprobs must be at least 0");
    if (p->top_logprobs > SAMPLER_MAX_TOP_LOGPROBS)
        return cerr_set(e, CERR_INVALID, "top_logprobs must be at most %d",
                        SAMPLER_MAX_TOP_LOGPROBS);
    if (p->n_logit_bias < 0 || (p->n_logit_bias > 0 && !p->logit_bias))
        return cerr_set(e, CERR_INVALID, "logit_bias must be a dict of int to float");
    for (int i = 0; i < p->n_logit_bias; i++) {
        const struct sampler_bias *b = &p->logit_bias[i];
        if (b->id < 0 || b->id >= n_vocab)
            return cerr_set(e, CERR_INVALID,
                            "logit_bias token id %d is out of range (the vocabulary has %d ids)",
                            (int)b->id, n_vocab);
        if (isnan(b->bias) || (isinf(b->bias) && b->bias > 0))
            return cerr_set(e, CERR_INVALID, "logit_bias must be a dict of int to float");
    }
    return 0;
}
