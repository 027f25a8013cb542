/* gram_schema_scalar.c — JSON Schema strings, integers and numbers to EBNF: bounds,
 * multipleOf (remainder rules for integer steps, fraction digits for decimal steps),
 * formats, patterns, and `not: {enum}` (a trie of the excluded values for strings, the
 * range cut around them for integers). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/gram_schema_int.h"

/* reads minimum/maximum/exclusive* into integer bounds for integers */
static int num_bounds(struct sc *c, const json_t *s, int integer, int *has_lo, double *lo, int *lo_ex,
                      int *has_hi, double *hi, int *hi_ex, const char *path)
{
    *has_lo = *has_hi = *lo_ex = *hi_ex = 0;
    json_t *v;
    if ((v = json_object_get(s, "minimum")) && json_is_number(v)) {
        *has_lo = 1;
        *lo = json_number_value(v);
    }
    if ((v = json_object_get(s, "maximum")) && json_is_number(v)) {
        *has_hi = 1;
        *hi = json_number_value(v);
    }
    if ((v = json_object_get(s, "exclusiveMinimum"))) {
        if (json_is_true(v))
            *lo_ex = *has_lo;
        else if (json_is_number(v)) {
            double x = json_number_value(v);
            if (!*has_lo || x >= *lo) {
                *has_lo = 1;
                *lo = x;
                *lo_ex = 1;
            }
        }
    }
    if ((v = json_object_get(s, "exclusiveMaximum"))) {
        if (json_is_true(v))
            *hi_ex = *has_hi;
        else if (json_is_number(v)) {
            double x = json_number_value(v);
            if (!*has_hi || x <= *hi) {
                *has_hi = 1;
                *hi = x;
                *hi_ex = 1;
            }
        }
    }
    (void)integer;
    (void)c;
    (void)path;
    return 0;
}

/* multipleOf: 0 none (or 1 on integers), k > 0: an integer multiple of k, -d: a decimal
 * step 10^-d (numbers with at most d fraction digits and no exponent); else unsupported. */
static int multiple_of(struct sc *c, const json_t *s, int integer, long *out, const char *path)
{
    json_t *v = json_object_get(s, "multipleOf");
    *out = 0;
    if (!v)
        return 0;
    double m = json_number_value(v);
    if (!json_is_number(v) || !(m > 0))
        return gsc_bad_schema(c, path, "multipleOf must be a number above 0");
    if (m == floor(m) && m <= 1000) {
        *out = m == 1 ? (integer ? 0 : 1) : (long)m;
        return 0;
    }
    if (!integer)
        for (int d = 1; d <= 9; d++)
            if (fabs(m - pow(10, -d)) < 1e-12 * pow(10, -d)) {
                *out = -d;
                return 0;
            }
    return gsc_unsupported(c, "multipleOf", path);
}

/* Appends the decimal integers (no leading zeros, "-" for negatives) that are multiples of
 * k: digits read left to right through the remainders mod k. */
static void gen_int_multiple(struct sc *c, struct sbuf *b, long k)
{
    int base = c->n_rules;
    c->n_rules += (int)k;
    for (long r = 0; r < k; r++) { /* r%d: digits that follow a prefix of remainder r */
        sbuf_printf(c->o, "r%ld ::= ", base + r);
        if (r == 0)
            sbuf_puts(c->o, "\"\" | ");
        for (int d = 0; d < 10; d++)
            sbuf_printf(c->o, "%s\"%d\" r%ld", d ? " | " : "", d, base + (r * 10 + d) % k);
        sbuf_puts(c->o, "\n");
    }
    sbuf_puts(b, "(\"0\" | \"-\"? (");
    for (int d = 1; d < 10; d++)
        sbuf_printf(b, "%s\"%d\" r%ld", d > 1 ? " | " : "", d, base + d % k);
    sbuf_puts(b, "))");
}

