/* gram_decrange.c — the EBNF of the JSON numbers (plain decimals: no exponent) between two
 * bounds that need not be integers (minimum 1e-9, exclusiveMaximum 4.5), exact on the
 * decimal text: a bound is written as its shortest round-trip decimal, a number is compared
 * digit by digit with it (integer part by range, fraction lexicographically, a missing digit
 * read as 0). Pure; used by the JSON Schema compiler for number schemas.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/gram_int.h"
#include "util/sbuf.h"

#define TAIL "[0-9]{0,15}" /* digits after the ones a bound decides */

struct dec {
    long long ip; /* integer part, >= 0 */
    char fp[32]; /* fraction digits, no trailing zeros ("" = an integer) */
    int excl;
};

/* |v| as a decimal (shortest text that reads back as v). 0, or -1 when it does not fit
 * (integer part >= 1e17, or more than 24 fraction digits). */
static int to_dec(double v, struct dec *d)
{
    char buf[64];
    v = fabs(v);
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    char dig[32];
    int nd = 0;
    const char *q = buf;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9')
            dig[nd++] = *q;
    int ex = *q == 'e' ? atoi(q + 1) : 0;
    if (ex >= 17 || nd == 0)
        return -1;
    /* value = dig[0].dig[1..] * 10^ex: the integer part is the first ex + 1 digits */
    d->ip = 0;
    int k = 0, fl = 0;
    for (; k < nd && k <= ex; k++)
        d->ip = d->ip * 10 + (dig[k] - '0');
    for (int z = nd; z <= ex; z++) /* digits past the mantissa: zeros */
        d->ip *= 10;
    for (int z = ex + 1; z < 0; z++) { /* leading fraction zeros */
        if (fl >= 24)
            return -1;
        d->fp[fl++] = '0';
    }
    for (; k < nd; k++) {
        if (fl >= 24)
            return -1;
        d->fp[fl++] = dig[k];
    }
    while (fl > 0 && d->fp[fl - 1] == '0')
        fl--;
    d->fp[fl] = 0;
    return 0;
}

/* fraction digit strings F (one digit or more) with F >= f (strict: F > f), where f has a
 * digit or more and no trailing zeros; a missing digit counts as 0 */
static void ge_d(struct sbuf *b, const char *f, int strict)
{
    int d = f[0] - '0';
    sbuf_puts(b, "(");
    if (d < 9)
        sbuf_printf(b, "[%d-9] " TAIL " | ", d + 1);
    if (f[1]) /* d alone is below f: more digits must follow */
        sbuf_printf(b, "\"%d\" ", d), ge_d(b, f + 1, strict);
    else if (strict) /* d, then anything above zero */
        sbuf_printf(b, "\"%d\" \"0\"{0,15} [1-9] " TAIL, d);
    else
        sbuf_printf(b, "\"%d\" " TAIL, d);
    sbuf_puts(b, ")");
}

/* F <= f (strict: F < f), as ge_d */
static void le_d(struct sbuf *b, const char *f, int strict)
{
    int d = f[0] - '0', any = 0;
    sbuf_puts(b, "(");
    if (d > 0)
        sbuf_printf(b, "[0-%d] " TAIL, d - 1), any = 1;
    if (f[1]) { /* d alone is below f (the rest has a digit above 0) */
        sbuf_printf(b, "%s\"%d\" ", any ? " | " : "", d);
        le_d(b, f + 1, strict);
        sbuf_puts(b, "?");
    } else if (!strict) { /* d then zeros: f itself (strict: nothing starts with d) */
        sbuf_printf(b, "%s\"%d\" \"0\"{0,15}", any ? " | " : "", d);
    }
    sbuf_puts(b, ")");
}

/* the suffix after an integer part equal to the bound's: "" or "." digits, with the
 * fraction >= / > (lower) or <= / < (upper) the bound's. Returns 0 when it is empty. */
static int frac_suffix(struct sbuf *b, const struct dec *x, int upper)
{
    if (!upper) {
        if (!x->fp[0] && !x->excl)
            sbuf_puts(b, "(\".\" [0-9]{1,15})?");
        else if (!x->fp[0]) /* above an integer: a fraction above zero */
            sbuf_puts(b, "\".\" \"0\"{0,15} [1-9] " TAIL);
        else
            sbuf_puts(b, "\".\" "), ge_d(b, x->fp, x->excl);
        return 1;
    }
    if (!x->fp[0]) {
        if (x->excl)
            return 0; /* below an integer with its own integer part: nothing */
        sbuf_puts(b, "(\".\" \"0\"{1,15})?");
        return 1;
    }
    sbuf_puts(b, "(\".\" "); /* no fraction (0) is below f */
    le_d(b, x->fp, x->excl);
    sbuf_puts(b, ")?");
    return 1;
}

