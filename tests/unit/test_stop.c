/* test_stop.c — the streaming stop matcher against a definition: the first byte position where
 * some stop ends (ties: the longest, i.e. the one starting first) decides; the emitted text is
 * everything before that stop; otherwise everything, once flushed. Every way of splitting the
 * text into pushes must give the same result, and the held tail must be exactly what is
 * missing from the emitted text. */
#include "harness.h"

#include <stdint.h>

#include "engine/stop.h"

/* stop_gate_block's arguments for the checks below (on = 0: not called) */
static struct {
    int on, first, inside;
    const char *open, *close;
} G;

/* The end of the first occurrence of tag in t[from..to), or 0 when none. */
static size_t first_end(const char *t, size_t from, size_t to, const char *tag)
{
    size_t l = tag && *tag ? strlen(tag) : 0;
    for (size_t e = from + l; l && e <= to; e++)
        if (!memcmp(t + e - l, tag, l))
            return e;
    return 0;
}

/* 1 when t[0..end) leaves the block of G open (the definition of stop_gate_block). */
static int inside_at(const char *t, size_t end)
{
    if (!G.on || !G.close || !*G.close)
        return 0;
    size_t o = 0;
    if (!G.inside && !(o = first_end(t, 0, end, G.open)))
        return 0;
    return first_end(t, o, end, G.close) == 0;
}

/* The definition. Returns the index of the stop that fires (or -1) and its start in *at. */
static int oracle(const char *const *stops, int n, const char *t, size_t tn, size_t *at)
{
    for (size_t end = 1; end <= tn; end++) {
        int best = -1, in = inside_at(t, end);
        size_t blen = 0;
        for (int i = 0; i < n; i++) {
            size_t l = stops[i] ? strlen(stops[i]) : 0;
            if (l == 0 || l > end || l <= blen || memcmp(t + end - l, stops[i], l) != 0)
                continue;
            if (in && i >= G.first) {
                int dup = 0; /* a lower-indexed ungated copy of the same stop fires */
                for (int k = 0; k < G.first && k < n; k++)
                    dup |= stops[k] && !strcmp(stops[k], stops[i]);
                if (!dup)
                    continue;
            }
            best = i, blen = l;
        }
        if (best >= 0) {
            *at = end - blen;
            return best;
        }
    }
    *at = tn;
    return -1;
}

struct run {
    char *out;
    size_t len, cap;
    int fired, which;
    int held_ok; /* emitted + held == input pushed so far, after every push */
};

/* Pushes t in pieces at the cut points cuts[0..nc) (ascending), then flushes. */
static void run_cuts(struct stop_matcher *m, const char *t, size_t tn, const size_t *cuts, int nc,
                     struct run *r)
{
    memset(r, 0, sizeof *r);
    r->held_ok = 1;
    size_t from = 0;
    for (int c = 0; c <= nc && !r->fired; c++) {
        size_t to = c < nc ? cuts[c] : tn;
        int rc = stop_push(m, t + from, to - from, &r->out, &r->len, &r->cap, &r->which);
        CHECK(rc == 0 || rc == 1);
        r->fired = rc == 1;
        from = to;
        if (!r->fired) {
            size_t hn;
            const char *h = stop_held(m, &hn);
            if (r->len + hn != to || (r->len && memcmp(r->out, t, r->len) != 0) ||
                (hn && memcmp(h, t + r->len, hn) != 0))
                r->held_ok = 0;
        }
    }
    if (!r->fired)
        CHECK_EQ_INT(stop_flush(m, &r->out, &r->len, &r->cap), 0);
}

/* Checks t split at every single cut and at every pair of cuts, and byte by byte. */
static int check_all_splits(const char *const *stops, int n, const char *t)
{
    size_t tn = strlen(t), at;
    int want = oracle(stops, n, t, tn, &at), failures = 0;
    size_t cuts[4096];
    for (int mode = 0; mode < 3; mode++) {
        size_t imax = mode == 0 ? 1 : tn + 1;
        for (size_t i = 0; i < imax; i++)
            for (size_t j = i; j < (mode == 2 ? tn + 1 : i + 1); j++) {
                int nc = 0;
                if (mode == 0) { /* byte by byte */
                    for (size_t k = 1; k < tn && k < 4096; k++)
                        cuts[nc++] = k;
                } else {
                    cuts[nc++] = i;
                    if (mode == 2)
                        cuts[nc++] = j;
                }
                struct stop_matcher *m = NULL;
                struct cerr e;
                if (stop_new(&m, stops, n, &e))
                    return 1;
                if (G.on && stop_gate_block(m, G.first, G.open, G.close, G.inside)) {
                    stop_free(m);
                    return 1;
                }
                struct run r;
                run_cuts(m, t, tn, cuts, nc, &r);
                int ok = r.held_ok && r.fired == (want >= 0) && r.len == at &&
                         (at == 0 || memcmp(r.out, t, at) == 0) && (want < 0 || r.which == want);
                if (!ok && failures++ < 3)
                    fprintf(stderr,
                            "text \"%s\" cuts %zu,%zu mode %d: fired %d which %d len %zu; "
                            "want %d at %zu\n",
                            t, i, j, mode, r.fired, r.which, r.len, want, at);
                free(r.out);
                stop_free(m);
            }
    }
    return failures;
}