int gsc_gen_integer(struct sc *c, const json_t *s, struct sbuf *b, const char *path)
{
    int hl, hh, le, he;
    double lo = 0, hi = 0;
    int rc = num_bounds(c, s, 1, &hl, &lo, &le, &hh, &hi, &he, path);
    if (rc)
        return rc;
    long long L = 0, H = 0;
    if (hl) {
        double x = le ? floor(lo) + 1 : ceil(lo);
        if (fabs(x) >= (double)GRAM_BIG)
            hl = 0;
        else
            L = (long long)x;
    }
    if (hh) {
        double x = he ? ceil(hi) - 1 : floor(hi);
        if (fabs(x) >= (double)GRAM_BIG)
            hh = 0;
        else
            H = (long long)x;
    }
    if (hl && hh && L > H)
        return gsc_bad_schema(c, path, "minimum is above maximum: no integer fits");
    long mul;
    if ((rc = multiple_of(c, s, 1, &mul, path)))
        return rc;
    if (mul) {
        if (hl || hh || c->excl)
            return gsc_unsupported(c, "multipleOf", path);
        gen_int_multiple(c, b, mul);
        return 0;
    }
    if (c->excl) { /* not: {enum}: the range cut around the excluded integers */
        size_t n = json_array_size(c->excl), k = 0;
        long long *x = calloc(n + 1, sizeof *x);
        if (!x)
            return cerr_set(c->e, CERR_NOMEM, "out of memory");
        for (size_t i = 0; i < n; i++) {
            json_t *v = json_array_get(c->excl, i);
            double d = json_is_number(v) ? json_number_value(v) : 0.5;
            if (d == floor(d) && fabs(d) < (double)GRAM_BIG && (!hl || d >= (double)L) && (!hh || d <= (double)H))
                x[k++] = (long long)d;
        }
        for (size_t i = 1; i < k; i++) /* insertion sort: few values */
            for (size_t j = i; j > 0 && x[j - 1] > x[j]; j--) {
                long long t = x[j];
                x[j] = x[j - 1];
                x[j - 1] = t;
            }
        sbuf_puts(b, "(");
        int any = 0, plo = hl;
        long long plo_v = L;
        for (size_t i = 0; i <= k; i++) {
            int phi = i < k ? 1 : hh;
            long long phi_v = i < k ? x[i] - 1 : H;
            if (!(plo && phi && plo_v > phi_v)) {
                sbuf_puts(b, any ? " | " : "");
                gram_int_range(b, plo, plo_v, phi, phi_v);
                any = 1;
            }
            if (i < k) {
                plo = 1;
                plo_v = x[i] + 1;
            }
        }
        free(x);
        sbuf_puts(b, ")");
        if (!any)
            return gsc_bad_schema(c, path, "no integer is left once `not` is applied");
        return 0;
    }
    gram_int_range(b, hl, L, hh, H);
    return 0;
}

int gsc_gen_number(struct sc *c, const json_t *s, struct sbuf *b, const char *path)
{
    int hl, hh, le, he;
    double lo = 0, hi = 0;
    int rc = num_bounds(c, s, 0, &hl, &lo, &le, &hh, &hi, &he, path);
    if (rc)
        return rc;
    long mul;
    if ((rc = multiple_of(c, s, 0, &mul, path)))
        return rc;
    if (c->excl)
        return gsc_unsupported(c, "not", path);
    if (mul > 0) /* an integer multiple: the integer grammar (it reads the same bounds) */
        return gsc_gen_integer(c, s, b, path);
    char frac[64] = "(\".\" [0-9]{1,20})?";
    if (mul < 0)
        snprintf(frac, sizeof frac, "(\".\" [0-9]{1,%ld})?", -mul);
    if (!hl && !hh) {
        if (mul < 0)
            sbuf_printf(b, "(jint %s)", frac);
        else
            sbuf_puts(b, "jnum");
        return 0;
    }
    /* bounds with fractions, or exclusive ones: decimals compared digit by digit */
    if ((hl && lo != floor(lo)) || (hh && hi != floor(hi)) || (hl && le && lo != 0) || (hh && he)) {
        if (mul < 0)
            return gsc_unsupported(c, "multipleOf", path);
        rc = gram_dec_range(b, hl, lo, le, hh, hi, he);
        if (rc == CERR_INVALID)
            return gsc_bad_schema(c, path, "no number lies between the bounds");
        if (rc)
            return gsc_unsupported(c, hl && lo != floor(lo) ? (le ? "exclusiveMinimum" : "minimum")
                                      : hh && hi != floor(hi) ? (he ? "exclusiveMaximum" : "maximum")
                                      : hl && le ? "exclusiveMinimum" : "exclusiveMaximum", path);
        return 0;
    }
    /* integral inclusive bounds: an integer part in [lo, hi - 1] with any fraction, or the
     * bound itself with a zero fraction; an exclusive 0 lower bound is handled too */
    if ((hl && fabs(lo) >= (double)GRAM_BIG) || (hh && fabs(hi) >= (double)GRAM_BIG))
        return gsc_unsupported(c, hl && fabs(lo) >= (double)GRAM_BIG ? "minimum" : "maximum", path);
    long long L = (long long)lo, H = (long long)hi;
    if (hl && hh && L > H)
        return gsc_bad_schema(c, path, "minimum is above maximum");
    sbuf_puts(b, "(");
    if (hl && le) { /* > 0 */
        sbuf_printf(b, "(\"0.\" [0-9]{0,%ld} [1-9])", mul < 0 ? -mul - 1 : 19);
        if (!hh || H >= 1) {
            sbuf_puts(b, " | ");
            if (hh)
                gram_int_range(b, 1, 1, 1, H - 1 >= 1 ? H - 1 : 0);
            else
                sbuf_puts(b, "[1-9] [0-9]{0,17}");
            sbuf_puts(b, frac);
        }
    } else if (hh && hl && L == H) {
        gram_int_range(b, 1, L, 1, L);
    } else {
        if (hh)
            gram_int_range(b, hl, L, 1, H - 1);
        else
            gram_int_range(b, hl, L, 0, 0);
        sbuf_puts(b, frac);
    }
    if (hh)
        sbuf_puts(b, " | "), gram_int_range(b, 1, H, 1, H), sbuf_puts(b, " (\".\" \"0\"{1,20})?");
    sbuf_puts(b, ")");
    return 0;
}