/* F with F >= a (sa: F > a) and F <= b (sb: F < b), a below b (a may be "": zero) */
static void bt_d(struct sbuf *b, const char *a, int sa, const char *z, int sz)
{
    int da = a[0] ? a[0] - '0' : 0, dz = z[0] - '0', any = 0;
    const char *a1 = a[0] ? a + 1 : a, *z1 = z + 1;
    sbuf_puts(b, "(");
    if (da == dz) { /* z's rest is above a's: more digits, or da alone when that is a itself */
        sbuf_printf(b, "\"%d\" ", da);
        bt_d(b, a1, sa, z1, sz);
        if (!a1[0] && !sa)
            sbuf_puts(b, "?");
        sbuf_puts(b, ")");
        return;
    }
    if (da + 1 <= dz - 1)
        sbuf_printf(b, "[%d-%d] " TAIL, da + 1, dz - 1), any = 1;
    /* first digit da: at or above a's rest */
    sbuf_printf(b, "%s\"%d\" ", any ? " | " : "", da);
    if (a1[0])
        ge_d(b, a1, sa);
    else if (sa)
        sbuf_puts(b, "\"0\"{0,15} [1-9] " TAIL);
    else
        sbuf_puts(b, TAIL);
    /* first digit dz: at or below z's rest */
    if (z1[0]) {
        sbuf_printf(b, " | \"%d\" ", dz);
        le_d(b, z1, sz);
        sbuf_puts(b, "?");
    } else if (!sz) {
        sbuf_printf(b, " | \"%d\" \"0\"{0,15}", dz);
    }
    sbuf_puts(b, ")");
}

/* the non-negative numbers from lo (or 0) to hi (or without end), as alternatives appended
 * to b (" | " between them). Returns their count (0: none fits). */
static int nonneg(struct sbuf *b, const struct dec *lo, const struct dec *hi)
{
    struct dec zero = {0};
    if (!lo)
        lo = &zero;
    int n = 0;
    if (hi && lo->ip > hi->ip)
        return 0;
    if (hi && lo->ip == hi->ip) { /* one integer part: the fraction between both */
        int bare = !lo->fp[0] && !lo->excl && (hi->fp[0] || !hi->excl); /* the integer itself */
        if (!hi->fp[0]) { /* up to the integer: only itself */
            if (!bare)
                return 0;
            gram_int_range(b, 1, lo->ip, 1, lo->ip);
            sbuf_puts(b, " (\".\" \"0\"{1,15})?");
            return 1;
        }
        int cmp = strcmp(lo->fp, hi->fp); /* digit strings without trailing zeros */
        if (cmp == 0 && !lo->excl && !hi->excl) { /* one value */
            gram_int_range(b, 1, lo->ip, 1, lo->ip);
            sbuf_printf(b, " \".%s\" \"0\"{0,15}", lo->fp);
            return 1;
        }
        if (cmp >= 0)
            return 0;
        gram_int_range(b, 1, lo->ip, 1, lo->ip);
        sbuf_puts(b, " (\".\" ");
        bt_d(b, lo->fp, lo->excl, hi->fp, hi->excl);
        sbuf_puts(b, bare ? ")?" : ")");
        return 1;
    }
    struct sbuf t = {0};
    if (frac_suffix(&t, lo, 0) && t.p) {
        gram_int_range(b, 1, lo->ip, 1, lo->ip);
        sbuf_printf(b, " %s", t.p);
        n++;
    }
    sbuf_free(&t);
    long long a = lo->ip + 1, z = hi ? hi->ip - 1 : 0;
    if (!hi || a <= z) {
        sbuf_puts(b, n ? " | " : "");
        gram_int_range(b, 1, a, hi != NULL, z);
        sbuf_puts(b, " (\".\" [0-9]{1,15})?");
        n++;
    }
    if (hi) {
        struct sbuf u = {0};
        if (frac_suffix(&u, hi, 1) && u.p) {
            sbuf_puts(b, n ? " | " : "");
            gram_int_range(b, 1, hi->ip, 1, hi->ip);
            sbuf_printf(b, " %s", u.p);
            n++;
        }
        sbuf_free(&u);
    }
    return n;
}

int gram_dec_range(struct sbuf *b, int has_lo, double lo, int lo_excl, int has_hi, double hi,
                   int hi_excl)
{
    struct dec L = {0}, H = {0};
    if ((has_lo && (!isfinite(lo) || to_dec(lo, &L))) || (has_hi && (!isfinite(hi) || to_dec(hi, &H))))
        return CERR_UNSUPPORTED;
    L.excl = lo_excl, H.excl = hi_excl;
    if (has_lo && has_hi && (lo > hi || (lo == hi && (lo_excl || hi_excl))))
        return CERR_INVALID;
    struct sbuf t = {0};
    int n = 0, rc = 0;
    sbuf_puts(&t, "(");
    if (!has_lo || lo < 0) { /* negatives: "-" and a magnitude in (0 or -hi, -lo) */
        struct dec mlo = {0}, *mhi = has_lo ? &L : NULL;
        mlo.excl = 1; /* -0 is 0: the non-negative side writes it */
        if (has_hi && hi < 0)
            mlo = H; /* x <= hi < 0: magnitude >= -hi */
        struct sbuf u = {0};
        int k = nonneg(&u, &mlo, mhi);
        if (k < 0)
            rc = CERR_UNSUPPORTED;
        else if (k > 0 && u.p)
            sbuf_printf(&t, "\"-\" (%s)", u.p), n++;
        sbuf_free(&u);
    }
    if (!rc && (!has_hi || hi >= 0) && !(has_hi && hi == 0 && hi_excl)) {
        struct dec z = {0};
        struct sbuf u = {0};
        int k = nonneg(&u, has_lo && lo >= 0 ? &L : &z, has_hi ? &H : NULL);
        if (k < 0)
            rc = CERR_UNSUPPORTED;
        else if (k > 0 && u.p)
            sbuf_printf(&t, "%s%s", n ? " | " : "", u.p), n++;
        sbuf_free(&u);
    }
    sbuf_puts(&t, ")");
    if (!rc && n == 0)
        rc = CERR_INVALID;
    if (!rc && !t.p)
        rc = CERR_NOMEM;
    if (!rc)
        sbuf_puts(b, t.p);
    sbuf_free(&t);
    return rc;
}
