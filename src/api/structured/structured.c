/* structured.c — response_format & co. to a grammar (see structured.h). */
#include "api/structured/structured.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/toolcall.h"
#include "engine/grammar/gram_schema.h"
#include "util/jsonfmt.h"
#include "util/sbuf.h"

int api_structured_enabled(void)
{
    const char *v = getenv("CINFER_GRAMMAR");
    return !(v && !strcmp(v, "0"));
}

/* ---- the compiled-grammar cache (by kind + source text) ----------------------------------- */

#define CACHE_N 32
static struct {
    uint64_t h;
    char *key;
    struct gram *g;
    long used;
} cache[CACHE_N];
static long cache_tick;
static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;

static struct gram *cache_get(const char *key)
{
    uint64_t h = 1469598103934665603ull;
    for (const char *p = key; *p; p++)
        h = (h ^ (uint8_t)*p) * 1099511628211ull;
    struct gram *g = NULL;
    pthread_mutex_lock(&cache_mu);
    for (int i = 0; i < CACHE_N; i++)
        if (cache[i].key && cache[i].h == h && !strcmp(cache[i].key, key)) {
            g = gram_ref(cache[i].g);
            cache[i].used = ++cache_tick;
            break;
        }
    pthread_mutex_unlock(&cache_mu);
    return g;
}

static void cache_put(const char *key, struct gram *g)
{
    uint64_t h = 1469598103934665603ull;
    for (const char *p = key; *p; p++)
        h = (h ^ (uint8_t)*p) * 1099511628211ull;
    char *k = strdup(key);
    if (!k)
        return;
    pthread_mutex_lock(&cache_mu);
    int v = 0;
    for (int i = 0; i < CACHE_N; i++) {
        if (!cache[i].key) {
            v = i;
            break;
        }
        if (cache[i].used < cache[v].used)
            v = i;
    }
    free(cache[v].key);
    gram_unref(cache[v].g);
    cache[v].key = k;
    cache[v].h = h;
    cache[v].g = gram_ref(g);
    cache[v].used = ++cache_tick;
    pthread_mutex_unlock(&cache_mu);
}

/* ---- compile one constraint ---------------------------------------------------------------- */

enum { K_SCHEMA, K_REGEX, K_CHOICE, K_GRAMMAR };

/* api_error.param is kept as a pointer: the field names it may hold, as literals */
static const char *intern(const char *p)
{
    static const char *const names[] = {
        "response_format", "response_format.json_schema.schema", "response_format.schema",
        "response_format.regex", "response_format.choice", "response_format.grammar",
        "text.format", "text.format.schema", "text.format.json_schema.schema", "text.format.regex",
        "text.format.choice", "text.format.grammar", "output_format", "output_format.schema",
        "output_format.json_schema.schema", "output_format.regex", "output_format.choice",
        "output_format.grammar", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
        "structured_outputs", "structured_outputs.json", "structured_outputs.regex",
        "structured_outputs.choice", "structured_outputs.grammar", "tools", NULL};
    for (int i = 0; names[i]; i++)
        if (!strcmp(names[i], p))
            return names[i];
    return "response_format";
}

static int fail_compile(struct api_error *err, const char *param, const struct cerr *e,
                        const char *kw)
{
    api_fail(err, e->code == CERR_NOMEM ? 500 : 400, intern(param), "%s: %s", param, e->msg);
    if (kw && *kw)
        err->code = "unsupported_schema_keyword";
    return -1;
}

/* Compiles v (a schema object or JSON text, a regex, a choice array, an EBNF text) into
 * out->grammar, or, degraded, writes out->instruction. */
