/* model_store.c — see model_store.h. Scans with opendir/stat (snapshot files are symlinks
 * into blobs/, so stat gives the blob's size); removal walks every snapshot of the repo to
 * keep blobs another snapshot still links to.
 */
#include "server/model_store.h"

#include <dirent.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/fs.h"

/* snprintf whose truncation (of paths too long to be real) is fine: the result is checked by
 * the file system calls that use it. */
static int pf(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int pf(char *out, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, cap, fmt, ap);
    va_end(ap);
    return n;
}

void store_hub_dir(char *out, size_t cap)
{
    const char *c = getenv("HF_HUB_CACHE"), *h = getenv("HF_HOME"), *home = getenv("HOME");
    if (c && *c)
        pf(out, cap, "%s", c);
    else if (h && *h)
        pf(out, cap, "%s/hub", h);
    else
        pf(out, cap, "%s/.cache/huggingface/hub", home && *home ? home : ".");
}

void store_local_dir(char *out, size_t cap)
{
    const char *home = getenv("HOME");
    pf(out, cap, "%s/.cache/cinfer/models", home && *home ? home : ".");
}

static int ends_with(const char *s, const char *suf)
{
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcasecmp(s + n - m, suf);
}

/* A later part of a split GGUF ("-00002-of-00003.gguf"): listed through its first part. */
static int later_split_part(const char *name)
{
    const char *p = strstr(name, "-of-");
    if (!p || p - name < 6)
        return 0;
    const char *q = p - 5;
    if (q[-1] != '-')
        return 0;
    for (int i = 0; i < 5; i++)
        if (q[i] < '0' || q[i] > '9')
            return 0;
    return strncmp(q, "00001", 5) != 0;
}

static int push(struct store_list *l, const struct store_model *m)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        struct store_model *nv = realloc(l->v, (size_t)cap * sizeof *nv);
        if (!nv)
            return CERR_NOMEM;
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = *m;
    return 0;
}

static long long file_size(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode) ? (long long)st.st_size : -1;
}

/* .gguf files under dir (relative names from rel), depth-limited. */
static int scan_gguf(struct store_list *l, const struct store_model *base, const char *dir,
                     const char *rel, int depth)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int rc = 0;
    struct dirent *de;
    while (!rc && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        char p[1536], r[512];
        pf(p, sizeof p, "%s/%s", dir, de->d_name);
        pf(r, sizeof r, "%s%s%s", rel, *rel ? "/" : "", de->d_name);
        struct stat st;
        if (stat(p, &st))
            continue; /* a dangling link (an incomplete download) */
        if (S_ISDIR(st.st_mode)) {
            if (depth < 3)
                rc = scan_gguf(l, base, p, r, depth + 1);
        } else if (ends_with(de->d_name, ".gguf") && !later_split_part(de->d_name)) {
            struct store_model m = *base;
            pf(m.file, sizeof m.file, "%s", r);
            pf(m.path, sizeof m.path, "%s", p);
            m.bytes = (long long)st.st_size;
            rc = push(l, &m);
        }
    }
    closedir(d);
    return rc;
}

/* A snapshot directory that is a Hugging Face model (config.json + safetensors). */
static int scan_hf_dir(struct store_list *l, const struct store_model *base, const char *dir)
{
    char p[1536];
    pf(p, sizeof p, "%s/config.json", dir);
    if (file_size(p) < 0)
        return 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    long long bytes = 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (ends_with(de->d_name, ".safetensors")) {
            pf(p, sizeof p, "%s/%s", dir, de->d_name);
            long long s = file_size(p);
            if (s >= 0)
                bytes += s, n++;
        }
    closedir(d);
    if (!n)
        return 0;
    struct store_model m = *base;
    m.file[0] = 0;
    pf(m.path, sizeof m.path, "%s", dir);
    m.bytes = bytes;
    return push(l, &m);
}

static void read_ref(const char *repo_dir, char *out, size_t cap)
{
    char p[1536];
    pf(p, sizeof p, "%s/refs/main", repo_dir);
    out[0] = 0;
    FILE *f = fopen(p, "r");
    if (!f)
        return;
    if (fgets(out, (int)cap, f))
        out[strcspn(out, " \r\n")] = 0;
    fclose(f);
}

