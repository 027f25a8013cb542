/* added.c — added tokens (special and user-defined) found in raw text.
 *
 * Matches like HF tokenizers' AddedVocabulary: leftmost-longest, non-overlapping; a
 * single_word token must stand between non-word characters; lstrip/rstrip swallow the
 * whitespace beside the match. Special tokens are skipped (left as text) unless the caller
 * parses specials — the scan still steps over them, as upstream's iterator does.
 */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/tok_int.h"
#include "util/err.h"

int tok_is_ws(uint32_t c);

static int cmp_added(const void *a, const void *b, void *ctx)
{
    const struct tok_added *base = ctx;
    const struct tok_added *x = &base[*(const int32_t *)a];
    const struct tok_added *y = &base[*(const int32_t *)b];
    uint8_t fx = (uint8_t)x->s[0], fy = (uint8_t)y->s[0];
    if (fx != fy)
        return fx < fy ? -1 : 1;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return *(const int32_t *)a - *(const int32_t *)b;
}

int tok_added_index(struct tok *t, struct cerr *e)
{
    free(t->added_idx);
    t->added_idx = malloc(sizeof(int32_t) * (size_t)(t->n_added + 1));
    if (!t->added_idx)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    int k = 0;
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].len > 0)
            t->added_idx[k++] = i;
    qsort_r(t->added_idx, (size_t)k, sizeof(int32_t), cmp_added, t->added);
    int j = 0;
    for (int b = 0; b < 256; b++) {
        t->added_start[b] = j;
        while (j < k && (uint8_t)t->added[t->added_idx[j]].s[0] == b)
            j++;
    }
    t->added_start[256] = k;
    t->has_norm_added = 0;
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].normalized)
            t->has_norm_added = 1;
    return 0;
}

static uint32_t cp_before(const uint8_t *s, size_t at, size_t *start)
{
    size_t k = at - 1;
    while (k > 0 && (s[k] & 0xC0) == 0x80)
        k--;
    int l = tok_utf8_len(s + k, at - k);
    *start = k;
    return l ? tok_utf8_cp(s + k, l) : 0xFFFD;
}

static int is_word_cp(uint32_t c)
{
    if (c == '_')
        return 1;
    utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)c);
    return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
           (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO) ||
           cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_MC;
}

int tok_added_split(const struct tok *t, const char *s, size_t n, int want_norm,
                    int parse_special, tok_seg_cb cb, void *ctx)
{
    const uint8_t *u = (const uint8_t *)s;
    size_t start_off = 0;
    for (size_t i = 0; i < n;) {
        int32_t lo = t->added_start[u[i]], hi = t->added_start[u[i] + 1];
        const struct tok_added *hit = NULL;
        for (int32_t k = lo; k < hi; k++) {
            const struct tok_added *a = &t->added[t->added_idx[k]];
            if (!a->normalized != !want_norm)
                continue;
            if (a->len <= n - i && memcmp(s + i, a->s, a->len) == 0) {
                hit = a;
                break;
            }
        }
        if (!hit) {
            i++;
            continue;
        }
        size_t ms = i, me = i + hit->len;
        i = me;
        if (hit->special && !parse_special)
            continue;
        if (hit->single_word) {
            size_t st;
            int left_ok = ms == 0 || !is_word_cp(cp_before(u, ms, &st));
            int l = me < n ? tok_utf8_len(u + me, n - me) : 0;
            int right_ok = me == n || !l || !is_word_cp(tok_utf8_cp(u + me, l));
            if (!left_ok || !right_ok)
                continue;
        }
        if (hit->lstrip) {
            size_t p = ms;
            while (p > 0) {
                size_t st;
                uint32_t c = cp_before(u, p, &st);
                if (!tok_is_ws(c))
                    break;
                p = st;
            }
            ms = p > start_off ? p : start_off;
        }
        if (hit->rstrip) {
            while (me < n) {
                int l = tok_utf8_len(u + me, n - me);
                if (!l || !tok_is_ws(tok_utf8_cp(u + me, l)))
                    break;
                me += (size_t)l;
            }
            i = me;
        }
        if (start_off < ms) {
            int rc = cb(ctx, -1, start_off, ms - start_off);
            if (rc)
                return rc;
        }
        int rc = cb(ctx, hit->id, ms, me - ms);
        if (rc)
            return rc;
        start_off = me;
    }
    if (start_off < n)
        return cb(ctx, -1, start_off, n - start_off);
    return 0;
}
