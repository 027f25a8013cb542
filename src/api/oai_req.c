/* oai_req.c — see oai_req.h. Field order follows server-inventory §3.1; messages are
 * copied and normalised so that the template sees exactly what HF's apply_chat_template
 * would get from mlx_lm.server.
 */
#include "api/oai_req.h"

#include <math.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/body.h"
#include "api/openai/fields.h"
#include "util/err.h"

#define MAX_STOPS 64

int api_fail(struct api_error *err, int status, const char *param, const char *fmt, ...)
{
    err->status = status;
    err->param = param;
    err->code = NULL;
    err->type = status == 401   ? "authentication_error"
                : status == 404 ? "not_found_error"
                : status == 429 ? "rate_limit_error"
                : status >= 500 ? "server_error"
                                : "invalid_request_error";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return -1;
}

void api_warn(char *w, size_t cap, const char *what, const char *name)
{
    if (!w || cap < 2)
        return;
    size_t n = strlen(w);
    if (strstr(w, name))
        return; /* each name once */
    snprintf(w + n, cap - n, "%s%s %s", n ? ", " : "ignored: ", what, name);
}

/* ---- typed getters: absent or null = not given (return 0, *given = 0) ---------------- */

static int get_num(json_t *o, const char *k, double *out, int *given, struct api_error *err)
{
    json_t *v = json_object_get(o, k);
    *given = 0;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v))
        return api_fail(err, 400, k, "%s must be a number", k);
    *out = json_number_value(v);
    if (!isfinite(*out))
        return api_fail(err, 400, k, "%s must be a finite number", k);
    *given = 1;
    return 0;
}

static int get_int(json_t *o, const char *k, long long *out, int *given, struct api_error *err)
{
    json_t *v = json_object_get(o, k);
    *given = 0;
    if (!v || json_is_null(v))
        return 0;
    if (json_is_integer(v))
        *out = json_integer_value(v);
    else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
             fabs(json_real_value(v)) < 9e15)
        *out = (long long)json_real_value(v);
    else
        return api_fail(err, 400, k, "%s must be of type int", k);
    *given = 1;
    return 0;
}

static int get_bool(json_t *o, const char *k, int *out, int *given, struct api_error *err)
{
    json_t *v = json_object_get(o, k);
    *given = 0;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return api_fail(err, 400, k, "%s must be of type bool", k);
    *out = json_is_true(v);
    *given = 1;
    return 0;
}

static int opt_float(json_t *o, const char *k, float *dst, struct api_error *err)
{
    double d;
    int given;
    if (get_num(o, k, &d, &given, err))
        return -1;
    if (given)
        *dst = (float)d;
    return 0;
}

static int opt_ctx(json_t *o, const char *k, int *dst, struct api_error *err)
{
    long long v;
    int given;
    if (get_int(o, k, &v, &given, err))
        return -1;
    if (given) {
        if (v < 0 || v > 1 << 30)
            return api_fail(err, 400, k, "%s must be at least 0", k);
        *dst = (int)v;
    }
    return 0;
}

/* ---- sampling ----------------------------------------------------------------------- */

static int parse_logit_bias(struct oai_req *r, json_t *o, int n_vocab, struct api_error *err)
{
    json_t *lb = json_object_get(o, "logit_bias");
    if (!lb || json_is_null(lb))
        return 0;
    if (!json_is_object(lb))
        return api_fail(err, 400, "logit_bias", "logit_bias must be a dict of int to float");
    size_t n = json_object_size(lb);
    if (n == 0)
        return 0;
    r->bias = calloc(n, sizeof *r->bias);
    if (!r->bias)
        return api_fail(err, 500, NULL, "out of memory");
    const char *key;
    json_t *val;
    int k = 0;
    json_object_foreach(lb, key, val)
    {
        char *end;
        long id = strtol(key, &end, 10);
        if (!*key || *end || !json_is_number(val))
            return api_fail(err, 400, "logit_bias", "logit_bias must be a dict of int to float");
        if (id < 0 || id >= n_vocab)
            return api_fail(err, 400, "logit_bias",
                            "logit_bias token id %ld is outside the vocabulary [0, %d)", id,
                            n_vocab);
        double b = json_number_value(val);
        r->bias[k].id = (int32_t)id;
        r->bias[k].bias = (float)(b < -1e30 ? -INFINITY : b);
        k++;
    }
    r->sp.logit_bias = r->bias;
    r->sp.n_logit_bias = k;
    return 0;
}

