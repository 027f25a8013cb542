/* test_toolcall.c — the streaming tool-call parsers (api/toolcall.h) on recorded outputs.
 *
 * tests/data/toolcall/cases.json lists model outputs (one file each, per family) with the
 * expected events. Every case is fed whole, cut at every byte boundary, byte by byte and in
 * random chunkings; the event sequences (adjacent CONTENT merged, ARGS deltas joined) must
 * be identical and equal the expectation, and every stream must respect the grammar
 * BEGIN → ARGS_DELTA* → END with deltas concatenating to the final JSON. Cases marked with
 * "reasoning" go through the think-tag splitter first. Also: family detection on the real
 * templates, ids, raw text per call, API edges.
 */
#include "harness.h"

#include <jansson.h>
#include <stdint.h>

#include "api/reasoning.h"
#include "api/toolcall.h"
#include "api/toolcall_int.h"

/* ---- event log ---- */

#define MAX_ITEMS 32
#define ITEM_CAP 4096

struct item {
    int call; /* 0: content */
    char text[ITEM_CAP]; /* content, or the joined ARGS deltas */
    char final[ITEM_CAP];
    char name[128], id[64];
    int index;
};

struct log {
    struct item it[MAX_ITEMS];
    int n;
    int open;       /* index of the call between BEGIN and END, -1 if none */
    int begun;      /* calls begun */
    int bad;        /* grammar violations */
    char reasoning[ITEM_CAP];
    struct tc_parser *p;
};

static int g_stream; /* feed() uses stream mode */
static int g_deltas; /* ARGS_DELTA events seen by the last feed() */

static void cat(char *dst, const char *s, size_t n)
{
    size_t l = strlen(dst);
    if (l + n >= ITEM_CAP)
        n = ITEM_CAP - 1 - l;
    memcpy(dst + l, s, n);
    dst[l + n] = 0;
}

static void on_event(const struct tc_event *ev, void *ud)
{
    struct log *L = ud;
    struct item *last = L->n ? &L->it[L->n - 1] : NULL;
    switch (ev->kind) {
    case TC_EV_CONTENT:
        if (L->open >= 0 || ev->n == 0)
            L->bad++;
        if (last && !last->call) {
            cat(last->text, ev->text, ev->n);
        } else if (L->n < MAX_ITEMS) {
            memset(&L->it[L->n], 0, sizeof L->it[0]);
            cat(L->it[L->n++].text, ev->text, ev->n);
        }
        break;
    case TC_EV_CALL_BEGIN:
        if (L->open >= 0 || ev->index != L->begun || !ev->id || !ev->name)
            L->bad++;
        L->open = ev->index;
        L->begun++;
        if (L->n < MAX_ITEMS) {
            struct item *it = &L->it[L->n++];
            memset(it, 0, sizeof *it);
            it->call = 1;
            it->index = ev->index;
            snprintf(it->name, sizeof it->name, "%s", ev->name ? ev->name : "");
            snprintf(it->id, sizeof it->id, "%s", ev->id ? ev->id : "");
        }
        break;
    case TC_EV_CALL_ARGS_DELTA:
        g_deltas++;
        if (L->open != ev->index || !last || !last->call)
            L->bad++;
        else
            cat(last->text, ev->text, ev->n);
        break;
    case TC_EV_CALL_END:
        if (L->open != ev->index || !last || !last->call) {
            L->bad++;
        } else {
            cat(last->final, ev->text, ev->n);
            if (strcmp(last->final, last->text) != 0)
                L->bad++; /* deltas must concatenate to the final arguments */
            if (strcmp(ev->id, last->id) != 0 || strcmp(ev->name, last->name) != 0)
                L->bad++;
        }
        L->open = -1;
        break;
    }
}

struct pipe {
    struct rsn_splitter *rs;
    struct tc_parser *tp;
    struct log *L;
};

