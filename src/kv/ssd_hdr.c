/* ssd_hdr.c — the SSD tier's file header (see ssd.h): a fixed 184-byte little-endian
 * record, its encoder and its parser (the parser is fuzzed: fuzz/fuzz_ssd_hdr.c), plus the
 * weights fingerprint. Offsets:
 *   0 magic "CINFKVB\x01" · 8 version · 12 header bytes · 16 namespace (32) · 48 key (32)
 *   80 n_tok · 84 block_size · 88 n_layer · 92 kv_dim · 96 kv_dtype · 100 zero
 *   104 payload bytes (u64) · 112 payload SHA-256 · 144 zero (8) · 152 header SHA-256
 */
#include <dirent.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kv/ssd.h"

static const uint8_t MAGIC[8] = {'C', 'I', 'N', 'F', 'K', 'V', 'B', 1};

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

static void sha256(const void *p, size_t n, uint8_t out[KV_SSD_KEY])
{
    unsigned int len = KV_SSD_KEY;
    if (!EVP_Digest(p, n, out, &len, EVP_sha256(), NULL))
        memset(out, 0, KV_SSD_KEY); /* never matches a real hash of the same bytes by chance */
}

void kv_ssd_hdr_encode(const struct kv_ssd_hdr *h, uint8_t b[KV_SSD_HDR_BYTES])
{
    memset(b, 0, KV_SSD_HDR_BYTES);
    memcpy(b, MAGIC, 8);
    put32(b + 8, h->version);
    put32(b + 12, KV_SSD_HDR_BYTES);
    memcpy(b + 16, h->ns, KV_SSD_KEY);
    memcpy(b + 48, h->key, KV_SSD_KEY);
    put32(b + 80, h->n_tok);
    put32(b + 84, h->block_size);
    put32(b + 88, h->n_layer);
    put32(b + 92, h->kv_dim);
    put32(b + 96, h->kv_dtype);
    put64(b + 104, h->payload_bytes);
    memcpy(b + 112, h->payload_hash, KV_SSD_KEY);
    sha256(b, 152, b + 152);
}

int kv_ssd_hdr_parse(const uint8_t *b, size_t n, struct kv_ssd_hdr *h, struct cerr *e)
{
    memset(h, 0, sizeof *h);
    if (n < KV_SSD_HDR_BYTES)
        return cerr_set(e, CERR_FORMAT, "truncated header (%zu of %d bytes)", n,
                        KV_SSD_HDR_BYTES);
    if (memcmp(b, MAGIC, 8))
        return cerr_set(e, CERR_FORMAT, "not a cinfer KV block file (bad magic)");
    h->version = get32(b + 8);
    if (h->version != KV_SSD_VERSION)
        return cerr_set(e, CERR_FORMAT, "format version %u, this build reads %d", h->version,
                        KV_SSD_VERSION);
    if (get32(b + 12) != KV_SSD_HDR_BYTES)
        return cerr_set(e, CERR_FORMAT, "header size %u, expected %d", get32(b + 12),
                        KV_SSD_HDR_BYTES);
    uint8_t hh[KV_SSD_KEY];
    sha256(b, 152, hh);
    if (memcmp(hh, b + 152, KV_SSD_KEY))
        return cerr_set(e, CERR_FORMAT, "header hash mismatch");
    static const uint8_t zero[8] = {0};
    if (memcmp(b + 100, zero, 4) || memcmp(b + 144, zero, 8))
        return cerr_set(e, CERR_FORMAT, "reserved header bytes are not zero");
    memcpy(h->ns, b + 16, KV_SSD_KEY);
    memcpy(h->key, b + 48, KV_SSD_KEY);
    h->n_tok = get32(b + 80);
    h->block_size = get32(b + 84);
    h->n_layer = get32(b + 88);
    h->kv_dim = get32(b + 92);
    h->kv_dtype = get32(b + 96);
    h->payload_bytes = get64(b + 104);
    memcpy(h->payload_hash, b + 112, KV_SSD_KEY);
    if (h->n_tok == 0 || h->n_tok > h->block_size || h->block_size > 65536 || h->n_layer == 0 ||
        h->n_layer > 4096 || h->kv_dim == 0 || h->kv_dim > (1u << 20) ||
        h->payload_bytes > ((uint64_t)1 << 40))
        return cerr_set(e, CERR_FORMAT, "header fields out of range");
    return 0;
}

/* ---- weights fingerprint ------------------------------------------------------------- */

/* Feeds name, size and 16 sampled 64 KiB windows (first and last included) of one file. */
static int fp_file(EVP_MD_CTX *c, const char *path, const char *name)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st)) {
        close(fd);
        return -1;
    }
    uint64_t size = (uint64_t)st.st_size;
    EVP_DigestUpdate(c, name, strlen(name) + 1);
    EVP_DigestUpdate(c, &size, sizeof size);
    enum { WIN = 65536, N = 16 };
    char *buf = malloc(WIN);
    int rc = buf ? 0 : -1;
    for (int i = 0; i < N && !rc; i++) {
        uint64_t off = size > WIN ? (size - WIN) / (N - 1) * (uint64_t)i : 0;
        ssize_t got = pread(fd, buf, WIN, (off_t)off);
        if (got < 0)
            rc = -1;
        else
            EVP_DigestUpdate(c, buf, (size_t)got);
    }
    free(buf);
    close(fd);
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int kv_ssd_fingerprint(const char *path, uint8_t out[KV_SSD_KEY], struct cerr *e)
{
    struct stat st;
    if (stat(path, &st))
        return cerr_set(e, CERR_IO, "%s: cannot stat the model", path);
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    if (!c || !EVP_DigestInit_ex(c, EVP_sha256(), NULL)) {
        EVP_MD_CTX_free(c);
        return cerr_set(e, CERR_NOMEM, "out of memory");
    }
    int rc = 0;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        char **names = NULL;
        int n = 0, cap = 0;
        struct dirent *de;
        while (d && (de = readdir(d))) {
            if (de->d_name[0] == '.')
                continue;
            if (n == cap) {
                char **nn = realloc(names, (size_t)(cap = cap ? 2 * cap : 32) * sizeof *nn);
                if (!nn)
                    break;
                names = nn;
            }
            if (!(names[n] = strdup(de->d_name)))
                break;
            n++;
        }
        if (d)
            closedir(d);
        else
            rc = -1;
        if (n > 1)
            qsort(names, (size_t)n, sizeof *names, cmp_str);
        for (int i = 0; i < n; i++) {
            char p[4096];
            struct stat fs;
            snprintf(p, sizeof p, "%s/%s", path, names[i]);
            if (!rc && stat(p, &fs) == 0 && S_ISREG(fs.st_mode))
                rc = fp_file(c, p, names[i]);
            free(names[i]);
        }
        free(names);
    } else
        rc = fp_file(c, path, "");
    unsigned int len = KV_SSD_KEY;
    if (!rc && !EVP_DigestFinal_ex(c, out, &len))
        rc = -1;
    EVP_MD_CTX_free(c);
    return rc ? cerr_set(e, CERR_IO, "%s: cannot read the model to fingerprint it", path) : 0;
}
