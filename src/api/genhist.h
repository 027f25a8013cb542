/* genhist.h — exact generated history: the next turn's prompt uses the ids the model
 * sampled, not a re-tokenization of their text.
 *
 * Re-tokenizing generated text need not give back the sampled ids (BPE has many ways to
 * spell a string; the model may pick a non-canonical one), and one changed id breaks prefix
 * reuse from that position on. So every finished generation's text is remembered with its
 * exact ids (genhist_put, fed through a struct genhist_acc by the job glue), and when a
 * rendered chat prompt contains that text again (the assistant message rendered back —
 * plain text, reasoning or tool calls, in whatever the template writes), genhist_encode
 * tokenizes the rest normally and splices the sampled ids in for that span. The split
 * points are where the original generation started (after the generation prompt) and where
 * it ended (before the template's end-of-turn markup), so the spliced prompt is the one the
 * model saw. The splice is used only when it decodes back to exactly the rendered text (a
 * SentencePiece tokenizer's dummy prefix on each segment would not): else the plain
 * encoding. Only texts of at least GENHIST_MIN_BYTES are kept (a short text could match a
 * user's words by chance; a longer one gains nothing from replay there anyway).
 * A span is anchored: with each text the end of the prompt it was generated after is kept
 * (its last few tokens' text, at most GENHIST_LEAD bytes: the generation prompt, e.g.
 * "<|im_start|>assistant\n"), and the text is spliced only where the rendered prompt has that
 * lead right before it. The same words elsewhere — inside a system prompt's tool list, a
 * user message, another call's rendering — keep their plain encoding, so a later prompt is
 * the same input as a cold one.
 * Process-wide, bounded (GENHIST_MAX_ENTRIES, GENHIST_MAX_BYTES, oldest dropped first); one
 * mutex, any thread.
 */
#ifndef CINFER_API_GENHIST_H
#define CINFER_API_GENHIST_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tok.h"
#include "util/err.h"

#define GENHIST_MAX_ENTRIES 512
#define GENHIST_MAX_BYTES (16u << 20)
#define GENHIST_MIN_BYTES 16
#define GENHIST_LEAD 24

/* Remembers that ids[0..n_ids) were sampled as text[0..n) right after a prompt ending with
 * lead[0..lead_n) (lead_n <= GENHIST_LEAD; 0 = no anchor: spliced wherever the text
 * appears). Replaces an entry of the same text. Returns 0, or -1 (out of memory or not
 * kept: too short or too large). */
int genhist_put(const char *text, size_t n, const int32_t *ids, int n_ids, const char *lead,
                size_t lead_n);

/* tok_encode(text) with remembered spans replaced by their sampled ids. flags as
 * tok_encode's (TOK_ADD_SPECIAL applies to the first segment only). *n_replayed gets the
 * number of ids that came from the history (may be NULL). Returns 0 or tok_encode's error. */
int genhist_encode(const struct tok *t, const char *text, size_t len, int flags, int32_t **ids,
                   int *n, int *n_replayed, struct cerr *e);

/* Accumulates one generation's ids and text as its events arrive (one thread). */
struct genhist_acc {
    int32_t *ids;
    int n, cap;
    char *text;
    size_t len, tcap;
    int oom;
    char lead[GENHIST_LEAD];
    size_t lead_n;
};
/* The prompt the generation follows (before any token): its end becomes the anchor. */
void genhist_acc_lead(struct genhist_acc *a, const struct tok *t, const int32_t *prompt, int n);
void genhist_acc_token(struct genhist_acc *a, int32_t id, const char *text, size_t len);
/* The generation ended: text is what the end released. keep: the ids are exactly the text
 * (it ended on an end-of-generation id, dropped here, or at the length limit; not at a stop
 * string, whose ids the text no longer covers). Stores it when keep and no kept id is a
 * special token (its text is not in the decoded text, so the span would not be the text),
 * then frees. */
void genhist_acc_end(struct genhist_acc *a, const struct tok *t, const char *text, size_t len,
                     int keep, int drop_last);

/* Entries and bytes now; drops everything (tests). */
void genhist_stats(size_t *entries, size_t *bytes);
void genhist_clear(void);

#endif