int oai_req_ban(struct oai_req *r, int32_t id)
{
    if (id < 0)
        return 0;
    struct sampler_bias *b = realloc(r->bias, (size_t)(r->sp.n_logit_bias + 1) * sizeof *b);
    if (!b)
        return -1;
    b[r->sp.n_logit_bias] = (struct sampler_bias){id, -INFINITY};
    r->bias = b;
    r->sp.logit_bias = b;
    r->sp.n_logit_bias++;
    return 0;
}

static int parse_sampling(struct oai_req *r, json_t *o, int n_vocab, struct api_error *err)
{
    struct sampler_params *p = &r->sp;
    if (opt_float(o, "temperature", &p->temperature, err) || opt_float(o, "top_p", &p->top_p, err) ||
        opt_float(o, "min_p", &p->min_p, err) ||
        opt_float(o, "xtc_probability", &p->xtc_probability, err) ||
        opt_float(o, "xtc_threshold", &p->xtc_threshold, err) ||
        opt_float(o, "repetition_penalty", &p->repetition_penalty, err) ||
        opt_float(o, "presence_penalty", &p->presence_penalty, err) ||
        opt_float(o, "frequency_penalty", &p->frequency_penalty, err) ||
        opt_ctx(o, "repetition_context_size", &p->repetition_context_size, err) ||
        opt_ctx(o, "presence_context_size", &p->presence_context_size, err) ||
        opt_ctx(o, "frequency_context_size", &p->frequency_context_size, err))
        return -1;
    long long v;
    int given;
    if (get_int(o, "top_k", &v, &given, err))
        return -1;
    if (given) {
        if (v < 0)
            return api_fail(err, 400, "top_k", "top_k must be at least 0");
        p->top_k = v > n_vocab ? n_vocab : (int)v;
    }
    if (get_int(o, "seed", &v, &given, err))
        return -1;
    if (given) {
        p->seed = (uint64_t)v;
        r->seed_given = 1;
    } else
        p->seed = sampler_seed_auto();
    if (parse_logit_bias(r, o, n_vocab, err))
        return -1;
    /* logprobs (the mlx_lm.server block); completions: an integer asks for the legacy block
     * with that many alternatives a position */
    int b;
    json_t *lpv = json_object_get(o, "logprobs");
    r->top_logprobs = -1;
    if (r->kind == OAI_COMPLETION && json_is_integer(lpv)) {
        long long k = json_integer_value(lpv);
        if (k < 0 || k > SAMPLER_MAX_TOP_LOGPROBS)
            return api_fail(err, 400, "logprobs", "logprobs must be an integer in [0, %d]",
                            SAMPLER_MAX_TOP_LOGPROBS);
        r->legacy_logprobs = 1;
        r->logprobs = 1;
        r->top_logprobs = (int)k;
    } else {
        if (get_bool(o, "logprobs", &b, &given, err))
            return api_fail(err, 400, "logprobs",
                            r->kind == OAI_COMPLETION
                                ? "logprobs must be an integer (or a bool, as mlx_lm.server)"
                                : "logprobs must be of type bool");
        r->logprobs = given && b;
    }
    json_t *tl = json_object_get(o, "top_logprobs");
    if (tl && !json_is_null(tl) && !r->legacy_logprobs) {
        if (!json_is_integer(tl))
            return api_fail(err, 400, "top_logprobs", "top_logprobs must be of type int");
        long long k = json_integer_value(tl);
        if (k != -1 && k < 0)
            return api_fail(err, 400, "top_logprobs", "top_logprobs must be at least 0");
        if (k > SAMPLER_MAX_TOP_LOGPROBS)
            return api_fail(err, 400, "top_logprobs", "top_logprobs must be at most %d",
                            SAMPLER_MAX_TOP_LOGPROBS);
        r->top_logprobs = (int)k;
    }
    /* k > 0 wins; logprobs:true alone captures the sampled token */
    p->top_logprobs = r->top_logprobs > 0 ? r->top_logprobs : r->logprobs ? 0 : -1;
    /* ranges, named by the request field (the sampler's own check stays the backstop) */
    static const struct {
        const char *name;
        size_t off;
        double lo, hi;
    } R[] = {
        {"temperature", offsetof(struct sampler_params, temperature), 0, 5},
        {"top_p", offsetof(struct sampler_params, top_p), 0, 1},
        {"min_p", offsetof(struct sampler_params, min_p), 0, 1},
        {"xtc_probability", offsetof(struct sampler_params, xtc_probability), 0, 1},
        {"xtc_threshold", offsetof(struct sampler_params, xtc_threshold), 0, 0.5},
        {"repetition_penalty", offsetof(struct sampler_params, repetition_penalty), 0, 1e9},
        {"presence_penalty", offsetof(struct sampler_params, presence_penalty), -2, 2},
        {"frequency_penalty", offsetof(struct sampler_params, frequency_penalty), -2, 2},
    };
    for (size_t i = 0; i < sizeof R / sizeof *R; i++) {
        float x = *(const float *)((const char *)p + R[i].off);
        if (!(x >= R[i].lo && x <= R[i].hi)) {
            if (R[i].hi >= 1e9)
                return api_fail(err, 400, R[i].name, "%s must be a non-negative number, got %g",
                                R[i].name, (double)x);
            return api_fail(err, 400, R[i].name, "%s must be a number in [%g, %g], got %g",
                            R[i].name, R[i].lo, R[i].hi, (double)x);
        }
    }
    struct cerr e = {0};
    if (sampler_params_check(p, n_vocab, &e))
        return api_fail(err, 400, NULL, "%s", e.msg);
    return 0;
}

