/* fuzz_grammar.c — libFuzzer target for the EBNF parser and the matcher.
 *
 * Input: EBNF text, a NUL, then bytes to feed. The parser must return an error or a
 * grammar; on a grammar the matcher takes the bytes one by one while they fit, and every
 * id of a small vocabulary that the mask allows must be taken by a fresh matcher that
 * replayed the same bytes, and the token-table path and the naive mask must agree with it.
 * Seeds: fuzz/corpus/fuzz_grammar/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/gram.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
        for (size_t i = 0; i < fl && i < 64; i++) {
            uint32_t mask[1], mt_mask[1], mr_mask[1];
            int n = gram_matcher_mask(m, mask);
            require(n >= 0);
            require(gram_matcher_mask(mt, mt_mask) == n && gram_matcher_mask_naive(mr, mr_mask) == n);
            require(mt_mask[0] == mask[0] && mr_mask[0] == mask[0]);
            /* each id the mask allows must be taken by accept on this state */
            for (int t = 0; t < 12; t++)
                if ((mask[0] >> t) & 1) {
                    struct gram_matcher *m2 = NULL;
                    require(gram_matcher_new(&m2, g, v, &e) == 0);
                    require(gram_matcher_accept_bytes(m2, feed, i) == 0);
                    require(gram_matcher_accept(m2, t) == 0);
                    gram_matcher_free(m2);
                }
            if (gram_matcher_accept_bytes(m, feed + i, 1))
                break;
            require(gram_matcher_accept_bytes(mt, feed + i, 1) == 0 && gram_matcher_accept_bytes(mr, feed + i, 1) == 0);
        }
        gram_matcher_free(m);
        gram_matcher_free(mt);
        gram_matcher_free(mr);
    }
    (void)gram_accepts(g, feed, fl);
    gram_vocab_free(v);
    gram_unref(g);
    return 0;
}
