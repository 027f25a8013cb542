/* fuzz_grammar.c — libFuzzer target for the EBNF parser and the matcher.
 *
 * Input: EBNF text, a NUL, then bytes to feed. The parser must return an error or a
 * grammar; on a grammar the matcher takes the bytes one by one while they fit, and every
 * id of a small vocabulary that the mask allows must be taken by a fresh matcher that
 * replayed the same bytes, and the token-table path and the naive mask must agree with it.
 * A call that passes the (lowered) work bound ends the walk: CERR_LIMIT is the one refusal
 * allowed besides the grammar's own.
 * Seeds: fuzz/corpus/fuzz_grammar/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/gram.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The matchers' work bound per call: the server's (GM_WORK_MAX, ~0.1 s in a release build)
 * is minutes under the fuzzer's instrumentation for an ambiguous grammar (the seed
 * ambiguous_root_star); this one (twice the peak of test_grammar's real schemas) stops it in
 * about a second. */
enum { WORK = 1000000 };

static void require(int ok)
{
    if (!ok)
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t gl = nul ? (size_t)(nul - data) : size;
    const char *feed = nul ? (const char *)nul + 1 : "";
    size_t fl = nul ? size - gl - 1 : 0;
    struct gram *g = NULL;
    struct cerr e = {0};
    if (gram_from_ebnf(&g, (const char *)data, gl, &e)) {
        require(g == NULL && e.msg[0]);
        return 0;
    }
    /* vocabulary: 8 single bytes, 4 two-byte pieces, one end id */
    static const char *const pieces[] = {"a", "b", "0", "1", "\"", "{", "}", " ", "ab", "{\"", "10", "\xc3\xa9", ""};
    int len[13];
    for (int i = 0; i < 12; i++)
        len[i] = (int)strlen(pieces[i]);
    len[12] = -1;
    int32_t eos = 12;
    struct gram_vocab *v = NULL;
    require(gram_vocab_new(&v, 13, pieces, len, &eos, 1, &e) == 0);
    struct gram_matcher *m = NULL, *mt = NULL, *mr = NULL;
    if (gram_matcher_new(&m, g, v, &e) == 0) {
        /* the token-table path (tables at once, frames deepened) and the naive reference
         * must give the same masks */
        require(gram_matcher_new(&mt, g, v, &e) == 0 && gram_matcher_new(&mr, g, v, &e) == 0);
        gram_matcher_tune(mt, 0, 0);
        gram_matcher_work_limit(m, WORK), gram_matcher_work_limit(mt, WORK);
        gram_matcher_work_limit(mr, WORK);
        for (size_t i = 0; i < fl && i < 64; i++) {
            uint32_t mask[1], mt_mask[1], mr_mask[1];
            int n = gram_matcher_mask(m, mask);
            if (n == CERR_LIMIT) /* too ambiguous (the server answers 400) */
                break;
            require(n >= 0);
            const int nt = gram_matcher_mask(mt, mt_mask), nr = gram_matcher_mask_naive(mr, mr_mask);
            if (nt == CERR_LIMIT || nr == CERR_LIMIT) /* (the paths' work differs) */
                break;
            require(nt == n && nr == n);
            require(mt_mask[0] == mask[0] && mr_mask[0] == mask[0]);
            /* each id the mask allows must be taken by accept on this state */
            for (int t = 0; t < 12; t++)
                if ((mask[0] >> t) & 1) {
                    struct gram_matcher *m2 = NULL;
                    require(gram_matcher_new(&m2, g, v, &e) == 0);
                    gram_matcher_work_limit(m2, WORK);
                    int r = gram_matcher_accept_bytes(m2, feed, i);
                    if (r == 0)
                        r = gram_matcher_accept(m2, t);
                    require(r == 0 || r == CERR_LIMIT);
                    gram_matcher_free(m2);
                }
            if (gram_matcher_accept_bytes(m, feed + i, 1))
                break;
            int rt = gram_matcher_accept_bytes(mt, feed + i, 1);
            int rr = gram_matcher_accept_bytes(mr, feed + i, 1);
            require((rt == 0 || rt == CERR_LIMIT) && (rr == 0 || rr == CERR_LIMIT));
            if (rt || rr)
                break;
        }
        gram_matcher_free(m);
        gram_matcher_free(mt);
        gram_matcher_free(mr);
    }
    /* the whole feed at once (gram_accepts' walk, under the lowered bound) */
    struct gram_matcher *ma = NULL;
    if (gram_matcher_new(&ma, g, NULL, &e) == 0) {
        gram_matcher_work_limit(ma, WORK);
        (void)gram_matcher_accept_bytes(ma, feed, fl);
        (void)gram_matcher_complete(ma);
        gram_matcher_free(ma);
    }
    gram_vocab_free(v);
    gram_unref(g);
    return 0;
}