static void on_rsn(int kind, const char *t, size_t n, void *ud)
{
    struct pipe *pp = ud;
    if (kind == RSN_REASONING)
        cat(pp->L->reasoning, t, n);
    else
        tc_push(pp->tp, t, n, on_event, pp->L);
}

/* Feeds text cut at cuts[0..nc) through (optionally) the think splitter and the parser. */
static int feed(enum tc_family fam, const char *tools, int think, const char *text, size_t n,
                const size_t *cuts, int nc, struct log *L)
{
    memset(L, 0, sizeof *L);
    L->open = -1;
    g_deltas = 0;
    struct pipe pp = {NULL, NULL, L};
    if (tc_new(&pp.tp, fam, tools, NULL) != 0)
        return -1;
    tc_set_id_seed(pp.tp, 12345);
    tc_set_stream_args(pp.tp, g_stream);
    if (think && rsn_new(&pp.rs, "<think>", "</think>", 0, NULL) != 0)
        return -1;
    size_t prev = 0;
    for (int i = 0; i <= nc; i++) {
        size_t at = i < nc ? cuts[i] : n;
        if (think)
            rsn_push(pp.rs, text + prev, at - prev, on_rsn, &pp);
        else if (tc_push(pp.tp, text + prev, at - prev, on_event, L) != 0)
            L->bad++;
        prev = at;
    }
    if (think)
        rsn_flush(pp.rs, on_rsn, &pp);
    if (tc_flush(pp.tp, on_event, L) != 0 || L->open >= 0)
        L->bad++;
    /* the records agree with the events */
    int k = 0;
    for (int i = 0; i < L->n; i++) {
        if (!L->it[i].call)
            continue;
        const char *raw = tc_call_raw(pp.tp, k, NULL);
        if (!tc_call_id(pp.tp, k) || strcmp(tc_call_id(pp.tp, k), L->it[i].id) != 0 ||
            strcmp(tc_call_args(pp.tp, k), L->it[i].final) != 0 ||
            strcmp(tc_call_name(pp.tp, k), L->it[i].name) != 0 || !raw || !memmem(text, n, raw, strlen(raw)))
            L->bad++;
        k++;
    }
    if (k != tc_call_count(pp.tp))
        L->bad++;
    rsn_free(pp.rs);
    tc_free(pp.tp);
    return 0;
}

static int same(const struct log *a, const struct log *b)
{
    if (a->n != b->n || strcmp(a->reasoning, b->reasoning) != 0)
        return 0;
    for (int i = 0; i < a->n; i++) {
        const struct item *x = &a->it[i], *y = &b->it[i];
        if (x->call != y->call || strcmp(x->text, y->text) || strcmp(x->final, y->final) ||
            strcmp(x->name, y->name) || strcmp(x->id, y->id))
            return 0;
    }
    return 1;
}

static void dump(const char *what, const struct log *L)
{
    fprintf(stderr, "  %s (%d items, bad %d):\n", what, L->n, L->bad);
    for (int i = 0; i < L->n; i++) {
        if (L->it[i].call)
            fprintf(stderr, "    call %s %s args=%s\n", L->it[i].name, L->it[i].id, L->it[i].final);
        else
            fprintf(stderr, "    content [%s]\n", L->it[i].text);
    }
}

/* The whole-fed log equals the expected items of the case. */
static int matches(const struct log *L, json_t *expect)
{
    if ((size_t)L->n != json_array_size(expect))
        return 0;
    for (int i = 0; i < L->n; i++) {
        json_t *x = json_array_get(expect, (size_t)i);
        json_t *content = json_object_get(x, "content");
        if (content) {
            if (L->it[i].call || strcmp(json_string_value(content), L->it[i].text) != 0)
                return 0;
            continue;
        }
        if (!L->it[i].call || strcmp(json_string_value(json_object_get(x, "call")), L->it[i].name))
            return 0;
        json_t *got = json_loads(L->it[i].final, 0, NULL);
        int eq = got && json_is_object(got) && json_equal(got, json_object_get(x, "args"));
        json_decref(got);
        if (!eq)
            return 0;
    }
    return 1;
}

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