static int compile(int kind, const json_t *v, const char *param, struct api_structured *out,
                   struct api_error *err)
{
    json_t *owned = NULL;
    if (kind == K_SCHEMA && json_is_string(v)) { /* guided_json may be JSON text */
        json_error_t je;
        owned = json_loads(json_string_value(v), 0, &je);
        if (!owned)
            return api_fail(err, 400, intern(param), "%s is not valid JSON: %s", param, je.text);
        v = owned;
    }
    if (kind == K_SCHEMA && !json_is_object(v) && !json_is_boolean(v)) {
        json_decref(owned);
        return api_fail(err, 400, intern(param), "%s must be a JSON Schema object", param);
    }
    if ((kind == K_REGEX || kind == K_GRAMMAR) && !json_is_string(v))
        return api_fail(err, 400, intern(param), "%s must be a string", param);
    if (kind == K_CHOICE) {
        if (!json_is_array(v) || !json_array_size(v))
            return api_fail(err, 400, intern(param), "%s must be a non-empty array of strings", param);
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) if (!json_is_string(x)) return api_fail(
            err, 400, intern(param), "%s must be a non-empty array of strings", param);
    }
    char *src = kind == K_SCHEMA || kind == K_CHOICE
                    ? json_dumps_short(v, JSON_COMPACT | JSON_ENCODE_ANY)
                    : strdup(json_string_value(v));
    struct sbuf key = {0};
    if (!src || sbuf_printf(&key, "%d:%s", kind, src)) {
        free(src);
        json_decref(owned);
        sbuf_free(&key);
        return api_fail(err, 500, NULL, "out of memory");
    }
    struct gram *g = cache_get(key.p);
    int rc = 0;
    if (!g) {
        struct cerr e = {0};
        char kw[64] = "";
        if (kind == K_SCHEMA) {
            rc = gram_from_schema(&g, v, 0, kw, &e);
        } else if (kind == K_REGEX) {
            rc = gram_from_regex(&g, src, strlen(src), &e);
        } else if (kind == K_GRAMMAR) {
            rc = gram_from_ebnf(&g, src, strlen(src), &e);
        } else {
            size_t n = json_array_size(v);
            const char **ch = calloc(n, sizeof *ch);
            for (size_t i = 0; ch && i < n; i++)
                ch[i] = json_string_value(json_array_get(v, i));
            rc = ch ? gram_from_choice(&g, ch, (int)n, &e) : cerr_set(&e, CERR_NOMEM, "out of memory");
            free(ch);
        }
        if (rc)
            fail_compile(err, param, &e, kw);
        else
            cache_put(key.p, g);
    }
    sbuf_free(&key);
    if (!rc && !api_structured_enabled()) {
        struct sbuf t = {0};
        static const char *const what[] = {
            "Respond only with JSON that validates against this JSON Schema: ",
            "Respond only with text that matches this regular expression: ",
            "Respond with exactly one of these choices and nothing else: ",
            "Respond only with text that this grammar accepts: "};
        sbuf_puts(&t, what[kind]);
        sbuf_puts(&t, src);
        gram_unref(g);
        g = NULL;
        out->instruction = t.p;
        out->degraded = 1;
    }
    free(src);
    json_decref(owned);
    if (rc)
        return -1;
    out->grammar = g;
    return 0;
}

/* ---- the request surfaces ----------------------------------------------------------------- */

static int response_format(const json_t *rf, const char *param, struct api_structured *out,
                           struct api_error *err)
{
    if (!json_is_object(rf))
        return api_fail(err, 400, intern(param), "%s must be an object", param);
    const char *t = json_string_value(json_object_get(rf, "type"));
    if (!t)
        return api_fail(err, 400, intern(param), "%s.type is required", param);
    if (!strcmp(t, "text"))
        return 0;
    char p[128];
    if (!strcmp(t, "json_object")) {
        json_t *s = json_pack("{s:s}", "type", "object");
        int rc = s ? compile(K_SCHEMA, s, param, out, err) : api_fail(err, 500, NULL, "out of memory");
        json_decref(s);
        return rc;
    }
    if (!strcmp(t, "json_schema")) {
        /* chat: {type, json_schema: {name, schema, strict}}; Responses / Anthropic put the
         * schema next to type */
        json_t *js = json_object_get(rf, "json_schema");
        json_t *s = js ? json_object_get(js, "schema") : json_object_get(rf, "schema");
        snprintf(p, sizeof p, "%s%s", param, js ? ".json_schema.schema" : ".schema");
        if (!s)
            return api_fail(err, 400, intern(p), "%s is required for type json_schema", p);
        return compile(K_SCHEMA, s, p, out, err);
    }
    if (!strcmp(t, "regex") || !strcmp(t, "grammar") || !strcmp(t, "choice")) {
        const char *k = !strcmp(t, "regex") ? "regex" : !strcmp(t, "choice") ? "choice" : "grammar";
        snprintf(p, sizeof p, "%s.%s", param, k);
        json_t *v = json_object_get(rf, k);
        if (!v)
            return api_fail(err, 400, intern(p), "%s is required for type %s", p, t);
        return compile(!strcmp(t, "regex") ? K_REGEX : !strcmp(t, "choice") ? K_CHOICE : K_GRAMMAR, v,
                       p, out, err);
    }
    return api_fail(err, 400, intern(param),
                    "%s.type must be \"text\", \"json_object\" or \"json_schema\", not \"%s\"",
                    param, t);
}