static void test_basic(void)
{
    const char *s1[] = {"<|end|>"};
    CHECK_EQ_INT(check_all_splits(s1, 1, "hello <|end|> world"), 0);
    CHECK_EQ_INT(check_all_splits(s1, 1, "<|end|>"), 0);
    CHECK_EQ_INT(check_all_splits(s1, 1, "no stop here <|en"), 0);
    CHECK_EQ_INT(check_all_splits(s1, 1, "<|<|<|end|"), 0);
    CHECK_EQ_INT(check_all_splits(s1, 1, "<|<|<|end|><|end|>"), 0);
    CHECK_EQ_INT(check_all_splits(s1, 1, ""), 0);
}

static void test_overlapping_and_multiple(void)
{
    const char *s2[] = {"ab", "b"};
    CHECK_EQ_INT(check_all_splits(s2, 2, "xxab"), 0); /* both end at the same byte: "ab" */
    CHECK_EQ_INT(check_all_splits(s2, 2, "xxb"), 0);
    CHECK_EQ_INT(check_all_splits(s2, 2, "aaaa"), 0);
    const char *s3[] = {"abcd", "bc", "x"};
    CHECK_EQ_INT(check_all_splits(s3, 3, "zzabcd"), 0); /* "bc" ends first */
    CHECK_EQ_INT(check_all_splits(s3, 3, "abx"), 0);
    const char *s4[] = {"END", "\n\n", "User:", "Us"};
    CHECK_EQ_INT(check_all_splits(s4, 4, "Hi there.\nUser: more"), 0);
    CHECK_EQ_INT(check_all_splits(s4, 4, "a\n\nb"), 0);
    CHECK_EQ_INT(check_all_splits(s4, 4, "ENENDEND"), 0);
    const char *s5[] = {"aab", "ab", "aaab"};
    CHECK_EQ_INT(check_all_splits(s5, 3, "aaaab"), 0);
    /* which = the index given, duplicates keep the lowest; empty and NULL are ignored */
    const char *s6[] = {"", NULL, "stop", "stop"};
    struct stop_matcher *m = NULL;
    struct cerr e;
    CHECK_EQ_INT(stop_new(&m, s6, 4, &e), 0);
    char *out = NULL;
    size_t len = 0, cap = 0;
    int which = -1;
    CHECK_EQ_INT(stop_push(m, "a sto", 5, &out, &len, &cap, &which), 0);
    CHECK_EQ_INT(stop_push(m, "p b", 3, &out, &len, &cap, &which), 1);
    CHECK_EQ_INT(which, 2);
    CHECK(len == 2 && memcmp(out, "a ", 2) == 0);
    which = -1; /* after the stop: nothing more, still 1 */
    CHECK_EQ_INT(stop_push(m, "more", 4, &out, &len, &cap, &which), 1);
    CHECK_EQ_INT(which, 2);
    CHECK_EQ_INT(stop_flush(m, &out, &len, &cap), 0);
    CHECK_EQ_INT((int)len, 2);
    free(out);
    stop_free(m);
}

static void test_no_stops(void)
{
    struct stop_matcher *m = NULL;
    struct cerr e;
    CHECK_EQ_INT(stop_new(&m, NULL, 0, &e), 0);
    char *out = NULL;
    size_t len = 0, cap = 0, hn = 9;
    int which = -1;
    CHECK_EQ_INT(stop_push(m, "abc", 3, &out, &len, &cap, &which), 0);
    stop_held(m, &hn);
    CHECK_EQ_INT((int)hn, 0);
    CHECK_EQ_INT(stop_push(m, "", 0, &out, &len, &cap, &which), 0);
    CHECK(len == 3 && memcmp(out, "abc", 3) == 0);
    free(out);
    stop_free(m);
    const char *empty[] = {""};
    CHECK_EQ_INT(check_all_splits(empty, 1, "anything"), 0);
}

