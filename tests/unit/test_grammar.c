/* test_grammar.c — the grammar engine: the EBNF parser, regex and choice front ends, the
 * JSON Schema compiler (accept / reject strings), the matcher's token masks against a
 * brute-force check over a vocabulary, and the JSONSchemaBench coverage floor. */
#include "harness.h"

#include <jansson.h>
#include <stdint.h>

#include "engine/grammar/gram.h"
#include "engine/grammar/gram_schema.h"
#include "engine/grammar/gram_row.h"
#include "engine/grammar/gram_tok.h"
#include "engine/sampler.h"

static struct gram *ebnf(const char *s)
{
    struct gram *g = NULL;
    struct cerr e = {0};
    int rc = gram_from_ebnf(&g, s, strlen(s), &e);
    CHECK_MSG(rc == 0, "%s: %s", s, e.msg);
    return g;
}

static int acc(const struct gram *g, const char *s) { return g && gram_accepts(g, s, strlen(s)); }

static void test_ebnf_basic(void)
{
    struct gram *g = ebnf("root ::= \"a\" b* | \"x\"\nb ::= [0-9] | \"-\"");
    CHECK(acc(g, "a"));
    CHECK(acc(g, "a12-3"));
    CHECK(acc(g, "x"));
    CHECK(!acc(g, "xa"));
    CHECK(!acc(g, ""));
    CHECK(!acc(g, "ab"));
    gram_unref(g);
    g = ebnf("# comment\nroot ::= (\"ab\" | \"c\"){2,3} \"!\"? # trailing\n");
    CHECK(acc(g, "abc"));
    CHECK(acc(g, "ccab!"));
    CHECK(!acc(g, "c"));
    CHECK(!acc(g, "cccc"));
    gram_unref(g);
    /* multi-line alternatives, nested groups */
    g = ebnf("root ::=\n  item (\",\" item)*\nitem ::= [a-z]+\n  | \"(\" root \")\"\n");
    CHECK(acc(g, "a,b,(c,d)"));
    CHECK(!acc(g, "a,,b"));
    gram_unref(g);
}

static void test_ebnf_unicode(void)
{
    struct gram *g = ebnf("root ::= [^\"]* \"é\" [α-ω]");
    CHECK(acc(g, "héllo wörld éβ"));
    CHECK(acc(g, "éω"));
    CHECK(!acc(g, "\"éω"));
    CHECK(!acc(g, "éa"));
    CHECK(!acc(g, "\xff\xfe" "éω")); /* not UTF-8 */
    gram_unref(g);
    g = ebnf("root ::= . . \"\\u00e9\\x41\\n\"");
    CHECK(acc(g, "\xf0\x9f\x98\x80z\xc3\xa9" "A\n"));
    CHECK(!acc(g, "z\xc3\xa9" "A\n"));
    gram_unref(g);
}

static void test_ebnf_errors(void)
{
    const char *bad[] = {"root ::= \"a", "root ::= [a-", "root ::= (\"a\"", "root ::= undefined_rule",
                         "x ::= \"a\"", "root ::= root \"a\"", "root ::= \"a\"{3,1}",
                         "root ::= \"a\" )", "root ::= [z-a]", "::= \"a\"",
                         "root ::= \"a\"\nroot ::= \"b\"", NULL};
    for (int i = 0; bad[i]; i++) {
        struct gram *g = NULL;
        struct cerr e = {0};
        int rc = gram_from_ebnf(&g, bad[i], strlen(bad[i]), &e);
        CHECK_MSG(rc < 0 && !g && e.msg[0], "accepted: %s", bad[i]);
        gram_unref(g);
    }
}

static struct gram *regex(const char *s)
{
    struct gram *g = NULL;
    struct cerr e = {0};
    int rc = gram_from_regex(&g, s, strlen(s), &e);
    CHECK_MSG(rc == 0, "%s: %s", s, e.msg);
    return g;
}

static void test_regex(void)
{
    struct gram *g = regex("^\\d{3}-[A-Z]{2,}(x|y)?$");
    CHECK(acc(g, "123-AB"));
    CHECK(acc(g, "123-ABCDy"));
    CHECK(!acc(g, "12-AB"));
    CHECK(!acc(g, "123-A"));
    CHECK(!acc(g, "123-ABz"));
    gram_unref(g);
    g = regex("[^a-c\\s]+\\.(?:com|org)");
    CHECK(acc(g, "xyz.com"));
    CHECK(!acc(g, "abc.com"));
    CHECK(!acc(g, "x y.org"));
    gram_unref(g);
    g = regex("(\\w+)@\\w+\\.\\w{2,3}");
    CHECK(acc(g, "me@ex.io"));
    CHECK(!acc(g, "me@ex.i"));
    gram_unref(g);
    const char *unsup[] = {"(a)\\1", "a(?=b)", "\\bword", "(?i)abc", NULL};
    for (int i = 0; unsup[i]; i++) {
        struct gram *x = NULL;
        struct cerr e = {0};
        CHECK_MSG(gram_from_regex(&x, unsup[i], strlen(unsup[i]), &e) < 0, "accepted %s", unsup[i]);
        gram_unref(x);
    }
}

static void check_masks(struct gram *g, const char *const *prefixes, int n_pref);
static struct gram *schema(const char *js, char *kw, int *rc_out);

/* A repetition of something that can match nothing: X* = (X minus the empty string)*,
 * so it compiles (it was refused as left-recursive) and matches what the regex matches. */
static void test_nullable_repeat(void)
{
    static const struct {
        const char *re, *yes[4], *no[4];
    } T[] = {
        {"(a*)*b", {"b", "aab", "ab", NULL}, {"", "ba", "abb", NULL}},
        {"(a?|b*)+c", {"c", "abbac", "bc", NULL}, {"ca", "", "abd", NULL}},
        {"((x)?(y)?)*z", {"z", "xyyxz", "yz", NULL}, {"xzy", "zz", "", NULL}},
        {"(a*){2,}", {"", "aaa", "a", NULL}, {"b", "ab", NULL, NULL}},
        {"^(https?:\\/\\/)?([\\da-z\\.-]+)\\.([a-z\\.]{2,6})([\\/\\w \\.-]*)*\\/?$",
         {"http://ex.com/a b/c", "ex.org", "a.bc/", NULL}, {"http://", "ex", "ex.c", NULL}},
    };
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
        struct gram *g = regex(T[i].re);
        if (!g)
            continue;
        for (int k = 0; k < 4 && T[i].yes[k]; k++)
            CHECK_MSG(acc(g, T[i].yes[k]), "%s refuses '%s'", T[i].re, T[i].yes[k]);
        for (int k = 0; k < 4 && T[i].no[k]; k++)
            CHECK_MSG(!acc(g, T[i].no[k]), "%s accepts '%s'", T[i].re, T[i].no[k]);
        gram_unref(g);
    }
    struct gram *g = ebnf("root ::= (\"\" | \"ab\")* \"c\" (\"\")*");
    CHECK(acc(g, "c") && acc(g, "ababc") && !acc(g, "abac") && !acc(g, "cc"));
    const char *pre[] = {"", "ab", "aba"};
    check_masks(g, pre, 3);
    gram_unref(g);
    g = regex("((a)?(b)?)*c");
    const char *pre2[] = {"", "a", "ab", "ba"};
    check_masks(g, pre2, 4);
    gram_unref(g);
}

