/* hub_pull.c — see hub_pull.h. One libcurl easy handle per request; the model-info call
 * is parsed with jansson; downloads stream to the blob's .incomplete file with a progress
 * line, and resume with a Range request after a cut connection (up to 5 tries).
 */
#include "server/hub_pull.h"

#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "server/model_store.h"
#include "util/clock.h"

#define MAX_FILES 64

static int pf(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int pf(char *out, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, cap, fmt, ap);
    va_end(ap);
    return n;
}

int hub_parse_spec(const char *spec, char *repo, size_t rcap, char *sel, size_t scap,
                   struct cerr *e)
{
    const char *colon = spec ? strchr(spec, ':') : NULL;
    size_t rn = colon ? (size_t)(colon - spec) : (spec ? strlen(spec) : 0);
    if (!spec || !rn || rn >= rcap)
        return cerr_set(e, CERR_INVALID, "expected ORG/REPO[:FILE|:QUANT], got '%s'",
                        spec ? spec : "");
    int slashes = 0;
    for (size_t i = 0; i < rn; i++) {
        char c = spec[i];
        if (c == '/')
            slashes++;
        else if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   c == '-' || c == '_' || c == '.'))
            return cerr_set(e, CERR_INVALID, "'%.*s' is not a Hub repo id (ORG/REPO)", (int)rn,
                            spec);
    }
    if (slashes != 1 || spec[0] == '/' || spec[rn - 1] == '/')
        return cerr_set(e, CERR_INVALID, "'%.*s' is not a Hub repo id (ORG/REPO)", (int)rn, spec);
    memcpy(repo, spec, rn);
    repo[rn] = 0;
    pf(sel, scap, "%s", colon ? colon + 1 : "");
    return 0;
}

/* ---- HTTP ----------------------------------------------------------------------------- */

struct mem {
    char *p;
    size_t n;
};

static size_t wr_mem(void *d, size_t sz, size_t nm, void *ud)
{
    struct mem *m = ud;
    size_t k = sz * nm;
    if (m->n + k > (64u << 20))
        return 0; /* an API answer this large is not one */
    char *np = realloc(m->p, m->n + k + 1);
    if (!np)
        return 0;
    memcpy(np + m->n, d, k);
    m->p = np;
    m->n += k;
    m->p[m->n] = 0;
    return k;
}

struct hdrs {
    char commit[96], etag[160], linked_etag[160], error_code[64], error_msg[256];
    long long size, linked_size;
};

static void hdr_val(const char *b, size_t n, const char *name, char *out, size_t cap)
{
    size_t ln = strlen(name);
    if (n <= ln + 1 || strncasecmp(b, name, ln) || b[ln] != ':')
        return;
    const char *v = b + ln + 1;
    size_t vn = n - ln - 1;
    while (vn && (*v == ' ' || *v == '\t'))
        v++, vn--;
    while (vn && (v[vn - 1] == '\r' || v[vn - 1] == '\n' || v[vn - 1] == ' '))
        vn--;
    pf(out, cap, "%.*s", (int)vn, v);
}

static size_t wr_hdr(char *b, size_t sz, size_t nm, void *ud)
{
    struct hdrs *h = ud;
    size_t n = sz * nm;
    char num[32] = "";
    if (n > 5 && !strncmp(b, "HTTP/", 5)) { /* a new response (after a redirect) */
        char keep[96];
        pf(keep, sizeof keep, "%s", h->commit);
        memset(h, 0, sizeof *h);
        pf(h->commit, sizeof h->commit, "%s", keep);
        return n;
    }
    hdr_val(b, n, "X-Repo-Commit", h->commit, sizeof h->commit);
    hdr_val(b, n, "ETag", h->etag, sizeof h->etag);
    hdr_val(b, n, "X-Linked-Etag", h->linked_etag, sizeof h->linked_etag);
    hdr_val(b, n, "X-Error-Code", h->error_code, sizeof h->error_code);
    hdr_val(b, n, "X-Error-Message", h->error_msg, sizeof h->error_msg);
    hdr_val(b, n, "X-Linked-Size", num, sizeof num);
    if (*num)
        h->linked_size = atoll(num);
    *num = 0;
    hdr_val(b, n, "Content-Length", num, sizeof num);
    if (*num)
        h->size = atoll(num);
    return n;
}

