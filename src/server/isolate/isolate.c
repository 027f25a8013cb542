/* isolate.c — the --isolate supervisor: listener, engine children, /health, /engine.
 * See isolate.h for the contract and docs/isolation.md for the behaviour.
 *
 * Children are watched by a 20 ms tick on the loop (waitpid WNOHANG; while starting, a
 * non-blocking connect to the child's socket, which appears only once the child has loaded
 * its model and built its engine). No call here blocks the loop.
 */
#include "server/isolate/isolate.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <jansson.h>

#include "server/isolate/iso_int.h"
#include "server/serve.h"
#include "util/clock.h"
#include "util/jsonfmt.h"
#include "util/log.h"
#include "util/version.h"
#include "web/web.h"

#define RESTARTS_MAX 3 /* respawns allowed within RESTART_WINDOW_S */
#define RESTART_WINDOW_S restart_window_s()
#define BACKOFF_FIRST_S backoff_first_s()
#define BACKOFF_MAX_S (BACKOFF_FIRST_S > 60.0 ? BACKOFF_FIRST_S : 60.0)

/* A positive number from the environment, else dflt. */
static double env_s(const char *name, double dflt)
{
    const char *v = getenv(name);
    char *end;
    double d = v && *v ? strtod(v, &end) : -1;
    return v && *v && !*end && d > 0 ? d : dflt;
}

/* 60 s and 5 s; the tests set them long (CINFER_TEST_RESTART_WINDOW_S,
 * CINFER_TEST_BACKOFF_S) so that a slow machine neither leaves the window nor the back-off
 * before the test has looked. */
static double restart_window_s(void) { return env_s("CINFER_TEST_RESTART_WINDOW_S", 60.0); }
static double backoff_first_s(void) { return env_s("CINFER_TEST_BACKOFF_S", 5.0); }

double iso_now(void)
{
    return clock_now_s();
}

static const char *state_name(enum iso_state st)
{
    static const char *const n[] = {"down", "starting", "ready", "backoff"};
    return n[st];
}

static void model_id_of(const char *path, char *out, size_t cap)
{
    if (!path) {
        snprintf(out, cap, "default");
        return;
    }
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", path);
    size_t n = strlen(tmp);
    while (n > 1 && tmp[n - 1] == '/')
        tmp[--n] = 0;
    const char *b = strrchr(tmp, '/');
    snprintf(out, cap, "%s", b ? b + 1 : tmp);
    n = strlen(out);
    if (n > 5 && !strcmp(out + n - 5, ".gguf"))
        out[n - 5] = 0;
}

/* ---- children -------------------------------------------------------------------------- */

