/* gram_range.c — EBNF pieces of the JSON Schema compiler: string literals (gram_lit) and the
 * integers of a range (minimum / maximum), exact digit by digit (gram_int_range). Pure. */
#include "engine/grammar/gram_int.h"

#include <stdio.h>
#include <string.h>

#include "util/sbuf.h"

/* an EBNF literal for the bytes s[0..n) */
void gram_lit(struct sbuf *b, const char *s, size_t n)
{
    sbuf_puts(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x20 && ch < 0x7F && ch != '"' && ch != '\\')
            sbuf_printf(b, "%c", ch);
        else
            sbuf_printf(b, "\\x%02X", ch);
    }
    sbuf_puts(b, "\"");
}

/* the EBNF for the decimal numbers lo..hi (0 <= lo <= hi), no leading zeros */
static void nat_range(struct sbuf *b, long long lo, long long hi)
{
    char a[24], z[24];
    int first = 1;
    sbuf_puts(b, "(");
    while (lo <= hi) {
        /* the largest block [lo, end] of the form prefix + (any digits)^k within hi */
        long long step = 1, end = lo;
        while (1) {
            long long s10 = step * 10;
            if (s10 > 1000000000000000000LL / 10)
                break;
            if (lo % s10 != 0)
                break;
            if (lo + s10 - 1 > hi)
                break;
            step = s10;
        }
        end = lo + step - 1;
        /* widen by the leading varying digit: lo .. lo + m*step - 1 */
        long long m = 1;
        while (lo + (m + 1) * step - 1 <= hi && ((lo / step) % 10) + m <= 9)
            m++;
        end = lo + m * step - 1;
        if (lo == 0 && end >= 9 && step >= 1) {
            /* 0 is written alone: a number never starts with 0 */
            sbuf_puts(b, first ? "" : " | ");
            sbuf_puts(b, "\"0\"");
            first = 0;
            lo = 1;
            continue;
        }
        snprintf(a, sizeof a, "%lld", lo);
        snprintf(z, sizeof z, "%lld", end);
        size_t n = strlen(a);
        sbuf_puts(b, first ? "" : " | ");
        first = 0;
        /* same length: a and z differ only in the digit before the k free ones */
        int k = 0;
        for (long long t = step; t > 1; t /= 10)
            k++;
        size_t fixed = n - (size_t)k;
        if (fixed > 1)
            gram_lit(b, a, fixed - 1);
        if (fixed >= 1) {
            if (a[fixed - 1] == z[fixed - 1])
                sbuf_printf(b, " \"%c\"", a[fixed - 1]);
            else
                sbuf_printf(b, " [%c-%c]", a[fixed - 1], z[fixed - 1]);
        }
        if (k)
            sbuf_printf(b, " [0-9]{%d}", k);
        if (end == hi)
            break;
        lo = end + 1;
    }
    sbuf_puts(b, ")");
}


/* integers lo..hi (either may be open: has_lo/has_hi) */
void gram_int_range(struct sbuf *b, int has_lo, long long lo, int has_hi, long long hi)
{
    if (!has_lo && !has_hi) {
        sbuf_puts(b, "jint");
        return;
    }
    sbuf_puts(b, "(");
    int first = 1;
    /* negative part: -(max(1,-hi) .. -lo) */
    if (!has_lo || lo < 0) {
        long long nlo = has_hi && hi < 0 ? -hi : 1, nhi = has_lo ? -lo : -1;
        sbuf_puts(b, "\"-\" ");
        if (has_lo)
            nat_range(b, nlo, nhi);
        else if (nlo <= 1)
            sbuf_puts(b, "[1-9] [0-9]{0,17}");
        else {
            /* nlo .. infinity: nlo..(next power of ten - 1) | more digits */
            long long p = 1;
            int d = 0;
            while (p <= nlo) {
                p *= 10;
                d++;
            }
            sbuf_puts(b, "(");
            nat_range(b, nlo, p - 1);
            sbuf_printf(b, " | [1-9] [0-9]{%d,17})", d);
        }
        first = 0;
    }
    if (!has_hi || hi >= 0) {
        long long plo = has_lo && lo > 0 ? lo : 0;
        sbuf_puts(b, first ? "" : " | ");
        if (has_hi)
            nat_range(b, plo, hi);
        else if (plo == 0)
            sbuf_puts(b, "jnat");
        else {
            long long p = 1;
            int d = 0;
            while (p <= plo) {
                p *= 10;
                d++;
            }
            sbuf_puts(b, "(");
            nat_range(b, plo, p - 1);
            sbuf_printf(b, " | [1-9] [0-9]{%d,17})", d);
        }
    }
    sbuf_puts(b, ")");
}