struct ctx {
    char ep[512], repo[256], auth[600];
    int progress;
};

static CURL *easy(const struct ctx *c, const char *url, struct curl_slist **hl)
{
    CURL *h = curl_easy_init();
    if (!h)
        return NULL;
    *hl = curl_slist_append(NULL, "User-Agent: cinfer");
    if (c->auth[0])
        *hl = curl_slist_append(*hl, c->auth);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, *hl);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 30L);
    /* a stalled transfer (under 1 byte/s for 60 s) counts as cut: it is resumed */
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    return h;
}

/* The status error of a Hub call, as a sentence. */
static int http_fail(const struct ctx *c, long code, const struct hdrs *h, const char *what,
                     struct cerr *e)
{
    if (code == 401 || code == 403) {
        if (!strcasecmp(h->error_code, "GatedRepo") || code == 403)
            return cerr_set(e, CERR_IO,
                            "%s is gated (HTTP %ld%s%s): accept its conditions at %s/%s while "
                            "logged in, then set HF_TOKEN to a token of that account",
                            c->repo, code, h->error_msg[0] ? ": " : "", h->error_msg, c->ep,
                            c->repo);
        return cerr_set(e, CERR_IO,
                        "%s needs authentication (HTTP 401): it is private, gated or does not "
                        "exist; set HF_TOKEN%s",
                        c->repo, c->auth[0] ? " to a token that can read it" : "");
    }
    if (code == 404)
        return cerr_set(e, CERR_IO, "%s: %s not found on %s (HTTP 404)", c->repo, what, c->ep);
    return cerr_set(e, CERR_IO, "%s: %s: HTTP %ld from %s", c->repo, what, code, c->ep);
}

/* ---- choosing files ------------------------------------------------------------------- */

static int ends_ci(const char *s, const char *suf)
{
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcasecmp(s + n - m, suf);
}

static int contains_ci(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay; hay++)
        if (!strncasecmp(hay, needle, n))
            return 1;
    return 0;
}

/* The split-file stem: "x-00001-of-00003.gguf" -> length of "x-" prefix + "of-00003", so
 * parts of one model share (prefix, suffix); 0 when not split. */
static int split_part(const char *f, int *part)
{
    const char *p = strstr(f, "-of-");
    if (!p || p - f < 6 || p[-6] != '-')
        return 0;
    *part = atoi(p - 5);
    return 1;
}

static int same_split(const char *a, const char *b)
{
    const char *pa = strstr(a, "-of-"), *pb = strstr(b, "-of-");
    return pa && pb && pa - a == pb - b && !strncmp(a, b, (size_t)(pa - a - 5)) &&
           !strcmp(pa, pb);
}

static int hf_model_file(const char *f)
{
    if (strchr(f, '/'))
        return 0;
    return ends_ci(f, ".json") || ends_ci(f, ".safetensors") || ends_ci(f, ".model") ||
           ends_ci(f, ".jinja") || ends_ci(f, ".txt") || ends_ci(f, ".tiktoken");
}

/* Picks the files of sel among the n siblings; out gets indexes. Returns the count, or a
 * CERR_* with e filled. */