static char *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)sz + 1);
    if (b && fread(b, 1, (size_t)sz, f) != (size_t)sz) {
        free(b);
        b = NULL;
    }
    if (b)
        b[sz] = 0;
    fclose(f);
    *n = (size_t)sz;
    return b;
}

static struct log g_whole, g_other; /* large: keep off the stack */
static int g_cases_run;

/* Feeds one case in one mode (whole / every split / byte by byte / random chunkings). */
static void run_mode(json_t *c, const char *text, size_t n, int fam, const char *tools)
{
    const char *name = json_string_value(json_object_get(c, "file"));
    json_t *reasoning = json_object_get(c, "reasoning");
    int think = reasoning != NULL;
    json_t *expect = json_object_get(c, "expect");
    if (g_stream && json_object_get(c, "stream_expect"))
        expect = json_object_get(c, "stream_expect");
    const char *mode = g_stream ? "stream" : "whole-block";

    feed(fam, tools, think, text, n, NULL, 0, &g_whole);
    int ok = matches(&g_whole, expect) && g_whole.bad == 0 &&
             (!think || strcmp(g_whole.reasoning, json_string_value(reasoning)) == 0);
    CHECK_MSG(ok, "%s (%s mode): whole-text events differ from the expectation", name, mode);
    if (!ok)
        dump("got", &g_whole);
    int bad = 0;
    for (size_t k = 0; k <= n; k++) {
        feed(fam, tools, think, text, n, &k, 1, &g_other);
        if ((!same(&g_whole, &g_other) || g_other.bad) && bad++ == 0) {
            fprintf(stderr, "  %s (%s): split at %zu differs\n", name, mode, k);
            dump("split", &g_other);
        }
    }
    size_t *cuts = malloc((n + 1) * sizeof *cuts);
    int nc = 0;
    for (size_t k = 1; k < n; k++)
        cuts[nc++] = k;
    feed(fam, tools, think, text, n, cuts, nc, &g_other);
    if ((!same(&g_whole, &g_other) || g_other.bad) && bad++ == 0) {
        fprintf(stderr, "  %s (%s): byte by byte differs\n", name, mode);
        dump("bytes", &g_other);
    }
    /* stream mode really streams: long arguments arrive in several deltas */
    json_t *min = json_object_get(c, "min_stream_deltas");
    if (g_stream && min)
        CHECK_MSG(g_deltas >= json_integer_value(min), "%s: %d deltas byte by byte", name,
                  g_deltas);
    for (int r = 0; r < 100; r++) {
        nc = 0;
        for (size_t k = 1 + rnd() % 8; k < n; k += 1 + rnd() % 12)
            cuts[nc++] = k;
        feed(fam, tools, think, text, n, cuts, nc, &g_other);
        if ((!same(&g_whole, &g_other) || g_other.bad) && bad++ == 0)
            fprintf(stderr, "  %s (%s): random chunking %d differs\n", name, mode, r);
    }
    CHECK_MSG(bad == 0, "%s (%s): %d feedings differ from the whole-text result", name, mode,
              bad);
    free(cuts);
}

static void run_case(json_t *c, json_t *toolsets)
{
    char path[1024];
    snprintf(path, sizeof path, "%s", repo_path("tests/data/toolcall/"));
    strncat(path, json_string_value(json_object_get(c, "file")), sizeof path - strlen(path) - 1);
    size_t n = 0;
    char *text = read_all(path, &n);
    CHECK_MSG(text != NULL, "cannot read %s", path);
    if (!text)
        return;
    int fam = tc_family_from_name(json_string_value(json_object_get(c, "family")));
    CHECK(fam >= 0);
    const char *ts_name = json_string_value(json_object_get(c, "tools"));
    json_t *ts = ts_name ? json_object_get(toolsets, ts_name) : NULL;
    char *tools = ts ? json_dumps(ts, JSON_COMPACT) : NULL;
    for (g_stream = 0; g_stream <= 1; g_stream++)
        run_mode(c, text, n, fam, tools);
    g_stream = 0;
    free(tools);
    free(text);
    g_cases_run++;
}