/* `$` inside a pattern asserts the end of the input there (expectations from Python's re
 * with \\Z, the end without a newline exception); one that text must follow matches nothing */
static void test_regex_inner_end(void)
{
    static const struct {
        const char *re, *yes[6], *no[6];
    } T[] = {
        {"(a$|b)c?", {"a", "bc", "b", NULL}, {"ac", "c", "", NULL}},
        {"^(\\/?((\\.{2})|([a-z0-9\\-]*))($|\\/))*$", {"", "a/b", "a/b/", "/x/..", "a//", ".."},
         {"A", "a.b", "a/B", NULL}},
        {"x(y|$)z?", {"x", "xy", "xyz", NULL}, {"xz", "xzz", NULL}},
        {"(ab$)*", {"", "ab", NULL}, {"abab", NULL}},
        {"(a|b$){2,3}", {"ab", "aab", "aaa", "aa", NULL}, {"aba", "abb", "b", "bb", NULL}},
    };
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
        struct gram *g = regex(T[i].re);
        if (!g)
            continue;
        for (int k = 0; k < 6 && T[i].yes[k]; k++)
            CHECK_MSG(acc(g, T[i].yes[k]), "%s refuses '%s'", T[i].re, T[i].yes[k]);
        for (int k = 0; k < 6 && T[i].no[k]; k++)
            CHECK_MSG(!acc(g, T[i].no[k]), "%s accepts '%s'", T[i].re, T[i].no[k]);
        gram_unref(g);
    }
    struct gram *g = NULL;
    struct cerr e = {0};
    CHECK(gram_from_regex(&g, "a$b", 3, &e) < 0 && !g);
    g = regex("(a$|b)c?");
    const char *pre[] = {"", "a", "b"};
    check_masks(g, pre, 3);
    gram_unref(g);
    /* in a JSON Schema pattern too */
    g = schema("{\"type\":\"string\",\"pattern\":\"^(x$|y)z?$\"}", NULL, NULL);
    CHECK(acc(g, "\"x\"") && acc(g, "\"yz\"") && !acc(g, "\"xz\""));
    gram_unref(g);
}

static void test_choice(void)
{
    const char *ch[] = {"yes", "no", "maybe so"};
    struct gram *g = NULL;
    struct cerr e = {0};
    CHECK(gram_from_choice(&g, ch, 3, &e) == 0);
    CHECK(acc(g, "yes"));
    CHECK(acc(g, "maybe so"));
    CHECK(!acc(g, "maybe"));
    CHECK(!acc(g, "yesno"));
    gram_unref(g);
}

static struct gram *schema(const char *js, char *kw, int *rc_out)
{
    json_error_t je;
    json_t *s = json_loads(js, JSON_DECODE_ANY, &je);
    CHECK_MSG(s != NULL, "bad test json %s", js);
    struct gram *g = NULL;
    struct cerr e = {0};
    int rc = gram_from_schema(&g, s, 0, kw, &e);
    if (rc_out)
        *rc_out = rc;
    else
        CHECK_MSG(rc == 0, "%s: %s", js, e.msg);
    json_decref(s);
    return g;
}

static void test_schema_object(void)
{
    struct gram *g = schema("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
                            "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},"
                            "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\"]},\"maxItems\":2}},"
                            "\"required\":[\"name\"],\"additionalProperties\":false}", NULL, NULL);
    CHECK(acc(g, "{\"name\":\"bo\"}"));
    CHECK(acc(g, "{ \"name\": \"bo\", \"age\": 150 }"));
    CHECK(acc(g, "{\"name\":\"x\",\"tags\":[\"a\",\"b\"]}"));
    CHECK(acc(g, "{\"name\":\"x\",\"age\":0,\"tags\":[]}"));
    CHECK(!acc(g, "{\"age\":3}"));                      /* name required */
    CHECK(!acc(g, "{\"name\":\"x\",\"age\":151}"));     /* maximum */
    CHECK(!acc(g, "{\"name\":\"x\",\"age\":-1}"));      /* minimum */
    CHECK(!acc(g, "{\"name\":\"x\",\"tags\":[\"a\",\"b\",\"a\"]}")); /* maxItems */
    CHECK(!acc(g, "{\"name\":\"x\",\"other\":1}"));     /* additionalProperties */
    CHECK(!acc(g, "{\"name\":\"x\",}"));
    gram_unref(g);
}

static void test_schema_refs(void)
{
    /* recursion through $defs */
    struct gram *g = schema("{\"$ref\":\"#/$defs/node\",\"$defs\":{\"node\":{\"type\":\"object\","
                            "\"properties\":{\"v\":{\"type\":\"number\"},\"kids\":{\"type\":\"array\","
                            "\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"]}}}", NULL, NULL);
    CHECK(acc(g, "{\"v\":1.5,\"kids\":[{\"v\":-2},{\"v\":3e5,\"kids\":[]}]}"));
    CHECK(!acc(g, "{\"v\":1,\"kids\":[{}]}"));
    gram_unref(g);
    g = schema("{\"anyOf\":[{\"type\":\"null\"},{\"type\":\"string\",\"format\":\"date\"}]}", NULL, NULL);
    CHECK(acc(g, "null"));
    CHECK(acc(g, "\"2024-02-29\""));
    CHECK(!acc(g, "\"2024-13-01\""));
    gram_unref(g);
    g = schema("{\"allOf\":[{\"properties\":{\"a\":{\"const\":1}},\"required\":[\"a\"]},"
               "{\"properties\":{\"b\":{\"type\":\"boolean\"}},\"required\":[\"b\"]}],"
               "\"additionalProperties\":false}", NULL, NULL);
    CHECK(acc(g, "{\"a\":1,\"b\":true}"));
    CHECK(!acc(g, "{\"a\":1}"));
    gram_unref(g);
}

static void test_schema_strings(void)
{
    struct gram *g = schema("{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"format\":\"uuid\"},"
                            "\"at\":{\"format\":\"date-time\",\"type\":\"string\"},"
                            "\"ip\":{\"type\":\"string\",\"format\":\"ipv4\"},"
                            "\"code\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{3}\\\\d$\"},"
                            "\"s\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}},"
                            "\"required\":[\"id\",\"at\",\"ip\",\"code\",\"s\"]}", NULL, NULL);
    CHECK(acc(g, "{\"id\":\"123e4567-e89b-12d3-a456-426614174000\",\"at\":\"2024-01-02T03:04:05Z\","
                 "\"ip\":\"10.0.255.1\",\"code\":\"ABC1\",\"s\":\"\\\"é\"}"));
    CHECK(!acc(g, "{\"id\":\"123e4567-e89b-12d3-a456-42661417400\",\"at\":\"2024-01-02T03:04:05Z\","
                  "\"ip\":\"10.0.255.1\",\"code\":\"ABC1\",\"s\":\"ab\"}"));
    CHECK(!acc(g, "{\"id\":\"123e4567-e89b-12d3-a456-426614174000\",\"at\":\"2024-01-02T03:04:05Z\","
                  "\"ip\":\"10.0.256.1\",\"code\":\"ABC1\",\"s\":\"ab\"}"));
    CHECK(!acc(g, "{\"id\":\"123e4567-e89b-12d3-a456-426614174000\",\"at\":\"2024-01-02T03:04:05Z\","
                  "\"ip\":\"10.0.255.1\",\"code\":\"ABC1\",\"s\":\"abcd\"}"));
    gram_unref(g);
}

