/* model_store.h — models by name: the Hugging Face hub cache and cinfer's local store.
 *
 * The hub cache is huggingface_hub's layout, so that models downloaded by Python tools are
 * found and ours are found by them: $HF_HUB_CACHE, else $HF_HOME/hub, else
 * ~/.cache/huggingface/hub, holding models--ORG--NAME/{blobs/ETAG, refs/main (a commit),
 * snapshots/COMMIT/FILE -> ../../blobs/ETAG}. The local store is ~/.cache/cinfer/models
 * (plain .gguf files). A cached model is a .gguf file of a snapshot (the first part of a
 * split one), or a snapshot directory with config.json and safetensors weights.
 *
 * A name resolves by case-insensitive substring: "NAME" against "ORG/NAME/FILE" (local
 * files: their file name), "REPO:FILE_OR_QUANT" against the repo id and the file name
 * separately. Single-threaded helpers for the CLI and start-up; the caller owns lists.
 */
#ifndef CINFER_SERVER_MODEL_STORE_H
#define CINFER_SERVER_MODEL_STORE_H

#include <stddef.h>

#include "util/err.h"

struct store_model {
    char repo[256];   /* "ORG/NAME"; "" for the local store */
    char file[512];   /* the file in the snapshot ("" = the whole directory) */
    char path[1536];  /* what model_load takes: the .gguf file or the snapshot directory */
    char commit[64];  /* the snapshot's commit ("" for the local store) */
    long long bytes;  /* the model's size on disk (all weight files of a directory) */
};

struct store_list {
    struct store_model *v;
    int n, cap;
};

/* The hub cache directory by the rules above (out gets a path, maybe not existing). */
void store_hub_dir(char *out, size_t cap);
/* The local store directory (~/.cache/cinfer/models). */
void store_local_dir(char *out, size_t cap);

/* Lists every cached model (hub cache, then local store), sorted by label. Missing
 * directories are not an error. Returns 0, or CERR_NOMEM. Free with store_list_free. */
int store_scan(struct store_list *out, struct cerr *e);
void store_list_free(struct store_list *l);

/* "ORG/NAME:FILE" (hub) or "FILE" (local store) into out. */
void store_label(const struct store_model *m, char *out, size_t cap);

/* Resolves name against l: returns the index of the one match, or CERR_INVALID with e
 * saying that nothing matches or listing the matches (more than one). */
int store_resolve(const struct store_list *l, const char *name, struct cerr *e);

/* The largest model of l whose size is at most max_bytes, or -1. */
int store_pick_largest(const struct store_list *l, long long max_bytes);

/* Removes a hub model's snapshot file (or directory) and the blobs no snapshot still links
 * to; a repo left with no snapshot is removed whole. A local-store model's file is deleted.
 * Returns 0, or CERR_IO with e filled. */
int store_remove(const struct store_model *m, struct cerr *e);

#endif