static int parse_stops(struct oai_req *r, json_t *o, const char *key, struct api_error *err)
{
    json_t *s = json_object_get(o, key);
    if (!s || json_is_null(s))
        return 0;
    if (!json_is_string(s) && !json_is_array(s))
        return api_fail(err, 400, key, "%s must be a string or an array of strings", key);
    size_t n = json_is_string(s) ? 1 : json_array_size(s);
    if (n > MAX_STOPS)
        return api_fail(err, 400, key, "%s has %zu entries; at most %d are allowed", key, n,
                        MAX_STOPS);
    r->stops = calloc(n ? n : 1, sizeof *r->stops);
    if (!r->stops)
        return api_fail(err, 500, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_is_string(s) ? s : json_array_get(s, i);
        if (!json_is_string(v) || json_string_length(v) == 0)
            continue; /* dropped, as the reference does */
        if (!(r->stops[r->n_stops] = strdup(json_string_value(v))))
            return api_fail(err, 500, NULL, "out of memory");
        r->n_stops++;
    }
    return 0;
}

/* parallel_tool_calls: false with tools: generation ends at the first call's end tag (a
 * stop string, not part of the output: the parser takes a call without its end tag). Small
 * models otherwise write call after call to max_tokens, of which only the first is kept.
 * They come last (n_call_stops) and stop only outside a think block (engine_req
 * n_stops_outside): an end tag in the reasoning is no call. */
static int add_call_end_stops(struct oai_req *r, struct api_error *err)
{
    static const char *const ENDS[] = {"</tool_call>", "</tools>"};
    char **ns = realloc(r->stops, (size_t)(r->n_stops + 2) * sizeof *ns);
    if (!ns)
        return api_fail(err, 500, NULL, "out of memory");
    r->stops = ns;
    for (int i = 0; i < 2; i++)
        if (!(r->stops[r->n_stops] = strdup(ENDS[i])))
            return api_fail(err, 500, NULL, "out of memory");
        else
            r->n_stops++, r->n_call_stops++;
    return 0;
}

/* ---- messages ----------------------------------------------------------------------- */

static const char *const ROLES[] = {"system", "developer", "user", "assistant", "tool"};

