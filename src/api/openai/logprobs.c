/* logprobs.c — see logprobs.h. */
#include "api/openai/logprobs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/oai_out.h"
#include "util/err.h"

char *lp_token_bytes(const struct tok *tk, int32_t id, size_t *n)
{
    *n = 0;
    if (!tk || tok_is_special(tk, id))
        return calloc(1, 1);
    struct cerr e = {0};
    char *t = NULL;
    int32_t bos = tok_bos(tk);
    if (bos >= 0 && bos != id) {
        /* after a token, as it decodes inside a text (a leading space is not stripped) */
        int32_t two[2] = {bos, id};
        char *a = NULL, *b = NULL;
        size_t la = 0, lb = 0;
        if (!tok_decode(tk, two, 1, TOK_RAW_BYTES, &a, &la, &e) &&
            !tok_decode(tk, two, 2, TOK_RAW_BYTES, &b, &lb, &e) && lb >= la &&
            !memcmp(a, b, la)) {
            memmove(b, b + la, lb - la + 1);
            *n = lb - la;
            free(a);
            return b;
        }
        free(a);
        free(b);
    }
    if (tok_decode(tk, &id, 1, TOK_RAW_BYTES, &t, n, &e))
        return NULL;
    return t;
}

static json_t *byte_array(const char *s, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_integer((unsigned char)s[i]))) {
            json_decref(a);
            return NULL;
        }
    return a;
}

/* A logprob as JSON can carry it: a token that cannot be drawn (masked by a grammar or a
 * -100 logit_bias: -inf) is -9999.0, as OpenAI writes it. */
static double lp_json(float x) { return isfinite(x) ? (double)x : -9999.0; }

/* {"id", "token", "logprob", "bytes"} */
static json_t *token_entry(const struct tok *tk, int32_t id, float logprob)
{
    size_t n;
    char *s = lp_token_bytes(tk, id, &n);
    if (!s)
        return NULL;
    json_t *e = json_pack("{s:i, s:o, s:f, s:o}", "id", (int)id, "token", api_json_text(s, n),
                          "logprob", lp_json(logprob), "bytes", byte_array(s, n));
    free(s);
    return e;
}

json_t *lp_chat_entry(const struct tok *tk, const struct sampler_logprob *lp)
{
    json_t *e = token_entry(tk, lp->id, lp->logprob), *top = json_array();
    for (int i = 0; e && top && i < lp->n_top; i++)
        if (json_array_append_new(top, token_entry(tk, lp->top_id[i], lp->top_lp[i])))
            break;
    if (!e || !top || json_array_size(top) != (size_t)lp->n_top ||
        json_object_set_new(e, "top_logprobs", top)) {
        json_decref(e);
        return NULL;
    }
    return e;
}

/* Unicode characters in s[0..n) (continuation bytes not counted), as text_offset counts. */
static long n_chars(const char *s, size_t n)
{
    long c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

int lp_legacy_init(struct lp_legacy *L, int top, long start_offset)
{
    memset(L, 0, sizeof *L);
    L->top = top;
    L->offset = start_offset;
    L->tokens = json_array();
    L->token_logprobs = json_array();
    L->top_logprobs = json_array();
    L->text_offset = json_array();
    if (!L->tokens || !L->token_logprobs || !L->top_logprobs || !L->text_offset) {
        lp_legacy_free(L);
        return CERR_NOMEM;
    }
    return 0;
}

int lp_legacy_add(struct lp_legacy *L, const struct tok *tk, const struct sampler_logprob *lp)
{
    size_t n;
    char *s = lp_token_bytes(tk, lp->id, &n);
    if (!s)
        return CERR_NOMEM;
    int rc = json_array_append_new(L->tokens, api_json_text(s, n)) ||
             json_array_append_new(L->token_logprobs, json_real(lp_json(lp->logprob))) ||
             json_array_append_new(L->text_offset, json_integer(L->offset));
    L->offset += n_chars(s, n);
    free(s);
    if (!rc) { /* {token: logprob} of the alternatives ({} when none were asked for) */
        json_t *m = json_object();
        for (int i = 0; m && i < lp->n_top; i++) {
            char *t = lp_token_bytes(tk, lp->top_id[i], &n);
            json_t *k = t ? api_json_text(t, n) : NULL;
            if (k)
                json_object_setn_new(m, json_string_value(k), json_string_length(k),
                                     json_real(lp_json(lp->top_lp[i])));
            json_decref(k);
            free(t);
        }
        rc = !m || json_array_append_new(L->top_logprobs, m);
    }
    return rc ? CERR_NOMEM : 0;
}

int lp_legacy_add_first(struct lp_legacy *L, const struct tok *tk, int32_t id)
{
    size_t n;
    char *s = lp_token_bytes(tk, id, &n);
    if (!s)
        return CERR_NOMEM;
    int rc = json_array_append_new(L->tokens, api_json_text(s, n)) ||
             json_array_append_new(L->token_logprobs, json_null()) ||
             json_array_append_new(L->top_logprobs, json_null()) ||
             json_array_append_new(L->text_offset, json_integer(L->offset));
    L->offset += n_chars(s, n);
    free(s);
    return rc ? CERR_NOMEM : 0;
}

int lp_legacy_empty(const struct lp_legacy *L) { return json_array_size(L->tokens) == 0; }

json_t *lp_legacy_take(struct lp_legacy *L)
{
    json_t *b = json_pack("{s:o, s:o, s:o, s:o}", "tokens", json_deep_copy(L->tokens),
                          "token_logprobs", json_deep_copy(L->token_logprobs), "top_logprobs",
                          json_deep_copy(L->top_logprobs), "text_offset",
                          json_deep_copy(L->text_offset));
    json_array_clear(L->tokens);
    json_array_clear(L->token_logprobs);
    json_array_clear(L->top_logprobs);
    json_array_clear(L->text_offset);
    return b;
}

void lp_legacy_free(struct lp_legacy *L)
{
    json_decref(L->tokens);
    json_decref(L->token_logprobs);
    json_decref(L->top_logprobs);
    json_decref(L->text_offset);
    memset(L, 0, sizeof *L);
}
