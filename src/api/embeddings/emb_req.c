/* emb_req.c — parse, validate and tokenize an OpenAI embeddings request (embeddings.h).
 *
 * The four input shapes OpenAI accepts are told apart by the JSON types: a string; an
 * array whose first element is a string (every element must be); an array whose first
 * element is an integer (one token sequence); an array of arrays of integers. Anything
 * else, an empty input or more than EMB_MAX_INPUTS inputs is a 400 naming `input`.
 */
#include <stdlib.h>
#include <string.h>

#include "api/body.h"
#include "api/embeddings/embeddings.h"
#include "tokenizer/tok.h"

static int check_ids(const json_t *a, int idx, struct api_error *err)
{
    if (json_array_size(a) == 0)
        return idx < 0 ? api_fail(err, 400, "input", "input must not be an empty array")
                       : api_fail(err, 400, "input", "input[%d] must not be an empty array",
                                  idx);
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v)
    {
        if (!json_is_integer(v))
            return api_fail(err, 400, "input",
                            "input must be a string, an array of strings, an array of token "
                            "ids or an array of token-id arrays");
    }
    return 0;
}

int emb_parse(struct emb_req *r, const char *body, size_t len, struct api_error *err)
{
    memset(r, 0, sizeof *r);
    json_error_t je;
    r->body = api_body_load(body, len, &je);
    if (!r->body || !json_is_object(r->body))
        return api_fail(err, 400, NULL, "invalid JSON body");
    json_t *o = r->body;
    json_t *m = json_object_get(o, "model");
    if (m && !json_is_null(m)) {
        if (!json_is_string(m))
            return api_fail(err, 400, "model", "model must be a string");
        r->model = json_string_value(m);
    }
    json_t *u = json_object_get(o, "user");
    if (u && !json_is_null(u) && !json_is_string(u))
        return api_fail(err, 400, "user", "user must be a string");
    json_t *ef = json_object_get(o, "encoding_format");
    if (ef && !json_is_null(ef)) {
        const char *s = json_string_value(ef);
        if (!s || (strcmp(s, "float") && strcmp(s, "base64")))
            return api_fail(err, 400, "encoding_format",
                            "encoding_format must be 'float' or 'base64'");
        r->base64 = !strcmp(s, "base64");
    }
    json_t *d = json_object_get(o, "dimensions");
    if (d && !json_is_null(d)) {
        if (!json_is_integer(d))
            return api_fail(err, 400, "dimensions", "dimensions must be an integer");
        json_int_t v = json_integer_value(d);
        if (v < 1)
            return api_fail(err, 400, "dimensions", "dimensions must be at least 1");
        r->dimensions = v > 1 << 30 ? 1 << 30 : (int)v;
    }
    json_t *in = json_object_get(o, "input");
    if (!in || json_is_null(in))
        return api_fail(err, 400, "input", "input is required");
    r->inputs = in;
    if (json_is_string(in)) {
        if (json_string_length(in) == 0)
            return api_fail(err, 400, "input", "input must not be an empty string");
        r->n_in = 1;
        return 0;
    }
    if (!json_is_array(in))
        return api_fail(err, 400, "input",
                        "input must be a string, an array of strings, an array of token ids "
                        "or an array of token-id arrays");
    size_t n = json_array_size(in);
    if (n == 0)
        return api_fail(err, 400, "input", "input must not be an empty array");
    json_t *first = json_array_get(in, 0);
    if (json_is_integer(first)) { /* one token sequence */
        r->tokens_given = 1;
        r->n_in = 1;
        return check_ids(in, -1, err);
    }
    if (n > EMB_MAX_INPUTS)
        return api_fail(err, 400, "input", "input holds %zu items; at most %d are allowed", n,
                        EMB_MAX_INPUTS);
    r->n_in = (int)n;
    r->tokens_given = json_is_array(first);
    size_t i;
    json_t *v;
    json_array_foreach(in, i, v)
    {
        if (r->tokens_given) {
            if (!json_is_array(v))
                return api_fail(err, 400, "input",
                                "input[%zu] must be an array of token ids like input[0]", i);
            if (check_ids(v, (int)i, err))
                return -1;
        } else {
            if (!json_is_string(v))
                return api_fail(err, 400, "input", "input[%zu] must be a string like input[0]",
                                i);
            if (json_string_length(v) == 0)
                return api_fail(err, 400, "input", "input[%zu] must not be an empty string", i);
        }
    }
    return 0;
}