/* Flattens a parts array to one string; refuses media the model cannot take. */
static int flatten_parts(json_t *parts, size_t mi, json_t **out, struct api_error *err)
{
    size_t len = 0;
    size_t i;
    json_t *p;
    json_array_foreach(parts, i, p)
    {
        const char *t = json_string_value(json_object_get(p, "type"));
        if (!json_is_object(p) || !t)
            return api_fail(err, 400, "messages",
                            "messages[%zu].content[%zu] must be an object with a type", mi, i);
        if (!strcmp(t, "text") || !strcmp(t, "input_text")) {
            if (!json_is_string(json_object_get(p, "text")))
                return api_fail(err, 400, "messages",
                                "messages[%zu].content[%zu].text must be a string", mi, i);
            len += json_string_length(json_object_get(p, "text"));
        } else if (!strcmp(t, "image_url") || !strcmp(t, "image") || !strcmp(t, "input_image"))
            return api_fail(err, 400, "messages", "model has no vision sidecar");
        else if (!strcmp(t, "input_audio") || !strcmp(t, "audio") || !strcmp(t, "audio_url"))
            return api_fail(err, 400, "messages", "model has no audio tower");
        else
            return api_fail(err, 400, "messages", "messages[%zu].content[%zu]: unknown part type \"%s\"",
                            mi, i, t);
    }
    char *s = malloc(len + 1), *w = s;
    if (!s)
        return api_fail(err, 500, NULL, "out of memory");
    json_array_foreach(parts, i, p)
    {
        json_t *tx = json_object_get(p, "text");
        memcpy(w, json_string_value(tx), json_string_length(tx));
        w += json_string_length(tx);
    }
    *w = 0;
    *out = json_stringn_nocheck(s, len);
    free(s);
    return *out ? 0 : api_fail(err, 400, "messages", "messages[%zu]: invalid text", mi);
}

/* Assistant tool calls: arguments arrive as a JSON string; the template wants an object. */
static int normalise_tool_calls(json_t *m, size_t mi, struct api_error *err)
{
    json_t *tc = json_object_get(m, "tool_calls");
    if (!tc || json_is_null(tc)) {
        json_object_del(m, "tool_calls");
        return 0;
    }
    if (!json_is_array(tc))
        return api_fail(err, 400, "messages", "messages[%zu].tool_calls must be an array", mi);
    size_t i;
    json_t *c;
    json_array_foreach(tc, i, c)
    {
        json_t *fn = json_object_get(c, "function");
        if (!json_is_object(c) || !json_is_object(fn) ||
            !json_is_string(json_object_get(fn, "name")))
            return api_fail(err, 400, "messages",
                            "messages[%zu].tool_calls[%zu] needs function.name", mi, i);
        json_t *a = json_object_get(fn, "arguments");
        if (json_is_string(a)) {
            json_t *obj = json_loads(json_string_value(a), JSON_DECODE_ANY, NULL);
            if (obj)
                json_object_set_new(fn, "arguments", obj);
        }
    }
    return 0;
}

static int parse_messages(struct oai_req *r, json_t *o, struct api_error *err)
{
    json_t *ms = json_object_get(o, "messages");
    if (!json_is_array(ms) || json_array_size(ms) == 0)
        return api_fail(err, 400, "messages", "messages required");
    r->messages = json_array();
    if (!r->messages)
        return api_fail(err, 500, NULL, "out of memory");
    size_t i;
    json_t *m;
    json_array_foreach(ms, i, m)
    {
        if (!json_is_object(m))
            return api_fail(err, 400, "messages", "messages[%zu] must be an object", i);
        const char *role = json_string_value(json_object_get(m, "role"));
        int ok = 0;
        for (size_t k = 0; role && k < sizeof ROLES / sizeof *ROLES; k++)
            ok |= !strcmp(role, ROLES[k]);
        if (!ok)
            return api_fail(err, 400, "messages",
                            "messages[%zu].role must be one of system, developer, user, "
                            "assistant, tool",
                            i);
        json_t *c = json_deep_copy(m);
        if (!c || json_array_append_new(r->messages, c))
            return api_fail(err, 500, NULL, "out of memory");
        if (!strcmp(role, "developer"))
            json_object_set_new(c, "role", json_string("system"));
        json_t *content = json_object_get(c, "content");
        if (json_is_array(content)) {
            json_t *flat;
            if (flatten_parts(content, i, &flat, err))
                return -1;
            json_object_set_new(c, "content", flat);
        } else if (content && !json_is_string(content) && !json_is_null(content))
            return api_fail(err, 400, "messages",
                            "messages[%zu].content must be a string or an array of parts", i);
        else if (!content || json_is_null(content)) {
            if (strcmp(role, "assistant"))
                return api_fail(err, 400, "messages", "messages[%zu].content is required", i);
            json_object_set_new(c, "content", json_string(""));
        }
        if (normalise_tool_calls(c, i, err))
            return -1;
    }
    return 0;
}