static void test_schema_numbers(void)
{
    struct { const char *s; const char *yes[6]; const char *no[6]; } t[] = {
        {"{\"type\":\"integer\",\"minimum\":-12,\"maximum\":305}", {"-12", "0", "9", "99", "305", NULL}, {"-13", "306", "01", "1000", "-0x", NULL}},
        {"{\"type\":\"integer\",\"exclusiveMinimum\":7}", {"8", "10", "123456", NULL}, {"7", "0", "-1", NULL}},
        {"{\"type\":\"integer\",\"maximum\":-5}", {"-5", "-100", NULL}, {"-4", "0", "5", NULL}},
        {"{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", {"0", "0.5", "1", "1.0", NULL}, {"1.5", "-0.1", "2", NULL}},
        {"{\"type\":\"number\",\"exclusiveMinimum\":0}", {"0.001", "3.5", NULL}, {"0", "0.0", "-1", NULL}},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        struct gram *g = schema(t[i].s, NULL, NULL);
        for (int k = 0; t[i].yes[k]; k++)
            CHECK_MSG(acc(g, t[i].yes[k]), "%s should take %s", t[i].s, t[i].yes[k]);
        for (int k = 0; t[i].no[k]; k++)
            CHECK_MSG(!acc(g, t[i].no[k]), "%s should refuse %s", t[i].s, t[i].no[k]);
        gram_unref(g);
    }
}

static void test_schema_unsupported(void)
{
    struct { const char *s, *kw; } t[] = {
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"not\":{\"type\":\"string\"}}}}", "not"},
        {"{\"type\":\"number\",\"multipleOf\":0.5}", "multipleOf"},
        {"{\"type\":\"array\",\"uniqueItems\":true}", "uniqueItems"},
        {"{\"if\":{\"type\":\"string\"}}", "if"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"minProperties\":2}", "minProperties"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        char kw[64] = "";
        int rc = 0;
        struct gram *g = schema(t[i].s, kw, &rc);
        CHECK_MSG(rc == CERR_UNSUPPORTED && !g, "%s: rc %d", t[i].s, rc);
        CHECK_STR(kw, t[i].kw);
        gram_unref(g);
    }
}

/* ---- number bounds with fractions and exclusive bounds: the grammar against strtod on
 * numbers of at most 12 significant digits (their order survives binary rounding) ---- */
static int num_text(char *out, size_t cap, uint64_t r, const char *near)
{
    if (near && (r & 3) != 0) { /* the bound's text, a digit appended or the last one moved */
        size_t n = strlen(near);
        snprintf(out, cap, "%s", near);
        if ((r >> 2) % 3 == 0 && n < 16)
            snprintf(out, cap, "%s%s%c", near, strchr(near, '.') ? "" : ".", (char)('0' + (r >> 4) % 10));
        else if ((r >> 2) % 3 == 1 && n > 0 && out[n - 1] >= '0' && out[n - 1] <= '9')
            out[n - 1] = (char)('0' + (out[n - 1] - '0' + 1 + (r >> 4) % 8) % 10);
        return 1;
    }
    int neg = (r >> 3) & 1, ip = (int)((r >> 4) % 120), fd = (int)((r >> 12) % 7);
    int n = snprintf(out, cap, "%s%d", neg ? "-" : "", ip);
    if (fd > 0) {
        n += snprintf(out + n, cap - (size_t)n, ".");
        for (int i = 0; i < fd; i++)
            n += snprintf(out + n, cap - (size_t)n, "%d", (int)((r >> (20 + 4 * i)) % 10));
    }
    return 1;
}

static void test_schema_number_bounds(void)
{
    static const char *const B[] = {"1e-9", "4.294967295", "-2.5", "0.1", "99.99", "-0.001", "3",
                                    "0", "-7", "12.3456", "0.05", "-118.25"};
    const int NB = (int)(sizeof B / sizeof B[0]);
    uint64_t r = 0x9e3779b97f4a7c15ull;
    int checked = 0;
    for (int t = 0; t < 160; t++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        int a = (int)(r >> 33) % NB, z = (int)(r >> 45) % NB, mode = (int)(r >> 20) % 4;
        int le = (int)(r >> 7) & 1, he = (int)(r >> 9) & 1;
        double lo = strtod(B[a], NULL), hi = strtod(B[z], NULL);
        if (mode == 3 && lo > hi) {
            double x = lo;
            int y = a;
            lo = hi, hi = x, a = z, z = y;
        }
        int has_lo = mode != 2, has_hi = mode != 1;
        if (has_lo && has_hi && (lo > hi || (lo == hi && (le || he))))
            continue;
        if ((!has_lo || lo == floor(lo)) && (!has_hi || hi == floor(hi)) && !(has_lo && le && lo != 0) &&
            !(has_hi && he))
            continue; /* the integral path: test_schema_numbers */
        char js[256];
        int n = snprintf(js, sizeof js, "{\"type\":\"number\"");
        if (has_lo)
            n += snprintf(js + n, sizeof js - (size_t)n, ",\"%s\":%.17g", le ? "exclusiveMinimum" : "minimum", lo);
        if (has_hi)
            n += snprintf(js + n, sizeof js - (size_t)n, ",\"%s\":%.17g", he ? "exclusiveMaximum" : "maximum", hi);
        snprintf(js + n, sizeof js - (size_t)n, "}");
        char kw[64];
        int rc = 0;
        struct gram *g = schema(js, kw, &rc);
        CHECK_MSG(rc == 0, "%s: rc %d", js, rc);
        for (int k = 0; g && k < 60; k++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            char num[64];
            num_text(num, sizeof num, r, k & 1 ? B[a] : B[z]);
            double x = strtod(num, NULL);
            char *end;
            strtod(num, &end);
            if (strchr(num, 'e')) /* the bound's own text in exponent form: not a plain decimal */
                continue;
            int want = (!has_lo || (le ? x > lo : x >= lo)) && (!has_hi || (he ? x < hi : x <= hi));
            int negzero = num[0] == '-' && x == 0;
            int got = acc(g, num);
            CHECK_MSG(got == (want && !negzero), "%s: '%s' grammar %d, value %d", js, num, got, want);
            checked++;
        }
        gram_unref(g);
    }
    CHECK(checked > 2000);
    struct gram *g = schema("{\"type\":\"number\",\"minimum\":1e-09,\"maximum\":4.294967295}", NULL, NULL);
    CHECK(acc(g, "0.000000001") && acc(g, "4.294967295") && acc(g, "1") && acc(g, "0.5") && acc(g, "4.2949672950"));
    CHECK(!acc(g, "0") && !acc(g, "0.0000000009") && !acc(g, "4.2949672951") && !acc(g, "5") && !acc(g, "-1"));
    gram_unref(g);
}

/* ---- which members are present: not over required names, property dependencies (a union
 * of closed objects, gram_schema_split.c) ---- */
