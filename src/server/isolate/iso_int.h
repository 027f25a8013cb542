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
    int crashed; /* died and not ready again yet: /health is degraded */
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

/* isolate.c */
double iso_now(void);
/* The supervisor's Prometheus lines (appended to the engine's /metrics body), malloc'd. */
char *iso_metrics_text(const struct iso *s);

#endif
