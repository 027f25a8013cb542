/* arena.h — bump allocator for request- and load-lifetime memory.
 *
 * Chunks are malloc'd on demand and freed together by arena_free(). Not thread-safe:
 * one arena belongs to one owner. Allocation failure returns NULL (callers map it to
 * CERR_NOMEM); nothing aborts.
 */
#ifndef CINFER_UTIL_ARENA_H
#define CINFER_UTIL_ARENA_H

#include <stddef.h>

struct arena_chunk;

struct arena {
    struct arena_chunk *head;
    size_t chunk_size; /* default chunk payload; larger requests get their own chunk */
    size_t used_total; /* bytes handed out, for stats */
};

void arena_init(struct arena *a, size_t chunk_size);
/* Frees every chunk; the arena may be reused afterwards. */
void arena_free(struct arena *a);
/* 16-byte aligned, uninitialised. NULL on failure. */
void *arena_alloc(struct arena *a, size_t n);
/* Zeroed. */
void *arena_calloc(struct arena *a, size_t count, size_t size);
/* Copies s[0..n) plus a NUL terminator. */
char *arena_strndup(struct arena *a, const char *s, size_t n);
char *arena_strdup(struct arena *a, const char *s);

#endif
