/* fs.h — read-only file mappings and whole-file reads.
 *
 * fs_map() mmaps a file read-only (process lifetime for weights); the mapping stays valid
 * until fs_unmap(). Empty files map to data == NULL, size == 0.
 */
#ifndef CINFER_UTIL_FS_H
#define CINFER_UTIL_FS_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

struct fs_map {
    const uint8_t *data;
    size_t size;
};

int fs_map(struct fs_map *m, const char *path, struct cerr *e);
void fs_unmap(struct fs_map *m);
/* Reads a whole file into a malloc'd NUL-terminated buffer (caller frees). */
int fs_read_all(const char *path, char **out, size_t *len, struct cerr *e);
int fs_is_dir(const char *path);
int fs_exists(const char *path);
/* Joins dir and name into out (cap bytes). Returns CERR_LIMIT when it does not fit. */
int fs_join(char *out, size_t cap, const char *dir, const char *name);

#endif