static void test_schema_presence(void)
{
    static const struct {
        const char *s, *yes[5], *no[4];
    } t[] = {
        {"{\"type\":\"object\",\"properties\":{\"cmd\":{\"type\":\"string\"},\"args\":{\"type\":\"array\","
         "\"items\":{\"type\":\"string\"}},\"x\":{\"type\":\"integer\"}},\"additionalProperties\":false,"
         "\"not\":{\"allOf\":[{\"required\":[\"cmd\"]},{\"required\":[\"args\"]}]}}",
         {"{}", "{\"cmd\":\"a\"}", "{\"args\":[]}", "{\"cmd\":\"a\",\"x\":1}", NULL},
         {"{\"cmd\":\"a\",\"args\":[]}", "{\"cmd\":\"a\",\"args\":[\"b\"],\"x\":2}", NULL}},
        {"{\"properties\":{\"cmd\":{},\"args\":{}},\"not\":{\"required\":[\"cmd\",\"args\"]}}",
         {"{}", "{\"cmd\":1}", "{\"args\":2}", NULL}, {"{\"cmd\":1,\"args\":2}", NULL}},
        {"{\"properties\":{\"cmd\":{},\"args\":{},\"x\":{}},\"not\":{\"anyOf\":[{\"required\":[\"cmd\"]},"
         "{\"required\":[\"args\"]}]}}",
         {"{}", "{\"x\":1}", NULL}, {"{\"cmd\":1}", "{\"args\":2}", "{\"cmd\":1,\"args\":2}", NULL}},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"},"
         "\"c\":{\"type\":\"integer\"}},\"dependencies\":{\"b\":[\"a\"],\"c\":[\"b\"]}}",
         {"{}", "{\"a\":1}", "{\"a\":1,\"b\":2}", "{\"a\":1,\"b\":2,\"c\":3}", NULL},
         {"{\"b\":2}", "{\"c\":3}", "{\"a\":1,\"c\":3}", "{\"b\":2,\"c\":3}"}},
        {"{\"properties\":{\"a\":{},\"c\":{}},\"required\":[\"a\"],\"dependentRequired\":{\"a\":[\"c\"]}}",
         {"{\"a\":1,\"c\":3}", NULL}, {"{\"a\":1}", "{\"c\":3}", NULL}},
        /* allOf: a member both sides declare meets both schemas */
        {"{\"allOf\":[{\"properties\":{\"a\":{\"type\":\"string\",\"maxLength\":3}},\"required\":[\"a\"]},"
         "{\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":\"^[a-z]+$\"},\"b\":{}}}]}",
         {"{\"a\":\"abc\"}", "{\"a\":\"x\",\"b\":1}", NULL}, {"{\"a\":\"abcd\"}", "{\"a\":\"AB\"}", "{\"a\":5}", NULL}},
        /* a closed side merged with an explicitly open one: the closed side's members only */
        {"{\"type\":\"object\",\"additionalProperties\":false,\"anyOf\":[{\"properties\":{\"x\":{}},"
         "\"additionalProperties\":true}]}", {"{}", NULL}, {"{\"x\":1}", NULL}},
        {"{\"allOf\":[{\"properties\":{\"a\":{},\"b\":{}},\"additionalProperties\":false},{\"properties\":"
         "{\"a\":{\"type\":\"integer\"},\"c\":{}},\"additionalProperties\":true}]}",
         {"{\"a\":1}", "{\"b\":2}", "{\"a\":1,\"b\":\"x\"}", NULL}, {"{\"c\":1}", "{\"a\":\"s\"}", NULL}},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        struct gram *g = schema(t[i].s, NULL, NULL);
        for (int k = 0; k < 5 && t[i].yes[k]; k++)
            CHECK_MSG(acc(g, t[i].yes[k]), "%zu should take %s", i, t[i].yes[k]);
        for (int k = 0; k < 4 && t[i].no[k]; k++)
            CHECK_MSG(!acc(g, t[i].no[k]), "%zu should refuse %s", i, t[i].no[k]);
        gram_unref(g);
    }
    /* an open object: a member left out of properties could still come as an extra */
    char kw[64] = "";
    int rc = 0;
    struct gram *g = schema("{\"properties\":{\"a\":{},\"b\":{}},\"additionalProperties\":true,"
                            "\"not\":{\"required\":[\"a\",\"b\"]}}", kw, &rc);
    CHECK(rc == CERR_UNSUPPORTED && !g && !strcmp(kw, "not"));
    gram_unref(g);
    g = schema("{\"properties\":{\"a\":{},\"b\":{}},\"additionalProperties\":{\"type\":\"integer\"},"
               "\"dependencies\":{\"a\":[\"b\"]}}", kw, &rc);
    CHECK(rc == CERR_UNSUPPORTED && !g && !strcmp(kw, "dependencies"));
    gram_unref(g);
}

/* ---- keywords enforced exactly: multipleOf, not {enum}, minProperties, propertyNames, long
 * maxLength, anchors per alternative ---- */
