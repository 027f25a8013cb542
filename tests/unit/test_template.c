/* test_template.c — the template engine's API: errors, bounds, threads, template sources.
 *
 * Byte parity with jinja2 is test_template_fixtures.c; this file checks what the server
 * relies on: syntax errors and raise_exception come back as messages (not crashes),
 * hostile templates hit the depth/step/memory bounds, one parsed template renders from
 * many threads at once, and tmpl_source_load/tmpl_special_tokens find the template of a
 * tokenizer_config.json, a HF directory and the real GGUF models (when present).
 */
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "template/tmpl.h"
#include "util/fs.h"

/* Renders src with ctx_json; returns rc, *out (malloc'd) and e. */
static int render_str(const char *src, const char *ctx_json, char **out, struct cerr *e,
                      const struct tmpl_opts *o)
{
    struct tmpl *t = NULL;
    *out = NULL;
    int rc = tmpl_parse(&t, src, strlen(src), e);
    if (rc)
        return rc;
    json_t *ctx = ctx_json ? json_loads(ctx_json, 0, NULL) : NULL;
    size_t len;
    rc = tmpl_render(t, ctx, o, out, &len, e);
    if (!rc && strlen(*out) != len)
        rc = -100;
    json_decref(ctx);
    tmpl_free(t);
    return rc;
}

static void expect_render(const char *src, const char *ctx, const char *want)
{
    char *out;
    struct cerr e = {0};
    int rc = render_str(src, ctx, &out, &e, NULL);
    CHECK_MSG(rc == 0, "%s: %s", src, e.msg);
    if (!rc)
        CHECK_STR(out, want);
    free(out);
}

static void expect_error(const char *src, const char *ctx, int code, const char *needle)
{
    char *out;
    struct cerr e = {0};
    int rc = render_str(src, ctx, &out, &e, NULL);
    CHECK_MSG(rc == code, "%s: rc %d (want %d): %s", src, rc, code, e.msg);
    CHECK(out == NULL);
    CHECK_MSG(strstr(e.msg, needle) != NULL, "'%s' not in '%s'", needle, e.msg);
    free(out);
}

static void test_basics(void)
{
    expect_render("Hello {{ name }}!", "{\"name\": \"W\"}", "Hello W!");
    expect_render("", NULL, "");
    expect_render("{{ x }}", NULL, "");
    expect_render("{% for m in messages %}{{ m.role }}{% endfor %}",
                  "{\"messages\": [{\"role\": \"a\"}, {\"role\": \"b\"}]}", "ab");
    expect_render("{{ [1.5, 2]|tojson }} {{ {'a': none} }}", NULL, "[1.5, 2] {'a': None}");
    expect_render("{{ 'é🙂x'|length }}{{ 'é🙂x'[::-1] }}", NULL, "3x🙂é");
}