static void test_recorded_outputs(void)
{
    json_error_t je;
    json_t *root = json_load_file(repo_path("tests/data/toolcall/cases.json"), 0, &je);
    CHECK_MSG(root != NULL, "cases.json: %s", je.text);
    if (!root)
        return;
    json_t *cases = json_object_get(root, "cases"), *c;
    size_t i;
    json_array_foreach(cases, i, c) run_case(c, json_object_get(root, "tools"));
    CHECK(g_cases_run >= 60);
    /* every family has recorded outputs */
    for (int f = TC_GENERIC; f < TC_NONE; f++) {
        int seen = 0;
        json_array_foreach(cases, i, c) seen |= tc_family_from_name(json_string_value(
                                                   json_object_get(c, "family"))) == f;
        CHECK_MSG(seen, "no recorded output for family %s", tc_family_name((enum tc_family)f));
    }
    json_decref(root);
}

/* ---- family detection on the real templates ---- */

static void check_detect(const char *file, const char *arch, enum tc_family want)
{
    char rel[256];
    snprintf(rel, sizeof rel, "chat-templates/%s", file);
    size_t n;
    char *src = read_all(fixture_path(rel), &n);
    CHECK_MSG(src != NULL, "missing fixture %s", rel);
    if (!src)
        return;
    enum tc_family got = tc_family_detect(src, arch);
    CHECK_MSG(got == want, "%s: detected %s, want %s", file, tc_family_name(got),
              tc_family_name(want));
    free(src);
}

static void test_family_detect(void)
{
    check_detect("Qwen-Qwen2.5-7B-Instruct.jinja", "qwen2", TC_HERMES);
    check_detect("Qwen-Qwen3-0.6B.jinja", "qwen3", TC_HERMES);
    check_detect("meta-llama-Llama-3.1-8B-Instruct.jinja", "llama", TC_LLAMA3);
    check_detect("meta-llama-Llama-3.2-3B-Instruct.jinja", "llama", TC_LLAMA3);
    check_detect("Mistral-Small-3.2-24B-Instruct-2506.jinja", "llama", TC_MISTRAL);
    check_detect("mistralai-Mistral-Nemo-Instruct-2407.jinja", "llama", TC_MISTRAL);
    check_detect("google-gemma-4-31B-it.jinja", NULL, TC_GEMMA);
    check_detect("google-gemma-2-2b-it.jinja", "gemma2", TC_GEMMA);
    check_detect("microsoft-Phi-3.5-mini-instruct.jinja", "phi3", TC_GENERIC);
    check_detect("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "qwen2", TC_DEEPSEEK);
    CHECK_EQ_INT(tc_family_detect("{% for tool in tools %}<tool_call>\n<function={{ name }}>\n"
                                  "<parameter=x>{% endfor %}", NULL), TC_QWEN3_XML);
    CHECK_EQ_INT(tc_family_detect(NULL, NULL), TC_GENERIC);
    CHECK_EQ_INT(tc_family_detect(NULL, "qwen3moe"), TC_HERMES);
    for (int f = TC_GENERIC; f <= TC_NONE; f++)
        CHECK_EQ_INT(tc_family_from_name(tc_family_name((enum tc_family)f)), f);
    CHECK_EQ_INT(tc_family_from_name("qwen3_coder"), TC_QWEN3_XML);
    CHECK_EQ_INT(tc_family_from_name("nope"), -1);
    CHECK_EQ_INT(tc_family_from_name(NULL), -1);
}

/* ---- ids, raw text, API edges ---- */

static const char WEATHER[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":"
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}]";

