/* load.c — tok_load(): picks the loader from what the path holds.
 *
 * A directory: tokenizer.json (+ tokenizer_config.json), else tokenizer.model, else the
 * first *.gguf. A file: GGUF magic -> GGUF; gzip magic -> gunzip, then JSON; '{' -> JSON
 * (with tokenizer_config.json from the same folder when present); otherwise SentencePiece.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "format/gguf.h"
#include "tokenizer/tok_int.h"
#include "util/err.h"
#include "util/fs.h"

/* Inflates a gzip buffer into a malloc'd NUL-terminated buffer. */
static int gunzip_mem(const uint8_t *in, size_t n, char **out, size_t *out_len, struct cerr *e)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK)
        return cerr_set(e, CERR_NOMEM, "zlib init failed");
    size_t cap = n * 4 + 1024, len = 0;
    char *buf = malloc(cap);
    int rc = buf ? 0 : CERR_NOMEM;
    z.next_in = (Bytef *)in;
    z.avail_in = (uInt)n;
    while (!rc) {
        if (cap - len < 2) {
            if (cap > ((size_t)1 << 31)) {
                rc = cerr_set(e, CERR_LIMIT, "gzip data inflates beyond 2 GiB");
                break;
            }
            cap *= 2;
            char *nb = realloc(buf, cap);
            if (!nb) {
                rc = CERR_NOMEM;
                break;
            }
            buf = nb;
        }
        z.next_out = (Bytef *)buf + len;
        z.avail_out = (uInt)(cap - len - 1);
        int zr = inflate(&z, Z_NO_FLUSH);
        len = (size_t)((char *)z.next_out - buf);
        if (zr == Z_STREAM_END)
            break;
        if (zr != Z_OK && zr != Z_BUF_ERROR) {
            rc = cerr_set(e, CERR_FORMAT, "corrupt gzip data (%s)", z.msg ? z.msg : "?");
            break;
        }
        if (zr == Z_BUF_ERROR && z.avail_in == 0) {
            rc = cerr_set(e, CERR_FORMAT, "truncated gzip data");
            break;
        }
    }
    inflateEnd(&z);
    if (rc) {
        free(buf);
        return rc == CERR_NOMEM ? cerr_set(e, CERR_NOMEM, "out of memory") : rc;
    }
    buf[len] = 0;
    *out = buf;
    *out_len = len;
    return 0;
}

static void dir_of(const char *path, char *dir, size_t cap)
{
    const char *sl = strrchr(path, '/');
    if (!sl) {
        snprintf(dir, cap, ".");
        return;
    }
    size_t l = (size_t)(sl - path);
    if (l >= cap)
        l = cap - 1;
    memcpy(dir, path, l);
    dir[l] = 0;
    if (l == 0)
        snprintf(dir, cap, "/");
}

static int load_file(struct tok **out, const char *path, struct cerr *e)
{
    struct fs_map m = {0};
    int rc = fs_map(&m, path, e);
    if (rc)
        return rc;
    if (m.size >= 4 && memcmp(m.data, "GGUF", 4) == 0) {
        fs_unmap(&m);
        struct gguf *g = NULL;
        rc = gguf_open(&g, path, e);
        if (rc)
            return rc;
        rc = tok_load_gguf(out, g, e);
        gguf_close(g);
        return rc;
    }
    char *json = NULL;
    size_t jlen = 0;
    if (m.size >= 2 && m.data[0] == 0x1f && m.data[1] == 0x8b) {
        rc = gunzip_mem(m.data, m.size, &json, &jlen, e);
        fs_unmap(&m);
        if (rc)
            return cerr_prefix(e, "%s", path);
    } else {
        size_t i = 0;
        while (i < m.size && (m.data[i] == ' ' || m.data[i] == '\n' || m.data[i] == '\r' ||
                              m.data[i] == '\t'))
            i++;
        if (i == m.size || m.data[i] != '{') {
            rc = tok_load_spm_mem(out, m.data, m.size, e);
            fs_unmap(&m);
            return rc ? cerr_prefix(e, "%s", path) : 0;
        }
        json = malloc(m.size + 1);
        if (!json) {
            fs_unmap(&m);
            return cerr_set(e, CERR_NOMEM, "out of memory");
        }
        memcpy(json, m.data, m.size);
        jlen = m.size;
        fs_unmap(&m);
    }
    char dir[1024], cfgp[1100];
    dir_of(path, dir, sizeof dir);
    char *cfg = NULL;
    size_t clen = 0;
    if (fs_join(cfgp, sizeof cfgp, dir, "tokenizer_config.json") == 0 && fs_exists(cfgp))
        if (fs_read_all(cfgp, &cfg, &clen, NULL) != 0)
            cfg = NULL;
    rc = tok_load_json_mem(out, json, jlen, cfg, clen, e);
    free(json);
    free(cfg);
    return rc ? cerr_prefix(e, "%s", path) : 0;
}

int tok_load(struct tok **out, const char *path, struct cerr *e)
{
    *out = NULL;
    if (!path || !*path)
        return cerr_set(e, CERR_INVALID, "no tokenizer path given");
    if (!fs_is_dir(path)) {
        if (!fs_exists(path))
            return cerr_set(e, CERR_IO, "%s: no such file", path);
        return load_file(out, path, e);
    }
    static const char *names[] = {"tokenizer.json", "tokenizer.json.gz", "tokenizer.model"};
    char p[1100];
    for (size_t i = 0; i < 3; i++)
        if (fs_join(p, sizeof p, path, names[i]) == 0 && fs_exists(p))
            return load_file(out, p, e);
    DIR *d = opendir(path);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d))) {
            size_t l = strlen(de->d_name);
            if (l > 5 && strcmp(de->d_name + l - 5, ".gguf") == 0 &&
                fs_join(p, sizeof p, path, de->d_name) == 0) {
                closedir(d);
                return load_file(out, p, e);
            }
        }
        closedir(d);
    }
    return cerr_set(e, CERR_IO, "%s: no tokenizer.json, tokenizer.model or .gguf in this folder",
                    path);
}