static void test_schema_more(void)
{
    struct gram *g = schema("{\"type\":\"integer\",\"multipleOf\":7}", NULL, NULL);
    CHECK(acc(g, "0") && acc(g, "21") && acc(g, "-49") && acc(g, "700007"));
    CHECK(!acc(g, "22") && !acc(g, "-1") && !acc(g, "07"));
    gram_unref(g);
    g = schema("{\"type\":\"number\",\"multipleOf\":0.01,\"minimum\":0}", NULL, NULL);
    CHECK(acc(g, "500.25") && acc(g, "3") && acc(g, "0.1"));
    CHECK(!acc(g, "0.125") && !acc(g, "1e2") && !acc(g, "-1"));
    gram_unref(g);
    g = schema("{\"type\":\"number\",\"multipleOf\":1.0,\"minimum\":0.0}", NULL, NULL);
    CHECK(acc(g, "12") && !acc(g, "1.5") && !acc(g, "-3"));
    gram_unref(g);
    g = schema("{\"type\":\"string\",\"not\":{\"enum\":[\"logs\",\"log\"]}}", NULL, NULL);
    CHECK(acc(g, "\"lo\"") && acc(g, "\"logsx\"") && acc(g, "\"\"") && acc(g, "\"x\"") && acc(g, "\"l\xc3\xa9\""));
    CHECK(!acc(g, "\"logs\"") && !acc(g, "\"log\"") && !acc(g, "\"\\u006cogs\""));
    gram_unref(g);
    g = schema("{\"type\":\"integer\",\"minimum\":1024,\"maximum\":65535,\"not\":{\"enum\":[6379,6380,43215]}}", NULL, NULL);
    CHECK(acc(g, "1024") && acc(g, "6378") && acc(g, "6381") && acc(g, "65535"));
    CHECK(!acc(g, "6379") && !acc(g, "6380") && !acc(g, "43215") && !acc(g, "1023"));
    gram_unref(g);
    g = schema("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"minProperties\":1}", NULL, NULL);
    CHECK(acc(g, "{\"a\":1}") && !acc(g, "{}"));
    gram_unref(g);
    g = schema("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"},\"minProperties\":2,"
               "\"propertyNames\":{\"enum\":[\"n\",\"s\",\"e\"]}}", NULL, NULL);
    CHECK(acc(g, "{\"n\":1,\"e\":2}") && !acc(g, "{\"n\":1}") && !acc(g, "{\"x\":1,\"n\":2}"));
    gram_unref(g);
    g = schema("{\"type\":\"string\",\"maxLength\":32767,\"minLength\":4}", NULL, NULL);
    CHECK(acc(g, "\"abcd\"") && !acc(g, "\"abc\""));
    gram_unref(g);
    g = schema("{\"type\":\"string\",\"pattern\":\"^[ATCG]+$|^SI-[GN]A-[A-Z][0-9]+$\",\"minLength\":1}", NULL, NULL);
    CHECK(acc(g, "\"GATC\"") && acc(g, "\"SI-GA-B12\"") && !acc(g, "\"\"") && !acc(g, "\"GAX\""));
    gram_unref(g);
    /* a pattern with length bounds: the pattern's automaton times a character count (an
     * escape and a two-byte character count one) */
    g = schema("{\"type\":\"string\",\"pattern\":\"^(\\\\d+\\\\.\\\\d+\\\\.\\\\d+.*)$\",\"maxLength\":12}", NULL, NULL);
    CHECK(acc(g, "\"1.2.3\"") && acc(g, "\"1.2.3-beta\"") && acc(g, "\"10.20.30abcd\""));
    CHECK(!acc(g, "\"1.2.3-beta.12\"") && !acc(g, "\"1.2\""));
    gram_unref(g);
    g = schema("{\"type\":\"string\",\"pattern\":\"^.*?@.*.*$\",\"minLength\":3}", NULL, NULL);
    CHECK(acc(g, "\"a@b\"") && acc(g, "\"\\\"@x\"") && acc(g, "\"\xc3\xa9@x\""));
    CHECK(!acc(g, "\"@b\"") && !acc(g, "\"\xc3\xa9@\"") && !acc(g, "\"ab\""));
    gram_unref(g);
    g = schema("{\"type\":\"string\",\"pattern\":\"^a*$\",\"minLength\":2,\"maxLength\":3}", NULL, NULL);
    CHECK(acc(g, "\"aa\"") && acc(g, "\"aaa\"") && !acc(g, "\"a\"") && !acc(g, "\"aaaa\""));
    gram_unref(g);
    char kw[64] = "";
    int rc = 0;
    g = schema("{\"type\":\"string\",\"pattern\":\"^a*$\",\"maxLength\":40000}", kw, &rc);
    CHECK(rc == CERR_UNSUPPORTED && !strcmp(kw, "maxLength")); /* too many counted states */
    gram_unref(g);
    g = schema("{\"type\":\"integer\",\"multipleOf\":3,\"maximum\":10}", kw, &rc);
    CHECK(rc == CERR_UNSUPPORTED && !strcmp(kw, "multipleOf"));
    gram_unref(g);
    /* property dependencies that hold anyway (none, or names required already) */
    g = schema("{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{}},\"required\":[\"b\"],"
               "\"dependencies\":{\"a\":[\"b\"]}}", NULL, NULL);
    CHECK(acc(g, "{\"a\":1,\"b\":2}") && acc(g, "{\"b\":2}") && !acc(g, "{\"a\":1}"));
    gram_unref(g);
    g = schema("{\"type\":\"object\",\"dependencies\":{}}", NULL, NULL);
    CHECK(acc(g, "{}"));
    gram_unref(g);
    /* one that does not hold: a union (test_schema_presence) */
    g = schema("{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{}},\"dependencies\":{\"a\":[\"b\"]}}", NULL, NULL);
    CHECK(acc(g, "{}") && acc(g, "{\"b\":2}") && acc(g, "{\"a\":1,\"b\":2}") && !acc(g, "{\"a\":1}"));
    gram_unref(g);
    g = schema("{\"type\":\"object\",\"not\":{\"required\":[\"a\"]}}", kw, &rc);
    CHECK(rc == CERR_UNSUPPORTED && !strcmp(kw, "not"));
    gram_unref(g);
}

/* ---- masks against brute force ------------------------------------------------------------ */

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)rng;
}

static void check_masks(struct gram *g, const char *const *prefixes, int n_pref)
{
    /* a vocabulary: all single bytes, common JSON pieces, random strings from an alphabet */
    enum { NV = 700 };
    static char store[NV][12];
    const char *bytes[NV];
    int len[NV];
    const char *pieces[] = {"{\"", "\":", "\",", "\"}", "true", "false", "null", " \"", "\n ", "12", "0.", "e+",
                            "é", "\xc3", "\xa9", "name", "age", "\":\"", "}]", "[{", ",\"", "-", "2024", "-0"};
    const char alpha[] = "{}[]\":, \n0123456789.-eEtrufalsn\\abcxyzé";
    int n = 0;
    for (int b = 1; b < 256; b++, n++) {
        store[n][0] = (char)b;
        bytes[n] = store[n];
        len[n] = 1;
    }
    for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; i++, n++) {
        bytes[n] = pieces[i];
        len[n] = (int)strlen(pieces[i]);
    }
    while (n < NV - 2) {
        int l = 2 + (int)(rnd() % 6);
        for (int k = 0; k < l; k++)
            store[n][k] = alpha[rnd() % (sizeof alpha - 1)];
        bytes[n] = store[n];
        len[n] = l;
        n++;
    }
    bytes[n] = "<eos>";
    len[n] = -1;
    int32_t eos = n++;
    bytes[n] = "<special>";
    len[n] = -1;
    n++;
    struct gram_vocab *v = NULL;
    struct cerr e = {0};
    CHECK(gram_vocab_new(&v, n, bytes, len, &eos, 1, &e) == 0);
    uint32_t mask[(NV + 31) / 32];
    for (int p = 0; p < n_pref; p++) {
        struct gram_matcher *m = NULL;
        CHECK(gram_matcher_new(&m, g, v, &e) == 0);
        if (gram_matcher_accept_bytes(m, prefixes[p], strlen(prefixes[p]))) {
            CHECK_MSG(0, "prefix refused: %s", prefixes[p]);
            gram_matcher_free(m);
            continue;
        }
        for (int rep = 0; rep < 2; rep++) { /* the second comes from the cache */
            int cnt = gram_matcher_mask(m, mask);
            int want_cnt = 0, bad = 0;
            for (int t = 0; t < n; t++) {
                int want;
                if (t == eos) {
                    want = gram_matcher_complete(m);
                } else if (len[t] < 0) {
                    want = 0;
                } else {
                    struct gram_matcher *m2 = NULL;
                    gram_matcher_new(&m2, g, v, &e);
                    want = gram_matcher_accept_bytes(m2, prefixes[p], strlen(prefixes[p])) == 0 &&
                           gram_matcher_accept_bytes(m2, bytes[t], (size_t)len[t]) == 0;
                    gram_matcher_free(m2);
                }
                int got = (mask[t >> 5] >> (t & 31)) & 1;
                want_cnt += want;
                if (got != want && bad++ < 3)
                    CHECK_MSG(0, "prefix '%s' token %d '%.*s': mask %d, brute force %d", prefixes[p], t,
                              len[t] > 0 ? len[t] : 0, bytes[t], got, want);
            }
            CHECK_EQ_INT(cnt, want_cnt);
        }
        /* the token-table paths (tables at once; frames deepened to the whole stack; one
         * frame) give the same mask */
        long tunes[3][2] = {{0, 0}, {0, 1000000}, {0, -1}};
        uint32_t mask2[(NV + 31) / 32];
        for (int k = 0; k < 3; k++) {
            struct gram_matcher *m3 = NULL;
            CHECK(gram_matcher_new(&m3, g, v, &e) == 0);
            gram_matcher_tune(m3, tunes[k][0], tunes[k][1]);
            CHECK(gram_matcher_accept_bytes(m3, prefixes[p], strlen(prefixes[p])) == 0);
            for (int rep = 0; rep < 2; rep++) {
                int c3 = gram_matcher_mask(m3, mask2);
                CHECK_EQ_INT(c3, gram_matcher_mask_naive(m, mask));
                CHECK_MSG(!memcmp(mask, mask2, sizeof mask), "prefix '%s': tables (tune %d) differ", prefixes[p], k);
            }
            gram_matcher_free(m3);
        }
        gram_matcher_free(m);
    }
    gram_vocab_free(v);
}