static int valid_id(const char *id)
{
    if (!id || strncmp(id, "call_", 5) != 0 || strlen(id) != 29)
        return 0;
    for (int i = 5; i < 29; i++)
        if (!strchr("0123456789abcdef", id[i]))
            return 0;
    return 1;
}

static void test_ids_and_raw(void)
{
    const char *text = "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"A\"}}, "
                       "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"B\"}}]"
                       "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"C\"}";
    struct tc_parser *p, *q;
    CHECK_EQ_INT(tc_new(&p, TC_MISTRAL, WEATHER, NULL), 0);
    CHECK_EQ_INT(tc_new(&q, TC_MISTRAL, WEATHER, NULL), 0);
    tc_set_id_seed(p, 7);
    tc_set_id_seed(q, 8);
    struct log *L = &g_other;
    memset(L, 0, sizeof *L);
    L->open = -1;
    tc_push(p, text, strlen(text), on_event, L);
    tc_flush(p, on_event, L);
    tc_push(q, text, strlen(text), NULL, NULL);
    tc_flush(q, NULL, NULL);
    CHECK_EQ_INT(tc_call_count(p), 3);
    CHECK_EQ_INT(tc_call_count(q), 3);
    for (int i = 0; i < 3; i++) {
        CHECK(valid_id(tc_call_id(p, i)));
        CHECK(strcmp(tc_call_id(p, i), tc_call_id(q, i)) != 0); /* other seed, other ids */
        for (int j = 0; j < i; j++)
            CHECK(strcmp(tc_call_id(p, i), tc_call_id(p, j)) != 0);
    }
    int first = -1;
    const char *r0 = tc_call_raw(p, 0, &first);
    CHECK_EQ_INT(first, 1);
    const char *r1 = tc_call_raw(p, 1, &first);
    CHECK_EQ_INT(first, 0);
    CHECK(r0 == r1);
    CHECK(strncmp(r0, "[TOOL_CALLS][{", 14) == 0 && r0[strlen(r0) - 1] == ']');
    CHECK_STR(tc_call_raw(p, 2, &first), "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"C\"}");
    CHECK_EQ_INT(first, 1);
    CHECK_STR(tc_call_args(p, 2), "{\"city\":\"C\"}");
    CHECK(tc_call_raw(p, 3, &first) == NULL && first == 0);
    CHECK(tc_call_id(p, -1) == NULL && tc_call_name(p, 3) == NULL && tc_call_args(p, 9) == NULL);
    CHECK_EQ_INT(L->bad, 0);
    /* same seed, same ids */
    struct tc_parser *r;
    CHECK_EQ_INT(tc_new(&r, TC_MISTRAL, WEATHER, NULL), 0);
    tc_set_id_seed(r, 7);
    tc_push(r, text, strlen(text), NULL, NULL);
    tc_flush(r, NULL, NULL);
    CHECK_STR(tc_call_id(r, 2), tc_call_id(p, 2));
    tc_free(r);
    /* default seeds differ between parsers */
    struct tc_parser *d1, *d2;
    tc_new(&d1, TC_MISTRAL, NULL, NULL);
    tc_new(&d2, TC_MISTRAL, NULL, NULL);
    tc_push(d1, text, strlen(text), NULL, NULL);
    tc_push(d2, text, strlen(text), NULL, NULL);
    tc_flush(d1, NULL, NULL);
    tc_flush(d2, NULL, NULL);
    CHECK(tc_call_id(d1, 0) && tc_call_id(d2, 0) && strcmp(tc_call_id(d1, 0), tc_call_id(d2, 0)));
    tc_free(d1);
    tc_free(d2);
    tc_free(p);
    tc_free(q);
}

