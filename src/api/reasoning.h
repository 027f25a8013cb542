/* reasoning.h — split a model's decoded output into reasoning and content (think tags).
 *
 * Pure text: feed decoded pieces in order, receive segments tagged RSN_REASONING or
 * RSN_CONTENT through a callback. A partial tag at the end of a piece is held back until the
 * next piece resolves it; rsn_flush() releases what is left at the end of the generation.
 * Rules (docs/tool-calling.md, "Reasoning"): one think block per turn; text before it is
 * content; whitespace right after the open tag, right before the close tag and right after
 * the close tag is dropped (Qwen3 writes "<think>\n…\n</think>\n\n"). Not thread-safe: one
 * splitter per request, used by one thread.
 */
#ifndef CINFER_API_REASONING_H
#define CINFER_API_REASONING_H

#include <stddef.h>

#include "util/err.h"

enum rsn_kind { RSN_CONTENT = 0, RSN_REASONING = 1 };

/* Receives one resolved segment (n > 0). `t` is valid only during the call (copy it). */
typedef void (*rsn_emit_fn)(int kind, const char *t, size_t n, void *ud);

struct rsn_splitter;

/* Creates a splitter. `open`/`close` are the tag strings (e.g. "<think>", "</think>"); when
 * `open` is NULL or "" the splitter is disabled and passes every byte through as content
 * (models without think tags). `start_inside` != 0 means the prompt already opened the block
 * (see reasoning_prompt_open), so output starts as reasoning. Returns 0, or CERR_INVALID
 * (open given without close) / CERR_NOMEM with `e` filled. Caller frees with rsn_free(). */
int rsn_new(struct rsn_splitter **out, const char *open, const char *close, int start_inside,
            struct cerr *e);

/* Feeds `n` bytes of decoded text; calls emit for every segment that is now resolved (zero,
 * one or several per call, in order). Returns 0, or CERR_NOMEM (state unchanged). */
int rsn_push(struct rsn_splitter *s, const char *text, size_t n, rsn_emit_fn emit, void *ud);

/* End of generation: emits what was held back (a partial tag is then plain text of the
 * current kind; trailing whitespace of unterminated reasoning is dropped). The splitter
 * may be reused afterwards only through rsn_reset(). Returns 0. */
int rsn_flush(struct rsn_splitter *s, rsn_emit_fn emit, void *ud);

/* Returns the splitter to its state right after rsn_new (same tags and start_inside). */
void rsn_reset(struct rsn_splitter *s);

/* 1 while the splitter is inside the think block (reasoning), else 0. */
int rsn_inside(const struct rsn_splitter *s);

/* Frees the splitter; NULL is fine. */
void rsn_free(struct rsn_splitter *s);

/* 1 when the rendered prompt (the generation prompt) leaves a think block open, i.e. the
 * prompt ends with `open` followed only by whitespace (DeepSeek-R1 distills, Qwen3
 * thinking-2507 templates end with "<think>\n"); 0 otherwise, or when an argument is NULL or
 * `open` is empty. An open tag earlier in the prompt (past turns, user text) does not count. */
int reasoning_prompt_open(const char *rendered_prompt, const char *open);

#endif
