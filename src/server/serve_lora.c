/* serve_lora.c — LoRA adapters in `cinfer serve`: --adapter / --adapter-path (mounted at
 * start-up, the default set), --adapters-dir, the routes POST/GET /v1/adapters, GET
 * /v1/adapters/available and DELETE /v1/adapters/{id}, a request's adapter (its "adapter"
 * field, or a "model" naming an adapter id), /v1/models entries, /stats.adapters, the
 * /metrics lines (vllm:lora_requests_info beside cinfer's own) and the ready card's line.
 * Loop thread, except setup and the card (main thread, before the routes open).
 */
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/oai_out.h"
#include "model/lora.h"
#include "server/serve.h"
#include "util/fs.h"
#include "util/jsonfmt.h"

#define LORA_LIST_MAX 64

int serve_lora_flag(struct serve_opts *o, const char *a, const char *v)
{
    if (!strcmp(a, "--adapter") || !strcmp(a, "--adapter-path")) {
        if (!v || !*v) {
            fprintf(stderr, "cinfer serve: %s expects an adapter directory or .gguf file\n", a);
            return -1;
        }
        if (o->n_adapters == LORA_MAX_STACK) {
            fprintf(stderr, "cinfer serve: at most %d --adapter flags (they stack)\n",
                    LORA_MAX_STACK);
            return -1;
        }
        o->adapters[o->n_adapters++] = v;
        return 1;
    }
    if (!strcmp(a, "--adapters-dir")) {
        if (!v || !*v) {
            fprintf(stderr, "cinfer serve: --adapters-dir expects a directory\n");
            return -1;
        }
        o->adapters_dir = v;
        return 1;
    }
    return 0;
}

/* The id an adapter path gets: its last path component without ".gguf". */
static void id_of(const char *path, char *id, size_t cap)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    size_t s = n;
    while (s > 0 && path[s - 1] != '/')
        s--;
    size_t len = n - s;
    if (len > 5 && !strncmp(path + n - 5, ".gguf", 5))
        len -= 5;
    snprintf(id, cap, "%.*s", (int)len, path + s);
}

static int mount(struct serve *sv, const char *path, const char *id, float scale, struct cerr *e)
{
    struct lora_adapter *a = NULL;
    int rc = lora_load(&a, sv->m, path, e);
    if (rc)
        return rc;
    if ((rc = lora_reg_mount(sv->lora, id, a, scale, e)))
        lora_unref(a);
    return rc;
}

/* An adapter's last reference dropped (any thread): its backend memory is freed on the
 * engine thread, which owns a device backend's stream (before the engine exists and once it
 * is gone: here). */
static void free_on_engine(void *ud)
{
    lora_destroy(ud);
}

static void free_hook(struct lora_adapter *a, void *ud)
{
    struct serve *sv = ud;
    if (!sv->eng || engine_post(sv->eng, free_on_engine, a))
        lora_destroy(a);
}

int serve_lora_setup(struct serve *sv, struct engine_config *ec)
{
    struct cerr e = {0};
    if (lora_reg_new(&sv->lora, &e)) {
        fprintf(stderr, "cinfer serve: %s\n", e.msg);
        return -1;
    }
    lora_reg_set_free_hook(sv->lora, free_hook, sv);
    ec->lora = sv->lora;
    sv->lora_default[0] = 0;
    for (int i = 0; i < sv->o.n_adapters; i++) {
        char id[LORA_ID_MAX];
        id_of(sv->o.adapters[i], id, sizeof id);
        if (mount(sv, sv->o.adapters[i], id, 1.0f, &e)) {
            fprintf(stderr, "cinfer serve: --adapter %s: %s\n", sv->o.adapters[i], e.msg);
            return -1;
        }
        size_t n = strlen(sv->lora_default);
        snprintf(sv->lora_default + n, sizeof sv->lora_default - n, "%s%s", n ? "+" : "", id);
    }
    return 0;
}

