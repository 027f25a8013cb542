/* spec_suffix.c — the suffix proposer (spec.h, kind suffix) and its corpus of recent
 * finished outputs.
 *
 * The match: every position of the request (before its last token) and of each corpus
 * segment whose preceding tokens equal the request's trailing tokens; the longest such
 * context (up to SPEC_SUFFIX_MAX_MATCH) selects the occurrences that vote. The walk: at each
 * draft position the occurrences vote for their next token, the most frequent wins (ties:
 * the most recent occurrence), the others drop out; the draft stops when the product of the
 * winning shares falls below SUFFIX_MIN_PROB or no occurrence continues. This is the walk
 * down a suffix tree's subtree counts (SuffixDecoding), over an occurrence list instead of
 * a tree: the request and corpus are scanned per proposal (linear in their tokens).
 */
#include <stdlib.h>
#include <string.h>

#include "engine/spec/spec_int.h"

#define SUFFIX_MIN_PROB 0.1f
#define SUFFIX_MAX_OCC 256 /* occurrences that vote (the most recent ones) */

#define VOTE_BITS 10 /* hash slots for a vote: more than SUFFIX_MAX_OCC ids, never full */
#define VOTE_SLOTS (1 << VOTE_BITS)

struct vote {
    int32_t id;
    int n, first; /* votes; the first (most recent) occurrence voting for id */
};

struct occ {
    const int32_t *t; /* the text holding it */
    int pos, end;     /* next token index, text length */
};

/* Backward match length of t[0..i) against pat[0..np) (pat's end aligned with i). */
static int match_back(const int32_t *t, int i, const int32_t *pat, int np, int cap)
{
    int l = 0;
    while (l < cap && l < i && l < np && t[i - 1 - l] == pat[np - 1 - l])
        l++;
    return l;
}

/* Collects occurrences in text t[0..n_scan) whose context before pos matches the trailing
 * pattern for at least *best tokens (raising *best and resetting the list on a longer one). */
static void scan(const int32_t *t, int n_scan, int n_text, const int32_t *pat, int np,
                 struct occ *o, int *no, int *best)
{
    int32_t last = pat[np - 1];
    for (int i = n_scan - 1; i >= 1; i--) { /* newest first */
        if (t[i - 1] != last)
            continue;
        int l = match_back(t, i, pat, np, SPEC_SUFFIX_MAX_MATCH);
        if (l < *best)
            continue;
        if (l > *best) {
            *best = l;
            *no = 0;
        }
        if (*no < SUFFIX_MAX_OCC)
            o[(*no)++] = (struct occ){t, i, n_text};
    }
}

int spec_suffix_propose(struct spec *s, const int32_t *t, int n, int max, int32_t *out,
                        int *match_len)
{
    *match_len = 0;
    if (n < 2)
        return 0;
    struct occ *o = malloc(SUFFIX_MAX_OCC * sizeof *o);
    if (!o)
        return 0;
    int no = 0, best = 1;
    /* the request itself: occurrences before its end (each has a continuation) */
    scan(t, n, n, t, n, o, &no, &best);
    for (int k = 0; k < s->n_seg; k++) {
        int g = (s->seg_head + s->n_seg - 1 - k) % SPEC_CORPUS_MAX_SEGS; /* newest first */
        scan(s->seg[g], s->seg_len[g], s->seg_len[g], t, n, o, &no, &best);
    }
    int m = 0;
    float prob = 1;
    while (m < max && no > 0) {
        /* vote: the most frequent next token (first seen = most recent on ties), counted in
         * one pass over a small hash of the ids (a short match, e.g. one common token, has
         * hundreds of occurrences: counting each against all was ~no^2 a draft token) */
        struct vote v[VOTE_SLOTS];
        memset(v, 0, sizeof v);
        int win = -1, wc = 0, alive = 0;
        for (int a = 0; a < no; a++) {
            if (o[a].pos >= o[a].end)
                continue;
            alive++;
            int32_t id = o[a].t[o[a].pos];
            unsigned h = ((uint32_t)id * 2654435761u) >> (32 - VOTE_BITS);
            while (v[h].n && v[h].id != id)
                h = (h + 1) & (VOTE_SLOTS - 1);
            if (!v[h].n)
                v[h].id = id, v[h].first = a;
            v[h].n++;
            if (v[h].n > wc || (v[h].n == wc && v[h].first < win))
                wc = v[h].n, win = v[h].first;
        }
        if (win < 0)
            break;
        prob *= (float)wc / (float)alive;
        if (m > 0 && prob < SUFFIX_MIN_PROB)
            break;
        int32_t id = o[win].t[o[win].pos];
        out[m++] = id;
        int keep = 0;
        for (int a = 0; a < no; a++)
            if (o[a].pos < o[a].end && o[a].t[o[a].pos] == id) {
                o[keep] = o[a];
                o[keep++].pos++;
            }
        no = keep;
    }
    free(o);
    *match_len = best;
    return m;
}

void spec_corpus_add(struct spec *s, const int32_t *t, int n)
{
    if (n < 2)
        return;
    if (n > SPEC_CORPUS_MAX_TOKENS)
        t += n - SPEC_CORPUS_MAX_TOKENS, n = SPEC_CORPUS_MAX_TOKENS;
    int32_t *c = malloc((size_t)n * sizeof *c);
    if (!c)
        return;
    memcpy(c, t, (size_t)n * sizeof *c);
    while (s->n_seg > 0 &&
           (s->n_seg == SPEC_CORPUS_MAX_SEGS || s->corpus_tokens + n > SPEC_CORPUS_MAX_TOKENS)) {
        free(s->seg[s->seg_head]);
        s->corpus_tokens -= s->seg_len[s->seg_head];
        s->seg[s->seg_head] = NULL;
        s->seg_head = (s->seg_head + 1) % SPEC_CORPUS_MAX_SEGS;
        s->n_seg--;
    }
    int g = (s->seg_head + s->n_seg) % SPEC_CORPUS_MAX_SEGS;
    s->seg[g] = c;
    s->seg_len[g] = n;
    s->n_seg++;
    s->corpus_tokens += n;
}

void spec_corpus_free(struct spec *s)
{
    for (int i = 0; i < SPEC_CORPUS_MAX_SEGS; i++)
        free(s->seg[i]);
    s->n_seg = 0;
    s->corpus_tokens = 0;
}
