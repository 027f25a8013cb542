/* gram_row.h — one sampling row's grammar: the matcher, its mask buffer, and the trigger a
 * lazy grammar waits for (a tool call's opening, a reasoning block's end). The sampler
 * holds one and calls the hooks below, all on the thread that samples the row; after an
 * accepted token the next mask is computed on a shared worker thread, overlapping the
 * model's forward (CINFER_GRAMMAR_ASYNC=0: in gram_row_mask instead); the first mask is
 * queued when the row is made, so it is computed while the prompt is fed. */
#ifndef CINFER_ENGINE_GRAMMAR_GRAM_ROW_H
#define CINFER_ENGINE_GRAMMAR_GRAM_ROW_H

#include <stdint.h>

#include "engine/grammar/gram.h"

struct gram_row;

/* Takes ownership of m (freed on failure too). trigger NULL: masking from the first token;
 * else none until the generated text contains trigger, then the matcher takes the text from
 * the trigger on (after = 1: only what follows it). open (with trigger: a reasoning block
 * the model may open itself, trigger its end): masking from the first token, where the ids
 * that spell the start of open are allowed besides the grammar's; a first token that starts
 * open (the opening wins where the grammar could take it too) leaves only open's rest
 * allowed until it is complete, and then the row is free until trigger, after which the
 * grammar takes what follows (as after = 1); any other first token is the grammar's, and
 * the opening is no longer possible. Never forced (gram_row_forced) while undecided.
 * Returns 0 or CERR_NOMEM. */
int gram_row_new(struct gram_row **out, struct gram_matcher *m, int n_vocab, const char *trigger,
                 int after, const char *open);
void gram_row_free(struct gram_row *r);
/* 1 while masking (a lazy grammar that has seen its trigger, and was not dropped). */
int gram_row_on(const struct gram_row *r);
/* -inf on every logit the grammar cannot take (a dead matcher leaves the row as it is). */
void gram_row_mask(struct gram_row *r, float *logits, int n_vocab);
/* The sampled token: advances the matcher, or (lazy) looks for the trigger. A lazy grammar
 * whose text after the trigger it refuses is dropped (the row goes on free). */
void gram_row_accept(struct gram_row *r, int32_t id);
/* Jump-forward (on when CINFER_GRAMMAR_JUMP=1, read once): 1 and *id when the next mask
 * allows exactly one id; the mask stays ready for gram_row_mask. 0 when off or not forced. */
int gram_row_forced(struct gram_row *r, int32_t *id);
struct gram_matcher *gram_row_matcher(const struct gram_row *r);
/* 1 once the matcher passed its work bound (gram.h: CERR_LIMIT, a grammar too ambiguous to
 * enforce): its masks no longer apply, and the caller must end the row with an error. */
int gram_row_over(const struct gram_row *r);
/* The bitset gram_row_mask applies ((n_vocab + 31) / 32 words; bit i % 32 of word i / 32
 * set = id i allowed), for a device to apply: valid until the next gram_row_accept (the
 * mask stays ready for gram_row_mask). NULL when no mask applies (not masking, or nothing
 * allowed: gram_row_mask then leaves the row as it is). Waits for the worker's job. */
const uint32_t *gram_row_bits(struct gram_row *r);

#endif