static void test_api_edges(void)
{
    struct tc_parser *p = NULL;
    struct cerr e = {0};
    CHECK_EQ_INT(tc_new(&p, TC_HERMES, "{\"not\": \"an array\"}", &e), CERR_FORMAT);
    CHECK(p == NULL && strlen(e.msg) > 0);
    CHECK_EQ_INT(tc_new(&p, TC_HERMES, "[oops", &e), CERR_FORMAT);
    CHECK_EQ_INT(tc_new(&p, (enum tc_family)99, NULL, &e), CERR_INVALID);
    CHECK_EQ_INT(tc_new(&p, TC_HERMES, "", &e), 0);
    tc_free(p);
    tc_free(NULL);
    /* TC_NONE: markup is content */
    const char *t = "<tool_call>{\"name\": \"x\"}</tool_call>";
    struct log *L = &g_other;
    memset(L, 0, sizeof *L);
    L->open = -1;
    CHECK_EQ_INT(tc_parse_text(TC_NONE, NULL, t, strlen(t), 1, on_event, L, &e), 0);
    CHECK_EQ_INT(L->n, 1);
    CHECK_STR(L->it[0].text, t);
    /* one-shot helper with a call, and tools shapes without schemas */
    memset(L, 0, sizeof *L);
    L->open = -1;
    CHECK_EQ_INT(tc_parse_text(TC_HERMES, "[{\"type\":\"function\",\"name\":\"x\"},{\"type\":"
                               "\"web_search\"}]", t, strlen(t), 1, on_event, L, &e), 0);
    CHECK_EQ_INT(L->n, 1);
    CHECK(L->it[0].call && strcmp(L->it[0].name, "x") == 0 && strcmp(L->it[0].final, "{}") == 0);
    CHECK_EQ_INT(L->bad, 0);
    /* empty pushes and a flush with nothing held */
    CHECK_EQ_INT(tc_new(&p, TC_GENERIC, NULL, &e), 0);
    CHECK_EQ_INT(tc_push(p, "", 0, NULL, NULL), 0);
    CHECK_EQ_INT(tc_flush(p, NULL, NULL), 0);
    tc_free(p);
}

/* ---- the JSON helpers under the parsers ---- */