static void test_mask_bruteforce(void)
{
    struct gram *g = schema("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
                            "\"age\":{\"type\":\"integer\"},\"ok\":{\"type\":\"boolean\"},"
                            "\"xs\":{\"type\":\"array\",\"items\":{\"type\":\"number\"}}},\"required\":[\"name\"]}",
                            NULL, NULL);
    const char *pre[] = {"", "{", "{\"na", "{\"name\":\"h\xc3", "{\"name\": \"x\", \"age\": 1",
                         "{\"name\":\"x\",\"xs\":[1.5,-", "{\"name\":\"x\"}", "{\"name\":\"\\"};
    check_masks(g, pre, (int)(sizeof pre / sizeof pre[0]));
    gram_unref(g);
    g = ebnf("root ::= (\"ab\" | [a-c]+ \"x\")? \"é\"*");
    const char *pre2[] = {"", "a", "ab", "abx", "abxé", "\xc3"};
    check_masks(g, pre2, (int)(sizeof pre2 / sizeof pre2[0]));
    gram_unref(g);
}

static void test_matcher_tokens(void)
{
    const char *bytes[] = {"{", "}", "\"a\"", ":", "1", "<eos>"};
    int len[] = {1, 1, 3, 1, 1, -1};
    int32_t eos = 5;
    struct gram_vocab *v = NULL;
    struct cerr e = {0};
    CHECK(gram_vocab_new(&v, 6, bytes, len, &eos, 1, &e) == 0);
    struct gram *g = ebnf("root ::= \"{\" (\"\\\"a\\\"\" \":\" \"1\")? \"}\"");
    struct gram_matcher *m = NULL;
    CHECK(gram_matcher_new(&m, g, v, &e) == 0);
    uint32_t mask[1];
    CHECK_EQ_INT(gram_matcher_mask(m, mask), 1);
    CHECK_EQ_INT(mask[0], 1u << 0);
    CHECK(gram_matcher_accept(m, 5) < 0); /* eos before complete */
    CHECK(gram_matcher_accept(m, 1) < 0);
    CHECK(gram_matcher_accept(m, 0) == 0);
    CHECK_EQ_INT(gram_matcher_mask(m, mask), 2);
    CHECK(gram_matcher_accept(m, 2) == 0 && gram_matcher_accept(m, 3) == 0 && gram_matcher_accept(m, 4) == 0);
    CHECK(!gram_matcher_complete(m));
    CHECK(gram_matcher_accept(m, 1) == 0);
    CHECK(gram_matcher_complete(m) && gram_matcher_done(m));
    CHECK_EQ_INT(gram_matcher_mask(m, mask), 1);
    CHECK_EQ_INT(mask[0], 1u << 5);
    CHECK(gram_matcher_accept(m, 5) == 0);
    gram_matcher_free(m);
    gram_unref(g);
    gram_vocab_free(v);
}

/* An ambiguous grammar whose parse stacks grow with the text (`root ::= . root*`: n bytes
 * parse in ever more ways) must not stall the engine: past the matcher's work bound a mask
 * or accept call returns CERR_LIMIT, and so does every later call; a plain repetition of
 * the same language never gets there. */
static void test_work_bound(void)
{
    const char *bytes[] = {"a", "b", "ab", "<eos>"};
    int len[] = {1, 1, 2, -1};
    int32_t eos = 3;
    struct gram_vocab *v = NULL;
    struct cerr e = {0};
    CHECK(gram_vocab_new(&v, 4, bytes, len, &eos, 1, &e) == 0);
    const char *srcs[] = {"root ::= . root*", "root ::= .+"};
    for (int k = 0; k < 2; k++) {
        struct gram *g = ebnf(srcs[k]);
        struct gram_matcher *m = NULL;
        CHECK(gram_matcher_new(&m, g, v, &e) == 0);
        uint32_t mask[1];
        int rc = 0, n = 0;
        for (; n < 4000 && rc >= 0; n++) {
            rc = gram_matcher_mask(m, mask);
            if (rc >= 0)
                rc = gram_matcher_accept(m, 0);
        }
        if (k == 0) { /* spent within a few hundred bytes, and stays spent */
            CHECK_EQ_INT(rc, CERR_LIMIT);
            CHECK(n < 1000);
            CHECK_EQ_INT(gram_matcher_mask(m, mask), CERR_LIMIT);
            CHECK_EQ_INT(gram_matcher_accept(m, 1), CERR_LIMIT);
        } else {
            CHECK_EQ_INT(rc, 0);
            CHECK_EQ_INT(n, 4000);
            CHECK(gram_matcher_complete(m));
        }
        gram_matcher_free(m);
        gram_unref(g);
    }
    /* the naive reference keeps the same contract under a lowered bound (gram.h): CERR_LIMIT,
     * not CERR_NOMEM (it answered CERR_NOMEM before session 9) */
    struct gram *g = ebnf(srcs[0]);
    struct gram_matcher *m = NULL;
    CHECK(gram_matcher_new(&m, g, v, &e) == 0);
    gram_matcher_work_limit(m, 20000);
    uint32_t mask[1];
    int rc = 0, n = 0;
    for (; n < 1000 && rc >= 0; n++) {
        rc = gram_matcher_mask_naive(m, mask);
        if (rc >= 0)
            rc = gram_matcher_accept_bytes(m, "a", 1);
    }
    CHECK_EQ_INT(rc, CERR_LIMIT);
    CHECK(n < 1000);
    CHECK_EQ_INT(gram_matcher_mask_naive(m, mask), CERR_LIMIT);
    CHECK_EQ_INT(gram_matcher_mask(m, mask), CERR_LIMIT);
    gram_matcher_free(m);
    gram_unref(g);
    gram_vocab_free(v);
}

/* ---- the sampler's grammar hook: masking, the prompt not advancing it, lazy triggers ---------- */