static int scan_repo(struct store_list *l, const char *hub, const char *dname)
{
    struct store_model base = {0};
    /* models--ORG--NAME -> ORG/NAME (a name without an org has one part) */
    const char *id = dname + 8;
    const char *sep = strstr(id, "--");
    if (sep)
        pf(base.repo, sizeof base.repo, "%.*s/%s", (int)(sep - id), id, sep + 2);
    else
        pf(base.repo, sizeof base.repo, "%s", id);
    char repo_dir[1024], snaps[1100], ref[64];
    pf(repo_dir, sizeof repo_dir, "%s/%s", hub, dname);
    pf(snaps, sizeof snaps, "%s/snapshots", repo_dir);
    read_ref(repo_dir, ref, sizeof ref);
    DIR *d = opendir(snaps);
    if (!d)
        return 0;
    int rc = 0;
    struct dirent *de;
    while (!rc && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        /* with refs/main, only its snapshot; without, every one */
        if (*ref && strcmp(de->d_name, ref))
            continue;
        char sdir[1536];
        pf(sdir, sizeof sdir, "%s/%s", snaps, de->d_name);
        pf(base.commit, sizeof base.commit, "%s", de->d_name);
        rc = scan_gguf(l, &base, sdir, "", 0);
        if (!rc)
            rc = scan_hf_dir(l, &base, sdir);
    }
    closedir(d);
    return rc;
}

void store_label(const struct store_model *m, char *out, size_t cap)
{
    if (!m->repo[0])
        pf(out, cap, "%s", m->file);
    else if (m->file[0])
        pf(out, cap, "%s:%s", m->repo, m->file);
    else
        pf(out, cap, "%s", m->repo);
}

static int by_label(const void *a, const void *b)
{
    char la[800], lb[800];
    store_label(a, la, sizeof la);
    store_label(b, lb, sizeof lb);
    return strcasecmp(la, lb);
}

int store_scan(struct store_list *l, struct cerr *e)
{
    memset(l, 0, sizeof *l);
    char hub[1024];
    store_hub_dir(hub, sizeof hub);
    int rc = 0;
    DIR *d = opendir(hub);
    if (d) {
        struct dirent *de;
        while (!rc && (de = readdir(d)))
            if (!strncmp(de->d_name, "models--", 8) && de->d_name[8])
                rc = scan_repo(l, hub, de->d_name);
        closedir(d);
    }
    char local[1024];
    store_local_dir(local, sizeof local);
    struct store_model base = {0};
    if (!rc)
        rc = scan_gguf(l, &base, local, "", 2);
    if (rc) {
        store_list_free(l);
        return cerr_set(e, CERR_NOMEM, "out of memory");
    }
    if (l->n > 1)
        qsort(l->v, (size_t)l->n, sizeof *l->v, by_label);
    return 0;
}

void store_list_free(struct store_list *l)
{
    free(l->v);
    memset(l, 0, sizeof *l);
}

/* ---- names -------------------------------------------------------------------------------- */

static int contains_ci(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    if (!n)
        return 1;
    for (; *hay; hay++)
        if (!strncasecmp(hay, needle, n))
            return 1;
    return 0;
}

static int matches(const struct store_model *m, const char *name)
{
    const char *colon = strchr(name, ':');
    if (colon) {
        char repo[512];
        pf(repo, sizeof repo, "%.*s", (int)(colon - name), name);
        const char *r = m->repo[0] ? m->repo : m->file;
        return contains_ci(r, repo) && (m->file[0] ? contains_ci(m->file, colon + 1)
                                                   : !colon[1]);
    }
    char full[800];
    pf(full, sizeof full, "%s%s%s", m->repo, m->repo[0] && m->file[0] ? "/" : "",
             m->file);
    return contains_ci(full, name);
}

int store_resolve(const struct store_list *l, const char *name, struct cerr *e)
{
    int found = -1, n = 0;
    for (int i = 0; i < l->n; i++)
        if (matches(&l->v[i], name)) {
            if (n == 0)
                found = i;
            n++;
        }
    if (n == 1)
        return found;
    if (n == 0)
        return cerr_set(e, CERR_INVALID,
                        "no cached model matches '%s' (%d cached; `cinfer ls` lists them, "
                        "`cinfer pull ORG/REPO[:QUANT]` downloads one)",
                        name, l->n);
    char list[400] = "";
    size_t off = 0;
    int shown = 0;
    for (int i = 0; i < l->n; i++) {
        if (!matches(&l->v[i], name))
            continue;
        char lab[800];
        store_label(&l->v[i], lab, sizeof lab);
        int k = pf(list + off, sizeof list - off, "%s%s", shown ? ", " : "", lab);
        if (k < 0 || (size_t)k >= sizeof list - off) {
            list[off] = 0;
            break;
        }
        off += (size_t)k;
        shown++;
    }
    return cerr_set(e, CERR_INVALID, "'%s' matches %d cached models: %s%s — give more of the name",
                    name, n, list, shown < n ? ", ..." : "");
}

