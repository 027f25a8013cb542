/* replay.h — prefix stability for agents: replay the exact sampled text of tool-call turns.
 *
 * When a turn ends with tool calls, the server keeps the exact text the model sampled for
 * that turn, keyed by the call ids it returned. Clients send the calls back re-serialized
 * (other JSON spacing, key order, ids in other shapes), which a chat template would render
 * differently from what the model produced, so the next prompt would diverge from the
 * cached tokens. replay_apply() rewrites such an assistant message into {content: the exact
 * text} without tool_calls, so the template renders the sampled bytes again (anchors §5).
 * Process-wide, bounded LRU (REPLAY_MAX_ENTRIES turns, REPLAY_MAX_BYTES of text); safe from
 * any thread (one mutex).
 */
#ifndef CINFER_API_REPLAY_H
#define CINFER_API_REPLAY_H

#include <jansson.h>
#include <stddef.h>

#define REPLAY_MAX_ENTRIES 1024
#define REPLAY_MAX_BYTES (8u << 20)

/* Remembers raw[0..n) as the sampled text of a turn whose calls got ids[0..n_ids) in this
 * order. Older entries are dropped (least recently used first) to stay within the caps.
 * A turn larger than the byte cap is not kept. Returns 0, or -1 when out of memory. */
int replay_put(const char *const *ids, int n_ids, const char *raw, size_t n);

/* Rewrites, in place, every assistant message of a normalised chat `messages` array whose
 * tool_calls ids are exactly (same order, same count) the ids of one stored turn: content
 * becomes the stored text and tool_calls is removed. Returns the number of messages
 * rewritten (0 when none matched, or on a malformed array). */
int replay_apply(json_t *messages);

/* Current entry count and stored bytes. */
void replay_stats(size_t *entries, size_t *bytes);

/* Drops everything (tests). */
void replay_clear(void);

#endif