/* 1 when the JSON Schema pattern (whole-match, as generated) accepts the empty string, or
 * when that cannot be told */
static int pattern_matches_empty(const char *re)
{
    struct sbuf t = {0};
    struct gram *g = NULL;
    sbuf_puts(&t, "root ::= ");
    int rc = gram_regex_to_ebnf(re, strlen(re), 1, &t, NULL);
    if (!rc && t.p)
        rc = gram_from_ebnf(&g, t.p, t.len, NULL);
    int r = rc || !g || gram_accepts(g, "", 0);
    gram_unref(g);
    sbuf_free(&t);
    return r;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* "N(prefix)": the rest of a JSON string (raw characters, no escapes) that is none of the
 * words w[0..n) (sorted, ASCII), given the prefix of d bytes written; returns its rule id */
static int excl_node(struct sc *c, const char *const *w, int n, size_t d)
{
    int id = c->n_rules++;
    struct sbuf alt = {0};
    int is_word = 0;
    char kids[128];
    int nk = 0;
    for (int i = 0; i < n; i++) {
        if (strlen(w[i]) == d)
            is_word = 1;
        else if (!nk || kids[nk - 1] != w[i][d])
            kids[nk++] = w[i][d];
    }
    sbuf_puts(&alt, is_word ? "" : "\"\\\"\" | ");
    for (int k = 0; k < nk; k++) {
        int lo = 0;
        while (lo < n && (strlen(w[lo]) <= d || w[lo][d] != kids[k]))
            lo++;
        int hi = lo;
        while (hi < n && strlen(w[hi]) > d && w[hi][d] == kids[k])
            hi++;
        int sub = excl_node(c, w + lo, hi - lo, d + 1);
        sbuf_printf(&alt, "\"\\x%02X\" r%d | ", (unsigned char)kids[k], sub);
    }
    sbuf_puts(&alt, "[^\"\\\\\\x00-\\x1F");
    for (int k = 0; k < nk; k++)
        sbuf_printf(&alt, "\\x%02X", (unsigned char)kids[k]);
    sbuf_puts(&alt, "] [^\"\\\\\\x00-\\x1F]* \"\\\"\"");
    sbuf_printf(c->o, "r%d ::= %s\n", id, alt.p ? alt.p : "");
    sbuf_free(&alt);
    return id;
}

/* A JSON string that is none of the string values in excl (`not: {enum}`): raw characters
 * only (an escape could spell an excluded value another way). */
static int gen_string_excl(struct sc *c, const json_t *excl, struct sbuf *b)
{
    size_t n = json_array_size(excl), k = 0;
    const char **w = calloc(n + 1, sizeof *w);
    if (!w)
        return cerr_set(c->e, CERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const char *x = json_string_value(json_array_get(excl, i));
        int ok = x != NULL && strlen(x) < 200;
        for (const char *q = x; ok && *q; q++)
            ok = (unsigned char)*q >= 0x20 && (unsigned char)*q < 0x7F && *q != '"' && *q != '\\';
        if (x && !ok && strlen(x) < 200) { /* a value raw ASCII cannot spell: only plain ASCII here */
            int ascii = 1;
            for (const char *q = x; *q; q++)
                ascii &= (unsigned char)*q < 0x80;
            if (!ascii) {
                free(w);
                return gsc_unsupported(c, "not", "(a non-ASCII excluded value)");
            }
            continue; /* it holds '"', '\\' or a control: raw text never equals it */
        }
        if (ok)
            w[k++] = x;
    }
    qsort(w, k, sizeof *w, cmp_str);
    int id = excl_node(c, w, (int)k, 0);
    free(w);
    sbuf_printf(b, "\"\\\"\" r%d", id);
    return 0;
}

int gsc_gen_string(struct sc *c, const json_t *s, struct sbuf *b, const char *path)
{
    json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    long lo = gsc_count_of(s, "minLength", 0), hi = gsc_count_of(s, "maxLength", -1);
    if (lo < 0 || (hi >= 0 && hi < lo))
        return gsc_bad_schema(c, path, "minLength/maxLength out of order");
    if (lo > 50000 || hi > 50000)
        return gsc_unsupported(c, lo > 50000 ? "minLength" : "maxLength", path);
    if (c->excl) {
        if (json_is_string(pat) || json_is_string(fmt) || lo > 0 || hi >= 0)
            return gsc_unsupported(c, "not", path);
        return gen_string_excl(c, c->excl, b);
    }
    if (json_is_string(pat)) {
        /* a length bound holds anyway where the pattern cannot match less (minLength 1 and
         * a pattern that never matches the empty string); any other is refused */
        const char *re = json_string_value(pat);
        if (lo > 1 || hi >= 0 || (lo == 1 && pattern_matches_empty(re))) {
            /* else the product of the pattern's automaton with a character count */
            struct cerr e2 = {0};
            struct sbuf x = {0};
            int rc = gram_regex_len_ebnf(re, lo, hi, c->o, &x, &c->n_rules, &e2);
            if (!rc)
                sbuf_printf(b, "\"\\\"\" %s \"\\\"\"", x.p);
            sbuf_free(&x);
            if (rc == CERR_INVALID)
                return gsc_bad_schema(c, path, "no string matches the pattern within the length bounds");
            if (rc == CERR_NOMEM)
                return cerr_set(c->e, CERR_NOMEM, "out of memory");
            if (rc)
                return gsc_unsupported(c, lo > 1 || (lo == 1 && hi < 0) ? "minLength" : "maxLength", path);
            return 0;
        }
        sbuf_puts(b, "\"\\\"\" ");
        int rc = gram_regex_to_ebnf(re, strlen(re), 1, b, c->e);
        if (rc) {
            if (c->kw)
                snprintf(c->kw, 64, "pattern");
            cerr_prefix(c->e, "JSON Schema 'pattern' at %s", path);
            return rc == CERR_NOMEM ? rc : CERR_UNSUPPORTED;
        }
        sbuf_puts(b, " \"\\\"\"");
        return 0;
    }
    const char *f = json_is_string(fmt) ? json_string_value(fmt) : NULL;
    const char *rule = NULL;
    if (f) {
        if (!strcmp(f, "date"))
            rule = "jdate";
        else if (!strcmp(f, "time"))
            rule = "jtime";
        else if (!strcmp(f, "date-time"))
            rule = "jdate \"T\" jtime";
        else if (!strcmp(f, "uuid"))
            rule = "juuid";
        else if (!strcmp(f, "email"))
            rule = "jemail";
        else if (!strcmp(f, "uri") || !strcmp(f, "url"))
            rule = "juri";
        else if (!strcmp(f, "uri-reference"))
            rule = "jurir";
        else if (!strcmp(f, "ipv4"))
            rule = "jipv4";
        else if (!strcmp(f, "hostname"))
            rule = "jhost";
    }
    /* format is an annotation unless a validator opts in; where it meets a length bound
     * (an assertion) the bound wins and the format is not enforced */
    if (rule && lo == 0 && hi < 0) {
        sbuf_printf(b, "\"\\\"\" %s \"\\\"\"", rule);
        return 0;
    }
    if (hi >= 0)
        sbuf_printf(b, "\"\\\"\" jchr{%ld,%ld} \"\\\"\"", lo, hi);
    else if (lo > 0)
        sbuf_printf(b, "\"\\\"\" jchr{%ld,} \"\\\"\"", lo);
    else
        sbuf_puts(b, "jstr");
    return 0;
}

