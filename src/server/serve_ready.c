/* serve_ready.c — readiness of `cinfer serve` as a router or load balancer sees it.
 *
 * The listener is bound before the model loads, so a router polling /health sees 503
 * (never a refused or reset connection) until the server can answer: while loading, a gate
 * in front of the routes answers every request 503 (GET /health {"status":"loading"}); the
 * routes are installed on the loop thread once the engine runs, and the gate opens. A drain
 * (SIGTERM with --drain-timeout) turns /health to 503 {"status":"draining"} and refuses new
 * generations with 503 while the running ones finish; the loop stops when the last ends.
 * Everything here runs on the HTTP loop thread.
 */
#include <string.h>

#include "server/serve.h"
#include "server/serve_embed.h"
#include "web/web.h"
#include "util/log.h"

static int is_health(const char *path) { return !strcmp(path, "/health"); }

int serve_gate(struct http_req *r, void *ud)
{
    struct serve *sv = ud;
    const char *path = http_req_path(r);
    if (sv->state == SERVE_LOADING) {
        http_add_header(r, "Retry-After", "1");
        if (is_health(path)) {
            static const char body[] = "{\"status\": \"loading\"}";
            http_reply(r, 503, "application/json", body, sizeof body - 1);
        } else
            http_reply_error(r, 503, "the model is still loading; retry shortly");
        return 1;
    }
    if (sv->state == SERVE_DRAINING && is_health(path)) {
        static const char body[] = "{\"status\": \"draining\"}";
        http_reply(r, 503, "application/json", body, sizeof body - 1);
        return 1;
    }
    return 0;
}

void serve_ready_install(void *ud)
{
    struct serve *sv = ud;
    struct cerr e = {0};
    int rc = serve_embed_install(sv) || serve_routes_install(sv) || serve_ssd_routes(sv);
    if (!rc && web_install(&sv->web, sv->http, &e)) { /* the browser chat page */
        log_error("cinfer serve: %s", e.msg);
        rc = -1;
    }
    if (!rc)
        sv->state = SERVE_READY;
    pthread_mutex_lock(&sv->ready_mu);
    sv->ready_rc = rc ? -1 : 1;
    pthread_cond_broadcast(&sv->ready_cv);
    pthread_mutex_unlock(&sv->ready_mu);
}

int serve_ready_wait(struct serve *sv)
{
    if (http_post(sv->http, serve_ready_install, sv))
        return -1;
    pthread_mutex_lock(&sv->ready_mu);
    while (!sv->ready_rc && !sv->loop_done)
        pthread_cond_wait(&sv->ready_cv, &sv->ready_mu);
    int rc = sv->ready_rc > 0 ? 0 : -1;
    pthread_mutex_unlock(&sv->ready_mu);
    return rc;
}

void serve_drain(void *ud)
{
    struct serve *sv = ud;
    if (sv->shutting_down)
        return;
    log_info("draining: %ld request(s) in flight finish, new ones get 503", sv->met.active_jobs);
    sv->state = SERVE_DRAINING;
    sv->shutting_down = 1; /* serve_generate refuses new work; job_free stops the loop */
    if (!sv->jobs && !serve_embed_pending(sv)) /* embeddings finish too (serve_embed.c) */
        http_server_stop(sv->http);
}
