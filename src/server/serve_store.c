/* serve_store.c — the Responses store behind previous_response_id (server-inventory §16.3).
 *
 * Per process, loop thread only. Each entry maps a response id to the conversation so far
 * (chat-shaped messages, system excluded) plus the instructions. TTL 1 h by default
 * ($CINFER_RESPONSE_TTL_MS overrides it, for tests); the total size, measured as the JSON
 * length of the entries, stays under 32 MiB: expired entries go first, then the least
 * recently used. A get refreshes the entry's LRU position (not its expiry).
 * The store's clock is the monotonic clock plus an offset that only the test control
 * POST /debug/advance-clock moves (serve_testctl.c), so a test expires entries without
 * waiting for a TTL.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "server/serve.h"
#include "util/clock.h"
#include "util/jsonfmt.h"

#define STORE_MAX_BYTES (32l << 20)

struct sentry {
    char *id;
    json_t *v; /* {messages, instructions} */
    size_t bytes;
    double expires; /* clock_now_s() deadline */
    unsigned long used;
};

static struct sentry *tab;
static int n_tab, cap_tab;
static size_t n_bytes;
static unsigned long tick;
static long ttl_ms = -1;
static double skew_s; /* store_advance_clock */

static double now_s(void) { return clock_now_s() + skew_s; }

void store_advance_clock(double s)
{
    if (s > 0)
        skew_s += s;
}

static long ttl(void)
{
    if (ttl_ms < 0) {
        const char *e = getenv("CINFER_RESPONSE_TTL_MS");
        char *end;
        long v = e && *e ? strtol(e, &end, 10) : -1;
        ttl_ms = v > 0 && !*end ? v : 3600000;
    }
    return ttl_ms;
}

static void drop(int k)
{
    n_bytes -= tab[k].bytes;
    free(tab[k].id);
    json_decref(tab[k].v);
    tab[k] = tab[--n_tab];
}

static void evict_expired(double now)
{
    for (int i = n_tab - 1; i >= 0; i--)
        if (tab[i].expires <= now)
            drop(i);
}

static int find(const char *id)
{
    for (int i = 0; i < n_tab; i++)
        if (!strcmp(tab[i].id, id))
            return i;
    return -1;
}

void store_put(const char *id, const json_t *messages, const char *instructions,
               const json_t *response)
{
    json_t *v = json_pack("{s:O, s:s?, s:O?}", "messages", (json_t *)messages, "instructions",
                          instructions, "response", (json_t *)response);
    char *s = v ? json_dumps_short(v, JSON_COMPACT) : NULL;
    size_t b = s ? strlen(s) + strlen(id) : 0;
    free(s);
    if (!v || !b || b > (size_t)STORE_MAX_BYTES) {
        json_decref(v);
        return;
    }
    double now = now_s();
    evict_expired(now);
    int k = find(id);
    if (k >= 0)
        drop(k);
    while (n_tab && n_bytes + b > (size_t)STORE_MAX_BYTES) {
        int lru = 0;
        for (int i = 1; i < n_tab; i++)
            if (tab[i].used < tab[lru].used)
                lru = i;
        drop(lru);
    }
    if (n_tab == cap_tab) {
        int nc = cap_tab ? cap_tab * 2 : 64;
        struct sentry *t = realloc(tab, (size_t)nc * sizeof *t);
        if (!t) {
            json_decref(v);
            return;
        }
        tab = t;
        cap_tab = nc;
    }
    char *idc = strdup(id);
    if (!idc) {
        json_decref(v);
        return;
    }
    tab[n_tab++] = (struct sentry){idc, v, b, now + (double)ttl() / 1000.0, ++tick};
    n_bytes += b;
}

json_t *store_get(const char *id)
{
    evict_expired(now_s());
    int k = find(id);
    if (k < 0)
        return NULL;
    tab[k].used = ++tick;
    return json_incref(tab[k].v);
}

int store_del(const char *id)
{
    evict_expired(clock_now_s());
    int k = find(id);
    if (k < 0)
        return -1;
    drop(k);
    return 0;
}

json_t *store_stats_json(void)
{
    evict_expired(now_s());
    return json_pack("{s:i, s:I, s:I, s:I}", "entries", n_tab, "bytes", (json_int_t)n_bytes,
                     "max_bytes", (json_int_t)STORE_MAX_BYTES, "ttl_ms", (json_int_t)ttl());
}
