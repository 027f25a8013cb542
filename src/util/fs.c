/* fs.c — see fs.h. */
#include "util/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int fs_map(struct fs_map *m, const char *path, struct cerr *e)
{
    m->data = NULL;
    m->size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return cerr_set(e, CERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return cerr_set(e, CERR_IO, "%s: not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return 0;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return cerr_set(e, CERR_IO, "%s: mmap failed: %s", path, strerror(errno));
    m->data = p;
    m->size = (size_t)st.st_size;
    return 0;
}

void fs_unmap(struct fs_map *m)
{
    if (m->data)
        munmap((void *)m->data, m->size);
    m->data = NULL;
    m->size = 0;
}

int fs_read_all(const char *path, char **out, size_t *len, struct cerr *e)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return cerr_set(e, CERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf)
        return cerr_set(e, CERR_NOMEM, "%s: out of memory reading file", path);
    if (bad) {
        free(buf);
        return cerr_set(e, CERR_IO, "%s: read error", path);
    }
    buf[n] = 0;
    *out = buf;
    if (len)
        *len = n;
    return 0;
}

int fs_is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int fs_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

int fs_join(char *out, size_t cap, const char *dir, const char *name)
{
    size_t dl = strlen(dir);
    int n = snprintf(out, cap, "%s%s%s", dir, (dl && dir[dl - 1] == '/') ? "" : "/", name);
    return (n < 0 || (size_t)n >= cap) ? CERR_LIMIT : 0;
}
