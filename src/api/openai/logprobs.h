/* logprobs.h — OpenAI logprob entries: each token as its decoded text with its UTF-8 bytes.
 *
 * The spec's ChatCompletionTokenLogprob is {token, logprob, bytes, top_logprobs[{token,
 * logprob, bytes}]}: `token` is the text the token adds to the output (not the vocabulary
 * piece: " Paris", not "\u0120Paris"; "" for a control token such as <|im_end|>), `bytes`
 * its bytes (the raw bytes of one token of a character split over several tokens, whose
 * `token` then holds U+FFFD). A token that cannot be drawn (masked by a grammar, banned by
 * logit_bias) has logprob -9999.0, as OpenAI writes it. cinfer adds the token `id`. The legacy completions
 * block (logprobs given as an integer) is {tokens, token_logprobs, top_logprobs,
 * text_offset}. Pure: the tokenizer is read only. One lp_legacy per request, one thread.
 */
#ifndef CINFER_API_OPENAI_LOGPROBS_H
#define CINFER_API_OPENAI_LOGPROBS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "engine/sampler.h"
#include "tokenizer/tok.h"

/* The bytes token id adds to a decoded text, in a malloc'd buffer (*n bytes; "" for a
 * control token); NULL on out of memory or a bad id. Context-free: a SentencePiece leading
 * space is kept (decoded after the BOS token, then that token's own text removed). */
char *lp_token_bytes(const struct tok *tk, int32_t id, size_t *n);

/* {"id", "token", "logprob", "bytes", "top_logprobs": [{"id", "token", "logprob", "bytes"}]}
 * with lp->n_top alternatives (an empty array when only the sampled token was asked for).
 * NULL on out of memory. */
json_t *lp_chat_entry(const struct tok *tk, const struct sampler_logprob *lp);

struct lp_legacy {
    json_t *tokens, *token_logprobs, *top_logprobs, *text_offset;
    long offset; /* characters of text before the next token */
    int top;     /* alternatives a position (0: each top_logprobs entry is {}) */
};
/* start_offset: characters before the first token (the echoed prompt). 0 or CERR_NOMEM. */
int lp_legacy_init(struct lp_legacy *L, int top, long start_offset);
int lp_legacy_add(struct lp_legacy *L, const struct tok *tk, const struct sampler_logprob *lp);
/* The first token of an echoed prompt: its text with a null logprob and null alternatives
 * (nothing comes before it to score it). 0 or CERR_NOMEM. */
int lp_legacy_add_first(struct lp_legacy *L, const struct tok *tk, int32_t id);
/* The block built so far (a new reference), then empty again for the next part (a stream
 * sends each chunk's tokens). NULL on out of memory. */
json_t *lp_legacy_take(struct lp_legacy *L);
int lp_legacy_empty(const struct lp_legacy *L);
void lp_legacy_free(struct lp_legacy *L);

#endif