static void test_flush_releases(void)
{
    const char *s[] = {"<|end|>"};
    struct stop_matcher *m = NULL;
    struct cerr e;
    CHECK_EQ_INT(stop_new(&m, s, 1, &e), 0);
    char *out = NULL;
    size_t len = 0, cap = 0, hn;
    int which;
    CHECK_EQ_INT(stop_push(m, "hello <|e", 9, &out, &len, &cap, &which), 0);
    CHECK(len == 6 && memcmp(out, "hello ", 6) == 0);
    const char *h = stop_held(m, &hn);
    CHECK(hn == 3 && memcmp(h, "<|e", 3) == 0);
    CHECK_EQ_INT(stop_push(m, "n", 1, &out, &len, &cap, &which), 0);
    CHECK_EQ_INT((int)len, 6);
    CHECK_EQ_INT(stop_flush(m, &out, &len, &cap), 0);
    CHECK(len == 10 && memcmp(out, "hello <|en", 10) == 0);
    free(out);
    stop_free(m);
}

static int utf8_valid(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n)
            return 0;
        for (size_t j = 1; j < k; j++)
            if (((unsigned char)s[i + j] >> 6) != 2)
                return 0;
        i += k;
    }
    return 1;
}

static void test_utf8(void)
{
    const char *s[] = {"。\n", "é", "終わり", "🛑"};
    const char *texts[] = {"こんにちは。\n次", "café au lait",   "è then é",
                           "おわり終わ終わり", "stop 🛑 here", "no match: è 終 🛒"};
    for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++)
        CHECK_EQ_INT(check_all_splits(s, 4, texts[k]), 0);
    /* fed one character at a time, every emitted piece is whole characters */
    const char *t = "abc 終わ終わ è é";
    struct stop_matcher *m = NULL;
    struct cerr e;
    CHECK_EQ_INT(stop_new(&m, s, 4, &e), 0);
    char *out = NULL;
    size_t len = 0, cap = 0, tn = strlen(t);
    int which = -1, bad = 0, fired = 0;
    for (size_t i = 0; i < tn && !fired;) {
        unsigned char c = (unsigned char)t[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4, before = len;
        fired = stop_push(m, t + i, k, &out, &len, &cap, &which);
        bad += !utf8_valid(out + before, len - before);
        i += k;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(fired, 1);
    CHECK_EQ_INT(which, 1);
    CHECK(len == strlen("abc 終わ終わ è ") && memcmp(out, t, len) == 0);
    free(out);
    stop_free(m);
}

/* Random stops and texts over a tiny alphabet (many partial matches) vs the definition. */
static void test_random(void)
{
    uint64_t x = 17;
    int failures = 0;
    for (int it = 0; it < 400; it++) {
        char sb[4][8], t[40];
        const char *st[4];
        int n = 1 + (int)((x = x * 6364136223846793005ull + 1) >> 60) % 4;
        for (int i = 0; i < n; i++) {
            int l = 1 + (int)((x = x * 6364136223846793005ull + 1) >> 61) % 5;
            for (int j = 0; j < l; j++)
                sb[i][j] = (char)('a' + ((x = x * 6364136223846793005ull + 1) >> 62) % 3);
            sb[i][l] = 0;
            st[i] = sb[i];
        }
        int tl = (int)((x = x * 6364136223846793005ull + 1) >> 59) % 24;
        for (int j = 0; j < tl; j++)
            t[j] = (char)('a' + ((x = x * 6364136223846793005ull + 1) >> 62) % 3);
        t[tl] = 0;
        failures += check_all_splits(st, n, t) != 0;
    }
    CHECK_EQ_INT(failures, 0);
}

/* Gated stops (parallel_tool_calls: false's call-end tags) do not fire inside a think block:
 * one the prompt leaves open, one the output opens itself, and none at all. */
static void test_gate(void)
{
    const char *s[] = {"<|end|>", "</tool_call>", "</tools>"};
    const char *t1 = "<think>\nplan: <tool_call>{}</tool_call> then </tools>\n</think>\n\n"
                     "<tool_call>\n{\"name\": \"f\"}\n</tool_call>\n<tool_call>";
    const char *t2 = "\nplan: </tool_call> ok <|end|> more </think> <tool_call></tool_call>x";
    G.on = 1, G.first = 1, G.open = "<think>", G.close = "</think>", G.inside = 0;
    CHECK_EQ_INT(check_all_splits(s, 3, t1), 0);
    CHECK_EQ_INT(check_all_splits(s, 3, t2), 0); /* no block opened: the first call ends it */
    size_t at;
    CHECK_EQ_INT(oracle(s, 3, t1, strlen(t1), &at), 1);
    CHECK(at > 14 && !memcmp(t1 + at - 14, "{\"name\": \"f\"}\n", 14));
    G.inside = 1; /* the prompt left the block open: only the close ends it */
    CHECK_EQ_INT(check_all_splits(s, 3, t2), 0);
    CHECK_EQ_INT(oracle(s, 3, t2, strlen(t2), &at), 0); /* the ungated stop inside fires */
    const char *t3 = "\nplan: </tool_call> more </think> <tool_call></tool_call>x";
    CHECK_EQ_INT(check_all_splits(s, 3, t3), 0);
    CHECK_EQ_INT(oracle(s, 3, t3, strlen(t3), &at), 1);
    CHECK_EQ_INT((long long)at, (long long)(strlen(t3) - strlen("</tool_call>x")));
    G.open = NULL, G.inside = 0; /* no think tags: nothing gated */
    CHECK_EQ_INT(check_all_splits(s, 3, t1), 0);
    CHECK_EQ_INT(oracle(s, 3, t1, strlen(t1), &at), 1);
    CHECK_EQ_INT((long long)at, (long long)strlen("<think>\nplan: <tool_call>{}"));
    /* a gated stop duplicating an ungated one, and a shorter ungated one at the same end */
    const char *d[] = {"ll>", "</tool_call>", "</tool_call>"};
    G.open = "<think>", G.first = 1;
    CHECK_EQ_INT(check_all_splits(d, 3, "<think></tool_call>"), 0);
    const char *d2[] = {"</tool_call>", "</tool_call>"};
    CHECK_EQ_INT(check_all_splits(d2, 2, "<think></tool_call>"), 0);
    CHECK_EQ_INT(oracle(d2, 2, "<think></tool_call>", 19, &at), 0);
    /* random stops, tags and texts over a tiny alphabet */
    uint64_t x = 29;
    int failures = 0;
    static const char *const opens[] = {"ab", "aab", "b", NULL};
    static const char *const closes[] = {"ba", "bb", "abc"};
    for (int it = 0; it < 600; it++) {
        char sb[4][8], t[40];
        const char *st[4];
        int n = 1 + (int)((x = x * 6364136223846793005ull + 1) >> 60) % 4;
        for (int i = 0; i < n; i++) {
            int l = 1 + (int)((x = x * 6364136223846793005ull + 1) >> 61) % 5;
            for (int j = 0; j < l; j++)
                sb[i][j] = (char)('a' + ((x = x * 6364136223846793005ull + 1) >> 62) % 3);
            sb[i][l] = 0;
            st[i] = sb[i];
        }
        int tl = (int)((x = x * 6364136223846793005ull + 1) >> 59) % 24;
        for (int j = 0; j < tl; j++)
            t[j] = (char)('a' + ((x = x * 6364136223846793005ull + 1) >> 62) % 3);
        t[tl] = 0;
        G.first = (int)((x = x * 6364136223846793005ull + 1) >> 62) % (n + 1);
        G.open = opens[it % 4];
        G.close = closes[(it / 4) % 3];
        G.inside = (it / 12) % 2;
        failures += check_all_splits(st, n, t) != 0;
    }
    CHECK_EQ_INT(failures, 0);
    G.on = 0;
}

/* A long generation: the work per push stays proportional to the new bytes. */
static void test_long(void)
{
    const char *s[] = {"</answer>", "\n\nQuestion:"};
    struct stop_matcher *m = NULL;
    struct cerr e;
    CHECK_EQ_INT(stop_new(&m, s, 2, &e), 0);
    char *out = NULL;
    size_t len = 0, cap = 0, total = 0;
    int which = -1, rc = 0;
    const char *piece = "some words </ans and \n\nQuest more ";
    for (int i = 0; i < 200000 && rc == 0; i++) {
        rc = stop_push(m, piece, strlen(piece), &out, &len, &cap, &which);
        total += strlen(piece);
    }
    CHECK_EQ_INT(rc, 0);
    size_t hn;
    stop_held(m, &hn);
    CHECK_EQ_INT((long long)(len + hn), (long long)total);
    rc = stop_push(m, "\n\nQuestion: next", 16, &out, &len, &cap, &which);
    CHECK_EQ_INT(rc, 1);
    CHECK_EQ_INT(which, 1);
    CHECK_EQ_INT((long long)len, (long long)total);
    free(out);
    stop_free(m);
}

int main(void)
{
    RUN(test_basic);
    RUN(test_overlapping_and_multiple);
    RUN(test_no_stops);
    RUN(test_flush_releases);
    RUN(test_utf8);
    RUN(test_random);
    RUN(test_long);
    RUN(test_gate);
    return harness_done();
}
