/* arena.c — see arena.h. */
#include "util/arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct arena_chunk {
    struct arena_chunk *next;
    size_t cap, used;
    _Alignas(16) unsigned char data[];
};

void arena_init(struct arena *a, size_t chunk_size)
{
    a->head = NULL;
    a->chunk_size = chunk_size ? chunk_size : 64 * 1024;
    a->used_total = 0;
}

void arena_free(struct arena *a)
{
    struct arena_chunk *c = a->head;
    while (c) {
        struct arena_chunk *n = c->next;
        free(c);
        c = n;
    }
    a->head = NULL;
    a->used_total = 0;
}

void *arena_alloc(struct arena *a, size_t n)
{
    size_t need = (n + 15) & ~(size_t)15;
    if (need < n)
        return NULL;
    struct arena_chunk *c = a->head;
    if (!c || c->cap - c->used < need) {
        size_t cap = need > a->chunk_size ? need : a->chunk_size;
        if (cap > SIZE_MAX - sizeof *c)
            return NULL;
        struct arena_chunk *nc = malloc(sizeof *nc + cap);
        if (!nc)
            return NULL;
        nc->cap = cap;
        nc->used = 0;
        if (c && need > a->chunk_size) { /* keep the current chunk on top for small allocs */
            nc->next = c->next;
            c->next = nc;
        } else {
            nc->next = c;
            a->head = nc;
        }
        c = nc;
    }
    void *p = c->data + c->used;
    c->used += need;
    a->used_total += need;
    return p;
}

void *arena_calloc(struct arena *a, size_t count, size_t size)
{
    if (size && count > SIZE_MAX / size)
        return NULL;
    void *p = arena_alloc(a, count * size);
    if (p)
        memset(p, 0, count * size);
    return p;
}

char *arena_strndup(struct arena *a, const char *s, size_t n)
{
    char *p = arena_alloc(a, n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

char *arena_strdup(struct arena *a, const char *s) { return arena_strndup(a, s, strlen(s)); }