static int choose(const struct ctx *c, const char *const *sib, int n, const char *sel,
                  int *out, int *is_dir, struct cerr *e)
{
    *is_dir = 0;
    int first = -1, n_first = 0, n_gguf = 0;
    char list[300] = "";
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        int part = 0;
        if (!ends_ci(sib[i], ".gguf") || (split_part(sib[i], &part) && part != 1))
            continue;
        n_gguf++;
        int hit = *sel ? (!strcmp(sib[i], sel) || contains_ci(sib[i], sel))
                       : contains_ci(sib[i], "Q4_K_M");
        if (*sel && !strcmp(sib[i], sel)) { /* an exact file name wins */
            first = i, n_first = 1;
            break;
        }
        if (hit) {
            if (!n_first)
                first = i;
            n_first++;
        }
        if (off < sizeof list - 1) {
            int k = pf(list + off, sizeof list - off, "%s%s", off ? ", " : "", sib[i]);
            off = k > 0 && (size_t)k < sizeof list - off ? off + (size_t)k : sizeof list - 1;
        }
    }
    for (int i = 0; *sel && first < 0 && i < n; i++)
        if (!strcmp(sib[i], sel)) /* a non-GGUF file named exactly */
            first = i, n_first = 1;
    if (!*sel && n_gguf == 1)
        for (int i = 0; i < n; i++) {
            int part = 0;
            if (ends_ci(sib[i], ".gguf") && (!split_part(sib[i], &part) || part == 1))
                first = i, n_first = 1;
        }
    if (!*sel && n_gguf == 0) { /* a Hugging Face model directory */
        int k = 0, weights = 0;
        for (int i = 0; i < n && k < MAX_FILES; i++)
            if (hf_model_file(sib[i])) {
                out[k++] = i;
                weights += ends_ci(sib[i], ".safetensors");
            }
        if (!weights)
            return cerr_set(e, CERR_UNSUPPORTED,
                            "%s has neither GGUF files nor safetensors weights", c->repo);
        *is_dir = 1;
        return k;
    }
    if (n_first != 1)
        return cerr_set(e, CERR_INVALID, "%s: %s '%s' — pick one of: %s", c->repo,
                        n_first ? "several GGUF files match" : "no file matches",
                        *sel ? sel : "(default Q4_K_M)", list[0] ? list : "(no GGUF files)");
    int k = 0, part = 0;
    out[k++] = first;
    if (split_part(sib[first], &part))
        for (int i = 0; i < n && k < MAX_FILES; i++)
            if (i != first && same_split(sib[i], sib[first]))
                out[k++] = i;
    return k;
}

/* ---- one file ------------------------------------------------------------------------- */

struct dl {
    FILE *f;
    CURL *h;
    long long off;   /* bytes already on disk when this try began */
    long long total; /* expected size, 0 unknown */
    const char *name;
    int progress, started, bad_status;
    double t0, last;
};

static size_t wr_file(void *d, size_t sz, size_t nm, void *ud)
{
    struct dl *x = ud;
    long code = 0;
    curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &code);
    if (code != 200 && code != 206) {
        x->bad_status = 1;
        return sz * nm; /* an error body: not ours to keep */
    }
    if (!x->started) {
        x->started = 1;
        if (code == 200 && x->off > 0) { /* the server ignored the Range: start over */
            if (ftruncate(fileno(x->f), 0) || fseek(x->f, 0, SEEK_SET))
                return 0;
            x->off = 0;
        }
    }
    return fwrite(d, sz, nm, x->f) * sz;
}

static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ut,
                       curl_off_t un)
{
    (void)ut, (void)un;
    struct dl *x = ud;
    double now = clock_now_s();
    if (!x->progress || now - x->last < 0.25)
        return 0;
    x->last = now;
    long long have = x->off + (long long)dlnow;
    long long total = x->total ? x->total : x->off + (long long)dltotal;
    double rate = (double)dlnow / (now - x->t0 > 1e-3 ? now - x->t0 : 1e-3);
    if (total > 0)
        fprintf(stderr, "\r  %s  %3d%%  %.1f / %.1f MB  %.1f MB/s   ", x->name,
                (int)(100.0 * (double)have / (double)total), have / 1e6, total / 1e6, rate / 1e6);
    else
        fprintf(stderr, "\r  %s  %.1f MB  %.1f MB/s   ", x->name, have / 1e6, rate / 1e6);
    return 0;
}

static int sha256_file(const char *path, char hex[65])
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    int ok = c && EVP_DigestInit_ex(c, EVP_sha256(), NULL);
    static unsigned char buf[1 << 16];
    size_t n;
    while (ok && (n = fread(buf, 1, sizeof buf, f)) > 0)
        ok = EVP_DigestUpdate(c, buf, n);
    unsigned char md[32];
    unsigned int len = 32;
    ok = ok && !ferror(f) && EVP_DigestFinal_ex(c, md, &len);
    EVP_MD_CTX_free(c);
    fclose(f);
    for (int i = 0; ok && i < 32; i++)
        sprintf(hex + 2 * i, "%02x", md[i]);
    return ok ? 0 : -1;
}