struct lora_am {
    struct lora_am *next;
    char id[LORA_ID_MAX];
    struct api_model am;
};

void serve_lora_free(struct serve *sv)
{
    lora_reg_free(sv->lora);
    sv->lora = NULL;
    while (sv->lora_ams) {
        struct lora_am *a = sv->lora_ams;
        sv->lora_ams = a->next;
        free(a);
    }
}

static void targets_text(unsigned t, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < LORA_NT && n < cap; i++)
        if (t & (1u << i))
            n += (size_t)snprintf(buf + n, cap - n, "%s%.*s", n ? " " : "",
                                  (int)(strchr(lora_target_name(i), '_') - lora_target_name(i)),
                                  lora_target_name(i));
}

void serve_lora_card(struct serve *sv)
{
    struct lora_reg_entry ent[LORA_LIST_MAX];
    int n = sv->lora ? lora_reg_list(sv->lora, ent, LORA_LIST_MAX) : 0;
    if (n == 0) {
        printf("  Adapters  none mounted (POST /v1/adapters%s%s%s)\n",
               sv->o.adapters_dir ? "; mountable from " : "",
               sv->o.adapters_dir ? sv->o.adapters_dir : "", sv->o.adapters_dir ? "" : "");
        return;
    }
    printf("  Adapters  %d mounted:", n);
    for (int i = 0; i < n && i < LORA_LIST_MAX; i++) {
        char t[64];
        targets_text(ent[i].targets, t, sizeof t);
        printf("%s %s (rank %d, %s)", i ? "," : "", ent[i].id, ent[i].rank, t);
    }
    printf(" · default %s\n", sv->lora_default[0] ? sv->lora_default : "none");
}

/* ---- a request's adapters ----------------------------------------------------------------- */

int serve_lora_pick(struct serve *sv, struct http_req *r, struct lora_set *set,
                    struct api_error *err)
{
    memset(set, 0, sizeof *set);
    if (!sv->lora)
        return 0;
    size_t blen = 0;
    const char *body = http_req_body(r, &blen);
    json_t *j = body && blen ? json_loadb(body, blen, 0, NULL) : NULL;
    const char *spec = sv->lora_default;
    json_t *ad = json_object_get(j, "adapter"), *md = json_object_get(j, "model");
    char buf[LORA_ID_MAX * LORA_MAX_STACK + 8];
    if (ad && !json_is_null(ad)) {
        if (!json_is_string(ad)) {
            json_decref(j);
            return api_fail(err, 400, "adapter",
                            "adapter must be a string: an adapter id, "
                            "\"a+b\" / \"a,b\" (stacked) or \"none\"");
        }
        snprintf(buf, sizeof buf, "%s", json_string_value(ad));
        spec = buf;
    } else if (json_is_string(md) && strcmp(json_string_value(md), sv->model_id) &&
               lora_reg_has(sv->lora, json_string_value(md))) {
        snprintf(buf, sizeof buf, "%s", json_string_value(md)); /* a router names the adapter */
        spec = buf;
    }
    json_decref(j);
    struct cerr e = {0};
    if (lora_reg_resolve(sv->lora, spec, set, NULL, 0, &e)) {
        api_fail(err, 400, "adapter", "%s", e.msg);
        err->code = "adapter_not_found";
        return -1;
    }
    return 0;
}

const struct api_model *serve_lora_am(struct serve *sv, struct http_req *r)
{
    if (!sv->lora || !lora_reg_list(sv->lora, NULL, 0))
        return &sv->am;
    size_t blen = 0;
    const char *body = http_req_body(r, &blen);
    json_t *j = body && blen ? json_loadb(body, blen, 0, NULL) : NULL;
    json_t *ad = json_object_get(j, "adapter"), *md = json_object_get(j, "model");
    char id[LORA_ID_MAX] = "";
    if ((!ad || json_is_null(ad)) && json_is_string(md) &&
        strcmp(json_string_value(md), sv->model_id) &&
        lora_reg_has(sv->lora, json_string_value(md)))
        snprintf(id, sizeof id, "%s", json_string_value(md));
    json_decref(j);
    if (!id[0])
        return &sv->am;
    struct lora_am *a = sv->lora_ams;
    while (a && strcmp(a->id, id))
        a = a->next;
    if (!a) {
        if (!(a = calloc(1, sizeof *a)))
            return &sv->am;
        snprintf(a->id, sizeof a->id, "%s", id);
        a->next = sv->lora_ams;
        sv->lora_ams = a;
    }
    a->am = sv->am; /* the rest as the server's, now */
    a->am.id = a->id;
    return &a->am;
}