int store_pick_largest(const struct store_list *l, long long max_bytes)
{
    int best = -1;
    for (int i = 0; i < l->n; i++)
        if (l->v[i].bytes <= max_bytes && (best < 0 || l->v[i].bytes > l->v[best].bytes))
            best = i;
    return best;
}

/* ---- removal ------------------------------------------------------------------------------ */

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st, (void)flag, (void)f;
    return remove(p);
}

static int rm_rf(const char *p) { return nftw(p, rm_cb, 16, FTW_DEPTH | FTW_PHYS); }

/* 1 when any symlink under dir resolves to blob (a real path). */
static int links_to(const char *dir, const char *blob)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int hit = 0;
    struct dirent *de;
    while (!hit && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        char p[1536], rp[PATH_MAX];
        pf(p, sizeof p, "%s/%s", dir, de->d_name);
        struct stat st;
        if (lstat(p, &st))
            continue;
        if (S_ISDIR(st.st_mode))
            hit = links_to(p, blob);
        else if (realpath(p, rp) && !strcmp(rp, blob))
            hit = 1;
    }
    closedir(d);
    return hit;
}

/* Unlinks one snapshot entry and its blob unless another snapshot still uses it. */
static int remove_entry(const char *repo_dir, const char *entry)
{
    char blob[PATH_MAX], snaps[1536];
    int has_blob = realpath(entry, blob) != NULL;
    if (unlink(entry))
        return -1;
    pf(snaps, sizeof snaps, "%s/snapshots", repo_dir);
    if (has_blob && !links_to(snaps, blob))
        unlink(blob);
    return 0;
}

/* Unlinks every file under dir through remove_entry (dropping unshared blobs). */
static void remove_tree_entries(const char *repo_dir, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char p[1536];
        pf(p, sizeof p, "%s/%s", dir, de->d_name);
        struct stat st;
        if (lstat(p, &st))
            continue;
        if (S_ISDIR(st.st_mode))
            remove_tree_entries(repo_dir, p);
        else
            remove_entry(repo_dir, p);
    }
    closedir(d);
}

static int dir_empty(const char *p)
{
    DIR *d = opendir(p);
    if (!d)
        return 1;
    struct dirent *de;
    int empty = 1;
    while (empty && (de = readdir(d)))
        empty = !strcmp(de->d_name, ".") || !strcmp(de->d_name, "..");
    closedir(d);
    return empty;
}

int store_remove(const struct store_model *m, struct cerr *e)
{
    if (!m->repo[0]) {
        if (unlink(m->path))
            return cerr_set(e, CERR_IO, "cannot remove %s", m->path);
        return 0;
    }
    char hub[1024], repo_dir[1536], snap[1700];
    store_hub_dir(hub, sizeof hub);
    char dname[300];
    const char *slash = strchr(m->repo, '/');
    if (slash)
        pf(dname, sizeof dname, "models--%.*s--%s", (int)(slash - m->repo), m->repo,
                 slash + 1);
    else
        pf(dname, sizeof dname, "models--%s", m->repo);
    pf(repo_dir, sizeof repo_dir, "%s/%s", hub, dname);
    pf(snap, sizeof snap, "%s/snapshots/%s", repo_dir, m->commit);
    if (m->file[0] && remove_entry(repo_dir, m->path))
        return cerr_set(e, CERR_IO, "cannot remove %s", m->path);
    /* a snapshot with no model left goes whole (its other files' blobs with it) */
    struct store_list l = {0};
    struct store_model base = {0};
    int rc = m->file[0] ? scan_gguf(&l, &base, snap, "", 0) : 0;
    if (!rc && m->file[0])
        rc = scan_hf_dir(&l, &base, snap);
    int keep = rc || l.n > 0;
    store_list_free(&l);
    if (!keep) {
        remove_tree_entries(repo_dir, snap);
        if (rm_rf(snap) && fs_exists(snap))
            return cerr_set(e, CERR_IO, "cannot remove %s", snap);
    }
    char snaps[1700];
    pf(snaps, sizeof snaps, "%s/snapshots", repo_dir);
    if (dir_empty(snaps) && rm_rf(repo_dir))
        return cerr_set(e, CERR_IO, "cannot remove %s", repo_dir);
    return 0;
}