int api_structured_oai(const json_t *body, struct api_structured *out, struct api_error *err)
{
    memset(out, 0, sizeof *out);
    static const struct { const char *field; int kind; } guided[] = {
        {"guided_json", K_SCHEMA}, {"guided_regex", K_REGEX}, {"guided_choice", K_CHOICE},
        {"guided_grammar", K_GRAMMAR}};
    static const struct { const char *field; int kind; } so[] = {
        {"json", K_SCHEMA}, {"regex", K_REGEX}, {"choice", K_CHOICE}, {"grammar", K_GRAMMAR}};
    const char *which = NULL;
    int n = 0;
    json_t *rf = json_object_get(body, "response_format");
    if (rf && !json_is_null(rf)) {
        const char *t = json_is_object(rf) ? json_string_value(json_object_get(rf, "type")) : NULL;
        if (!t || strcmp(t, "text"))
            n++, which = "response_format";
    }
    for (int i = 0; i < 4; i++)
        if (json_object_get(body, guided[i].field) && !json_is_null(json_object_get(body, guided[i].field)))
            n++, which = guided[i].field;
    json_t *sot = json_object_get(body, "structured_outputs");
    if (sot && !json_is_null(sot)) {
        if (!json_is_object(sot))
            return api_fail(err, 400, "structured_outputs", "structured_outputs must be an object");
        for (int i = 0; i < 4; i++)
            if (json_object_get(sot, so[i].field))
                n++, which = "structured_outputs";
    }
    if (n > 1)
        return api_fail(err, 400, intern(which),
                        "give at most one of response_format, guided_json, guided_regex, "
                        "guided_choice, guided_grammar and structured_outputs (one field)");
    if (rf && !json_is_null(rf))
        return response_format(rf, "response_format", out, err);
    for (int i = 0; i < 4; i++) {
        json_t *v = json_object_get(body, guided[i].field);
        if (v && !json_is_null(v))
            return compile(guided[i].kind, v, guided[i].field, out, err);
    }
    if (sot && !json_is_null(sot))
        for (int i = 0; i < 4; i++) {
            json_t *v = json_object_get(sot, so[i].field);
            char p[64];
            snprintf(p, sizeof p, "structured_outputs.%s", so[i].field);
            if (v)
                return compile(so[i].kind, v, p, out, err);
        }
    return 0;
}

int api_structured_responses(const json_t *body, struct api_structured *out, struct api_error *err)
{
    memset(out, 0, sizeof *out);
    json_t *text = json_object_get(body, "text");
    json_t *f = json_is_object(text) ? json_object_get(text, "format") : NULL;
    if (!f || json_is_null(f))
        return 0;
    return response_format(f, "text.format", out, err);
}

int api_structured_anthropic(const json_t *body, struct api_structured *out, struct api_error *err)
{
    memset(out, 0, sizeof *out);
    json_t *f = json_object_get(body, "output_format");
    if (!f || json_is_null(f))
        return 0;
    return response_format(f, "output_format", out, err);
}

/* ---- forced tool calls ---------------------------------------------------------------------- */

