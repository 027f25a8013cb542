/* serve_ssd.c — the server side of the SSD cold tier (docs/ssd-cache.md): the --ssd-*
 * flags and CINFER_SSD_* variables, the ready-card line, /stats.ssd_cache, the /metrics
 * lines and POST /admin/cache/flush (loopback only; with --api-key, the key too), and
 * POST /admin/drain on an engine child of --isolate (a unix-socket listener only: the
 * supervisor's call before it stops the engine; src/server/isolate).
 *
 * The flush blocks until the engine has queued every cached block and the writer has
 * written them, so it runs on a thread of its own and posts its reply back to the loop.
 */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kv/ssd.h"
#include "server/serve.h"
#include "util/clock.h"
#include "util/jsonfmt.h"
#include "util/log.h"
#include "util/sbuf.h"

static const double FLUSH_TIMEOUT_S = 60;
static int g_flushing; /* admin flushes in flight (atomic): the exit waits for them */

/* ---- flags ---------------------------------------------------------------------------- */

static int num(const char *flag, const char *v, double lo, double hi, const char *range,
               double *out)
{
    char *end;
    errno = 0;
    double x = v ? strtod(v, &end) : 0;
    if (!v || !*v || errno || *end || !(x >= lo && x <= hi)) {
        fprintf(stderr, "cinfer serve: %s expects %s, got '%s'\n", flag, range, v ? v : "");
        return -1;
    }
    *out = x;
    return 0;
}

int serve_ssd_flag(const char *a, const char *v, struct serve_opts *o, int *used)
{
    *used = 1;
    if (!strcmp(a, "--ssd-cache")) {
        if (!v || !*v) {
            fprintf(stderr, "cinfer serve: --ssd-cache expects a directory\n");
            return -1;
        }
        o->ssd_dir = v;
        return 1;
    }
    if (!strcmp(a, "--ssd-cache-max"))
        return num(a, v, 0.000001, 1e6, "a number of GiB > 0", &o->ssd_max_gib) ? -1 : 1;
    if (!strcmp(a, "--ssd-demote-idle"))
        return num(a, v, 0, 1e9, "a number of seconds >= 0 (0 disables)", &o->ssd_demote_s) ? -1
                                                                                          : 1;
    if (!strcmp(a, "--generation-checkpoint")) {
        double n;
        if (num(a, v, 1, 1e9, "a number of tokens >= 1", &n))
            return -1;
        o->ssd_gen_ckpt = (int)n;
        return 1;
    }
    if (!strcmp(a, "--ssd-cache-verify")) {
        o->ssd_verify = 1;
        *used = 0;
        return 1;
    }
    return 0; /* not an SSD flag: *used stays 1, the caller's default for a flag */
}

int serve_ssd_config(const struct serve_opts *o, struct engine_config *ec)
{
    int given = o->ssd_max_gib > 0 || o->ssd_demote_s >= 0 || o->ssd_verify || o->ssd_gen_ckpt;
    if (!o->ssd_dir) {
        if (given)
            fprintf(stderr, "cinfer serve: --ssd-cache-max, --ssd-cache-verify, "
                            "--ssd-demote-idle and --generation-checkpoint need --ssd-cache "
                            "DIR\n");
        return given ? -1 : 0;
    }
    if (o->prompt_cache_gib == 0) {
        fprintf(stderr, "cinfer serve: --ssd-cache needs the RAM prompt cache, but "
                        "--prompt-cache 0 turns it off; drop --prompt-cache 0 or --ssd-cache\n");
        return -1;
    }
    ec->ssd_dir = o->ssd_dir;
    ec->ssd_max_bytes = (size_t)((o->ssd_max_gib > 0 ? o->ssd_max_gib : 32) * 1073741824.0);
    ec->ssd_verify = o->ssd_verify;
    ec->ssd_gen_checkpoint = o->ssd_gen_ckpt;
    ec->ssd_demote_idle_s = o->ssd_demote_s >= 0 ? o->ssd_demote_s : 300;
    const char *wb = getenv("CINFER_SSD_WRITEBEHIND");
    ec->ssd_writebehind = !(wb && !strcmp(wb, "0"));
    const char *q = getenv("CINFER_SSD_SPILL_QUEUE_GB");
    double qg = 2;
    if (q && *q) {
        char *end;
        double x = strtod(q, &end);
        if (*end || !(x >= 0 && x <= 1e6)) {
            fprintf(stderr, "cinfer serve: CINFER_SSD_SPILL_QUEUE_GB expects a number of GiB "
                            ">= 0, got '%s'\n",
                    q);
            return -1;
        }
        qg = x;
    }
    ec->ssd_spill_queue_bytes = (size_t)(qg * 1073741824.0);
    const char *t = getenv("CINFER_SSD_FLUSH_TIMEOUT_S");
    ec->ssd_close_timeout_s = t && *t && atof(t) > 0 ? atof(t) : 30;
    return 0;
}

