/* iso_admin.c — the supervisor's engine management beyond the relay: the drain call to an
 * engine (POST /admin/drain on its unix socket, so that its prompt cache goes to the SSD tier
 * before it stops), POST /admin/sleep and /admin/wake, the pool's memory fit, and the
 * per-engine label on the relayed /metrics. See iso_int.h and docs/isolation.md.
 *
 * The drain call blocks (the engine finishes its requests and writes its cache), so it runs
 * on a thread of its own and posts its result back to the loop; so does the pool's /metrics,
 * which asks every ready engine. Everything else runs on the loop thread and never blocks it.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <jansson.h>

#include "engine/plan.h"
#include "server/isolate/iso_int.h"
#include "server/serve.h"
#include "util/jsonfmt.h"
#include "util/log.h"
#include "util/sbuf.h"

/* The engine's drain waits up to 60 s for its requests and 60 s for its writes. */
static const int DRAIN_REPLY_TIMEOUT_S = 150;

/* ---- POST /admin/drain on the engine's socket ------------------------------------------- */

struct drain_job {
    struct iso *s;
    int idx;
    pid_t pid;
    char sock[100];
    long demotions;
    int ok;
};

/* Loop thread: the engine answered (or not): count its demotions and stop it. */
static void drain_done(void *ud)
{
    struct drain_job *j = ud;
    struct iso_engine *e = &j->s->eng[j->idx];
    if (e->pid == j->pid && e->draining) {
        e->demotions += j->demotions;
        j->s->demotions += j->demotions;
        if (j->ok)
            log_info("isolate: engine %s drained (%ld KV blocks demoted to the SSD tier)", e->id,
                     j->demotions);
        else
            log_warn("isolate: engine %s did not answer its drain; stopping it", e->id);
        kill(e->pid, SIGTERM);
    }
    free(j);
}