static int parse_thinking(struct oai_req *r, json_t *o, struct api_error *err)
{
    r->thinking = -1;
    json_t *kw = json_object_get(o, "chat_template_kwargs");
    if (kw && !json_is_null(kw)) {
        if (!json_is_object(kw))
            return api_fail(err, 400, "chat_template_kwargs",
                            "chat_template_kwargs must be an object");
        r->template_kwargs = kw;
        json_t *et = json_object_get(kw, "enable_thinking");
        if (json_is_boolean(et))
            r->thinking = json_is_true(et);
    }
    json_t *re = json_object_get(o, "reasoning_effort");
    if (re && !json_is_null(re)) {
        static const char *const L[] = {"none", "minimal", "low", "medium", "high", "xhigh"};
        const char *s = json_string_value(re);
        int k = -1;
        for (int i = 0; s && i < 6; i++)
            if (!strcmp(s, L[i]))
                k = i;
        if (k < 0)
            return api_fail(err, 400, "reasoning_effort",
                            "reasoning_effort must be one of none, minimal, low, medium, high, "
                            "xhigh");
        if (r->thinking < 0)
            r->thinking = k != 0;
    }
    return 0;
}

/* Each entry {"type": "function", "function": {"name": N, "description"?: S,
 * "parameters"?: {...}, "strict"?: B}}, as OpenAI checks them. */
static int check_tools(json_t *t, struct api_error *err)
{
    size_t i;
    json_t *x;
    json_array_foreach(t, i, x)
    {
        const char *ty = json_string_value(json_object_get(x, "type"));
        json_t *fn = json_object_get(x, "function");
        if (!json_is_object(x) || !ty)
            return api_fail(err, 400, "tools", "tools[%zu] must be an object with a type", i);
        if (strcmp(ty, "function"))
            return api_fail(err, 400, "tools",
                            "tools[%zu].type \"%s\" is not supported (only \"function\")", i, ty);
        if (!json_is_object(fn))
            return api_fail(err, 400, "tools", "tools[%zu].function must be an object", i);
        json_t *nm = json_object_get(fn, "name");
        if (!json_is_string(nm) || json_string_length(nm) == 0 || json_string_length(nm) > 256 ||
            strlen(json_string_value(nm)) != json_string_length(nm))
            return api_fail(err, 400, "tools",
                            "tools[%zu].function.name must be a non-empty string", i);
        json_t *pa = json_object_get(fn, "parameters");
        if (pa && !json_is_null(pa) && !json_is_object(pa))
            return api_fail(err, 400, "tools",
                            "tools[%zu].function.parameters must be a JSON Schema object", i);
        json_t *de = json_object_get(fn, "description");
        if (de && !json_is_null(de) && !json_is_string(de))
            return api_fail(err, 400, "tools",
                            "tools[%zu].function.description must be a string", i);
        json_t *st = json_object_get(fn, "strict");
        if (st && !json_is_null(st) && !json_is_boolean(st))
            return api_fail(err, 400, "tools", "tools[%zu].function.strict must be a bool", i);
    }
    return 0;
}

static int check_tool_choice(json_t *tc, struct api_error *err)
{
    static const char msg[] = "tool_choice must be \"none\", \"auto\", \"required\" or "
                              "{\"type\": \"function\", \"function\": {\"name\": ...}}";
    if (json_is_string(tc)) {
        const char *s = json_string_value(tc);
        if (strcmp(s, "none") && strcmp(s, "auto") && strcmp(s, "required"))
            return api_fail(err, 400, "tool_choice", "%s", msg);
        return 0;
    }
    if (!json_is_object(tc))
        return api_fail(err, 400, "tool_choice", "%s", msg);
    const char *ty = json_string_value(json_object_get(tc, "type"));
    json_t *fn = json_object_get(tc, "function");
    if (!ty || strcmp(ty, "function") ||
        !json_is_string(json_object_get(json_is_object(fn) ? fn : tc, "name")))
        return api_fail(err, 400, "tool_choice", "%s", msg);
    return 0;
}