/* ---- routes ------------------------------------------------------------------------------- */

static void fail(struct serve *sv, struct http_req *r, int status, const char *code,
                 const char *msg)
{
    struct api_error err;
    api_fail(&err, status, NULL, "%s", msg);
    err.code = code;
    serve_reply_error(sv, r, &err, oai_error_body);
}

static json_t *entry_json(const struct lora_reg_entry *x)
{
    json_t *t = json_array();
    for (int i = 0; i < LORA_NT; i++)
        if (x->targets & (1u << i))
            json_array_append_new(t, json_string(lora_target_name(i)));
    int waiting = x->active - x->running > 0 ? x->active - x->running : 0;
    return json_pack("{s:s, s:s, s:s, s:f, s:i, s:o, s:I, s:i, s:i}", "id", x->id, "object",
                     "adapter", "path", x->path, "scale", (double)x->scale, "rank", x->rank,
                     "target_modules", t, "requests", (json_int_t)x->requests, "running",
                     x->running, "waiting", waiting);
}

static json_t *list_json(struct serve *sv)
{
    struct lora_reg_entry ent[LORA_LIST_MAX];
    int n = lora_reg_list(sv->lora, ent, LORA_LIST_MAX);
    json_t *a = json_array();
    for (int i = 0; i < n && i < LORA_LIST_MAX; i++)
        json_array_append_new(a, entry_json(&ent[i]));
    return a;
}

static void h_list(struct http_req *r, void *ud)
{
    struct serve *sv = ud;
    sv->met.requests[EP_OTHER]++;
    serve_reply_json(r, 200,
          json_pack("{s:s, s:o, s:s}", "object", "list", "data", list_json(sv), "default",
                    sv->lora_default[0] ? sv->lora_default : "none"));
}

static void h_available(struct http_req *r, void *ud)
{
    struct serve *sv = ud;
    sv->met.requests[EP_OTHER]++;
    json_t *a = json_array();
    DIR *d = sv->o.adapters_dir ? opendir(sv->o.adapters_dir) : NULL;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        char p[1024], q[1100];
        snprintf(p, sizeof p, "%s/%s", sv->o.adapters_dir, de->d_name);
        snprintf(q, sizeof q, "%s/adapter_config.json", p);
        size_t n = strlen(de->d_name);
        const char *fmt = fs_is_dir(p) && fs_exists(q)                    ? "peft"
                          : n > 5 && !strcmp(de->d_name + n - 5, ".gguf") ? "gguf"
                                                                          : NULL;
        if (!fmt)
            continue;
        char id[LORA_ID_MAX];
        id_of(p, id, sizeof id);
        json_array_append_new(a, json_pack("{s:s, s:s, s:s, s:b}", "id", id, "path", p, "format",
                                           fmt, "mounted", lora_reg_has(sv->lora, id)));
    }
    if (d)
        closedir(d);
    serve_reply_json(r, 200,
          json_pack("{s:s, s:o, s:s?}", "object", "list", "data", a, "adapters_dir",
                    sv->o.adapters_dir));
}

/* A mount while serving loads and uploads on the engine thread, between steps (a device
 * backend's stream belongs to it); the loop thread waits for it. Unmounting only drops the
 * registry's reference: the last one frees on the engine thread (free_hook). */
struct mount_call {
    struct serve *sv;
    const char *path, *id;
    float scale;
    int rc;
    struct cerr e;
};