/* ---- ready card, /stats, /metrics ------------------------------------------------------ */

void serve_ssd_card(struct serve *sv)
{
    struct kv_ssd_stats s;
    if (engine_ssd_stats(sv->eng, &s))
        return;
    const struct engine_config *c = engine_config_of(sv->eng);
    char demote[64];
    if (c->ssd_demote_idle_s > 0)
        snprintf(demote, sizeof demote, "demote idle after %g s", c->ssd_demote_idle_s);
    else
        snprintf(demote, sizeof demote, "no idle demotion");
    char ckpt[64] = "";
    if (c->ssd_gen_checkpoint > 0)
        snprintf(ckpt, sizeof ckpt, " · generation checkpoint every %d tokens",
                 c->ssd_gen_checkpoint);
    printf("  SSD cache %s · cap %.1f GiB · %ld entries found at start (%.2f GiB) · %s%s%s%s\n",
           c->ssd_dir, (double)s.max_bytes / 1073741824.0, s.entries_at_start,
           (double)s.bytes / 1073741824.0, demote, c->ssd_verify ? " · verify on" : "",
           c->ssd_writebehind ? "" : " · write-behind off", ckpt);
}

static json_t *stats_obj(struct serve *sv, const struct kv_ssd_stats *s)
{
    json_t *o = json_object();
    json_object_set_new(o, "dir", json_string(engine_config_of(sv->eng)->ssd_dir));
#define I(name, v) json_object_set_new(o, name, json_integer((json_int_t)(v)))
    I("entries", s->entries);
    I("bytes", s->bytes);
    I("max_bytes", s->max_bytes);
    I("hits", s->hits);
    I("misses", s->misses);
    I("restored_tokens", s->restored_tokens);
    I("restored_blocks", s->restored_blocks);
    I("spilled_blocks", s->spilled_blocks);
    I("writes", s->writes);
    I("write_errors", s->write_errors);
    I("pending_spills", s->pending_spills);
    I("pending_spill_bytes", s->pending_spill_bytes);
    I("dropped_spills", s->dropped_spills);
    I("quarantined", s->quarantined);
    I("evictions", s->evictions);
    I("demoted_blocks", s->demoted_blocks);
    I("entries_at_start", s->entries_at_start);
    I("checkpoint_blocks", s->checkpoint_blocks);
#undef I
    json_object_set_new(o, "last_flush_ms", json_real(s->last_flush_ms));
    return o;
}

void serve_ssd_stats_json(struct serve *sv, json_t *j)
{
    struct kv_ssd_stats s;
    if (!engine_ssd_stats(sv->eng, &s))
        json_object_set_new(j, "ssd_cache", stats_obj(sv, &s));
}