static int parse_tools(struct oai_req *r, json_t *o, struct api_error *err)
{
    json_t *t = json_object_get(o, "tools");
    json_t *tc = json_object_get(o, "tool_choice");
    if (tc && !json_is_null(tc) && check_tool_choice(tc, err))
        return -1;
    if (!t || json_is_null(t) || (json_is_array(t) && json_array_size(t) == 0)) {
        if (tc && !json_is_null(tc) && !(json_is_string(tc) && (!strcmp(json_string_value(tc), "none") ||
                                                                 !strcmp(json_string_value(tc), "auto"))))
            return api_fail(err, 400, "tool_choice",
                            "tool_choice is only allowed when tools are specified");
        if (t && !json_is_null(t) && !json_is_array(t))
            return api_fail(err, 400, "tools", "tools must be an array");
        return 0;
    }
    if (!json_is_array(t))
        return api_fail(err, 400, "tools", "tools must be an array");
    if (check_tools(t, err))
        return -1;
    int b, given;
    if (get_bool(o, "parallel_tool_calls", &b, &given, err))
        return -1;
    r->single_call = given && !b;
    if (json_is_string(tc) && !strcmp(json_string_value(tc), "none")) {
        r->none_tools = json_array_size(t) ? t : NULL;
        return 0;
    }
    if (json_array_size(t))
        r->tools = t;
    if (json_is_string(tc) && !strcmp(json_string_value(tc), "required"))
        r->tool_choice = 1;
    else if (json_is_object(tc)) {
        /* {"type":"function","function":{"name":N}} (chat) or {"type":"function","name":N} */
        json_t *fn = json_object_get(tc, "function");
        const char *name = json_string_value(json_object_get(fn ? fn : tc, "name"));
        if (!name)
            return api_fail(err, 400, "tool_choice",
                            "tool_choice must be \"none\", \"auto\", \"required\" or "
                            "{\"type\": \"function\", \"function\": {\"name\": ...}}");
        int found = 0;
        size_t i;
        json_t *x;
        json_array_foreach(t, i, x)
        {
            json_t *f = json_object_get(x, "function");
            const char *n = json_string_value(json_object_get(f ? f : x, "name"));
            found |= n && !strcmp(n, name);
        }
        if (!found)
            return api_fail(err, 400, "tool_choice",
                            "tool_choice names the function \"%s\", which is not in tools", name);
        r->tool_choice = 2;
        r->tool_name = name;
    }
    if (!r->tools)
        r->tool_choice = 0;
    return 0;
}

/* ---- n, stream_options, completions ------------------------------------------------- */

static int parse_n_and_stream(struct oai_req *r, json_t *o, struct api_error *err)
{
    long long v;
    int given;
    if (get_int(o, "n", &v, &given, err))
        return -1;
    if (given && v < 1)
        return api_fail(err, 400, "n", "n must be at least 1, got %lld", v);
    if (given && v > OAI_MAX_CHOICES)
        return api_fail(err, 400, "n", "n must be at most %d, got %lld", OAI_MAX_CHOICES, v);
    r->n = given ? (int)v : 1;
    r->best_of = r->n;
    json_t *so = json_object_get(o, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so))
            return api_fail(err, 400, "stream_options", "stream_options must be an object");
        if (!r->stream)
            return api_fail(err, 400, "stream_options",
                            "stream_options is only allowed when stream is true");
        int b;
        if (get_bool(so, "include_usage", &b, &given, err))
            return api_fail(err, 400, "stream_options",
                            "stream_options.include_usage must be of type bool");
        r->include_usage = given && b;
    }
    return 0;
}

#define PROMPT_SHAPES                                                                        \
    "prompt must be a string, an array of strings, an array of token ids or an array of "    \
    "arrays of token ids"