/* One blocking HTTP/1.0 exchange on the engine's socket; the reply body is parsed. */
static void *drain_main(void *arg)
{
    struct drain_job *j = arg;
    struct iso *s = j->s;
    char *body = NULL;
    if (iso_sock_exchange(j->sock, "POST /admin/drain HTTP/1.0\r\nHost: engine\r\n"
                                   "Content-Length: 0\r\n\r\n",
                          DRAIN_REPLY_TIMEOUT_S * 1000, 4096, &body) == 200 && body) {
        json_t *r = json_loads(body, 0, NULL);
        json_t *d = json_object_get(r, "demotions");
        j->ok = json_is_true(json_object_get(r, "drained"));
        j->demotions = json_is_integer(d) ? (long)json_integer_value(d) : 0;
        json_decref(r);
    }
    free(body);
    if (http_post(s->http, drain_done, j))
        free(j); /* the loop is gone: the shutdown stops the child */
    __atomic_sub_fetch(&s->drain_threads, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

int iso_drain_post(struct iso *s, struct iso_engine *e)
{
    struct drain_job *j = calloc(1, sizeof *j);
    if (!j)
        return -1;
    j->s = s;
    j->idx = (int)(e - s->eng);
    j->pid = e->pid;
    snprintf(j->sock, sizeof j->sock, "%s", e->sock);
    pthread_t th;
    __atomic_add_fetch(&s->drain_threads, 1, __ATOMIC_SEQ_CST);
    if (pthread_create(&th, NULL, drain_main, j)) {
        __atomic_sub_fetch(&s->drain_threads, 1, __ATOMIC_SEQ_CST);
        free(j);
        return -1;
    }
    pthread_detach(th);
    return 0;
}

void iso_drain_wait(struct iso *s)
{
    /* the children are stopped: their sockets closed, so every drain thread ends soon */
    for (int t = 0; t < 500 && __atomic_load_n(&s->drain_threads, __ATOMIC_SEQ_CST) > 0; t++)
        usleep(10000);
}

/* ---- POST /admin/sleep, /admin/wake ----------------------------------------------------- */

enum { ADM_SLEEP = 1, ADM_WAKE };

struct iso_adm {
    struct http_req *r;
    int kind, idx;
    long demotions0; /* s->demotions when the sleep began */
    double t0;
    struct iso_adm *next;
};

static void reply_json(struct http_req *r, int status, json_t *j)
{
    char *b = j ? json_dumps_short(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (b)
        http_reply(r, status, "application/json", b, strlen(b));
    else
        http_reply_error(r, 500, "out of memory");
    free(b);
}

static int admin_allowed(struct http_req *r)
{
    if (http_req_peer_loopback(r))
        return 1;
    char *b = iso_error_body(http_req_path(r), 403, "permission_error",
                             "sleep and wake answer loopback clients only");
    if (b)
        http_reply(r, 403, NULL, b, strlen(b));
    else
        http_reply_error(r, 403, "forbidden");
    free(b);
    return 0;
}

static void adm_add(struct iso *s, struct http_req *r, int kind, int idx)
{
    struct iso_adm *a = calloc(1, sizeof *a);
    if (!a) {
        http_reply_error(r, 500, "out of memory");
        return;
    }
    a->r = r, a->kind = kind, a->idx = idx, a->demotions0 = s->demotions, a->t0 = iso_now();
    http_req_ref(r);
    a->next = s->adm;
    s->adm = a;
}

/* Sleep: every resident engine is drained once idle (its cache demoted to the SSD tier, its
 * process stopped: weights and KV freed); the reply comes when none is resident. A request
 * meanwhile is served first; one after the sleep starts the engine again (a wake). */
static void h_sleep(struct http_req *r, void *ud)
{
    struct iso *s = ud;
    if (!admin_allowed(r))
        return;
    for (int i = 0; i < s->n_eng; i++)
        if (s->eng[i].pid > 0) {
            s->eng[i].sleep_pending = 1;
            s->eng[i].wake_pending = 0;
        }
    adm_add(s, r, ADM_SLEEP, -1);
    iso_admin_step(s);
}

/* Wake: starts the engine of {"model": id} (default: the most recently used one) and answers
 * once it is ready. */
static void h_wake(struct http_req *r, void *ud)
{
    struct iso *s = ud;
    if (!admin_allowed(r))
        return;
    struct iso_engine *e = iso_default_engine(s);
    size_t n = 0;
    const char *body = http_req_body(r, &n);
    json_t *j = n ? json_loadb(body, n, 0, NULL) : NULL;
    const char *id = json_string_value(json_object_get(j, "model"));
    if (id && !(e = iso_engine_by_id(s, id))) {
        char msg[400];
        snprintf(msg, sizeof msg, "model '%.200s' not found", id);
        char *b = iso_error_body(http_req_path(r), 404, "not_found_error", msg);
        http_reply(r, 404, NULL, b ? b : msg, strlen(b ? b : msg));
        free(b);
        json_decref(j);
        return;
    }
    json_decref(j);
    e->sleep_pending = 0;
    if (e->state != ENG_READY || e->draining)
        e->wake_pending = 1;
    adm_add(s, r, ADM_WAKE, (int)(e - s->eng));
    iso_admin_step(s);
}

int iso_admin_routes(struct iso *s)
{
    return http_route(s->http, "POST", "/admin/sleep", 0, h_sleep, s) ||
                   http_route(s->http, "POST", "/admin/wake", 0, h_wake, s)
               ? -1
               : 0;
}

/* 1 when the adm request is answered (and may be freed). */
static int adm_answer(struct iso *s, struct iso_adm *a)
{
    if (a->kind == ADM_SLEEP) {
        for (int i = 0; i < s->n_eng; i++)
            if (s->eng[i].sleep_pending)
                return 0;
        json_t *asleep = json_array();
        for (int i = 0; i < s->n_eng; i++)
            if (s->eng[i].pid == 0)
                json_array_append_new(asleep, json_string(s->eng[i].id));
        reply_json(a->r, 200,
                   json_pack("{s:b, s:I, s:o, s:i, s:f}", "asleep", iso_resident(s) == 0,
                             "demotions", (json_int_t)(s->demotions - a->demotions0), "unloaded",
                             asleep, "resident", iso_resident(s), "sleep_s", iso_now() - a->t0));
        return 1;
    }
    struct iso_engine *e = &s->eng[a->idx];
    if (e->state == ENG_READY && !e->draining) {
        reply_json(a->r, 200,
                   json_pack("{s:b, s:s, s:I, s:f}", "awake", 1, "model", e->id, "pid",
                             (json_int_t)e->pid, "wake_s", iso_now() - a->t0));
        return 1;
    }
    if (e->state == ENG_BACKOFF || (e->state == ENG_DOWN && !e->wake_pending && !e->waiting)) {
        char msg[400];
        snprintf(msg, sizeof msg, "the engine of %.100s could not start: %.250s", e->id,
                 e->reason[0] ? e->reason : "unknown");
        char *b = iso_error_body(http_req_path(a->r), 503, "engine_unavailable", msg);
        http_reply(a->r, 503, NULL, b ? b : msg, strlen(b ? b : msg));
        free(b);
        return 1;
    }
    return 0;
}

void iso_admin_step(struct iso *s)
{
    for (int i = 0; i < s->n_eng; i++) {
        struct iso_engine *e = &s->eng[i];
        if (!e->sleep_pending)
            continue;
        if (e->pid == 0) { /* asleep (or it died: nothing left to free) */
            e->sleep_pending = 0;
            continue;
        }
        /* a request in flight or held is served first; then the engine sleeps */
        if (e->state == ENG_READY && !e->draining && !e->inflight && !e->waiting)
            iso_drain(s, e, "sleep");
    }
    for (struct iso_adm **pp = &s->adm; *pp;) {
        struct iso_adm *a = *pp;
        if (s->stopping || adm_answer(s, a)) {
            if (s->stopping)
                http_reply_error(a->r, 503, "the server is shutting down");
            *pp = a->next;
            http_req_unref(a->r);
            free(a);
        } else
            pp = &a->next;
    }
}

/* ---- the pool's memory fit ---------------------------------------------------------------- */

static long long path_bytes(const char *path)
{
    struct stat st;
    if (!path || stat(path, &st))
        return -1;
    if (!S_ISDIR(st.st_mode))
        return (long long)st.st_size;
    DIR *d = opendir(path);
    if (!d)
        return -1;
    long long sum = 0;
    struct dirent *de;
    char p[2048];
    while ((de = readdir(d))) {
        snprintf(p, sizeof p, "%s/%s", path, de->d_name);
        if (de->d_name[0] != '.' && !stat(p, &st) && S_ISREG(st.st_mode))
            sum += (long long)st.st_size;
    }
    closedir(d);
    return sum;
}

int iso_fit(struct iso *s, struct iso_engine *e, char *msg, size_t cap)
{
    if (s->engine_budget <= 0) {
        double given = s->o->memory_budget_gb > 0 ? s->o->memory_budget_gb * 1e9 : 0;
        double ram = (double)plan_ram_bytes() * 0.75;
        s->engine_budget = given > 0 ? given : s->cap > 1 ? ram / s->cap : ram;
        s->pool_budget = given > 0 ? given * s->cap : ram;
    }
    if (e->need_bytes == 0)
        e->need_bytes = path_bytes(e->model);
    if (e->need_bytes < 0 || s->engine_budget <= 0)
        return 0; /* unknown: the engine's own plan decides */
    if ((double)e->need_bytes > s->engine_budget) {
        snprintf(msg, cap,
                 "model %s does not fit: its weights take %.3f GB and an engine of this pool may "
                 "use %.3f GB (%s); raise --memory-budget or lower --model-pool",
                 e->id, (double)e->need_bytes / 1e9, s->engine_budget / 1e9,
                 s->o->memory_budget_gb > 0 ? "--memory-budget" : "75% of RAM / --model-pool");
        return -1;
    }
    double used = 0;
    for (int i = 0; i < s->n_eng; i++)
        if (&s->eng[i] != e && s->eng[i].pid > 0 && s->eng[i].need_bytes > 0)
            used += (double)s->eng[i].need_bytes;
    return used + (double)e->need_bytes > s->pool_budget ? 1 : 0;
}

/* ---- /metrics: the engine's series labelled with its id ---------------------------------- */

char *iso_metrics_relabel(const char *text, size_t n, const char *id)
{
    struct sbuf b = {0};
    char lab[300];
    snprintf(lab, sizeof lab, "engine=\"%s\"", id);
    int rc = 0;
    size_t i = 0;
    while (i < n && !rc) {
        const char *line = text + i;
        const char *nl = memchr(line, '\n', n - i);
        size_t len = nl ? (size_t)(nl - line) : n - i;
        i += len + (nl != NULL);
        if (!len || line[0] == '#') {
            rc |= sbuf_append(&b, line, len);
        } else {
            size_t name = 0;
            while (name < len && line[name] != '{' && line[name] != ' ')
                name++;
            rc |= sbuf_append(&b, line, name);
            if (name < len && line[name] == '{') {
                int empty = name + 1 < len && line[name + 1] == '}';
                rc |= sbuf_printf(&b, "{%s%s", lab, empty ? "}" : ",");
                rc |= sbuf_append(&b, line + name + 1 + empty, len - name - 1 - empty);
            } else {
                rc |= sbuf_printf(&b, "{%s}", lab);
                rc |= sbuf_append(&b, line + name, len - name);
            }
        }
        if (nl)
            rc |= sbuf_append(&b, "\n", 1);
    }
    if (rc) {
        sbuf_free(&b);
        return NULL;
    }
    return b.p ? b.p : strdup("");
}

/* ---- /metrics of a pool: every ready engine's series, merged by family ------------------- */

struct fam {
    char name[160];
    int head_from; /* the text whose HELP/TYPE lines it keeps, -1 = none yet */
    struct sbuf head, samples;
};

static int fam_of(struct fam **f, int *n, int *cap, const char *name, size_t len)
{
    if (len >= sizeof(*f)[0].name)
        len = sizeof(*f)[0].name - 1;
    for (int i = 0; i < *n; i++)
        if (strlen((*f)[i].name) == len && !memcmp((*f)[i].name, name, len))
            return i;
    if (*n == *cap) {
        int nc = *cap ? 2 * *cap : 64;
        struct fam *nf = realloc(*f, (size_t)nc * sizeof *nf);
        if (!nf)
            return -1;
        *f = nf, *cap = nc;
    }
    struct fam *x = &(*f)[*n];
    memset(x, 0, sizeof *x);
    memcpy(x->name, name, len);
    x->head_from = -1;
    return (*n)++;
}

char *iso_metrics_merge(char *const *texts, int n_texts)
{
    struct fam *f = NULL;
    int n = 0, cap = 0, rc = 0;
    for (int t = 0; t < n_texts && !rc; t++) {
        const char *p = texts[t] ? texts[t] : "";
        int cur = fam_of(&f, &n, &cap, "", 0);
        rc |= cur < 0;
        while (*p && !rc) {
            const char *nl = strchr(p, '\n');
            size_t len = nl ? (size_t)(nl - p) : strlen(p);
            if (len > 7 && (!strncmp(p, "# HELP ", 7) || !strncmp(p, "# TYPE ", 7))) {
                const char *nm = p + 7;
                size_t k = 0;
                while (7 + k < len && nm[k] != ' ')
                    k++;
                cur = fam_of(&f, &n, &cap, nm, k);
                rc |= cur < 0;
                if (!rc && f[cur].head_from < 0)
                    f[cur].head_from = t;
                if (!rc && f[cur].head_from == t) /* HELP and TYPE once: the first text's */
                    rc |= sbuf_append(&f[cur].head, p, len) || sbuf_append(&f[cur].head, "\n", 1);
            } else if (len && !rc) {
                rc |= sbuf_append(&f[cur].samples, p, len) || sbuf_append(&f[cur].samples, "\n", 1);
            }
            p += len + (nl != NULL);
        }
    }
    struct sbuf out = {0};
    for (int i = 0; i < n && !rc; i++) {
        if (f[i].head.len)
            rc |= sbuf_append(&out, f[i].head.p, f[i].head.len);
        if (f[i].samples.len)
            rc |= sbuf_append(&out, f[i].samples.p, f[i].samples.len);
    }
    for (int i = 0; i < n; i++)
        sbuf_free(&f[i].head), sbuf_free(&f[i].samples);
    free(f);
    if (rc) {
        sbuf_free(&out);
        return NULL;
    }
    return out.p ? out.p : strdup("");
}

struct metrics_job {
    struct iso *s;
    struct http_req *r;
    int n;
    char sock[ISO_MAX_ENGINES][100];
    char id[ISO_MAX_ENGINES][256];
    char *tail; /* the supervisor's series (made on the loop) */
    char *out;
};

/* One engine's /metrics body over its socket (malloc'd), or NULL. Bounded: 5 s, 16 MiB. */
static char *fetch_metrics(const char *sock)
{
    char *body = NULL;
    iso_sock_exchange(sock, "GET /metrics HTTP/1.0\r\nHost: engine\r\n\r\n", 5000, 16u << 20,
                      &body);
    return body;
}

static void metrics_reply(void *ud)
{
    struct metrics_job *j = ud;
    if (j->out)
        http_reply(j->r, 200, "text/plain; version=0.0.4; charset=utf-8", j->out, strlen(j->out));
    else
        http_reply_error(j->r, 502, "the engines' metrics could not be read");
    http_req_unref(j->r);
    free(j->out);
    free(j);
}

static void *metrics_main(void *arg)
{
    struct metrics_job *j = arg;
    struct iso *s = j->s;
    char *texts[ISO_MAX_ENGINES + 1];
    int n = 0;
    for (int i = 0; i < j->n; i++) {
        char *m = fetch_metrics(j->sock[i]);
        if (m) { /* an engine that just went away is left out */
            texts[n] = iso_metrics_relabel(m, strlen(m), j->id[i]);
            n += texts[n] != NULL;
        }
        free(m);
    }
    texts[n++] = j->tail;
    j->out = n > 1 ? iso_metrics_merge(texts, n) : NULL;
    for (int i = 0; i < n; i++)
        free(texts[i]);
    j->tail = NULL;
    if (http_post(s->http, metrics_reply, j)) {
        http_req_unref(j->r); /* the loop is gone */
        free(j->out);
        free(j);
    }
    __atomic_sub_fetch(&s->drain_threads, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

int iso_metrics_pool(struct iso *s, struct http_req *r)
{
    int ready = 0;
    for (int i = 0; i < s->n_eng; i++)
        ready += s->eng[i].state == ENG_READY && !s->eng[i].draining;
    if (ready < 2 || strcmp(http_req_method(r), "GET") || strcmp(http_req_path(r), "/metrics"))
        return 0;
    struct metrics_job *j = calloc(1, sizeof *j);
    if (!j)
        return 0;
    j->s = s, j->r = r;
    for (int i = 0; i < s->n_eng; i++)
        if (s->eng[i].state == ENG_READY && !s->eng[i].draining) {
            snprintf(j->sock[j->n], sizeof j->sock[0], "%s", s->eng[i].sock);
            snprintf(j->id[j->n], sizeof j->id[0], "%s", s->eng[i].id);
            j->n++;
        }
    j->tail = iso_metrics_text(s);
    s->relayed++;
    http_req_ref(r);
    pthread_t th;
    __atomic_add_fetch(&s->drain_threads, 1, __ATOMIC_SEQ_CST);
    if (!j->tail || pthread_create(&th, NULL, metrics_main, j)) {
        __atomic_sub_fetch(&s->drain_threads, 1, __ATOMIC_SEQ_CST);
        http_req_unref(r);
        free(j->tail);
        free(j);
        return 0;
    }
    pthread_detach(th);
    return 1;
}