void serve_ssd_metrics(struct serve *sv, struct sbuf *b)
{
    struct kv_ssd_stats s;
    if (engine_ssd_stats(sv->eng, &s))
        return;
    static const struct {
        const char *name, *type, *help;
    } m[] = {
        {"entries", "gauge", "Block files in the SSD cache."},
        {"bytes", "gauge", "Bytes of the SSD cache's files."},
        {"max_bytes", "gauge", "The SSD cache's byte cap."},
        {"hits_total", "counter", "Blocks restored from the SSD cache."},
        {"misses_total", "counter", "SSD reads that found no usable file."},
        {"restored_tokens_total", "counter", "Prompt positions restored from the SSD cache."},
        {"spilled_blocks_total", "counter", "Blocks queued for the SSD (eviction, snapshot, demotion)."},
        {"writes_total", "counter", "Block files written."},
        {"write_errors_total", "counter", "Block files that could not be written."},
        {"pending_spills", "gauge", "Blocks queued for the writer."},
        {"pending_spill_bytes", "gauge", "Bytes queued for the writer."},
        {"dropped_spills_total", "counter", "Queued blocks dropped (queue cap or write error)."},
        {"quarantined_total", "counter", "Files moved to quarantine (corrupt, truncated, foreign)."},
        {"evictions_total", "counter", "Files deleted at the byte cap (oldest mtime first)."},
        {"demoted_blocks_total", "counter", "Idle RAM blocks moved to the SSD."},
        {"checkpoint_blocks_total", "counter", "Blocks queued by generation checkpoints."},
        {"last_flush_ms", "gauge", "Duration of the last flush."},
    };
    double v[] = {(double)s.entries, (double)s.bytes, (double)s.max_bytes, (double)s.hits,
                  (double)s.misses, (double)s.restored_tokens, (double)s.spilled_blocks,
                  (double)s.writes, (double)s.write_errors, (double)s.pending_spills,
                  (double)s.pending_spill_bytes, (double)s.dropped_spills, (double)s.quarantined,
                  (double)s.evictions, (double)s.demoted_blocks, (double)s.checkpoint_blocks,
                  s.last_flush_ms};
    for (size_t i = 0; i < sizeof m / sizeof *m; i++)
        sbuf_printf(b, "# HELP cinfer_ssd_cache_%s %s\n# TYPE cinfer_ssd_cache_%s %s\n"
                       "cinfer_ssd_cache_%s %.17g\n",
                    m[i].name, m[i].help, m[i].name, m[i].type, m[i].name, v[i]);
}

void serve_ssd_exit(struct serve *sv)
{
    struct kv_ssd_stats s;
    if (!sv->eng || engine_ssd_stats(sv->eng, &s))
        return;
    double to = engine_config_of(sv->eng)->ssd_close_timeout_s;
    /* an admin flush still running uses the engine: let it end first (bounded) */
    for (double t_end = clock_now_s() + FLUSH_TIMEOUT_S;
         __atomic_load_n(&g_flushing, __ATOMIC_SEQ_CST) > 0 && clock_now_s() < t_end;)
        usleep(10000);
    fprintf(stderr, "cinfer serve: writing the SSD cache to %s (at most %g s) ...\n",
            engine_config_of(sv->eng)->ssd_dir, to);
    double t0 = clock_now_s();
    int rc = engine_ssd_flush(sv->eng, to);
    engine_ssd_stats(sv->eng, &s);
    if (rc == 0)
        fprintf(stderr, "cinfer serve: SSD cache durable: %ld entries, %.1f MiB (%.0f ms)\n",
                s.entries, (double)s.bytes / 1048576.0, (clock_now_s() - t0) * 1e3);
    else
        fprintf(stderr, "cinfer serve: SSD cache: %ld blocks still pending after %g s are lost "
                        "(a future miss)\n",
                s.pending_spills, to);
}

/* ---- POST /admin/cache/flush ----------------------------------------------------------- */

struct flush_job {
    struct serve *sv;
    struct http_req *r;
    int rc;
    double ms;
    int drain;       /* POST /admin/drain: demote too */
    long demotions;  /* blocks demoted by the drain */
};