static void test_sampler_grammar(void)
{
    /* ids: 0 "a", 1 "b", 2 "<c>", 3 "x", 4 "y", 5 end */
    const char *bytes[] = {"a", "b", "<c>", "x", "y", ""};
    int len[] = {1, 1, 3, 1, 1, -1};
    int32_t eos = 5;
    struct gram_vocab *v = NULL;
    struct cerr e = {0};
    CHECK(gram_vocab_new(&v, 6, bytes, len, &eos, 1, &e) == 0);
    struct gram *g = ebnf("root ::= \"<c>\" [xy]{2}");
    struct sampler_params p;
    sampler_params_default(&p);
    p.temperature = 0;
    for (int lazy = 0; lazy < 2; lazy++) {
        struct sampler *s = NULL;
        struct gram_matcher *m = NULL;
        CHECK(sampler_new(&s, &p, 6, &e) == 0);
        CHECK(gram_matcher_new(&m, g, v, &e) == 0);
        CHECK((lazy ? sampler_set_grammar_lazy(s, m, "<c>", 0) : sampler_set_grammar(s, m)) == 0);
        CHECK(!sampler_is_plain_greedy(s));
        int32_t prompt[] = {2, 3, 3}; /* the prompt is not grammar text */
        sampler_prime(s, prompt, 3);
        float lg[6];
        int32_t want[] = {2, 3, 4, 5}, got[4];
        if (lazy) { /* free until the trigger: the argmax "a" */
            float l0[6] = {5, 1, 0, 0, 0, 0};
            int32_t id = sampler_sample(s, l0, NULL);
            CHECK_EQ_INT(id, 0);
            sampler_accept(s, id);
        }
        for (int k = 0; k < 4; k++) {
            /* "a" and "b" always look best; the grammar must pick "<c>", then x/y, then end */
            float l1[6] = {9, 8, 1, 2, 3, 0.5f};
            memcpy(lg, l1, sizeof lg);
            if (k == 1)
                lg[3] = 4; /* x over y */
            got[k] = lazy && k == 0 ? 2 : sampler_sample(s, lg, NULL);
            sampler_accept(s, got[k]);
        }
        for (int k = 0; k < 4; k++)
            CHECK_MSG(got[k] == want[k], "lazy %d step %d: got %d want %d", lazy, k, got[k], want[k]);
        sampler_free(s);
    }
    gram_unref(g);
    gram_vocab_free(v);
}

/* ---- JSONSchemaBench coverage ---------------------------------------------------------------- */

static void test_jsonschemabench(void)
{
    json_error_t je;
    /* jansson refuses integers beyond int64; the file has one (9223372036854776000, a bound
     * written by a float printer): it is read as a real, the rest as written */
    FILE *f = fopen(repo_path("tests/data/jsonschemabench/schemas.json"), "rb");
    CHECK(f != NULL);
    if (!f)
        return;
    static char buf[2 << 20];
    size_t nb = fread(buf, 1, sizeof buf - 64, f);
    fclose(f);
    buf[nb] = 0;
    char *big = buf;
    while ((big = strstr(big, "9223372036854776000")) && nb + 2 < sizeof buf - 1) {
        big += 19;
        memmove(big + 2, big, nb - (size_t)(big - buf) + 1);
        memcpy(big, ".0", 2);
        nb += 2;
    }
    json_t *d = json_loadb(buf, nb, 0, &je);
    CHECK_MSG(d != NULL, "tests/data/jsonschemabench/schemas.json: %s", je.text);
    if (!d)
        return;
    json_t *cases = json_object_get(d, "cases");
    size_t i, n = json_array_size(cases);
    json_t *c;
    int ok = 0, ex_ok = 0, xg_ok = 0;
    json_array_foreach(cases, i, c) {
        struct gram *g = NULL;
        struct cerr e = {0};
        char kw[64];
        int rc = gram_from_schema(&g, json_object_get(c, "schema"), 0, kw, &e);
        xg_ok += json_is_true(json_object_get(c, "xgrammar_ok"));
        if (rc) {
            if (getenv("CINFER_GRAMMAR_VERBOSE"))
                fprintf(stderr, "%s: %s\n", json_string_value(json_object_get(c, "id")), e.msg);
            continue;
        }
        ok++;
        /* the known-valid example, compact; the grammar keeps declared property order, so
         * an example written in another order may be refused: counted, not required */
        char *ex = json_dumps(json_object_get(c, "example"), JSON_COMPACT | JSON_ENCODE_ANY);
        if (ex && gram_accepts(g, ex, strlen(ex)))
            ex_ok++;
        else if (getenv("CINFER_GRAMMAR_VERBOSE"))
            fprintf(stderr, "%s: example refused\n", json_string_value(json_object_get(c, "id")));
        free(ex);
        gram_unref(g);
    }
    printf("jsonschemabench: %d/%zu compiled (xgrammar %d), %d of them accept the example\n", ok, n,
           xg_ok, ex_ok);
    CHECK_EQ_INT(n, 301);
    CHECK_MSG(ok >= 295, "coverage floor: %d compiled", ok);
    CHECK_MSG(ex_ok >= ok * 7 / 10, "examples accepted: %d of %d", ex_ok, ok);
    json_decref(d);
}

/* ---- masks over real vocabularies: every fast path against stepping each id alone ------------ */

static const char *const REAL_GRAMMARS[][2] = {
    {"schema", "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":40},"
               "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}},\"n\":{\"type\":\"integer\","
               "\"minimum\":-5,\"maximum\":1200},\"x\":{\"type\":\"number\"},\"kind\":{\"enum\":[\"a\",\"bb\",3]},"
               "\"when\":{\"type\":\"string\",\"format\":\"date-time\"},\"sub\":{\"$ref\":\"#\"}},"
               "\"required\":[\"name\",\"tags\"]}"},
    {"schema", "{\"type\":\"object\",\"additionalProperties\":{\"type\":[\"string\",\"null\",\"boolean\"]}}"},
    {"schema", "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"pattern\":\"^[a-z]+( [a-z]+)*$\"},\"minItems\":1}"},
    {"regex", "(\\w+ ){1,12}[.!?]"},
    {"regex", "[^\\n]{0,200}\\n"},
    {"ebnf", "root ::= \"<\" tag \">\" text \"</\" tag \">\"\ntag ::= [a-z]{1,8}\ntext ::= [^<]*"},
    {"schema", "{}"},
};