/* A prompt given as token ids: copied, each checked against the vocabulary. */
static int prompt_ids(struct oai_prompt *q, json_t *a, int n_vocab, struct api_error *err)
{
    size_t n = json_array_size(a);
    if (!n)
        return api_fail(err, 400, "prompt", "prompt has an empty array of token ids");
    q->ids = malloc(n * sizeof *q->ids);
    if (!q->ids)
        return api_fail(err, 500, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(a, i);
        if (!json_is_integer(x))
            return api_fail(err, 400, "prompt", PROMPT_SHAPES);
        json_int_t id = json_integer_value(x);
        if (id < 0 || id >= n_vocab)
            return api_fail(err, 400, "prompt",
                            "prompt token id %lld is outside the vocabulary [0, %d)",
                            (long long)id, n_vocab);
        q->ids[i] = (int32_t)id;
    }
    q->n_ids = (int)n;
    return 0;
}

/* One prompt: a non-empty string or an array of token ids. */
static int prompt_one(struct oai_prompt *q, json_t *p, int n_vocab, struct api_error *err)
{
    if (json_is_array(p))
        return prompt_ids(q, p, n_vocab, err);
    if (!json_is_string(p))
        return api_fail(err, 400, "prompt", PROMPT_SHAPES);
    if (json_string_length(p) == 0)
        return api_fail(err, 400, "prompt",
                        "prompt is required: a non-empty string, an array of strings, an array of "
                        "token ids or an array of arrays of token ids");
    q->text = json_string_value(p);
    q->len = json_string_length(p);
    return 0;
}

static int parse_completion(struct oai_req *r, json_t *o, int n_vocab, struct api_error *err)
{
    long long v;
    int given;
    if (get_int(o, "best_of", &v, &given, err))
        return -1;
    if (given && v < r->n)
        return api_fail(err, 400, "best_of", "best_of (%lld) must be at least n (%d)", v, r->n);
    if (given && v > OAI_MAX_CHOICES)
        return api_fail(err, 400, "best_of", "best_of must be at most %d, got %lld",
                        OAI_MAX_CHOICES, v);
    if (given && v > r->n && r->stream)
        return api_fail(err, 400, "best_of", "best_of > n cannot be streamed");
    r->best_of = given ? (int)v : r->n; /* best_of = n returns every sample: n itself */
    json_t *p = json_object_get(o, "prompt");
    /* a string or one array of ids is one prompt; an array of strings or of arrays is one
     * prompt each (one choice each, in order; n choices each with n > 1) */
    int many = json_is_array(p) && json_array_size(p) > 0 && !json_is_integer(json_array_get(p, 0));
    size_t np = many ? json_array_size(p) : 1;
    if (!p || json_is_null(p) || (json_is_array(p) && json_array_size(p) == 0))
        return api_fail(err, 400, "prompt",
                        "prompt is required: a non-empty string, an array of strings, an array of "
                        "token ids or an array of arrays of token ids");
    if (np * (size_t)r->best_of > OAI_MAX_CHOICES)
        return api_fail(err, 400, "prompt",
                        "%zu prompts x %d samples asks for %zu generations; at most %d a request",
                        np, r->best_of, np * (size_t)r->best_of, OAI_MAX_CHOICES);
    r->prompts = calloc(np, sizeof *r->prompts);
    if (!r->prompts)
        return api_fail(err, 500, NULL, "out of memory");
    r->n_prompts = (int)np;
    for (size_t i = 0; i < np; i++)
        if (prompt_one(&r->prompts[i], many ? json_array_get(p, i) : p, n_vocab, err))
            return -1;
    r->prompt = r->prompts[0].text;
    r->prompt_len = r->prompts[0].len;
    if (r->prompts[0].ids) { /* the first prompt's ids, as before prompt arrays */
        r->prompt_ids = malloc((size_t)r->prompts[0].n_ids * sizeof *r->prompt_ids);
        if (!r->prompt_ids)
            return api_fail(err, 500, NULL, "out of memory");
        memcpy(r->prompt_ids, r->prompts[0].ids, (size_t)r->prompts[0].n_ids * sizeof *r->prompt_ids);
        r->n_prompt_ids = r->prompts[0].n_ids;
    }
    int b;
    if (get_bool(o, "echo", &b, &given, err))
        return -1;
    r->echo = given && b;
    if (r->echo && r->logprobs && !r->legacy_logprobs)
        return api_fail(err, 400, "logprobs",
                        "echo with logprobs takes logprobs as an integer (the completions API's "
                        "block: the prompt's tokens are scored too)");
    json_t *sf = json_object_get(o, "suffix");
    if (sf && !json_is_null(sf) && !(json_is_string(sf) && json_string_length(sf) == 0))
        return api_fail(err, 400, "suffix",
                        "suffix is not supported: cinfer has no fill-in-the-middle prompt format");
    return 0;
}

