/* iso_int.h — internals of src/server/isolate shared by isolate.c (supervisor, children)
 * and iso_proxy.c (the HTTP relay). Loop thread only. */
#ifndef CINFER_SERVER_ISO_INT_H
#define CINFER_SERVER_ISO_INT_H

#include <sys/types.h>

#include "http/http.h"

enum iso_state { ENG_DOWN = 0, ENG_STARTING, ENG_READY, ENG_BACKOFF };

struct pxy;

struct iso_engine {
    char id[256];      /* the model id (file name without .gguf) */
    const char *model; /* the MODEL argument, or NULL = the child's default */
    char sock[100];    /* fits sockaddr_un.sun_path */
    pid_t pid;         /* 0 = none */
    enum iso_state state;
    double spawned_s, ready_s;
    long restarts;    /* respawns after a death, since start */
    double recent[3]; /* times of the last 3 respawns (ring) */
    int n_recent;
    double backoff_s, backoff_until;
    char reason[256];    /* why the last child ended, "" = never ended */
    struct pxy *waiting; /* requests held until the engine is ready (FIFO) */
    struct pxy *waiting_tail;
    long inflight;
    double last_used; /* LRU of the pool */
    int draining;     /* asked to stop (LRU or idle), not a crash */
    const char *drain_why;
    int crashed;          /* died and not ready again yet: /health is degraded */
    long demotions;       /* KV blocks its drains demoted to the SSD tier */
    int sleep_pending;    /* POST /admin/sleep: drain it once it is idle */
    int wake_pending;     /* POST /admin/wake: start it (like a held request) */
    long long need_bytes; /* its weights' bytes (the pool's memory fit), -1 = unknown */
};

#define ISO_MAX_ENGINES 16

struct iso {
    const struct serve_opts *o;
    int argc;
    char **argv;
    struct http_server *http;
    struct event_base *base;
    struct event *tick;
    struct web *web;
    char dir[84]; /* the private socket directory */
    struct iso_engine eng[ISO_MAX_ENGINES];
    int n_eng, cap; /* models known; engines resident at once (--model-pool) */
    long switches, drains;
    char *owned[ISO_MAX_ENGINES]; /* model paths found in --models-dir */
    double started_s;
    int announced, stopping;
    long relayed, failed_502;
    long demotions;      /* KV blocks demoted by drains, all engines */
    int drain_threads;   /* drain and pool-metrics threads in flight (atomic): waited for at exit */
    struct iso_adm *adm; /* /admin/sleep and /admin/wake requests waiting for their state */
    double pool_budget;  /* bytes the resident engines' weights may take together */
    double engine_budget; /* bytes one engine may plan */
};

/* iso_proxy.c */
/* Relays r to e: at once when e is ready, else after e becomes ready (held in e->waiting). */
void pxy_start(struct iso *s, struct iso_engine *e, struct http_req *r);
/* Starts every held request of e (e just became ready). */
void pxy_flush(struct iso *s, struct iso_engine *e);
/* Fails every held request of e with status + message (e cannot serve now). */
void pxy_fail_waiting(struct iso *s, struct iso_engine *e, int status, const char *msg);
/* An error body in the protocol shape of path (malloc'd). */
char *iso_error_body(const char *path, int status, const char *type, const char *msg);

/* iso_admin.c */
/* Asks e's child (ready) over its socket to drain: POST /admin/drain (its running requests
 * end, its prompt cache goes to the SSD tier), on a thread; the reply comes back to the loop,
 * which then stops the child (SIGTERM). Returns 0, or -1 when it could not start (the caller
 * stops the child at once). */
int iso_drain_post(struct iso *s, struct iso_engine *e);
/* Waits (bounded) for the drain threads at shutdown, after the children were stopped. */
void iso_drain_wait(struct iso *s);
/* Installs POST /admin/sleep and /admin/wake (loopback only; --api-key too). */
int iso_admin_routes(struct iso *s);
/* Every tick: drains engines put to sleep once idle; answers sleep/wake requests whose
 * engines reached their state. */
void iso_admin_step(struct iso *s);
/* The pool's memory fit of e: sets e->need_bytes and the budgets (once). Returns 0 when e fits
 * beside the resident engines, 1 when it fits alone only (the LRU must go first), -1 when it
 * never fits (msg: the numbers). */
int iso_fit(struct iso *s, struct iso_engine *e, char *msg, size_t cap);
/* The engine's /metrics text with engine="id" added to every sample (malloc'd), or NULL. */
char *iso_metrics_relabel(const char *text, size_t n, const char *id);
/* Prometheus texts merged by metric family (a family's HELP/TYPE once, from the first text
 * that has them, then its samples from every text in order), malloc'd, or NULL. */
char *iso_metrics_merge(char *const *texts, int n);
/* GET /metrics while two or more engines are ready: answers it (later, from a thread) with
 * every ready engine's series, labelled engine="ID" and merged by family, then the
 * supervisor's. Returns 1 when it took r, 0 when the caller relays it as usual. */
int iso_metrics_pool(struct iso *s, struct http_req *r);
/* Drains e (LRU, idle, sleep): isolate.c. */
void iso_drain(struct iso *s, struct iso_engine *e, const char *why);
int iso_resident(const struct iso *s);
struct iso_engine *iso_default_engine(struct iso *s);
struct iso_engine *iso_engine_by_id(struct iso *s, const char *id);

/* iso_sock.c: one blocking HTTP/1.0 exchange with the engine on unix socket sock: sends
 * request, reads the reply to its end (at most max bytes; each send/recv bounded by
 * timeout_ms). Returns the reply's status (0: no reply or not HTTP); with body set and a 200,
 * *body is the reply body (malloc'd, NUL-terminated; NULL when out of memory). */
int iso_sock_exchange(const char *sock, const char *request, int timeout_ms, size_t max,
                      char **body);

/* isolate.c */
double iso_now(void);
/* The supervisor's Prometheus lines (appended to the engine's /metrics body), malloc'd. */
char *iso_metrics_text(const struct iso *s);

#endif