static void drain_reply(struct flush_job *f)
{
    struct kv_ssd_stats s;
    int tier = !engine_ssd_stats(f->sv->eng, &s);
    json_t *j = json_pack("{s:b, s:I, s:b, s:b, s:f}", "drained", 1, "demotions",
                          (json_int_t)f->demotions, "ssd_cache", tier, "durable",
                          tier && f->rc == 0, "drain_ms", f->ms);
    char *body = j ? json_dumps_short(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (body)
        http_reply(f->r, 200, "application/json", body, strlen(body));
    else
        http_reply_error(f->r, 500, "out of memory");
    free(body);
    http_req_unref(f->r);
    free(f);
}

static void flush_reply(void *ud)
{
    struct flush_job *f = ud;
    if (f->drain) {
        drain_reply(f);
        return;
    }
    struct kv_ssd_stats s;
    json_t *j;
    if (engine_ssd_stats(f->sv->eng, &s))
        j = json_pack("{s:b, s:s}", "durable", 0, "error", "the SSD cache is off");
    else {
        j = stats_obj(f->sv, &s);
        json_object_set_new(j, "durable", json_boolean(f->rc == 0));
        json_object_set_new(j, "flush_ms", json_real(f->ms));
    }
    char *body = j ? json_dumps_short(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (body)
        http_reply(f->r, f->rc == 0 ? 200 : 503, "application/json", body, strlen(body));
    else
        http_reply_error(f->r, 500, "out of memory");
    free(body);
    http_req_unref(f->r);
    free(f);
}

static void *flush_main(void *arg)
{
    struct flush_job *f = arg;
    double t0 = clock_now_s();
    if (f->drain) { /* quiesce: the requests still running end first (bounded) */
        struct engine_stats st;
        for (double t_end = t0 + FLUSH_TIMEOUT_S; clock_now_s() < t_end; usleep(10000)) {
            engine_get_stats(f->sv->eng, &st);
            if (!st.running && !st.waiting)
                break;
        }
    }
    f->rc = f->drain ? engine_ssd_demote(f->sv->eng, FLUSH_TIMEOUT_S, &f->demotions)
                     : engine_ssd_flush(f->sv->eng, FLUSH_TIMEOUT_S);
    f->ms = (clock_now_s() - t0) * 1e3;
    __atomic_sub_fetch(&g_flushing, 1, __ATOMIC_SEQ_CST); /* done with the engine */
    if (http_post(f->sv->http, flush_reply, f))
        log_warn("ssd cache: the flush finished after the server stopped");
    return NULL;
}

static void start_job(struct serve *sv, struct http_req *r, int drain)
{
    struct flush_job *f = calloc(1, sizeof *f);
    pthread_t th;
    if (!f) {
        http_reply_error(r, 500, "out of memory");
        return;
    }
    f->sv = sv;
    f->r = r;
    f->drain = drain;
    http_req_ref(r);
    __atomic_add_fetch(&g_flushing, 1, __ATOMIC_SEQ_CST);
    if (pthread_create(&th, NULL, flush_main, f)) {
        __atomic_sub_fetch(&g_flushing, 1, __ATOMIC_SEQ_CST);
        http_req_unref(r);
        free(f);
        http_reply_error(r, 500, "cannot start the flush");
        return;
    }
    pthread_detach(th);
}

static void h_flush(struct http_req *r, void *ud)
{
    struct serve *sv = ud;
    if (!http_req_peer_loopback(r)) {
        http_reply_error(r, 403, "/admin/cache/flush answers loopback clients only");
        return;
    }
    struct kv_ssd_stats s;
    if (engine_ssd_stats(sv->eng, &s)) {
        http_reply_error(r, 404, "the SSD cache is off (start with --ssd-cache DIR)");
        return;
    }
    start_job(sv, r, 0);
}

/* POST /admin/drain: the --isolate supervisor's call before it stops this engine: the
 * running requests end, then the whole prompt cache is demoted to the SSD tier (with
 * --ssd-cache; without it there is nothing to keep) → {"drained":true,"demotions":N}. The
 * route exists only on a unix-socket listener (an engine child), never on TCP. */
static void h_drain(struct http_req *r, void *ud)
{
    start_job(ud, r, 1);
}

/* POST /admin/sleep and /admin/wake are the --isolate supervisor's (it frees the weights
 * and the KV by stopping the engine process, src/server/isolate/iso_admin.c). */
static void h_needs_isolate(struct http_req *r, void *ud)
{
    (void)ud;
    http_reply_error(r, 409, "sleep and wake need `cinfer serve --isolate` (the supervisor frees "
                             "the weights and the KV by stopping the engine process)");
}

int serve_ssd_routes(struct serve *sv)
{
    int child = !strncmp(sv->o.host, "unix:", 5);
    if (child && http_route(sv->http, "POST", "/admin/drain", 0, h_drain, sv))
        return -1;
    if (!child && (http_route(sv->http, "POST", "/admin/sleep", 0, h_needs_isolate, sv) ||
                   http_route(sv->http, "POST", "/admin/wake", 0, h_needs_isolate, sv)))
        return -1;
    return http_route(sv->http, "POST", "/admin/cache/flush", 0, h_flush, sv) ? -1 : 0;
}
