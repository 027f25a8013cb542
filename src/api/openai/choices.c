/* choices.c — see choices.h. */
#include "api/openai/choices.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/jsonfmt.h"

struct oai_choices {
    struct oai_out **o; /* (n) */
    int n, per, keep, kind, stream, include_usage, n_done, failed;
    char id[64];
    long created;
    const char *model_id, *lane;
    /* usage: every prompt once (its first choice's counts), every choice's tokens */
    long prompt, cached, gen;
};

int oai_choices_new(struct oai_choices **out, struct oai_out **outs, int n_total,
                    int n_per_prompt, int n_keep, int kind, int stream, int include_usage,
                    const char *model_id, const char *lane)
{
    struct oai_choices *c = calloc(1, sizeof *c);
    if (!c) {
        for (int i = 0; i < n_total; i++)
            oai_out_free(outs[i]);
        free(outs);
        return CERR_NOMEM;
    }
    c->o = outs;
    c->n = n_total;
    c->per = n_per_prompt > 0 ? n_per_prompt : 1;
    c->keep = n_keep > 0 && n_keep < c->per && !stream ? n_keep : c->per;
    c->kind = kind;
    c->stream = stream;
    c->include_usage = stream && include_usage;
    c->model_id = model_id;
    c->lane = lane;
    c->created = (long)time(NULL);
    snprintf(c->id, sizeof c->id, "%s", oai_out_id(outs[0]));
    for (int i = 0; i < n_total; i++)
        oai_out_group(outs[i], i, c->id, c->created);
    *out = c;
    return 0;
}

void oai_choices_free(struct oai_choices *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n; i++)
        oai_out_free(c->o[i]);
    free(c->o);
    free(c);
}

int oai_choices_begin(struct oai_choices *c, struct sbuf *out)
{
    for (int i = 0; i < c->n; i++)
        if (oai_out_begin(c->o[i], out))
            return CERR_NOMEM;
    return 0;
}

static json_t *usage_json(const struct oai_choices *c)
{
    return json_pack("{s:I, s:I, s:I, s:{s:I}, s:s}", "prompt_tokens", (json_int_t)c->prompt,
                     "completion_tokens", (json_int_t)c->gen, "total_tokens",
                     (json_int_t)(c->prompt + c->gen), "prompt_tokens_details", "cached_tokens",
                     (json_int_t)c->cached, "lane", c->lane);
}

static int put_json(struct sbuf *out, json_t *j, int sse)
{
    if (!j)
        return CERR_NOMEM;
    char *s = json_dumps_short(j, JSON_COMPACT);
    json_decref(j);
    int rc = !s || (sse && sbuf_puts(out, "data: ")) || sbuf_puts(out, s) ||
             (sse && sbuf_puts(out, "\n\n"));
    free(s);
    return rc ? CERR_NOMEM : 0;
}

/* After the last choice: the stream's end, or the whole body. */
static int finish_all(struct oai_choices *c, struct sbuf *out)
{
    const char *obj = c->kind == OAI_CHAT ? "chat.completion" : "text_completion";
    if (c->stream) {
        if (c->include_usage &&
            put_json(out,
                     json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", c->id, "object",
                               c->kind == OAI_CHAT ? "chat.completion.chunk" : "text_completion",
                               "created", (json_int_t)c->created, "model", c->model_id,
                               "choices", "usage", usage_json(c)),
                     1))
            return CERR_NOMEM;
        return sbuf_puts(out, "data: [DONE]\n\n") ? CERR_NOMEM : 0;
    }
    json_t *a = json_array();
    int *order = malloc((size_t)c->per * sizeof *order);
    for (int p = 0; a && order && p < c->n / c->per; p++) {
        /* best_of: the prompt's samples by mean token logprob, best first (stable) */
        for (int k = 0; k < c->per; k++)
            order[k] = p * c->per + k;
        for (int k = 1; c->keep < c->per && k < c->per; k++)
            for (int m = k; m > 0 && oai_out_mean_logprob(c->o[order[m]]) >
                                         oai_out_mean_logprob(c->o[order[m - 1]]);
                 m--) {
                int t = order[m];
                order[m] = order[m - 1];
                order[m - 1] = t;
            }
        for (int k = 0; k < c->keep; k++) {
            json_t *ch = oai_out_choice(c->o[order[k]]);
            if (!ch || json_object_set_new(ch, "index", json_integer(p * c->keep + k)) ||
                json_array_append(a, ch)) {
                json_decref(a);
                a = NULL;
            }
        }
    }
    free(order);
    if (!a)
        return CERR_NOMEM;
    return put_json(out,
                    json_pack("{s:s, s:s, s:I, s:s, s:o, s:o}", "id", c->id, "object", obj,
                              "created", (json_int_t)c->created, "model", c->model_id, "choices",
                              a, "usage", usage_json(c)),
                    0);
}

int oai_choices_event(struct oai_choices *c, int i, const struct engine_event *ev,
                      struct sbuf *out)
{
    if (i < 0 || i >= c->n)
        return 0;
    int rc = oai_out_event(c->o[i], ev, out);
    if (ev->type != ENGINE_EV_DONE && ev->type != ENGINE_EV_ERROR)
        return rc;
    c->n_done++;
    c->failed |= ev->type == ENGINE_EV_ERROR || rc;
    c->gen += ev->n_gen;
    if (i % c->per == 0) {
        c->prompt += ev->n_prompt;
        c->cached += ev->n_cached;
    }
    if (rc || c->failed || c->n_done < c->n)
        return rc;
    return finish_all(c, out);
}
