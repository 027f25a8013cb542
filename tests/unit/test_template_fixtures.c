/* test_template_fixtures.c — the real chat templates against Python jinja2's renders.
 *
 * For every template in fixtures/chat-templates and every conversation of
 * expected_renders.json (89 renders + 6 expected raise_exception errors), renders with the
 * C engine and requires byte-identical text (or the identical error message). Then the
 * same for the repo's own conversations in tests/data/template/expected.json (tools, tool
 * calls, tool results, thinking on/off, generation prompt on/off, GGUF-embedded templates).
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "template/tmpl.h"
#include "util/fs.h"

static int64_t date_to_unix(const char *ymd)
{
    struct tm tmv = {0};
    if (!ymd || sscanf(ymd, "%d-%d-%d", &tmv.tm_year, &tmv.tm_mon, &tmv.tm_mday) != 3)
        return 0;
    tmv.tm_year -= 1900;
    tmv.tm_mon -= 1;
    return (int64_t)timegm(&tmv);
}

static void show_diff(const char *want, const char *got)
{
    size_t i = 0;
    while (want[i] && got[i] && want[i] == got[i])
        i++;
    size_t from = i > 40 ? i - 40 : 0;
    fprintf(stderr, "    first difference at byte %zu\n    want: ...%.80s\n    got:  ...%.80s\n", i,
            want + from, got + from);
}

/* Renders one case; returns 1 when it matches. */
static int check_case(struct tmpl *t, const char *tname, const char *cname, json_t *ctx,
                      json_t *expect, int64_t now)
{
    char *out = NULL;
    size_t len = 0;
    struct cerr e = {0};
    struct tmpl_opts o = {.now_unix = now};
    int rc = tmpl_render(t, ctx, &o, &out, &len, &e);
    int ok_expected = json_is_true(json_object_get(expect, "ok"));
    int pass;
    if (ok_expected) {
        const char *want = json_string_value(json_object_get(expect, "text"));
        pass = rc == 0 && want && len == strlen(want) && memcmp(out, want, len) == 0;
        if (!pass) {
            fprintf(stderr, "  MISMATCH %s / %s: rc=%d %s\n", tname, cname, rc, rc ? e.msg : "");
            if (!rc && want)
                show_diff(want, out);
        }
    } else {
        const char *want = json_string_value(json_object_get(expect, "error"));
        json_t *exact = json_object_get(expect, "error_exact");
        /* raise_exception texts must match exactly; other errors (Python TypeErrors,
         * syntax errors) only have to be errors, since their wording is Python's */
        pass = rc != 0 && want && (json_is_false(exact) || strcmp(e.msg, want) == 0);
        if (!pass)
            fprintf(stderr, "  ERROR MISMATCH %s / %s: rc=%d got '%s' want '%s'\n", tname, cname,
                    rc, rc ? e.msg : "(rendered)", want ? want : "?");
    }
    free(out);
    return pass;
}

static void test_fixture_renders(void)
{
    json_error_t je;
    json_t *root = json_load_file(fixture_path("chat-templates/expected_renders.json"), 0, &je);
    CHECK_MSG(root != NULL, "cannot load expected_renders.json: %s", je.text);
    if (!root)
        return;
    int64_t now = date_to_unix(json_string_value(json_object_get(root, "strftime_now_fixed")));
    json_t *cases = json_object_get(root, "cases");
    json_t *renders = json_object_get(root, "renders");
    json_t *special = json_object_get(root, "special_tokens");
    const char *tname;
    json_t *per;
    int total = 0, passed = 0, errors = 0, errors_passed = 0;
    json_object_foreach(renders, tname, per) {
        char rel[512];
        snprintf(rel, sizeof rel, "chat-templates/%s", tname);
        char *src = NULL;
        size_t n = 0;
        struct cerr e = {0};
        CHECK_MSG(fs_read_all(fixture_path(rel), &src, &n, &e) == 0, "%s", e.msg);
        struct tmpl *t = NULL;
        int prc = src ? tmpl_parse(&t, src, n, &e) : -1;
        CHECK_MSG(prc == 0, "parse %s: %s", tname, e.msg);
        size_t i;
        json_t *c;
        json_array_foreach(cases, i, c) {
            const char *cname = json_string_value(json_object_get(c, "name"));
            json_t *expect = json_object_get(per, cname);
            if (!expect)
                continue;
            int is_err = !json_is_true(json_object_get(expect, "ok"));
            total++;
            errors += is_err;
            if (prc != 0)
                continue;
            json_t *ctx = json_object();
            json_object_set(ctx, "messages", json_object_get(c, "messages"));
            json_object_set(ctx, "add_generation_prompt", json_object_get(c, "add_generation_prompt"));
            json_t *st = json_object_get(special, tname);
            json_object_set(ctx, "bos_token", json_object_get(st, "bos_token"));
            json_object_set(ctx, "eos_token", json_object_get(st, "eos_token"));
            int p = check_case(t, tname, cname, ctx, expect, now);
            passed += p;
            errors_passed += p && is_err;
            json_decref(ctx);
        }
        tmpl_free(t);
        free(src);
    }
    fprintf(stderr, "fixture renders: %d/%d passed (%d/%d expected errors)\n", passed, total,
            errors_passed, errors);
    CHECK_EQ_INT(total, 95);
    CHECK_EQ_INT(passed, total);
    json_decref(root);
}