static void mount_fn(void *ud)
{
    struct mount_call *c = ud;
    c->rc = mount(c->sv, c->path, c->id, c->scale, &c->e);
}

static int mount_serving(struct serve *sv, const char *path, const char *id, float scale,
                         struct cerr *e)
{
    struct mount_call c = {.sv = sv, .path = path, .id = id, .scale = scale};
    if (!sv->eng)
        return mount(sv, path, id, scale, e);
    if (engine_call(sv->eng, mount_fn, &c))
        return cerr_set(e, CERR_NOMEM, "out of memory");
    *e = c.e;
    return c.rc;
}

static void h_mount(struct http_req *r, void *ud)
{
    struct serve *sv = ud;
    sv->met.requests[EP_OTHER]++;
    size_t blen = 0;
    const char *body = http_req_body(r, &blen);
    json_error_t je;
    json_t *j = json_loadb(body ? body : "", blen, 0, &je);
    json_t *jp = json_object_get(j, "path"), *ji = json_object_get(j, "id"),
           *js = json_object_get(j, "scale");
    char msg[700];
    if (!json_is_object(j) || !json_is_string(jp) || (ji && !json_is_string(ji)) ||
        (js && !json_is_number(js))) {
        json_decref(j);
        fail(sv, r, 400, NULL,
             "the body must be a JSON object {\"path\": string, \"id\"?: "
             "string, \"scale\"?: number}");
        return;
    }
    const char *path = json_string_value(jp);
    char full[1024];
    snprintf(full, sizeof full, "%s", path);
    if (path[0] != '/' && sv->o.adapters_dir) { /* a name under --adapters-dir */
        char c[1024];
        snprintf(c, sizeof c, "%s/%s", sv->o.adapters_dir, path);
        if (fs_exists(c))
            snprintf(full, sizeof full, "%s", c);
    }
    char id[LORA_ID_MAX];
    if (ji)
        snprintf(id, sizeof id, "%s", json_string_value(ji));
    else
        id_of(full, id, sizeof id);
    double scale = js ? json_number_value(js) : 1.0;
    json_decref(j);
    if (!(scale > -1e6 && scale < 1e6)) {
        fail(sv, r, 400, NULL, "scale must be a finite number");
        return;
    }
    if (lora_reg_has(sv->lora, id)) {
        snprintf(msg, sizeof msg,
                 "adapter id '%s' is already mounted (DELETE "
                 "/v1/adapters/%s first)",
                 id, id);
        fail(sv, r, 409, "adapter_exists", msg);
        return;
    }
    struct cerr e = {0};
    if (mount_serving(sv, full, id, (float)scale, &e)) {
        fail(sv, r, e.code == CERR_UNSUPPORTED && strstr(e.msg, "backend") ? 501 : 400,
             "adapter_load_failed", e.msg);
        return;
    }
    struct lora_reg_entry ent[LORA_LIST_MAX];
    int n = lora_reg_list(sv->lora, ent, LORA_LIST_MAX);
    for (int i = 0; i < n && i < LORA_LIST_MAX; i++)
        if (!strcmp(ent[i].id, id)) {
            serve_reply_json(r, 200, entry_json(&ent[i]));
            return;
        }
    fail(sv, r, 500, NULL, "the adapter was unmounted while mounting");
}

static void h_unmount(struct http_req *r, void *ud)
{
    struct serve *sv = ud;
    sv->met.requests[EP_OTHER]++;
    const char *id = http_req_path(r) + strlen("/v1/adapters/");
    struct cerr e = {0};
    if (lora_reg_unmount(sv->lora, id, &e)) {
        fail(sv, r, 404, "adapter_not_found", e.msg);
        return;
    }
    /* the default set named it: requests without "adapter" now run the rest */
    char def[sizeof sv->lora_default], *save = NULL;
    snprintf(def, sizeof def, "%s", sv->lora_default);
    sv->lora_default[0] = 0;
    for (char *t = strtok_r(def, "+", &save); t; t = strtok_r(NULL, "+", &save))
        if (strcmp(t, id)) {
            size_t n = strlen(sv->lora_default);
            snprintf(sv->lora_default + n, sizeof sv->lora_default - n, "%s%s", n ? "+" : "", t);
        }
    serve_reply_json(r, 200, json_pack("{s:s, s:s, s:b}", "id", id, "object", "adapter", "deleted", 1));
}