int api_structured_tools(int family, const json_t *tools, int tool_choice, const char *name,
                         const char *forced, struct api_structured *out, struct api_error *err)
{
    if (out->grammar || out->degraded || !tools || !api_structured_enabled())
        return 0;
    if (tool_choice && !forced)
        return 0;
    const char *open, *close, *args;
    switch (family) {
    case TC_HERMES:
    case TC_GENERIC:
        open = "<tool_call>\n", close = "\n</tool_call>", args = "arguments";
        break;
    case TC_LLAMA3:
        open = "", close = "", args = "parameters";
        break;
    case TC_MISTRAL:
        open = "[TOOL_CALLS][", close = "]", args = "arguments";
        break;
    default:
        return 0;
    }
    if (!tool_choice && !*open)
        return 0; /* auto: nothing marks where a call starts */
    /* one schema: anyOf over the allowed tools of {name: const, args: parameters} */
    json_t *alts = json_array(), *defs = json_object(), *root = json_object();
    int strict_any = 0, rc = 0;
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *fn = json_object_get(t, "function");
        if (!fn)
            fn = t;
        const char *nm = json_string_value(json_object_get(fn, "name"));
        if (!nm || (name && strcmp(nm, name)))
            continue;
        if (!tool_choice && !json_is_true(json_object_get(fn, "strict")))
            continue; /* auto: only strict tools are held to their schema */
        json_t *params = json_object_get(fn, "parameters");
        if (!params)
            params = json_object_get(fn, "input_schema");
        strict_any |= json_is_true(json_object_get(fn, "strict"));
        json_t *p = params ? json_deep_copy(params) : json_pack("{s:s}", "type", "object");
        /* local definitions move to the root, where "#/$defs/..." resolves */
        static const char *const dk[] = {"$defs", "definitions"};
        for (int k = 0; k < 2; k++) {
            json_t *d = json_object_get(p, dk[k]);
            if (json_is_object(d)) {
                json_t *have = json_object_get(defs, dk[k]);
                if (!have)
                    json_object_set(defs, dk[k], d);
                else
                    json_object_update(have, d);
                json_object_del(p, dk[k]);
            }
        }
        json_t *alt = json_pack("{s:s, s:{s:{s:s}, s:o}, s:[s,s], s:b}", "type", "object",
                                "properties", "name", "const", nm, args, p, "required", "name", args,
                                "additionalProperties", 0);
        json_array_append_new(alts, alt);
    }
    if (!json_array_size(alts)) {
        json_decref(alts);
        json_decref(defs);
        json_decref(root);
        return 0;
    }
    json_object_update(root, defs);
    json_object_set_new(root, "anyOf", alts);
    struct sbuf b = {0};
    struct cerr e = {0};
    char kw[64] = "";
    rc = gram_schema_to_ebnf(root, 0, &b, kw, &e);
    json_decref(defs);
    json_decref(root);
    if (rc) {
        sbuf_free(&b);
        if (!strict_any)
            return 0; /* a tool nobody marked strict: the call is free, as before */
        return fail_compile(err, "tools", &e, kw);
    }
    /* the schema's last line is "root ::= rN": the call wraps it */
    char *last = strstr(b.p, "\nroot ::= ");
    if (last)
        memcpy(last + 1, "jcal", 4);
    int multi = !tool_choice && !strcmp(open, "<tool_call>\n"); /* auto: more calls may follow */
    sbuf_puts(&b, multi ? "call ::= " : "root ::= ");
    if (*open) {
        sbuf_puts(&b, "\"");
        for (const char *q = open; *q; q++)
            sbuf_printf(&b, "\\x%02X", (uint8_t)*q);
        sbuf_puts(&b, "\" ");
    }
    sbuf_puts(&b, "jcal ");
    if (*close) {
        sbuf_puts(&b, "\"");
        for (const char *q = close; *q; q++)
            sbuf_printf(&b, "\\x%02X", (uint8_t)*q);
        sbuf_puts(&b, "\"");
    }
    sbuf_puts(&b, "\n");
    if (multi)
        sbuf_puts(&b, "root ::= call (\"\\n\" call)*\n");
    struct gram *g = NULL;
    rc = gram_from_ebnf(&g, b.p, b.len, &e);
    sbuf_free(&b);
    if (rc)
        return strict_any ? fail_compile(err, "tools", &e, NULL) : 0;
    if (tool_choice)
        out->prime = strdup(forced);
    else
        out->trigger = strndup(open, strcspn(open, "\n"));
    if (!(tool_choice ? out->prime : out->trigger)) {
        gram_unref(g);
        return api_fail(err, 500, NULL, "out of memory");
    }
    out->grammar = g;
    return 0;
}

int api_structured_after_reasoning(struct api_structured *s, int start_in_reasoning,
                                   int thinking, const char *think_open,
                                   const char *think_close, struct api_error *err)
{
    if (!s->grammar || s->prime || s->trigger || !think_close || !*think_close)
        return 0;
    int optional = !start_in_reasoning && think_open && *think_open && thinking != 0;
    if (!start_in_reasoning && !optional)
        return 0;
    s->trigger = strdup(think_close);
    if (!s->trigger || (optional && !(s->open = strdup(think_open))))
        return api_fail(err, 500, NULL, "out of memory");
    s->trigger_after = 1;
    return 0;
}

int api_structured_instruct(json_t *messages, const struct api_structured *s)
{
    if (!s->instruction || !json_is_array(messages))
        return 0;
    json_t *m0 = json_array_get(messages, 0);
    const char *role = json_string_value(json_object_get(m0, "role"));
    json_t *c = json_object_get(m0, "content");
    if (role && !strcmp(role, "system") && json_is_string(c)) {
        struct sbuf t = {0};
        sbuf_printf(&t, "%s\n\n%s", json_string_value(c), s->instruction);
        int rc = t.p ? json_object_set_new(m0, "content", json_string(t.p)) : -1;
        sbuf_free(&t);
        return rc;
    }
    return json_array_insert_new(messages, 0,
                                 json_pack("{s:s, s:s}", "role", "system", "content", s->instruction));
}

void api_structured_deinit(struct api_structured *s)
{
    gram_unref(s->grammar);
    free(s->prime);
    free(s->trigger);
    free(s->open);
    free(s->instruction);
    memset(s, 0, sizeof *s);
}