static void check_real_vocab(const char *model, int steps)
{
    char path[1024];
    const char *mdir = getenv("MODELS_DIR") ? getenv("MODELS_DIR") : repo_path("models");
    snprintf(path, sizeof path, "%s/%s", mdir, model);
    struct tok *t = NULL;
    struct cerr e = {0};
    if (tok_load(&t, path, &e)) {
        CHECK_MSG(0, "%s: %s (scripts/fetch_models.sh fetches it)", path, e.msg);
        return;
    }
    int V = tok_vocab_size(t), ne = 0;
    int32_t eog[8];
    for (int i = 0; i < V && ne < 8; i++)
        if (tok_is_eog(t, i))
            eog[ne++] = i;
    struct gram_vocab *v = NULL;
    CHECK(gram_vocab_from_tok(&v, t, V, eog, ne, &e) == 0);
    size_t words = ((size_t)V + 31) / 32;
    uint32_t *want = malloc(words * 4), *got = malloc(words * 4);
    long compared = 0;
    for (size_t gi = 0; v && gi < sizeof REAL_GRAMMARS / sizeof REAL_GRAMMARS[0]; gi++) {
        const char *kind = REAL_GRAMMARS[gi][0], *src = REAL_GRAMMARS[gi][1];
        struct gram *g = !strcmp(kind, "schema") ? schema(src, NULL, NULL)
                         : !strcmp(kind, "regex") ? NULL
                                                  : ebnf(src);
        if (!strcmp(kind, "regex"))
            CHECK(gram_from_regex(&g, src, strlen(src), &e) == 0);
        if (!g)
            continue;
        /* the reference walks; three fast matchers follow: default levers, tables at once
         * with deep frames, tables at once with one frame */
        struct gram_matcher *ref = NULL, *fm[3] = {0};
        long tunes[3][2] = {{-1, -1}, {0, 0}, {0, 100000000}};
        CHECK(gram_matcher_new(&ref, g, v, &e) == 0);
        for (int k = 0; k < 3; k++) {
            CHECK(gram_matcher_new(&fm[k], g, v, &e) == 0);
            gram_matcher_tune(fm[k], tunes[k][0], tunes[k][1]);
        }
        /* and a sampling row: its masks come from the worker thread, computed ahead */
        struct gram_matcher *rm = NULL;
        struct gram_row *row = NULL;
        CHECK(gram_matcher_new(&rm, g, v, &e) == 0);
        CHECK(gram_row_new(&row, rm, V, NULL, 0, NULL) == 0);
        float *lg = malloc((size_t)V * sizeof *lg);
        for (int step = 0; step < steps; step++) {
            int cw = gram_matcher_mask_naive(ref, want);
            for (int i = 0; i < V; i++)
                lg[i] = 0;
            gram_row_mask(row, lg, V);
            int rdiff = 0;
            for (int i = 0; i < V && rdiff < 3; i++)
                if ((lg[i] == 0) != (int)((want[i >> 5] >> (i & 31)) & 1)) {
                    CHECK_MSG(0, "%s grammar %zu step %d: the row's mask differs at id %d", model, gi, step, i);
                    rdiff++;
                }
            for (int k = 0; k < 3; k++) {
                int cg = gram_matcher_mask(fm[k], got);
                CHECK_EQ_INT(cg, cw);
                int diff = 0;
                for (size_t w = 0; w < words && diff < 3; w++)
                    if (got[w] != want[w]) {
                        int b = __builtin_ctz(got[w] ^ want[w]), id = (int)w * 32 + b, n;
                        const char *tb = gram_vocab_token(v, id, &n);
                        CHECK_MSG(0, "%s %s grammar %zu step %d lever %d: id %d '%.*s' fast %d naive %d", model,
                                  kind, gi, step, k, id, n > 0 ? n : 0, tb ? tb : "", (got[w] >> b) & 1,
                                  (want[w] >> b) & 1);
                        diff++;
                    }
                compared++;
            }
            /* the next token: a random allowed one that is not the end (ids of several bytes
             * are favoured, so strings and numbers get long) */
            int32_t pick = -1;
            for (int tries = 0; tries < 64 && pick < 0; tries++) {
                int32_t id = (int32_t)(rnd() % (uint32_t)V);
                int n;
                if (((want[id >> 5] >> (id & 31)) & 1) && gram_vocab_token(v, id, &n) && (n > 1 || tries > 32))
                    pick = id;
            }
            for (int32_t id = 0; id < V && pick < 0; id++) {
                int n;
                if (((want[id >> 5] >> (id & 31)) & 1) && gram_vocab_token(v, id, &n))
                    pick = id;
            }
            if (pick < 0)
                break; /* only the end is left */
            CHECK(gram_matcher_accept(ref, pick) == 0);
            for (int k = 0; k < 3; k++)
                CHECK(gram_matcher_accept(fm[k], pick) == 0);
            gram_row_accept(row, pick);
        }
        gram_row_accept(row, 0); /* a job in flight when the row is freed */
        gram_row_free(row);
        free(lg);
        gram_matcher_free(ref);
        for (int k = 0; k < 3; k++)
            gram_matcher_free(fm[k]);
        gram_unref(g);
    }
    printf("masks over %s: %ld fast masks equal the naive ones\n", model, compared);
    CHECK(compared > 100);
    free(want);
    free(got);
    gram_vocab_free(v);
    tok_free(t);
}

static void test_mask_real_vocab(void)
{
    int steps = getenv("CINFER_GRAMMAR_MASK_STEPS") ? atoi(getenv("CINFER_GRAMMAR_MASK_STEPS")) : 24;
    check_real_vocab("qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf", steps);
    check_real_vocab("smollm2-135m-instruct-Q4_1.gguf", steps);
}

/* ---- our own corpus (scripts/gen_schema_corpus.py) --------------------------------------------- */

static void test_corpus(void)
{
    json_error_t je;
    json_t *d = json_load_file(repo_path("tests/data/structured/corpus.json"), 0, &je);
    CHECK_MSG(d != NULL, "tests/data/structured/corpus.json: %s", je.text);
    if (!d)
        return;
    json_t *cases = json_object_get(d, "cases");
    size_t i, n = json_array_size(cases);
    json_t *c;
    int ok = 0, acc_c = 0, acc_p = 0;
    json_array_foreach(cases, i, c) {
        struct gram *g = NULL;
        struct cerr e = {0};
        const char *id = json_string_value(json_object_get(c, "id"));
        if (gram_from_schema(&g, json_object_get(c, "schema"), 0, NULL, &e)) {
            CHECK_MSG(0, "%s: %s", id, e.msg);
            continue;
        }
        ok++;
        /* the instance, compact and indented (the model's usual layout) */
        char *cs = json_dumps(json_object_get(c, "instance"), JSON_COMPACT | JSON_ENCODE_ANY);
        char *ps = json_dumps(json_object_get(c, "instance"), JSON_INDENT(2) | JSON_ENCODE_ANY);
        int a = cs && gram_accepts(g, cs, strlen(cs)), b = ps && gram_accepts(g, ps, strlen(ps));
        CHECK_MSG(a && b, "%s refuses its instance (compact %d, indented %d): %s", id, a, b, cs);
        acc_c += a;
        acc_p += b;
        free(cs);
        free(ps);
        gram_unref(g);
    }
    printf("corpus: %d/%zu compiled, instances accepted %d compact, %d indented\n", ok, n, acc_c, acc_p);
    CHECK(n >= 200);
    json_decref(d);
}

int main(void)
{
    RUN(test_ebnf_basic);
    RUN(test_ebnf_unicode);
    RUN(test_ebnf_errors);
    RUN(test_regex);
    RUN(test_nullable_repeat);
    RUN(test_regex_inner_end);
    RUN(test_choice);
    RUN(test_schema_object);
    RUN(test_schema_refs);
    RUN(test_schema_strings);
    RUN(test_schema_numbers);
    RUN(test_schema_unsupported);
    RUN(test_schema_more);
    RUN(test_schema_presence);
    RUN(test_schema_number_bounds);
    RUN(test_matcher_tokens);
    RUN(test_work_bound);
    RUN(test_mask_bruteforce);
    RUN(test_mask_real_vocab);
    RUN(test_sampler_grammar);
    RUN(test_jsonschemabench);
    RUN(test_corpus);
    return harness_done();
}