static void test_errors(void)
{
    expect_error("{{ raise_exception('Only user and assistant roles') }}", NULL, CERR_FORMAT,
                 "Only user and assistant roles");
    char *out;
    struct cerr e = {0};
    render_str("{{ raise_exception('exact text') }}", NULL, &out, &e, NULL);
    CHECK_STR(e.msg, "exact text"); /* verbatim: the API returns it as the 400 message */
    expect_error("{% if x %}", NULL, CERR_FORMAT, "syntax error");
    expect_error("line1\n{{ 1 + }}", NULL, CERR_FORMAT, "line 2");
    expect_error("{% endfor %}", NULL, CERR_FORMAT, "unknown tag");
    expect_error("{% frobnicate %}", NULL, CERR_FORMAT, "unknown tag 'frobnicate'");
    expect_error("{{ 'unterminated }}", NULL, CERR_FORMAT, "string");
    expect_error("{{ x|nosuch }}", NULL, CERR_FORMAT, "No filter named 'nosuch'");
    expect_error("{{ x is nosuch }}", NULL, CERR_FORMAT, "No test named 'nosuch'");
    expect_error("{{ a.b }}", NULL, CERR_FORMAT, "'a' is undefined");
    expect_error("{{ 'a' + 1 }}", NULL, CERR_FORMAT, "unsupported operand");
    expect_error("{{ 1 // 0 }}", NULL, CERR_FORMAT, "by zero");
    expect_error("{% for x in 3 %}{% endfor %}", NULL, CERR_FORMAT, "not iterable");
    expect_error("{{ range(10**9) }}", NULL, CERR_FORMAT, "Range too big");
    expect_error("{{ 2 ** 70 }}", NULL, CERR_LIMIT, "overflow");
    expect_error("{{ x.append(1) }}", "{\"x\": []}", CERR_FORMAT, "append");
    expect_error("{% set x.y = 1 %}", "{\"x\": {}}", CERR_FORMAT, "non-namespace");
    /* fuzz finding: a huge positional index in str.format overflowed */
    expect_error("{{ '{66666666666666666666666666666666}'.format(1) }}", NULL, CERR_FORMAT,
                 "out of range");
    expect_error("{{ '{1}'.format(1) }}", NULL, CERR_FORMAT, "out of range");
    expect_render("{{ '{1}{0}'.format('a', 'b') }}", NULL, "ba");
    free(out);
    /* a non-object context is refused, not crashed on */
    struct tmpl *t;
    CHECK(tmpl_parse(&t, "x", 1, &e) == 0);
    json_t *arr = json_array();
    CHECK(tmpl_render(t, arr, NULL, &out, NULL, &e) == CERR_INVALID);
    json_decref(arr);
    tmpl_free(t);
}

static void test_bounds(void)
{
    /* parser nesting: 5000 parentheses and 5000 nested ifs */
    size_t n = 5000;
    char *deep = malloc(n * 2 + 16);
    strcpy(deep, "{{ ");
    memset(deep + 3, '(', n);
    deep[3 + n] = '1';
    memset(deep + 4 + n, ')', n);
    strcpy(deep + 4 + 2 * n, " }}");
    expect_error(deep, NULL, CERR_LIMIT, "nesting");
    free(deep);
    char *ifs = malloc(n * 10 + 16);
    for (size_t i = 0; i < n; i++)
        memcpy(ifs + i * 10, "{% if 1 %}", 10);
    ifs[n * 10] = 0;
    expect_error(ifs, NULL, CERR_LIMIT, "nesting");
    free(ifs);
    /* unary chains recurse too */
    char *neg = malloc(n + 16);
    strcpy(neg, "{{ ");
    memset(neg + 3, '-', n);
    strcpy(neg + 3 + n, "1 }}");
    expect_error(neg, NULL, CERR_LIMIT, "nesting");
    free(neg);
    /* runaway recursion, loops, memory */
    expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, CERR_LIMIT,
                 "nested deeper");
    expect_error("{% set xs = range(100000) %}{% for i in xs %}{% for j in xs %}{% endfor %}{% endfor %}",
                 NULL, CERR_LIMIT, "steps");
    expect_error("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                 NULL, CERR_LIMIT, "bytes");
    expect_error("{{ 'x' * 10000000000 }}", NULL, CERR_LIMIT, "too large");
    char *out;
    struct cerr e = {0};
    struct tmpl_opts o = {.max_steps = 100};
    CHECK(render_str("{% for i in range(1000) %}{{ i }}{% endfor %}", NULL, &out, &e, &o) == CERR_LIMIT);
    free(out);
}

static void test_strftime(void)
{
    char *out;
    struct cerr e = {0};
    struct tmpl_opts o = {.now_unix = 1721952000}; /* 2024-07-26 00:00 UTC */
    CHECK(render_str("{{ strftime_now('%d %b %Y') }}", NULL, &out, &e, &o) == 0);
    CHECK_STR(out, "26 Jul 2024");
    free(out);
}

struct thread_arg {
    const struct tmpl *t;
    json_t *ctx;
    const char *want;
    int bad;
};

