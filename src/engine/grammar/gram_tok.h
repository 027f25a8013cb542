/* gram_tok.h — builds a struct gram_vocab from a tokenizer: each id's bytes
 * (tok_token_bytes; special tokens take no text) and the end-of-generation ids given.
 * n_vocab is the model's (ids past the tokenizer's have no text). Built once per engine,
 * on the thread that first needs it; read-only afterwards. */
#ifndef CINFER_ENGINE_GRAMMAR_GRAM_TOK_H
#define CINFER_ENGINE_GRAMMAR_GRAM_TOK_H

#include "engine/grammar/gram.h"
#include "tokenizer/tok.h"

int gram_vocab_from_tok(struct gram_vocab **out, const struct tok *t, int n_vocab,
                        const int32_t *eog, int n_eog, struct cerr *e);

#endif
