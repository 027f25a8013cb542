/* gram_tok.c — a grammar vocabulary from a tokenizer (tok_token_bytes per id). */
#include <stdlib.h>

#include "engine/grammar/gram_tok.h"

int gram_vocab_from_tok(struct gram_vocab **out, const struct tok *t, int n_vocab,
                        const int32_t *eog, int n_eog, struct cerr *e)
{
    *out = NULL;
    const char **bytes = calloc((size_t)n_vocab + 1, sizeof *bytes);
    int *len = calloc((size_t)n_vocab + 1, sizeof *len);
    char *buf = malloc(1024);
    int rc = 0;
    if (!bytes || !len || !buf) {
        rc = cerr_set(e, CERR_NOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < n_vocab; i++) {
        int n = i < tok_vocab_size(t) ? tok_token_bytes(t, i, buf, 1024) : -1;
        len[i] = n > 0 ? n : -1;
        if (n > 0) {
            char *c = malloc((size_t)n);
            if (!c) {
                rc = cerr_set(e, CERR_NOMEM, "out of memory");
                goto out;
            }
            for (int k = 0; k < n; k++)
                c[k] = buf[k];
            bytes[i] = c;
        }
    }
    rc = gram_vocab_new(out, n_vocab, bytes, len, eog, n_eog, e);
out:
    if (bytes)
        for (int i = 0; i < n_vocab; i++)
            free((void *)bytes[i]);
    free(bytes);
    free(len);
    free(buf);
    return rc;
}