static void *render_loop(void *p)
{
    struct thread_arg *a = p;
    for (int i = 0; i < 200; i++) {
        char *out;
        size_t len;
        struct cerr e;
        if (tmpl_render(a->t, a->ctx, NULL, &out, &len, &e) != 0 || strcmp(out, a->want) != 0)
            a->bad++;
        free(out);
    }
    return NULL;
}

static void test_threads(void)
{
    char *src;
    size_t n;
    struct cerr e = {0};
    CHECK(fs_read_all(fixture_path("chat-templates/Qwen-Qwen3-0.6B.jinja"), &src, &n, &e) == 0);
    struct tmpl *t;
    CHECK(tmpl_parse(&t, src, n, &e) == 0);
    json_t *ctx = json_loads("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], "
                             "\"add_generation_prompt\": true}", 0, NULL);
    char *want;
    size_t len;
    CHECK(tmpl_render(t, ctx, NULL, &want, &len, &e) == 0);
    CHECK_STR(want, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    pthread_t th[4];
    struct thread_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (struct thread_arg){t, ctx, want, 0};
        pthread_create(&th[i], NULL, render_loop, &args[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ_INT(args[i].bad, 0);
    }
    free(want);
    json_decref(ctx);
    tmpl_free(t);
    free(src);
}

/* tokenizer_config.json templates render the chat_prompts of expected_tokenize.json. */
static void check_config(const char *dir, int want_prompts)
{
    char rel[256], *src = NULL, *bos = NULL, *eos = NULL;
    struct cerr e = {0};
    snprintf(rel, sizeof rel, "%s/tokenizer_config.json", dir);
    CHECK_MSG(tmpl_source_load(fixture_path(rel), NULL, &src, &e) == 0, "%s", e.msg);
    CHECK(tmpl_special_tokens(fixture_path(rel), &bos, &eos, &e) == 0);
    CHECK(eos != NULL);
    char *dsrc = NULL; /* the same through the directory */
    CHECK(tmpl_source_load(fixture_path(dir), NULL, &dsrc, &e) == 0);
    CHECK(src && dsrc && strcmp(src, dsrc) == 0);
    json_t *exp = json_load_file(fixture_path("chat-templates/expected_renders.json"), 0, NULL);
    snprintf(rel, sizeof rel, "%s/expected_tokenize.json", dir);
    json_t *tok = json_load_file(fixture_path(rel), 0, NULL);
    CHECK(exp && tok && src);
    if (!exp || !tok || !src)
        goto done;
    struct tmpl *t;
    CHECK_MSG(tmpl_parse(&t, src, strlen(src), &e) == 0, "%s", e.msg);
    int rendered = 0;
    size_t i;
    json_t *cp;
    json_array_foreach(json_object_get(tok, "chat_prompts"), i, cp) {
        const char *tname = json_string_value(json_object_get(cp, "template"));
        char frel[512], *fsrc = NULL;
        size_t fn;
        snprintf(frel, sizeof frel, "chat-templates/%s", tname);
        if (fs_read_all(fixture_path(frel), &fsrc, &fn, &e) != 0)
            continue;
        int same = strcmp(fsrc, src) == 0;
        free(fsrc);
        if (!same)
            continue;
        const char *cname = json_string_value(json_object_get(cp, "case"));
        size_t k;
        json_t *c;
        json_array_foreach(json_object_get(exp, "cases"), k, c) {
            if (strcmp(json_string_value(json_object_get(c, "name")), cname) != 0)
                continue;
            json_t *ctx = json_object();
            json_object_set(ctx, "messages", json_object_get(c, "messages"));
            json_object_set(ctx, "add_generation_prompt", json_object_get(c, "add_generation_prompt"));
            json_t *st = json_object_get(json_object_get(exp, "special_tokens"), tname);
            json_object_set(ctx, "bos_token", json_object_get(st, "bos_token"));
            json_object_set(ctx, "eos_token", json_object_get(st, "eos_token"));
            char *out;
            size_t len;
            struct tmpl_opts o = {.now_unix = 1721952000};
            CHECK(tmpl_render(t, ctx, &o, &out, &len, &e) == 0);
            CHECK_STR(out, json_string_value(json_object_get(cp, "text")));
            rendered++;
            free(out);
            json_decref(ctx);
        }
    }
    CHECK_MSG(rendered >= want_prompts, "%s: only %d chat prompts rendered", dir, rendered);
    tmpl_free(t);
done:
    json_decref(exp);
    json_decref(tok);
    free(src);
    free(dsrc);
    free(bos);
    free(eos);
}

static void test_sources(void)
{
    check_config("qwen3-tokenizer", 5);
    check_config("llama3-tokenizer", 0); /* its template is covered by expected.json */
    char *src = NULL;
    struct cerr e = {0};
    CHECK(tmpl_source_load(fixture_path("no/such/model"), NULL, &src, &e) != 0);
    CHECK(src == NULL);
    /* GGUF files without a chat template say so */
    CHECK(tmpl_source_load(fixture_path("stories260K/stories260K.gguf"), NULL, &src, &e) != 0);
    CHECK_MSG(strstr(e.msg, "chat template") != NULL, "%s", e.msg);
}

/* The real GGUF models (scripts/fetch_models.sh): the embedded template equals the text
 * extracted by the jinja2 reference script, and the GGUF's BOS/EOS tokens are found. */
static void test_gguf_models(void)
{
    json_t *toks = json_load_file(repo_path("tests/data/template/gguf/tokens.json"), 0, NULL);
    CHECK(toks != NULL);
    const char *name;
    json_t *info;
    int seen = 0;
    json_object_foreach(toks, name, info) {
        char mrel[512], jrel[512];
        snprintf(mrel, sizeof mrel, "models/%s", json_string_value(json_object_get(info, "model")));
        snprintf(jrel, sizeof jrel, "tests/data/template/gguf/%s", name);
        if (!fs_exists(repo_path(mrel)))
            continue;
        char *src = NULL, *want = NULL, *bos = NULL, *eos = NULL;
        size_t n;
        struct cerr e = {0};
        CHECK_MSG(tmpl_source_load(repo_path(mrel), NULL, &src, &e) == 0, "%s", e.msg);
        CHECK(fs_read_all(repo_path(jrel), &want, &n, &e) == 0);
        CHECK(src && want && strcmp(src, want) == 0);
        CHECK(tmpl_special_tokens(repo_path(mrel), &bos, &eos, &e) == 0);
        CHECK(bos && eos);
        if (bos && eos) {
            CHECK_STR(bos, json_string_value(json_object_get(info, "bos_token")));
            CHECK_STR(eos, json_string_value(json_object_get(info, "eos_token")));
        }
        seen++;
        free(src);
        free(want);
        free(bos);
        free(eos);
    }
    fprintf(stderr, "gguf models checked: %d\n", seen);
    json_decref(toks);
}

static void test_hostile_bytes(void)
{
    /* invalid UTF-8 and NUL bytes in sources and data must not crash */
    const char src[] = "{{ '\xff\xfe' ~ s }}{{ s|length }}{{ s[::-1]|upper }}\x00tail{{ s|tojson(ensure_ascii=true) }}";
    struct tmpl *t;
    struct cerr e = {0};
    CHECK(tmpl_parse(&t, src, sizeof src - 1, &e) == 0);
    json_t *ctx = json_object();
    json_object_set_new(ctx, "s", json_stringn("a\0b\xc3\xa9", 5));
    char *out = NULL;
    size_t len = 0;
    CHECK(tmpl_render(t, ctx, NULL, &out, &len, &e) == 0);
    CHECK(len > 0);
    free(out);
    json_decref(ctx);
    tmpl_free(t);
}

int main(void)
{
    RUN(test_basics);
    RUN(test_errors);
    RUN(test_bounds);
    RUN(test_strftime);
    RUN(test_threads);
    RUN(test_sources);
    RUN(test_gguf_models);
    RUN(test_hostile_bytes);
    return harness_done();
}