int emb_specials(const struct tok *tk, struct emb_specials *sp)
{
    memset(sp, 0, sizeof *sp);
    static const char probe[] = "hello world";
    int32_t *with = NULL, *plain = NULL;
    int nw = 0, np = 0, rc = -1;
    if (tok_encode(tk, probe, sizeof probe - 1, TOK_ADD_SPECIAL, &with, &nw, NULL) ||
        tok_encode(tk, probe, sizeof probe - 1, 0, &plain, &np, NULL))
        goto done;
    for (int at = 0; at + np <= nw; at++) {
        if (memcmp(with + at, plain, (size_t)np * sizeof *plain))
            continue;
        int ns = nw - at - np;
        if (at > 4 || ns > 4)
            break;
        memcpy(sp->pre, with, (size_t)at * sizeof *with);
        memcpy(sp->suf, with + at + np, (size_t)ns * sizeof *with);
        sp->n_pre = at, sp->n_suf = ns;
        rc = 0;
        break;
    }
done:
    free(with);
    free(plain);
    return rc;
}

static int too_long(int i, int n, int max_len, struct api_error *err)
{
    return api_fail(err, 400, "input",
                    "input[%d] is %d tokens long; this model takes at most %d tokens per input "
                    "(its special tokens included). Shorten or split the input",
                    i, n, max_len);
}

int emb_tokenize(struct emb_req *r, const struct tok *tk, const struct emb_specials *sp,
                 int n_vocab, int max_len, struct api_error *err)
{
    r->ids = calloc((size_t)r->n_in, sizeof *r->ids);
    r->lens = calloc((size_t)r->n_in, sizeof *r->lens);
    if (!r->ids || !r->lens)
        return api_fail(err, 500, NULL, "out of memory");
    int single = r->n_in == 1 && (json_is_string(r->inputs) ||
                                  (r->tokens_given && json_is_integer(json_array_get(r->inputs, 0))));
    r->n_tokens = 0;
    for (int i = 0; i < r->n_in; i++) {
        const json_t *v = single ? r->inputs : json_array_get(r->inputs, (size_t)i);
        if (!r->tokens_given) {
            struct cerr e = {0};
            if (tok_encode(tk, json_string_value(v), json_string_length(v), TOK_ADD_SPECIAL,
                           &r->ids[i], &r->lens[i], &e))
                return api_fail(err, e.code == CERR_NOMEM ? 500 : 400, "input",
                                "input[%d] cannot be tokenized: %s", i, e.msg);
            if (r->lens[i] > max_len)
                return too_long(i, r->lens[i], max_len, err);
        } else {
            size_t n = json_array_size(v);
            size_t total = n + (size_t)sp->n_pre + (size_t)sp->n_suf;
            if (total > (size_t)max_len)
                return too_long(i, total > 1 << 30 ? 1 << 30 : (int)total, max_len, err);
            int32_t *ids = malloc(total * sizeof *ids);
            if (!ids)
                return api_fail(err, 500, NULL, "out of memory");
            r->ids[i] = ids;
            memcpy(ids, sp->pre, (size_t)sp->n_pre * sizeof *ids);
            for (size_t k = 0; k < n; k++) {
                json_int_t t = json_integer_value(json_array_get(v, k));
                if (t < 0 || t >= n_vocab)
                    return api_fail(err, 400, "input",
                                    "input[%d][%zu] = %lld is not a token id of this model "
                                    "(0 to %d)",
                                    i, k, (long long)t, n_vocab - 1);
                ids[sp->n_pre + k] = (int32_t)t;
            }
            memcpy(ids + sp->n_pre + n, sp->suf, (size_t)sp->n_suf * sizeof *ids);
            r->lens[i] = (int)total;
        }
        r->n_tokens += r->lens[i];
        if (r->n_tokens > EMB_MAX_TOKENS)
            return api_fail(err, 400, "input",
                            "the inputs hold more than %d tokens in all (at input[%d]); send "
                            "them in several requests",
                            EMB_MAX_TOKENS, i);
    }
    return 0;
}

void emb_req_deinit(struct emb_req *r)
{
    if (r->ids)
        for (int i = 0; i < r->n_in; i++)
            free(r->ids[i]);
    free(r->ids);
    free(r->lens);
    json_decref(r->body);
    memset(r, 0, sizeof *r);
}