/* ---- entry -------------------------------------------------------------------------- */

int oai_parse(struct oai_req *r, int kind, const char *body, size_t len,
              const struct sampler_params *defaults, int n_vocab, struct api_error *err)
{
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->sp = *defaults;
    r->sp.logit_bias = NULL;
    r->sp.n_logit_bias = 0;
    r->thinking = -1;
    r->top_logprobs = -1;
    json_error_t je;
    r->body = api_body_load(body, len, &je);
    if (!r->body || !json_is_object(r->body)) {
        oai_req_deinit(r);
        return api_fail(err, 400, NULL, "invalid JSON body");
    }
    json_t *o = r->body;
    int rc = 0, given, b;
    if (get_bool(o, "stream", &b, &given, err))
        rc = -1;
    r->stream = !rc && given && b;
    long long mt = 0;
    int g1 = 0, g2 = 0;
    long long v1 = 0, v2 = 0;
    if (!rc && (get_int(o, "max_completion_tokens", &v1, &g1, err) ||
                get_int(o, "max_tokens", &v2, &g2, err)))
        rc = -1;
    if (!rc && (g1 || g2)) {
        mt = g1 ? v1 : v2;
        if (mt < 1)
            rc = api_fail(err, 400, g1 ? "max_completion_tokens" : "max_tokens",
                          "%s must be at least 1", g1 ? "max_completion_tokens" : "max_tokens");
        r->max_tokens = mt > 1 << 30 ? 1 << 30 : (int)mt;
    }
    if (!rc)
        rc = parse_n_and_stream(r, o, err);
    if (!rc)
        rc = parse_sampling(r, o, n_vocab, err);
    if (!rc)
        rc = parse_stops(r, o, "stop", err);
    if (!rc && kind == OAI_CHAT)
        rc = parse_messages(r, o, err);
    if (!rc && kind == OAI_CHAT)
        rc = parse_thinking(r, o, err);
    if (!rc && kind == OAI_CHAT)
        rc = parse_tools(r, o, err);
    if (!rc && kind == OAI_CHAT)
        rc = oai_check_chat_fields(o, err); /* hints and refusals (openai/fields.h) */
    if (!rc && kind == OAI_CHAT && r->single_call && r->tools)
        rc = add_call_end_stops(r, err);
    if (!rc && kind == OAI_CHAT && get_bool(o, "continue_final_message", &b, &given, err))
        rc = -1;
    if (!rc && kind == OAI_CHAT && given && b) {
        json_t *last = json_array_get(r->messages, json_array_size(r->messages) - 1);
        const char *role = json_string_value(json_object_get(last, "role"));
        if (!role || strcmp(role, "assistant") || !json_is_string(json_object_get(last, "content")))
            rc = api_fail(err, 400, "continue_final_message",
                          "continue_final_message needs a final assistant message with text");
        else
            r->continue_final = 1;
    }
    if (!rc && kind == OAI_COMPLETION)
        rc = parse_completion(r, o, n_vocab, err);
    if (!rc && kind == OAI_COMPLETION)
        rc = oai_check_completion_fields(o, err);
    if (rc)
        oai_req_deinit(r);
    return rc;
}

void oai_req_deinit(struct oai_req *r)
{
    json_decref(r->messages);
    json_decref(r->body);
    free(r->bias);
    free(r->prompt_ids);
    for (int i = 0; i < r->n_prompts; i++)
        free(r->prompts[i].ids);
    free(r->prompts);
    for (int i = 0; i < r->n_stops; i++)
        free(r->stops[i]);
    free(r->stops);
    memset(r, 0, sizeof *r);
}