static void test_json_validator(void)
{
    static const char *const ok[] = {"{}", "[]", " {\"a\": [1, -2.5e-3, 0, 1E+9, true, false, null,"
                                     " \"x\\u00e9\\n\\\"\"]} ", "[[[{}]]]", "{\"\":{}}"};
    static const char *const bad[] = {"{\"a\":}", "{\"a\" 1}", "[1,]", "{\"a\":01}", "{\"a\":1}}",
                                      "[\"\\x\"]", "[1.]", "[-]", "[tru]", "{a:1}", "[1 2]",
                                      "", "  ", "{\"a\":1", "[\"\\u12g4\"]", "[.5]", "{,}"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        CHECK_MSG(tcj_valid(ok[i], strlen(ok[i]), 0), "should be valid: %s", ok[i]);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK_MSG(!tcj_valid(bad[i], strlen(bad[i]), 0), "should be invalid: %s", bad[i]);
    CHECK(!tcj_valid("1", 1, 0));
    CHECK(tcj_valid(" 12 ", 4, 1) && tcj_valid("\"s\"", 3, 1) && tcj_valid("null", 4, 1));
    CHECK(!tcj_valid("1 2", 3, 1) && !tcj_valid("01", 2, 1) && !tcj_valid("- 1", 3, 1));
    /* nesting is bounded */
    char deep[400];
    memset(deep, '[', 300);
    CHECK(!tcj_valid(deep, 300, 0));
}

static void minified(const char *in, size_t n, const char *want)
{
    struct tcb b = {0};
    tcj_minify(&b, in, n);
    CHECK_STR(tcb_cstr(&b), want);
    CHECK_MSG(tcj_valid(b.p, b.n, 0), "minified output is not JSON: %s", b.p);
    json_t *j = json_loadb(b.p, b.n, 0, NULL);
    CHECK_MSG(j != NULL, "jansson refuses %s", b.p);
    json_decref(j);
    /* the incremental minifier gives the same bytes for every cut */
    for (size_t k = 0; k <= n; k++) {
        struct tcm m = {0};
        struct tcb o = {0};
        size_t used = tcm_feed(&m, &o, in, k, 0);
        CHECK(used <= k);
        tcm_feed(&m, &o, in + used, n - used, 1);
        CHECK_MSG(o.n == b.n && memcmp(o.p, b.p, b.n) == 0, "cut %zu of %s", k, want);
        tcb_free(&o);
    }
    tcb_free(&b);
}

static void test_json_minify_sanitize(void)
{
    const char *a = "{ \"a\" : [ 1 , 2 ] , \"b\" : \"x y\n\t\" }";
    minified(a, strlen(a), "{\"a\":[1,2],\"b\":\"x y\\n\\t\"}");
    const char *u = "{\"k\": \"caf\xc3\xa9 \xf0\x9f\x98\x80 \xff \xc3 end\"}";
    minified(u, strlen(u), "{\"k\":\"caf\xc3\xa9 \xf0\x9f\x98\x80 \xef\xbf\xbd \xef\xbf\xbd end\"}");
    const char *s = "{\"p\": \"\\ud83d\\ude00\", \"lone\": \"\\ud800x\\udc00\", \"nul\": \"a\\u0000\"}";
    minified(s, strlen(s), "{\"p\":\"\\ud83d\\ude00\",\"lone\":\"\\ufffdx\\ufffd\",\"nul\":\"a\\ufffd\"}");
    const char z[] = "{\"z\": \"a\0b\"}";
    minified(z, sizeof z - 1, "{\"z\":\"a\xef\xbf\xbd" "b\"}");
    struct tcb e = {0};
    tcj_escape(&e, "q\"\\\n\x01\xfe", 6);
    CHECK_STR(tcb_cstr(&e), "\"q\\\"\\\\\\n\\u0001\xef\xbf\xbd\"");
    tcb_free(&e);
    CHECK(tcj_name_ok("get_weather", 11) && tcj_name_ok("caf\xc3\xa9", 5));
    CHECK(!tcj_name_ok("", 0) && !tcj_name_ok("a\nb", 3) && !tcj_name_ok("\xff", 1));
    CHECK_EQ_INT(tcj_utf8_tail("ab\xe6\x97", 4), 2);
    CHECK_EQ_INT(tcj_utf8_tail("ab\xe6\x97\xa5", 5), 0);
    CHECK_EQ_INT(tcj_utf8_tail("\xf0", 1), 1);
}

static void test_json_closable(void)
{
    /* every prefix the validator calls closable becomes valid JSON with tcj_close() */
    const char *doc = "{\"a\": [1, 22.5, {\"b\": \"x\\\"y\"}, [], true], \"c\": {\"d\": -0.5e3}}";
    size_t n = strlen(doc);
    int closable = 0;
    for (size_t k = 1; k <= n; k++) {
        struct tcj j;
        tcj_init(&j, 0);
        for (size_t i = 0; i < k; i++)
            tcj_feed(&j, (unsigned char)doc[i]);
        if (!tcj_closable(&j))
            continue;
        closable++;
        struct tcb b = {0};
        tcb_put(&b, doc, k);
        tcj_close(&j, &b);
        CHECK_MSG(tcj_valid(b.p, b.n, 0), "prefix %zu closed: %s", k, tcb_cstr(&b));
        tcb_free(&b);
    }
    CHECK(closable > 20);
}

int main(void)
{
    RUN(test_recorded_outputs);
    RUN(test_family_detect);
    RUN(test_ids_and_raw);
    RUN(test_api_edges);
    RUN(test_json_validator);
    RUN(test_json_minify_sanitize);
    RUN(test_json_closable);
    return harness_done();
}