static int is_sha256(const char *s)
{
    if (strlen(s) != 64)
        return 0;
    for (; *s; s++)
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
            return 0;
    return 1;
}

static int mkdirs(const char *path)
{
    char tmp[2048];
    pf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(tmp, 0755) && errno != EEXIST)
                return -1;
            *p = '/';
        }
    return mkdir(tmp, 0755) && errno != EEXIST ? -1 : 0;
}

/* Downloads one file of the repo at commit sha into repo_dir; *commit gets the commit. */
static int pull_file(const struct ctx *c, const char *repo_dir, const char *sha, const char *file,
                     char *commit, size_t ccap, struct cerr *e)
{
    char url[2048];
    pf(url, sizeof url, "%s/%s/resolve/%s/%s", c->ep, c->repo, sha, file);
    /* HEAD, redirect not followed: the blob id, the commit, the size */
    struct hdrs h = {0};
    struct curl_slist *hl = NULL;
    CURL *q = easy(c, url, &hl);
    if (!q)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    curl_easy_setopt(q, CURLOPT_NOBODY, 1L);
    curl_easy_setopt(q, CURLOPT_HEADERFUNCTION, wr_hdr);
    curl_easy_setopt(q, CURLOPT_HEADERDATA, &h);
    CURLcode r = curl_easy_perform(q);
    long code = 0;
    curl_easy_getinfo(q, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(q);
    curl_slist_free_all(hl);
    if (r != CURLE_OK)
        return cerr_set(e, CERR_IO, "%s: %s: %s", c->repo, url, curl_easy_strerror(r));
    if (code >= 400 || code < 200)
        return http_fail(c, code, &h, file, e);
    char id[160];
    const char *raw = h.linked_etag[0] ? h.linked_etag : h.etag;
    if (!strncmp(raw, "W/", 2))
        raw += 2;
    pf(id, sizeof id, "%s", raw + (*raw == '"'));
    id[strcspn(id, "\"")] = 0;
    if (!id[0] || strchr(id, '/') || !strcmp(id, ".") || !strcmp(id, ".."))
        return cerr_set(e, CERR_FORMAT, "%s: the Hub gave no usable ETag for %s", c->repo, file);
    pf(commit, ccap, "%s", h.commit[0] ? h.commit : sha);
    long long total = h.linked_size ? h.linked_size : h.size;
    char blobs[2048], blob[2300], inc[2400];
    pf(blobs, sizeof blobs, "%s/blobs", repo_dir);
    pf(blob, sizeof blob, "%s/%s", blobs, id);
    pf(inc, sizeof inc, "%s.incomplete", blob);
    if (mkdirs(blobs))
        return cerr_set(e, CERR_IO, "cannot create %s: %s", blobs, strerror(errno));
    struct stat st;
    if (stat(blob, &st) != 0) {
        int done = 0;
        for (int attempt = 0; attempt < 5 && !done; attempt++) {
            struct dl x = {.total = total, .name = file, .progress = c->progress,
                           .t0 = clock_now_s()};
            x.f = fopen(inc, "ab");
            if (!x.f)
                return cerr_set(e, CERR_IO, "cannot write %s: %s", inc, strerror(errno));
            x.off = ftell(x.f);
            if (total && x.off == total) { /* a complete .incomplete: verify below */
                fclose(x.f);
                done = 1;
                break;
            }
            x.h = easy(c, url, &hl);
            if (!x.h) {
                fclose(x.f);
                return cerr_set(e, CERR_NOMEM, "out of memory");
            }
            curl_easy_setopt(x.h, CURLOPT_FOLLOWLOCATION, 1L);
            curl_easy_setopt(x.h, CURLOPT_WRITEFUNCTION, wr_file);
            curl_easy_setopt(x.h, CURLOPT_WRITEDATA, &x);
            curl_easy_setopt(x.h, CURLOPT_NOPROGRESS, 0L);
            curl_easy_setopt(x.h, CURLOPT_XFERINFOFUNCTION, on_progress);
            curl_easy_setopt(x.h, CURLOPT_XFERINFODATA, &x);
            if (x.off > 0)
                curl_easy_setopt(x.h, CURLOPT_RESUME_FROM_LARGE, (curl_off_t)x.off);
            r = curl_easy_perform(x.h);
            curl_easy_getinfo(x.h, CURLINFO_RESPONSE_CODE, &code);
            curl_easy_cleanup(x.h);
            curl_slist_free_all(hl);
            hl = NULL;
            int werr = fclose(x.f) != 0;
            if (c->progress)
                fprintf(stderr, "\n");
            if (werr)
                return cerr_set(e, CERR_IO, "cannot write %s", inc);
            if (r == CURLE_OK && (code == 200 || code == 206))
                done = 1;
            else if (code == 416) /* nothing left to send: the file is whole */
                done = 1;
            else if (r == CURLE_OK && code >= 400)
                return http_fail(c, code, &h, file, e);
            else if (c->progress)
                fprintf(stderr, "  %s: %s — resuming\n", file, curl_easy_strerror(r));
        }
        if (!done)
            return cerr_set(e, CERR_IO, "%s: downloading %s failed 5 times (%s); run the pull "
                                        "again to resume",
                            c->repo, file, curl_easy_strerror(r));
        if (stat(inc, &st) || (total && st.st_size != total))
            return cerr_set(e, CERR_IO, "%s: %s is %lld bytes, the Hub said %lld; run the "
                                        "pull again to resume",
                            c->repo, file, (long long)st.st_size, total);
        if (is_sha256(id)) { /* an LFS file: its ETag is its sha256 */
            char hex[65];
            if (sha256_file(inc, hex))
                return cerr_set(e, CERR_IO, "cannot read %s", inc);
            if (strcmp(hex, id)) {
                unlink(inc);
                return cerr_set(e, CERR_FORMAT,
                                "%s: %s failed its sha256 check (expected %s, got %s); the "
                                "download was deleted",
                                c->repo, file, id, hex);
            }
        }
        if (rename(inc, blob))
            return cerr_set(e, CERR_IO, "cannot rename %s: %s", inc, strerror(errno));
    }
    /* snapshots/COMMIT/FILE -> ../../blobs/ID (one more ../ per folder in FILE) */
    char link[2400], dir[2400], target[2400] = "../../";
    pf(link, sizeof link, "%s/snapshots/%s/%s", repo_dir, commit, file);
    pf(dir, sizeof dir, "%s", link);
    *strrchr(dir, '/') = 0;
    for (const char *p = file; *p; p++)
        if (*p == '/')
            strcat(target, "../");
    size_t tl = strlen(target);
    pf(target + tl, sizeof target - tl, "blobs/%s", id);
    if (mkdirs(dir))
        return cerr_set(e, CERR_IO, "cannot create %s: %s", dir, strerror(errno));
    unlink(link);
    if (symlink(target, link))
        return cerr_set(e, CERR_IO, "cannot link %s: %s", link, strerror(errno));
    return 0;
}

/* ---- the pull ------------------------------------------------------------------------- */

int hub_pull(const char *spec, const struct pull_opts *o, char *path, size_t cap,
             struct cerr *e)
{
    struct ctx c = {.progress = o->progress};
    char sel[512];
    int rc = hub_parse_spec(spec, c.repo, sizeof c.repo, sel, sizeof sel, e);
    if (rc)
        return rc;
    const char *ep = o->endpoint ? o->endpoint : getenv("HF_ENDPOINT");
    pf(c.ep, sizeof c.ep, "%s", ep && *ep ? ep : "https://huggingface.co");
    size_t n = strlen(c.ep);
    while (n && c.ep[n - 1] == '/')
        c.ep[--n] = 0;
    const char *tok = o->token ? o->token : getenv("HF_TOKEN");
    if (tok && *tok)
        pf(c.auth, sizeof c.auth, "Authorization: Bearer %s", tok);
    if (curl_global_init(CURL_GLOBAL_DEFAULT))
        return cerr_set(e, CERR_IO, "cannot initialise libcurl");
    /* the model info: the commit and the file list */
    char url[1024];
    pf(url, sizeof url, "%s/api/models/%s/revision/main", c.ep, c.repo);
    struct mem m = {0};
    struct hdrs h = {0};
    struct curl_slist *hl = NULL;
    CURL *q = easy(&c, url, &hl);
    json_t *j = NULL;
    char repo_dir[2048] = "", commit[96] = "";
    const char **sib = NULL;
    if (!q) {
        rc = cerr_set(e, CERR_NOMEM, "out of memory");
        goto out;
    }
    curl_easy_setopt(q, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(q, CURLOPT_WRITEFUNCTION, wr_mem);
    curl_easy_setopt(q, CURLOPT_WRITEDATA, &m);
    curl_easy_setopt(q, CURLOPT_HEADERFUNCTION, wr_hdr);
    curl_easy_setopt(q, CURLOPT_HEADERDATA, &h);
    CURLcode r = curl_easy_perform(q);
    long code = 0;
    curl_easy_getinfo(q, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(q);
    curl_slist_free_all(hl);
    if (r != CURLE_OK) {
        rc = cerr_set(e, CERR_IO, "cannot reach %s: %s (HF_ENDPOINT sets another hub)", c.ep,
                      curl_easy_strerror(r));
        goto out;
    }
    if (code != 200) {
        rc = http_fail(&c, code, &h, "the repo", e);
        goto out;
    }
    j = json_loads(m.p ? m.p : "", 0, NULL);
    const char *sha = json_string_value(json_object_get(j, "sha"));
    json_t *sibs = json_object_get(j, "siblings");
    if (!sha || !json_is_array(sibs)) {
        rc = cerr_set(e, CERR_FORMAT, "%s: the Hub's model info has no sha/siblings", c.repo);
        goto out;
    }
    int ns = (int)json_array_size(sibs), idx[MAX_FILES], is_dir = 0;
    sib = calloc((size_t)ns + 1, sizeof *sib);
    if (!sib) {
        rc = cerr_set(e, CERR_NOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < ns; i++) {
        const char *f = json_string_value(json_object_get(json_array_get(sibs, i), "rfilename"));
        sib[i] = f && !strstr(f, "..") && f[0] != '/' ? f : "";
    }
    int nf = choose(&c, sib, ns, sel, idx, &is_dir, e);
    if (nf < 0) {
        rc = nf;
        goto out;
    }
    char hub[1024];
    store_hub_dir(hub, sizeof hub);
    const char *slash = strchr(c.repo, '/');
    pf(repo_dir, sizeof repo_dir, "%s/models--%.*s--%s", hub, (int)(slash - c.repo), c.repo,
       slash + 1);
    for (int i = 0; i < nf && !rc; i++) {
        if (c.progress)
            fprintf(stderr, "pull %s/%s (%d of %d)\n", c.repo, sib[idx[i]], i + 1, nf);
        rc = pull_file(&c, repo_dir, sha, sib[idx[i]], commit, sizeof commit, e);
    }
    if (rc)
        goto out;
    /* refs/main: the commit the snapshot is named by */
    char refs[2100], ref[2200];
    pf(refs, sizeof refs, "%s/refs", repo_dir);
    pf(ref, sizeof ref, "%s/main", refs);
    FILE *f = mkdirs(refs) ? NULL : fopen(ref, "w");
    if (!f || fputs(commit, f) < 0 || fclose(f)) {
        rc = cerr_set(e, CERR_IO, "cannot write %s", ref);
        goto out;
    }
    if (is_dir)
        pf(path, cap, "%s/snapshots/%s", repo_dir, commit);
    else
        pf(path, cap, "%s/snapshots/%s/%s", repo_dir, commit, sib[idx[0]]);
out:
    free(sib);
    json_decref(j);
    free(m.p);
    curl_global_cleanup();
    return rc;
}
