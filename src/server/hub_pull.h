/* hub_pull.h — `cinfer pull`: downloads a model from the Hugging Face Hub (its HTTP API,
 * through libcurl) into the hub cache, laid out as huggingface_hub lays it out
 * (model_store.h), so Python tools and cinfer share the files.
 *
 * REPO[:FILE|:QUANT]: FILE names a file of the repo (a split GGUF brings all its parts);
 * QUANT picks the one GGUF whose name contains it (case-insensitive); nothing picks the only
 * GGUF, else the Q4_K_M one, else (a repo without GGUF) the Hugging Face model files
 * (config, tokenizer, safetensors). Per file: HEAD .../resolve/COMMIT/FILE without
 * following the redirect gives the commit (X-Repo-Commit), the blob id (X-Linked-Etag for
 * LFS files = their sha256, else ETag) and the size; the body is fetched into
 * blobs/ID.incomplete, resumed with Range after a cut connection (and by a later pull),
 * checked against the sha256 for LFS files, renamed to blobs/ID and linked from
 * snapshots/COMMIT/FILE; refs/main gets the commit. Env: HF_ENDPOINT (default
 * https://huggingface.co), HF_TOKEN (Authorization: Bearer), HF_HUB_CACHE / HF_HOME.
 */
#ifndef CINFER_SERVER_HUB_PULL_H
#define CINFER_SERVER_HUB_PULL_H

#include <stddef.h>

#include "util/err.h"

struct pull_opts {
    const char *endpoint; /* NULL = $HF_ENDPOINT or https://huggingface.co */
    const char *token;    /* NULL = $HF_TOKEN (none when unset) */
    int progress;         /* a progress line on stderr per file */
};

/* Splits "REPO[:SEL]" and checks REPO is ORG/NAME-shaped (letters, digits, -_.).
 * Returns 0, or CERR_INVALID with e filled. */
int hub_parse_spec(const char *spec, char *repo, size_t rcap, char *sel, size_t scap,
                   struct cerr *e);

/* Pulls spec into the hub cache; path (cap bytes) gets what `cinfer serve` loads (the
 * .gguf or the snapshot directory). Returns 0, or a CERR_* with a sentence in e: a missing
 * repo or file, a gated or private repo (with what to do), a sha256 mismatch (the download
 * is deleted), a network failure after retries. Not thread-safe (libcurl global init). */
int hub_pull(const char *spec, const struct pull_opts *o, char *path, size_t cap,
             struct cerr *e);

#endif