static int spawn(struct iso *s, struct iso_engine *e)
{
    unlink(e->sock);
    /* argv: <exe> serve [engine flags...] --host unix:SOCK --no-open [MODEL] */
    char **av = calloc((size_t)s->argc + 10, sizeof *av);
    char host[600];
    if (!av)
        return -1;
    snprintf(host, sizeof host, "unix:%s", e->sock);
    int n = 0;
    av[n++] = "cinfer";
    av[n++] = "serve";
    for (int i = 1; i < s->argc; i++)
        if (s->o->argrole[i] == '.')
            av[n++] = s->argv[i];
    char budget[64];
    if (s->cap > 1 && s->o->memory_budget_gb < 0) { /* each resident engine its own share */
        double ram = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
        snprintf(budget, sizeof budget, "%.3f", ram * 0.75 / s->cap / 1e9);
        av[n++] = "--memory-budget";
        av[n++] = budget;
    }
    if (s->o->served_name && e == &s->eng[0]) { /* the name is the first model's */
        av[n++] = "--served-model-name";
        av[n++] = (char *)s->o->served_name;
    }
    av[n++] = "--host";
    av[n++] = host;
    av[n++] = "--no-open";
    if (e->model)
        av[n++] = (char *)e->model;
    av[n] = NULL;
    pid_t pid = fork();
    if (pid < 0) {
        free(av);
        snprintf(e->reason, sizeof e->reason, "fork failed: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        sigset_t all;
        sigemptyset(&all);
        sigprocmask(SIG_SETMASK, &all, NULL);
        prctl(PR_SET_PDEATHSIG, SIGKILL);   /* never outlive the supervisor */
        dup2(STDERR_FILENO, STDOUT_FILENO); /* its ready card is a log line here */
        execv("/proc/self/exe", av);
        fprintf(stderr, "cinfer serve --isolate: cannot start the engine: %s\n", strerror(errno));
        _exit(127);
    }
    free(av);
    e->pid = pid;
    e->state = ENG_STARTING;
    e->spawned_s = iso_now();
    log_info("isolate: engine %s started (pid %d)", e->id, (int)pid);
    return 0;
}

/* The child is ready: its /health answers 200. (A serving child binds its socket before it
 * loads the model and answers 503 "loading" meanwhile, so a socket that accepts is not yet a
 * ready engine.) The child's HTTP loop answers /health at once, whatever its engine does;
 * the exchange is bounded by 200 ms timeouts all the same. */
static int sock_accepts(const char *path)
{
    return iso_sock_exchange(path, "GET /health HTTP/1.0\r\nHost: engine\r\n\r\n", 200, 4096,
                             NULL) == 200;
}

static void announce(struct iso *s, struct iso_engine *e);

static void child_ended(struct iso *s, struct iso_engine *e, int wst)
{
    if (WIFSIGNALED(wst))
        snprintf(e->reason, sizeof e->reason, "engine pid %d killed by signal %d (%s)", (int)e->pid,
                 WTERMSIG(wst), strsignal(WTERMSIG(wst)));
    else
        snprintf(e->reason, sizeof e->reason, "engine pid %d exited with status %d", (int)e->pid,
                 WEXITSTATUS(wst));
    log_warn("isolate: %s", e->reason);
    e->pid = 0;
    e->state = ENG_DOWN;
    unlink(e->sock);
    if (s->stopping)
        return;
    if (e->draining) { /* made room for another model: unloaded, not a crash */
        e->draining = 0;
        snprintf(e->reason, sizeof e->reason, "drained (%s)", e->drain_why);
        return;
    }
    e->crashed = 1;
    double now = iso_now();
    int in_window = 0;
    for (int i = 0; i < e->n_recent; i++)
        in_window += now - e->recent[i] < RESTART_WINDOW_S;
    if (in_window >= RESTARTS_MAX) {
        e->backoff_s = e->backoff_s > 0 ? e->backoff_s * 2 : BACKOFF_FIRST_S;
        if (e->backoff_s > BACKOFF_MAX_S)
            e->backoff_s = BACKOFF_MAX_S;
        e->backoff_until = now + e->backoff_s;
        e->state = ENG_BACKOFF;
        log_error("isolate: %d restarts within %.0f s: backing off %.0f s", RESTARTS_MAX,
                  RESTART_WINDOW_S, e->backoff_s);
        char msg[400];
        snprintf(msg, sizeof msg, "engine unavailable (restarting after repeated failures: %s)",
                 e->reason);
        pxy_fail_waiting(s, e, 503, msg);
        return;
    }
    e->recent[e->n_recent < RESTARTS_MAX ? e->n_recent++ : (int)(e->restarts % RESTARTS_MAX)] = now;
    e->restarts++;
    if (spawn(s, e)) {
        e->state = ENG_BACKOFF;
        e->backoff_s = BACKOFF_FIRST_S;
        e->backoff_until = now + e->backoff_s;
        pxy_fail_waiting(s, e, 503, e->reason);
    }
}

/* The LRU / idle / sleep drain: POST /admin/drain on the engine's unix socket (its running
 * requests end, its whole prompt cache is demoted to the SSD tier when it has one:
 * {"drained":true,"demotions":N}), then SIGTERM (iso_admin.c). A switch back respawns it and
 * restores the conversation from the disk. Requests for it meanwhile are held and start it
 * again once it has exited. */
void iso_drain(struct iso *s, struct iso_engine *v, const char *why)
{
    log_info("isolate: draining engine %s (pid %d, %s)", v->id, (int)v->pid, why);
    v->drain_why = why;
    v->draining = 1;
    s->drains++;
    if (v->state != ENG_READY || iso_drain_post(s, v))
        kill(v->pid, SIGTERM);
}

int iso_resident(const struct iso *s)
{
    int n = 0;
    for (int i = 0; i < s->n_eng; i++)
        n += s->eng[i].pid > 0;
    return n;
}

/* A pool engine that can never fit the memory budget: its held requests get 503 with the
 * numbers, and it is not started. */
static int refuse_unfit(struct iso *s, struct iso_engine *e)
{
    char msg[400];
    if (iso_fit(s, e, msg, sizeof msg) >= 0)
        return 0;
    log_warn("isolate: %s", msg);
    snprintf(e->reason, sizeof e->reason, "%.250s", msg);
    e->wake_pending = 0;
    pxy_fail_waiting(s, e, 503, msg);
    return 1;
}

/* Engines with held requests (or a wake) and no process: start them, making room first:
 * over the cap, or when the weights would not fit the pool's memory beside the resident
 * engines, the least recently used idle engine is drained. */
static void pool_step(struct iso *s)
{
    for (int i = 0; i < s->n_eng && !s->stopping; i++) {
        struct iso_engine *e = &s->eng[i];
        if (e->state != ENG_DOWN || !(e->waiting || e->wake_pending) || refuse_unfit(s, e))
            continue;
        char msg[8];
        if (iso_resident(s) < s->cap && (iso_resident(s) == 0 || !iso_fit(s, e, msg, sizeof msg))) {
            s->switches += s->announced;
            e->wake_pending = 0;
            if (spawn(s, e)) {
                e->state = ENG_BACKOFF;
                e->backoff_s = BACKOFF_FIRST_S;
                e->backoff_until = iso_now() + e->backoff_s;
                pxy_fail_waiting(s, e, 503, e->reason);
            }
            continue;
        }
        struct iso_engine *v = NULL;
        for (int j = 0; j < s->n_eng; j++) {
            struct iso_engine *c = &s->eng[j];
            if (c->draining) { /* one at a time: wait for it to exit */
                v = NULL;
                break;
            }
            if (c != e && c->pid > 0 && !c->inflight && !c->waiting &&
                (!v || c->last_used < v->last_used))
                v = c;
        }
        if (v)
            iso_drain(s, v, "least recently used");
    }
}

/* --idle-unload: an engine unused that long stops; the next request reloads it. */
static void idle_step(struct iso *s)
{
    if (!s->o->idle_unload || s->stopping)
        return;
    double now = iso_now();
    for (int i = 0; i < s->n_eng; i++) {
        struct iso_engine *e = &s->eng[i];
        double last = e->last_used > e->ready_s ? e->last_used : e->ready_s;
        if (e->state == ENG_READY && !e->draining && !e->inflight && !e->waiting &&
            now - last >= s->o->idle_unload)
            iso_drain(s, e, "idle");
    }
}

static void tick_cb(evutil_socket_t fd, short what, void *ud)
{
    (void)fd, (void)what;
    struct iso *s = ud;
    pool_step(s);
    idle_step(s);
    iso_admin_step(s);
    for (int i = 0; i < s->n_eng; i++) {
        struct iso_engine *e = &s->eng[i];
        int wst;
        if (e->pid > 0 && waitpid(e->pid, &wst, WNOHANG) == e->pid) {
            child_ended(s, e, wst);
            continue;
        }
        if (e->state == ENG_STARTING && e->pid > 0 && sock_accepts(e->sock)) {
            e->state = ENG_READY;
            e->crashed = 0;
            e->ready_s = iso_now();
            log_info("isolate: engine %s ready (pid %d, %.2f s)", e->id, (int)e->pid,
                     e->ready_s - e->spawned_s);
            announce(s, e);
            pxy_flush(s, e);
        } else if (e->state == ENG_READY && e->backoff_s > 0 &&
                   iso_now() - e->ready_s > RESTART_WINDOW_S)
            e->backoff_s = 0; /* stable again: the next crash loop backs off from the start */
        else if (e->state == ENG_BACKOFF && iso_now() >= e->backoff_until && !s->stopping &&
                 iso_resident(s) < s->cap) {
            e->restarts++;
            e->recent[(int)(e->restarts % RESTARTS_MAX)] = iso_now();
            if (spawn(s, e))
                e->backoff_until = iso_now() + e->backoff_s;
        }
    }
}

/* ---- routes ---------------------------------------------------------------------------- */

/* The most recently used engine with a process, else the first model. */
struct iso_engine *iso_default_engine(struct iso *s)
{
    struct iso_engine *best = NULL;
    for (int i = 0; i < s->n_eng; i++)
        if (s->eng[i].pid > 0 && (!best || s->eng[i].last_used > best->last_used))
            best = &s->eng[i];
    return best ? best : &s->eng[0];
}

struct iso_engine *iso_engine_by_id(struct iso *s, const char *id)
{
    for (int i = 0; i < s->n_eng; i++)
        if (!strcmp(s->eng[i].id, id))
            return &s->eng[i];
    return NULL;
}

static void reply_json(struct http_req *r, int status, json_t *j);

static json_t *ids_json(const struct iso *s)
{
    json_t *a = json_array();
    for (int i = 0; i < s->n_eng; i++)
        json_array_append_new(a, json_string(s->eng[i].id));
    return a;
}

/* 404 for a model id the pool does not know, listing the ids, in the protocol's shape. */
static void unknown_model(struct iso *s, struct http_req *r, const char *id)
{
    char msg[1024];
    int n = snprintf(msg, sizeof msg, "model '%.200s' not found; available:", id);
    for (int i = 0; i < s->n_eng && n > 0 && (size_t)n < sizeof msg; i++)
        n += snprintf(msg + n, sizeof msg - (size_t)n, "%s %s", i ? "," : "", s->eng[i].id);
    char *b = iso_error_body(http_req_path(r), 404, "not_found_error", msg);
    json_t *j = b ? json_loads(b, 0, NULL) : NULL;
    free(b);
    json_t *err = j ? json_object_get(j, "error") : NULL;
    if (err) /* the ids as data too */
        json_object_set_new(err, "available", ids_json(s));
    if (!j) {
        http_reply_error(r, 404, msg);
        return;
    }
    reply_json(r, 404, j);
}

/* With several models: the request's exact `model` picks the engine; no `model` keeps the
 * default (the most recently used engine); any other value is a 404 listing the ids. With
 * one model, every request goes to it (the engine itself ignores a fuzzy `model`). */
static struct iso_engine *engine_for(struct iso *s, struct http_req *r)
{
    if (s->n_eng == 1 || strcmp(http_req_method(r), "POST"))
        return iso_default_engine(s);
    size_t n = 0;
    const char *body = http_req_body(r, &n);
    json_t *j = n ? json_loadb(body, n, 0, NULL) : NULL;
    const char *id = json_string_value(json_object_get(j, "model"));
    struct iso_engine *e = id && *id ? iso_engine_by_id(s, id) : iso_default_engine(s);
    if (!e)
        unknown_model(s, r, id);
    json_decref(j);
    return e;
}

static const char *pool_state(const struct iso_engine *e)
{
    return e->state == ENG_READY      ? "loaded"
           : e->state == ENG_STARTING ? "loading"
           : e->state == ENG_BACKOFF  ? "failed"
                                      : "unloaded";
}

/* /v1/models and /v1/models/{id} of a pool: every known model with its state. */
static int pool_models(struct iso *s, struct http_req *r)
{
    const char *path = http_req_path(r);
    if (s->n_eng == 1 || strcmp(http_req_method(r), "GET") ||
        (strcmp(path, "/v1/models") && strncmp(path, "/v1/models/", 11)))
        return 0;
    json_t *data = json_array();
    for (int i = 0; i < s->n_eng; i++) {
        const struct iso_engine *e = &s->eng[i];
        json_t *m =
            json_pack("{s:s, s:s, s:I, s:s, s:s}", "id", e->id, "object", "model", "created",
                      (json_int_t)time(NULL), "owned_by", "cinfer", "state", pool_state(e));
        if (path[10] == '/' && !strcmp(path + 11, e->id)) {
            json_decref(data);
            reply_json(r, 200, m);
            return 1;
        }
        json_array_append_new(data, m);
    }
    if (path[10] == '/') {
        json_decref(data);
        unknown_model(s, r, path + 11);
        return 1;
    }
    reply_json(r, 200, json_pack("{s:s, s:o}", "object", "list", "data", data));
    return 1;
}

static void h_proxy(struct http_req *r, void *ud)
{
    struct iso *s = ud;
    if (!strcmp(http_req_path(r), "/admin/drain")) {
        /* an engine's drain is the supervisor's to call, on the engine's unix socket only:
         * never relayed from the public listener */
        char *b = iso_error_body(http_req_path(r), 403, "permission_error",
                                 "/admin/drain is served on the engine's unix socket only");
        if (b)
            http_reply(r, 403, NULL, b, strlen(b));
        else
            http_reply_error(r, 403, "forbidden");
        free(b);
        return;
    }
    const char *up = http_req_header(r, "Upgrade");
    if (!strcmp(http_req_path(r), "/ws/chat") || (up && !strcasecmp(up, "websocket"))) {
        /* the relay speaks HTTP/1.1 request/reply and SSE, not WebSocket */
        char *b = iso_error_body(http_req_path(r), 501, "not_implemented",
                                 "WebSocket upgrades are not relayed under --isolate; use the "
                                 "HTTP API (SSE streams)");
        if (b)
            http_reply(r, 501, NULL, b, strlen(b));
        else
            http_reply_error(r, 501, "not implemented");
        free(b);
        return;
    }
    if (pool_models(s, r) || iso_metrics_pool(s, r))
        return;
    struct iso_engine *e = engine_for(s, r);
    if (e)
        pxy_start(s, e, r);
}

/* ok: the first engine has been ready once, and no engine is in back-off or respawning
 * after a death (an unloaded or loading pool model is fine: requests for it wait). */
static int healthy(const struct iso *s)
{
    if (!s->announced)
        return 0;
    for (int i = 0; i < s->n_eng; i++)
        if (s->eng[i].state == ENG_BACKOFF || s->eng[i].crashed)
            return 0;
    return 1;
}

static void reply_json(struct http_req *r, int status, json_t *j)
{
    char *b = j ? json_dumps_short(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!b) {
        http_reply_error(r, 500, "out of memory");
        return;
    }
    http_reply(r, status, NULL, b, strlen(b));
    free(b);
}

static void h_health(struct http_req *r, void *ud)
{
    struct iso *s = ud;
    const struct iso_engine *e = iso_default_engine(s);
    for (int i = 0; i < s->n_eng; i++)
        if (s->eng[i].state == ENG_BACKOFF)
            e = &s->eng[i];
    int ok = healthy(s);
    json_t *j = json_pack("{s:s, s:b, s:s}", "status", ok ? "ok" : "degraded", "isolated", 1,
                          "engine", state_name(e->state));
    if (j && !ok && e->reason[0])
        json_object_set_new(j, "reason", json_string(e->reason));
    reply_json(r, ok ? 200 : 503, j);
}

static json_t *engine_json(const struct iso_engine *e)
{
    double now = iso_now();
    json_t *j =
        json_pack("{s:s, s:s, s:I, s:I, s:s, s:f}", "model", e->id, "state", state_name(e->state),
                  "pid", (json_int_t)e->pid, "restarts", (json_int_t)e->restarts, "socket", e->sock,
                  "uptime_s", e->state == ENG_READY ? now - e->ready_s : 0.0);
    if (!j)
        return NULL;
    json_object_set_new(j, "reason", e->reason[0] ? json_string(e->reason) : json_null());
    json_object_set_new(j, "inflight", json_integer(e->inflight));
    json_object_set_new(j, "demotions", json_integer(e->demotions));
    if (e->state == ENG_BACKOFF)
        json_object_set_new(j, "retry_in_s", json_real(e->backoff_until - now));
    return j;
}

static void h_engine(struct http_req *r, void *ud)
{
    struct iso *s = ud;
    json_t *j = engine_json(iso_default_engine(s));
    json_t *pool = json_array();
    for (int i = 0; i < s->n_eng; i++)
        json_array_append_new(pool, engine_json(&s->eng[i]));
    json_t *p =
        json_pack("{s:i, s:i, s:I, s:I, s:o}", "size", s->cap, "resident", iso_resident(s), "switches",
                  (json_int_t)s->switches, "drains", (json_int_t)s->drains, "engines", pool);
    if (!j || !p) {
        json_decref(j);
        json_decref(p);
        http_reply_error(r, 500, "out of memory");
        return;
    }
    json_object_set_new(j, "isolated", json_true());
    json_object_set_new(j, "pool", p);
    json_object_set_new(j, "relayed", json_integer(s->relayed));
    json_object_set_new(j, "failed_502", json_integer(s->failed_502));
    json_object_set_new(j, "demotions", json_integer(s->demotions));
    json_object_set_new(j, "asleep", json_boolean(s->announced && !iso_resident(s)));
    reply_json(r, 200, j);
}

char *iso_metrics_text(const struct iso *s)
{
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    if (!f)
        return NULL;
    fprintf(f, "# HELP cinfer_isolate_engine_up 1 when the model's engine child is ready\n"
               "# TYPE cinfer_isolate_engine_up gauge\n");
    for (int i = 0; i < s->n_eng; i++)
        fprintf(f, "cinfer_isolate_engine_up{engine=\"%s\"} %d\n", s->eng[i].id,
                s->eng[i].state == ENG_READY);
    fprintf(f, "# HELP cinfer_isolate_restarts_total engine respawns after a death\n"
               "# TYPE cinfer_isolate_restarts_total counter\n");
    for (int i = 0; i < s->n_eng; i++)
        fprintf(f, "cinfer_isolate_restarts_total{engine=\"%s\"} %ld\n", s->eng[i].id,
                s->eng[i].restarts);
    fprintf(f,
            "# HELP cinfer_isolate_pool_switches_total engines started for a request\n"
            "# TYPE cinfer_isolate_pool_switches_total counter\n"
            "cinfer_isolate_pool_switches_total %ld\n"
            "# HELP cinfer_isolate_drains_total engines drained (LRU or idle)\n"
            "# TYPE cinfer_isolate_drains_total counter\n"
            "cinfer_isolate_drains_total %ld\n"
            "# HELP cinfer_isolate_failed_total requests failed because an engine died\n"
            "# TYPE cinfer_isolate_failed_total counter\n"
            "cinfer_isolate_failed_total %ld\n"
            "# HELP cinfer_isolate_demotions_total KV blocks drained engines demoted to the SSD "
            "tier\n"
            "# TYPE cinfer_isolate_demotions_total counter\n",
            s->switches, s->drains, s->failed_502);
    for (int i = 0; i < s->n_eng; i++)
        fprintf(f, "cinfer_isolate_demotions_total{engine=\"%s\"} %ld\n", s->eng[i].id,
                s->eng[i].demotions);
    fclose(f);
    return out;
}

static char *error_fmt(const char *path, int status, const char *message, void *ud)
{
    (void)ud;
    return iso_error_body(path, status, NULL, message);
}

/* ---- the ready card, signals, main ------------------------------------------------------ */

static void announce(struct iso *s, struct iso_engine *e)
{
    if (s->announced)
        return;
    s->announced = 1;
    const struct serve_opts *o = s->o;
    const char *shown =
        !strcmp(o->host, "0.0.0.0") || !strcmp(o->host, "::") ? "localhost" : o->host;
    int port = http_server_port(s->http);
    char url[320];
    web_chat_url(url, sizeof url, o->host, port);
    printf("\ncinfer %s · serving %s (isolated)\n", CINFER_VERSION, e->id);
    printf("  API       http://%s:%d/v1\n", shown, port);
    printf("  Chat      %s   (status: /#/status)\n", url);
    printf("  Isolation engine pid %d on %s · respawn: %d in %.0f s, then back-off · "
           "GET /engine\n",
           (int)e->pid, e->sock, RESTARTS_MAX, RESTART_WINDOW_S);
    if (s->n_eng > 1 || s->cap > 1 || o->idle_unload) {
        printf("  Pool      %d model%s, %d resident at once", s->n_eng, s->n_eng > 1 ? "s" : "",
               s->cap);
        if (o->idle_unload)
            printf(" · idle unload after %d s", o->idle_unload);
        printf(":");
        for (int i = 0; i < s->n_eng; i++)
            printf(" %s", s->eng[i].id);
        printf("\n");
    }
    printf("  Auth      %s\n", o->api_key ? "API key required"
                                          : "none (loopback bind is the "
                                            "protection)");
    printf("ready in %.2f s — Ctrl-C to stop\n\n", iso_now() - s->started_s);
    fflush(stdout);
    if (!o->no_open && isatty(STDOUT_FILENO))
        web_open_browser(url);
}

static sigset_t g_sigs;

static void stop_on_loop(void *ud)
{
    struct iso *s = ud;
    s->stopping = 1;
    for (int i = 0; i < s->n_eng; i++)
        if (s->eng[i].pid > 0)
            kill(s->eng[i].pid, SIGTERM);
    for (int i = 0; i < s->n_eng; i++)
        pxy_fail_waiting(s, &s->eng[i], 503, "the server is shutting down");
    iso_admin_step(s); /* sleep/wake requests still waiting: 503 */
    http_server_stop(s->http);
}

static void *signal_thread(void *arg)
{
    struct iso *s = arg;
    int sig, n = 0;
    while (sigwait(&g_sigs, &sig) == 0) {
        if (++n == 1) {
            fprintf(stderr, "\ncinfer serve: %s received, stopping (again to force)\n",
                    sig == SIGINT ? "SIGINT" : "SIGTERM");
            if (http_post(s->http, stop_on_loop, s))
                http_server_stop(s->http);
        } else {
            http_server_stop(s->http);
            break;
        }
    }
    return NULL;
}

/* After the loop: the children get up to 5 s to stop, then SIGKILL. */
static void reap_all(struct iso *s)
{
    for (int i = 0; i < s->n_eng; i++) {
        struct iso_engine *e = &s->eng[i];
        if (e->pid <= 0)
            continue;
        kill(e->pid, SIGTERM);
        int wst;
        for (int t = 0; t < 250 && waitpid(e->pid, &wst, WNOHANG) == 0; t++)
            usleep(20000);
        if (waitpid(e->pid, &wst, WNOHANG) == 0) {
            kill(e->pid, SIGKILL);
            waitpid(e->pid, &wst, 0);
        }
        e->pid = 0;
        unlink(e->sock);
    }
}

static int add_engine(struct iso *s, const char *model)
{
    char id[256];
    model_id_of(model, id, sizeof id);
    if (!s->n_eng && s->o->served_name) /* --served-model-name names the first model */
        snprintf(id, sizeof id, "%s", s->o->served_name);
    if (iso_engine_by_id(s, id))
        return 0; /* the same id twice: the first wins */
    if (s->n_eng == ISO_MAX_ENGINES) {
        fprintf(stderr, "cinfer serve: --isolate: at most %d models\n", ISO_MAX_ENGINES);
        return -1;
    }
    struct iso_engine *e = &s->eng[s->n_eng];
    e->model = model;
    snprintf(e->id, sizeof e->id, "%s", id);
    snprintf(e->sock, sizeof e->sock, "%.80s/engine-%d.sock", s->dir, s->n_eng);
    s->n_eng++;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The MODEL arguments, then every *.gguf of --models-dir (sorted), then the default model
 * when there is none. */
static int add_models(struct iso *s)
{
    const struct serve_opts *o = s->o;
    for (int i = 0; i < o->n_models; i++)
        if (add_engine(s, o->models[i]))
            return -1;
    if (o->models_dir) {
        DIR *d = opendir(o->models_dir);
        if (!d) {
            fprintf(stderr, "cinfer serve: --models-dir %s: %s\n", o->models_dir, strerror(errno));
            return -1;
        }
        char *names[256];
        int n = 0;
        struct dirent *de;
        while ((de = readdir(d)) && n < 256) {
            size_t l = strlen(de->d_name);
            if (l > 5 && !strcmp(de->d_name + l - 5, ".gguf") && de->d_name[0] != '.')
                names[n++] = strdup(de->d_name);
        }
        closedir(d);
        qsort(names, (size_t)n, sizeof *names, cmp_str);
        int rc = 0, k = 0;
        for (int i = 0; i < n; i++) {
            char *p = NULL;
            if (!rc && names[i] && k < ISO_MAX_ENGINES &&
                asprintf(&p, "%s/%s", o->models_dir, names[i]) > 0) {
                s->owned[k++] = p;
                rc = add_engine(s, p);
            }
            free(names[i]);
        }
        if (rc)
            return -1;
    }
    if (!s->n_eng)
        return add_engine(s, NULL);
    return 0;
}

int isolate_main(const struct serve_opts *o, int argc, char **argv)
{
    struct iso *s = calloc(1, sizeof *s);
    if (!s)
        return 1;
    s->o = o, s->argc = argc, s->argv = argv;
    s->started_s = iso_now();
    const char *tmp = getenv("TMPDIR");
    snprintf(s->dir, sizeof s->dir, "%.60s/cinfer-iso-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(s->dir)) {
        fprintf(stderr, "cinfer serve: --isolate: cannot create %s: %s\n", s->dir, strerror(errno));
        free(s);
        return 1;
    }
    s->cap = o->model_pool > 0 ? o->model_pool : 1;
    if (add_models(s)) {
        rmdir(s->dir);
        free(s);
        return 1;
    }
    struct iso_engine *e = &s->eng[0];
    char unfit[400];
    if (iso_fit(s, e, unfit, sizeof unfit) < 0) {
        fprintf(stderr, "cinfer serve: --isolate: %s\n", unfit);
        rmdir(s->dir);
        free(s);
        return 1;
    }

    sigemptyset(&g_sigs);
    sigaddset(&g_sigs, SIGINT);
    sigaddset(&g_sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &g_sigs, NULL);

    int status = 1;
    struct cerr err = {0};
    struct http_config hc = {.host = o->host,
                             .port = o->port,
                             .max_body = (size_t)o->max_body,
                             .max_conns = o->max_conns,
                             .header_timeout_s = 30,
                             .api_key = o->api_key};
    if (http_server_new(&s->http, &hc, &err)) {
        fprintf(stderr,
                "cinfer serve: %s (is another program using the port? pick one with "
                "--port N)\n",
                err.msg);
        goto done;
    }
    s->base = http_server_base(s->http);
    http_set_error_fmt(s->http, error_fmt, s);
    int rc = http_route(s->http, "GET", "/health", HTTP_ROUTE_PUBLIC, h_health, s);
    rc |= http_route(s->http, "GET", "/engine", 0, h_engine, s);
    rc |= iso_admin_routes(s);
    if (rc || web_install(&s->web, s->http, &err) ||
        http_route(s->http, NULL, "/", HTTP_ROUTE_PREFIX, h_proxy, s)) {
        fprintf(stderr, "cinfer serve: cannot install the routes: %s\n",
                err.msg[0] ? err.msg : "out of memory");
        goto done;
    }
    s->tick = event_new(s->base, -1, EV_PERSIST, tick_cb, s);
    struct timeval tv = {0, 20000};
    if (!s->tick || event_add(s->tick, &tv)) {
        fprintf(stderr, "cinfer serve: out of memory\n");
        goto done;
    }
    fprintf(stderr, "cinfer serve: --isolate: supervisor pid %d, starting the engine for %s\n",
            (int)getpid(), o->model ? o->model : "the default model");
    if (spawn(s, e)) {
        fprintf(stderr, "cinfer serve: --isolate: %s\n", e->reason);
        goto done;
    }
    pthread_t th;
    if (pthread_create(&th, NULL, signal_thread, s)) {
        fprintf(stderr, "cinfer serve: cannot start the signal thread\n");
        goto done;
    }
    pthread_detach(th);
    if (http_server_run(s->http)) {
        fprintf(stderr, "cinfer serve: the event loop failed\n");
        goto done;
    }
    fprintf(stderr, "cinfer serve: stopped\n");
    status = 0;
done:
    s->stopping = 1;
    reap_all(s);
    iso_drain_wait(s);
    if (s->tick)
        event_free(s->tick);
    http_server_free(s->http); /* fires on_close of open relays: they free themselves */
    web_free(s->web);
    rmdir(s->dir);
    for (int i = 0; i < ISO_MAX_ENGINES; i++)
        free(s->owned[i]);
    free(s);
    return status;
}
