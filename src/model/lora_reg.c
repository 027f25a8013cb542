/* lora_reg.c — the registry of mounted adapters: ids, weights, request counts, and the
 * resolution of a request's adapter text ("a", "a+b", "a,b", "none") into a stacked set.
 * One mutex guards everything; calls are short (no I/O, no loading under the lock).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/lora.h"

#define REG_MAX 64

struct reg_slot {
    struct lora_reg_entry info;
    struct lora_adapter *a;
};

struct lora_reg {
    pthread_mutex_t mu;
    struct reg_slot s[REG_MAX];
    int n;
    unsigned paths;
    void (*free_hook)(struct lora_adapter *, void *);
    void *free_ud;
};

int lora_reg_new(struct lora_reg **out, struct cerr *e)
{
    struct lora_reg *r = calloc(1, sizeof *r);
    if (!r)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    pthread_mutex_init(&r->mu, NULL);
    *out = r;
    return 0;
}

void lora_reg_free(struct lora_reg *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->n; i++) {
        r->s[i].a->free_hook = NULL; /* the engine is gone: free here */
        lora_unref(r->s[i].a);
    }
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static int id_ok(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n >= LORA_ID_MAX || !strcmp(id, "none"))
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

static int find(struct lora_reg *r, const char *id, size_t len)
{
    for (int i = 0; i < r->n; i++)
        if (strlen(r->s[i].info.id) == len && !strncmp(r->s[i].info.id, id, len))
            return i;
    return -1;
}

void lora_reg_set_free_hook(struct lora_reg *r, void (*hook)(struct lora_adapter *, void *),
                            void *ud)
{
    pthread_mutex_lock(&r->mu);
    r->free_hook = hook;
    r->free_ud = ud;
    for (int i = 0; i < r->n; i++) {
        r->s[i].a->free_hook = hook;
        r->s[i].a->free_ud = ud;
    }
    pthread_mutex_unlock(&r->mu);
}

int lora_reg_mount(struct lora_reg *r, const char *id, struct lora_adapter *a, float scale,
                   struct cerr *e)
{
    if (!id_ok(id))
        return cerr_set(e, CERR_INVALID,
                        "adapter id '%s' is not valid (1-63 of letters, digits, "
                        "'.', '_', '-'; not \"none\")",
                        id);
    pthread_mutex_lock(&r->mu);
    int rc = 0;
    if (find(r, id, strlen(id)) >= 0)
        rc = cerr_set(e, CERR_INVALID, "adapter id '%s' is already mounted", id);
    else if (r->n == REG_MAX)
        rc = cerr_set(e, CERR_LIMIT, "%d adapters are mounted already (the most)", REG_MAX);
    if (!rc) {
        struct reg_slot *s = &r->s[r->n++];
        memset(s, 0, sizeof *s);
        snprintf(s->info.id, sizeof s->info.id, "%s", id);
        snprintf(s->info.path, sizeof s->info.path, "%s", a->path);
        s->info.scale = scale;
        s->info.rank = a->rank;
        s->info.targets = a->targets;
        s->a = a;
        a->free_hook = r->free_hook;
        a->free_ud = r->free_ud;
        r->paths |= a->targets;
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

int lora_reg_unmount(struct lora_reg *r, const char *id, struct cerr *e)
{
    pthread_mutex_lock(&r->mu);
    int i = find(r, id, strlen(id));
    struct lora_adapter *a = NULL;
    if (i >= 0) {
        a = r->s[i].a;
        memmove(&r->s[i], &r->s[i + 1], (size_t)(r->n - i - 1) * sizeof r->s[0]);
        r->n--;
    }
    pthread_mutex_unlock(&r->mu);
    if (i < 0)
        return cerr_set(e, CERR_INVALID, "unknown adapter '%s'", id);
    lora_unref(a); /* running requests hold their own references */
    return 0;
}

int lora_reg_resolve(struct lora_reg *r, const char *spec, struct lora_set *set, char *bad_id,
                     size_t cap, struct cerr *e)
{
    memset(set, 0, sizeof *set);
    if (!spec || !*spec || !strcmp(spec, "none"))
        return 0;
    pthread_mutex_lock(&r->mu);
    int rc = 0;
    const char *p = spec;
    while (!rc) {
        size_t len = strcspn(p, "+,");
        /* trim spaces around an id ("a, b") */
        const char *q = p;
        size_t l = len;
        while (l && *q == ' ')
            q++, l--;
        while (l && q[l - 1] == ' ')
            l--;
        int i = find(r, q, l);
        if (i < 0) {
            rc = cerr_set(e, CERR_INVALID, "unknown adapter '%.*s'", (int)(l > 63 ? 63 : l), q);
            if (bad_id && cap)
                snprintf(bad_id, cap, "%.*s", (int)(l > 63 ? 63 : l), q);
        } else if (set->n == LORA_MAX_STACK) {
            rc = cerr_set(e, CERR_LIMIT, "at most %d adapters may be stacked", LORA_MAX_STACK);
        } else {
            set->a[set->n] = r->s[i].a;
            set->w[set->n] = r->s[i].info.scale;
            set->n++;
        }
        if (!p[len])
            break;
        p += len + 1;
    }
    if (!rc)
        lora_set_ref(set);
    else
        set->n = 0;
    pthread_mutex_unlock(&r->mu);
    return rc;
}

int lora_reg_has(struct lora_reg *r, const char *id)
{
    pthread_mutex_lock(&r->mu);
    int i = find(r, id, strlen(id));
    pthread_mutex_unlock(&r->mu);
    return i >= 0;
}

int lora_reg_list(struct lora_reg *r, struct lora_reg_entry *out, int cap)
{
    pthread_mutex_lock(&r->mu);
    int n = r->n;
    for (int i = 0; i < n && i < cap; i++)
        out[i] = r->s[i].info;
    pthread_mutex_unlock(&r->mu);
    return n;
}

unsigned lora_reg_paths(struct lora_reg *r)
{
    pthread_mutex_lock(&r->mu);
    unsigned p = r->paths;
    pthread_mutex_unlock(&r->mu);
    return p;
}

void lora_reg_admit(struct lora_reg *r, const struct lora_set *s, int delta)
{
    pthread_mutex_lock(&r->mu);
    for (int k = 0; k < s->n; k++)
        for (int i = 0; i < r->n; i++)
            if (r->s[i].a == s->a[k]) {
                r->s[i].info.running += delta;
                if (r->s[i].info.running < 0)
                    r->s[i].info.running = 0;
            }
    pthread_mutex_unlock(&r->mu);
}

void lora_reg_count(struct lora_reg *r, const struct lora_set *s, int delta)
{
    pthread_mutex_lock(&r->mu);
    for (int k = 0; k < s->n; k++)
        for (int i = 0; i < r->n; i++)
            if (r->s[i].a == s->a[k]) {
                if (delta > 0)
                    r->s[i].info.requests++;
                r->s[i].info.active += delta;
                if (r->s[i].info.active < 0)
                    r->s[i].info.active = 0;
            }
    pthread_mutex_unlock(&r->mu);
}