int serve_lora_routes(struct serve *sv)
{
    struct http_server *h = sv->http;
    int rc = http_route(h, "POST", "/v1/adapters", 0, h_mount, sv);
    rc |= http_route(h, "GET", "/v1/adapters", 0, h_list, sv);
    rc |= http_route(h, "GET", "/v1/adapters/available", 0, h_available, sv);
    rc |= http_route(h, "DELETE", "/v1/adapters/", HTTP_ROUTE_PREFIX, h_unmount, sv);
    return rc ? -1 : 0;
}

/* ---- models, stats, metrics --------------------------------------------------------------- */

void serve_lora_models(struct serve *sv, json_t *data, const char *only)
{
    struct lora_reg_entry ent[LORA_LIST_MAX];
    int n = sv->lora ? lora_reg_list(sv->lora, ent, LORA_LIST_MAX) : 0;
    for (int i = 0; i < n && i < LORA_LIST_MAX; i++)
        if (!only || !strcmp(only, ent[i].id))
            json_array_append_new(
                data, json_pack("{s:s, s:s, s:I, s:s, s:s, s:s}", "id", ent[i].id, "object",
                                "model", "created", (json_int_t)sv->started_unix, "owned_by",
                                "cinfer", "parent", sv->model_id, "root", ent[i].path));
}

json_t *serve_lora_stats_json(struct serve *sv)
{
    return json_pack("{s:o, s:s, s:i}", "mounted", sv->lora ? list_json(sv) : json_array(),
                     "default", sv->lora_default[0] ? sv->lora_default : "none", "max_lora",
                     LORA_LIST_MAX);
}

void serve_lora_metrics(struct serve *sv, struct sbuf *b)
{
    struct lora_reg_entry ent[LORA_LIST_MAX];
    int n = sv->lora ? lora_reg_list(sv->lora, ent, LORA_LIST_MAX) : 0;
    char running[LORA_LIST_MAX * LORA_ID_MAX + 1] = "", waiting[sizeof running] = "";
    size_t o = 0, w = 0;
    for (int i = 0; i < n && i < LORA_LIST_MAX; i++) {
        if (ent[i].running > 0)
            o += (size_t)snprintf(running + o, sizeof running - o, "%s%s", o ? "," : "", ent[i].id);
        if (ent[i].active > ent[i].running)
            w += (size_t)snprintf(waiting + w, sizeof waiting - w, "%s%s", w ? "," : "", ent[i].id);
    }
    sbuf_printf(b,
                "# HELP vllm:lora_requests_info Running stats on lora requests.\n"
                "# TYPE vllm:lora_requests_info gauge\n"
                "vllm:lora_requests_info{max_lora=\"%d\",running_lora_adapters=\"%s\","
                "waiting_lora_adapters=\"%s\"} %ld\n",
                LORA_LIST_MAX, running, waiting, (long)time(NULL));
    sbuf_printf(b,
                "# HELP cinfer_lora_adapters_mounted Mounted LoRA adapters.\n"
                "# TYPE cinfer_lora_adapters_mounted gauge\n"
                "cinfer_lora_adapters_mounted %d\n",
                n);
    sbuf_printf(b, "# HELP cinfer_lora_requests_total Requests that ran with each mounted "
                   "adapter.\n# TYPE cinfer_lora_requests_total counter\n");
    for (int i = 0; i < n && i < LORA_LIST_MAX; i++)
        sbuf_printf(b, "cinfer_lora_requests_total{adapter=\"%s\"} %ld\n", ent[i].id,
                    ent[i].requests);
}
