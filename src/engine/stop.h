/* stop.h — stop sequences matched on decoded text as it streams.
 *
 * An Aho-Corasick automaton over the stop strings (bytes). Each push walks only the new bytes;
 * the matcher holds back the longest tail of the text that is still a prefix of some stop and
 * releases everything before it. A stop fires the moment its last byte arrives; among stops
 * completing at that same byte the one starting first (the longest) wins, so the outcome never
 * depends on how the text was split into pushes. With UTF-8 stops and UTF-8 text the emitted
 * pieces end on character boundaries. One matcher per request, one thread at a time.
 */
#ifndef CINFER_ENGINE_STOP_H
#define CINFER_ENGINE_STOP_H

#include <stddef.h>

#include "util/err.h"

struct stop_matcher;

/* Builds a matcher for stops[0..n) (NUL-terminated; empty ones are ignored; duplicates keep
 * the lowest index); the strings are copied. n = 0 gives a pass-through matcher.
 * Returns 0 and *out, or CERR_NOMEM (*out = NULL). */
int stop_new(struct stop_matcher **out, const char *const *stops, int n, struct cerr *e);
/* Gates stops[first..) on a reasoning block: they fire only where the text is outside it
 * (a stop completing inside the block is matched no further; its text passes through; a
 * shorter ungated stop ending at the same byte still fires). The block follows the rules of
 * api/reasoning.h: it is open from the start when inside != 0, else `open` opens it at its
 * first occurrence (NULL or "": never); `close` ends it, and it never opens again. Call once,
 * before the first push. Returns 0, or CERR_NOMEM (m unchanged). */
int stop_gate_block(struct stop_matcher *m, int first, const char *open, const char *close,
                    int inside);
/* Frees m; NULL is a no-op. */
void stop_free(struct stop_matcher *m);

/* Feeds text[0..n) and appends to *out (a malloc'd buffer the caller owns; *len bytes used of
 * *cap, grown with realloc; *out may start NULL with len = cap = 0) the text that can no
 * longer become part of a stop. Returns 1 when a stop fired: what was appended ends right
 * before the match, the stop text and everything after it are discarded, *which = the index
 * in the stops given to stop_new. Returns 0 otherwise, CERR_NOMEM on allocation failure
 * (nothing consumed). After a stop fired, further pushes append nothing and return 1. */
int stop_push(struct stop_matcher *m, const char *text, size_t n, char **out, size_t *len,
              size_t *cap, int *which);

/* End of generation: appends everything held back (nothing after a stop fired).
 * Returns 0 or CERR_NOMEM. */
int stop_flush(struct stop_matcher *m, char **out, size_t *len, size_t *cap);

/* The bytes currently held back (valid until the next push/flush); *n gets their count. */
const char *stop_held(const struct stop_matcher *m, size_t *n);

#endif