/* tests/data/template/expected.json: {"cases": [{"template": path rel. to repo,
 * "name", "context": {...}, "date", "ok", "text" | "error"}]} */
static void test_repo_conversations(void)
{
    json_error_t je;
    json_t *root = json_load_file(repo_path("tests/data/template/expected.json"), 0, &je);
    CHECK_MSG(root != NULL, "cannot load tests/data/template/expected.json: %s", je.text);
    if (!root)
        return;
    json_t *cases = json_object_get(root, "cases");
    size_t i;
    json_t *c;
    int total = 0, passed = 0;
    json_array_foreach(cases, i, c) {
        const char *tp = json_string_value(json_object_get(c, "template"));
        const char *inline_src = json_string_value(json_object_get(c, "source"));
        const char *cname = json_string_value(json_object_get(c, "name"));
        char *src = NULL;
        size_t n = 0;
        struct cerr e = {0};
        total++;
        if (inline_src) {
            n = strlen(inline_src);
            src = malloc(n + 1);
            memcpy(src, inline_src, n + 1);
            tp = "(snippet)";
        } else {
            const char *path = strncmp(tp, "fixtures/", 9) == 0 ? fixture_path(tp + 9) : repo_path(tp);
            size_t pl = strlen(path);
            int rc = pl > 5 && strcmp(path + pl - 5, ".json") == 0
                         ? tmpl_source_load(path, NULL, &src, &e)
                         : fs_read_all(path, &src, &n, &e);
            if (!rc)
                n = strlen(src);
            if (rc != 0) {
                CHECK_MSG(0, "%s", e.msg);
                continue;
            }
        }
        struct tmpl *t = NULL;
        if (tmpl_parse(&t, src, n, &e) != 0) {
            json_t *exact = json_object_get(c, "error_exact");
            int want_err = !json_is_true(json_object_get(c, "ok")) && json_is_false(exact);
            CHECK_MSG(want_err, "parse %s (%s): %s", tp, cname, e.msg);
            passed += want_err;
            free(src);
            continue;
        }
        int64_t now = date_to_unix(json_string_value(json_object_get(c, "date")));
        passed += check_case(t, tp, cname, json_object_get(c, "context"), c, now);
        tmpl_free(t);
        free(src);
    }
    fprintf(stderr, "repo conversations: %d/%d passed\n", passed, total);
    CHECK(total > 0);
    CHECK_EQ_INT(passed, total);
    json_decref(root);
}

/* [source, ok, text] cases against one shared context: matrix.json (every value through
 * every filter/test/method and the binary operators) and whitespace.json (random
 * templates with every whitespace-control marker, raw blocks, comments). */
static void run_case_file(const char *rel, int min_cases)
{
    json_error_t je;
    json_t *root = json_load_file(repo_path(rel), 0, &je);
    CHECK_MSG(root != NULL, "cannot load %s: %s", rel, je.text);
    if (!root)
        return;
    json_t *ctx = json_object_get(root, "context");
    size_t i;
    json_t *c;
    int total = 0, passed = 0;
    json_array_foreach(json_object_get(root, "cases"), i, c) {
        const char *src = json_string_value(json_array_get(c, 0));
        int ok = json_is_true(json_array_get(c, 1));
        const char *want = json_string_value(json_array_get(c, 2));
        struct tmpl *t = NULL;
        struct cerr e = {0};
        char *out = NULL;
        size_t len = 0;
        int rc = tmpl_parse(&t, src, strlen(src), &e);
        if (!rc)
            rc = tmpl_render(t, ctx, NULL, &out, &len, &e);
        int pass = ok ? (rc == 0 && len == strlen(want) && memcmp(out, want, len) == 0) : rc != 0;
        if (!pass)
            fprintf(stderr, "  CASE %s: want %s '%s', got %s '%s'\n", src, ok ? "ok" : "error", want,
                    rc ? "error" : "ok", rc ? e.msg : out);
        total++;
        passed += pass;
        free(out);
        tmpl_free(t);
    }
    fprintf(stderr, "%s: %d/%d passed\n", rel, passed, total);
    CHECK(total >= min_cases);
    CHECK_EQ_INT(passed, total);
    json_decref(root);
}

static void test_matrix(void)
{
    run_case_file("tests/data/template/matrix.json", 5000);
}

static void test_whitespace(void)
{
    run_case_file("tests/data/template/whitespace.json", 800);
}

static void test_statements(void)
{
    run_case_file("tests/data/template/statements.json", 600);
}

int main(void)
{
    RUN(test_matrix);
    RUN(test_statements);
    RUN(test_whitespace);
    RUN(test_fixture_renders);
    RUN(test_repo_conversations);
    return harness_done();
}
