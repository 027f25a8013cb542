/* replay.c — see replay.h. A small array of entries scanned linearly (≤ REPLAY_MAX_ENTRIES
 * turns of a few calls each; one lookup per assistant message of a request), stamped with a
 * use counter for LRU eviction.
 */
#include "api/replay.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct rentry {
    char **ids;
    int n_ids;
    char *raw;
    size_t n;
    uint64_t used;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct rentry tab[REPLAY_MAX_ENTRIES];
static int n_tab;
static size_t n_bytes;
static uint64_t tick;

static size_t entry_bytes(const struct rentry *e)
{
    size_t b = e->n;
    for (int i = 0; i < e->n_ids; i++)
        b += strlen(e->ids[i]) + 1;
    return b;
}

static void entry_free(struct rentry *e)
{
    for (int i = 0; i < e->n_ids; i++)
        free(e->ids[i]);
    free(e->ids);
    free(e->raw);
    memset(e, 0, sizeof *e);
}

/* Locked. Removes entry k (swap with the last). */
static void drop(int k)
{
    n_bytes -= entry_bytes(&tab[k]);
    entry_free(&tab[k]);
    tab[k] = tab[--n_tab];
    memset(&tab[n_tab], 0, sizeof tab[n_tab]);
}

static void drop_lru(void)
{
    int k = 0;
    for (int i = 1; i < n_tab; i++)
        if (tab[i].used < tab[k].used)
            k = i;
    drop(k);
}

/* Locked. The entry holding id, or -1. */
static int find(const char *id)
{
    for (int i = 0; i < n_tab; i++)
        for (int j = 0; j < tab[i].n_ids; j++)
            if (!strcmp(tab[i].ids[j], id))
                return i;
    return -1;
}

int replay_put(const char *const *ids, int n_ids, const char *raw, size_t n)
{
    if (n_ids <= 0 || !raw)
        return 0;
    struct rentry e = {0};
    e.ids = calloc((size_t)n_ids, sizeof *e.ids);
    e.raw = malloc(n + 1);
    if (!e.ids || !e.raw) {
        free(e.ids);
        free(e.raw);
        return -1;
    }
    memcpy(e.raw, raw, n);
    e.raw[n] = 0;
    e.n = n;
    for (int i = 0; i < n_ids; i++) {
        if (!(e.ids[i] = strdup(ids[i] ? ids[i] : ""))) {
            entry_free(&e);
            return -1;
        }
        e.n_ids = i + 1;
    }
    size_t b = entry_bytes(&e);
    if (b > REPLAY_MAX_BYTES) {
        entry_free(&e);
        return 0;
    }
    pthread_mutex_lock(&mu);
    for (int i = 0; i < n_ids; i++) { /* an id reused: the new turn wins */
        int k;
        while ((k = find(e.ids[i])) >= 0)
            drop(k);
    }
    while (n_tab > 0 && (n_tab == REPLAY_MAX_ENTRIES || n_bytes + b > REPLAY_MAX_BYTES))
        drop_lru();
    e.used = ++tick;
    tab[n_tab++] = e;
    n_bytes += b;
    pthread_mutex_unlock(&mu);
    return 0;
}

/* The id of a tool call in the normalised OpenAI shape. */
static const char *call_id(json_t *c)
{
    return json_string_value(json_object_get(c, "id"));
}

int replay_apply(json_t *messages)
{
    if (!json_is_array(messages))
        return 0;
    int done = 0;
    size_t i;
    json_t *m;
    pthread_mutex_lock(&mu);
    json_array_foreach(messages, i, m)
    {
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *tc = json_object_get(m, "tool_calls");
        if (!role || strcmp(role, "assistant") || !json_is_array(tc) || !json_array_size(tc))
            continue;
        const char *first = call_id(json_array_get(tc, 0));
        int k = first ? find(first) : -1;
        if (k < 0 || (size_t)tab[k].n_ids != json_array_size(tc))
            continue;
        int same = 1;
        for (int j = 0; j < tab[k].n_ids && same; j++) {
            const char *id = call_id(json_array_get(tc, (size_t)j));
            same = id && !strcmp(id, tab[k].ids[j]);
        }
        if (!same)
            continue;
        json_t *s = json_stringn_nocheck(tab[k].raw, tab[k].n);
        if (!s || json_object_set_new(m, "content", s))
            continue;
        json_object_del(m, "tool_calls");
        tab[k].used = ++tick;
        done++;
    }
    pthread_mutex_unlock(&mu);
    return done;
}

void replay_stats(size_t *entries, size_t *bytes)
{
    pthread_mutex_lock(&mu);
    *entries = (size_t)n_tab;
    *bytes = n_bytes;
    pthread_mutex_unlock(&mu);
}

void replay_clear(void)
{
    pthread_mutex_lock(&mu);
    while (n_tab)
        drop(n_tab - 1);
    pthread_mutex_unlock(&mu);
}
