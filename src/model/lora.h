/* lora.h — LoRA adapters on a loaded model: loading (PEFT directories and llama.cpp GGUF
 * LoRA files), stacked sets, and the registry of mounted adapters.
 *
 * An adapter is kept unmerged: per layer and projection (q, k, v, o, gate, up, down) its A
 * (rank, in) and B^T (rank, out) in backend memory (f16 by default: CINFER_LORA_DTYPE, see
 * lora_proj); the forward adds
 * scale * (x A^T) B^T to the base projection of the rows whose sequence runs it
 * (model_batch.lora; the backend op lora). The base weights are never touched, so any
 * number of adapters share one model and rows of different adapters share a step.
 * Lifetimes: an adapter is reference counted (the registry holds one reference while
 * mounted, every request using it one more); the last lora_unref frees it, on any thread.
 * The registry is safe to use from any thread.
 */
#ifndef CINFER_MODEL_LORA_H
#define CINFER_MODEL_LORA_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

struct model;

enum lora_target { LORA_Q = 0, LORA_K, LORA_V, LORA_O, LORA_GATE, LORA_UP, LORA_DOWN, LORA_NT };

#define LORA_MAX_RANK 256
#define LORA_MAX_STACK 4 /* adapters in one stacked set ("a+b") */
#define LORA_ID_MAX 64

/* One adapted projection: a (rank, in), bt (rank, out) in backend memory, dtype elements:
 * a 16-bit file's F16 / BF16 as they are; an F32 file's as CINFER_LORA_DTYPE says (F16 by
 * default, A and B each scaled by a power of two folded into scale; BF16; F32).
 * a == NULL when the adapter leaves this projection alone. */
struct lora_proj {
    void *a, *bt;
    int rank;
    int dtype;
    float scale; /* alpha / rank, or alpha / sqrt(rank) with rsLoRA (x 2^-k of the f16 copy) */
};

struct lora_adapter {
    char path[512];
    int format; /* 0 PEFT directory, 1 GGUF LoRA file */
    int rank;   /* the config's r (GGUF: the first tensor's) */
    float alpha;
    int rslora;
    unsigned targets; /* bits 1 << enum lora_target */
    int n_layer;
    struct lora_proj *p;  /* (n_layer * LORA_NT), layer-major */
    uint64_t fingerprint; /* FNV-1a over the f32 tensors and scales (the prefix-cache key) */
    size_t bytes;         /* backend memory held */
    const struct model *m;
    int refs; /* atomic */
    /* NULL: the last reference frees the adapter at once; else it hands the adapter to
     * free_hook(a, free_ud), which must see lora_destroy(a) run on a thread that may free
     * backend memory (set by lora_reg_mount from lora_reg_set_free_hook) */
    void (*free_hook)(struct lora_adapter *a, void *ud);
    void *free_ud;
};

/* Loads the adapter at path for model m: a directory with adapter_config.json and
 * adapter_model.safetensors (PEFT), or a .gguf file with general.type = adapter. Checks every
 * tensor against the model (architecture, shapes, a tensor of A without its B, an unknown
 * module): the error names the tensor. The backend must have the op lora. Returns 0 with
 * *out holding one reference, or a CERR_*. */
int lora_load(struct lora_adapter **out, const struct model *m, const char *path, struct cerr *e);
/* Same from memory (fuzzing, tests): a PEFT config text and safetensors bytes. */
int lora_load_peft_mem(struct lora_adapter **out, const struct model *m, const char *config,
                       size_t config_len, const uint8_t *st, size_t st_len, struct cerr *e);
void lora_ref(struct lora_adapter *a);
void lora_unref(struct lora_adapter *a); /* NULL is a no-op */
/* Frees a and its backend memory now (what a free_hook arranges for). */
void lora_destroy(struct lora_adapter *a);
/* A short name for a target bit ("q_proj" ...). */
const char *lora_target_name(int t);

/* A stacked set: deltas of every member summed, member i weighted by w[i]. n == 0: none. */
struct lora_set {
    int n;
    struct lora_adapter *a[LORA_MAX_STACK];
    float w[LORA_MAX_STACK];
};
/* 1 when both sets run the same deltas (members, order and weights). */
int lora_set_eq(const struct lora_set *x, const struct lora_set *y);
/* Writes the set's key text ("fp:weight+fp:weight") to buf (NUL-terminated, cap bytes). */
void lora_set_key(const struct lora_set *s, char *buf, size_t cap);
/* Loads n adapters for m into *set (stacked, weight 1 each; `cinfer run/bench --adapter`).
 * On failure the set is empty and e names the path. */
int lora_set_load(struct lora_set *set, const struct model *m, const char *const *paths, int n,
                  struct cerr *e);
/* The union of the set's targets (model_batch.lora_paths for a set used alone). */
unsigned lora_set_targets(const struct lora_set *s);
/* References for every member (copying a set) / releasing them. */
void lora_set_ref(struct lora_set *s);
void lora_set_unref(struct lora_set *s);

/* ---- the registry of mounted adapters -------------------------------------------------- */
struct lora_reg;
struct lora_reg_entry {
    char id[LORA_ID_MAX];
    char path[512];
    float scale;
    int rank;
    unsigned targets;
    long requests; /* requests that ran with it (lora_reg_count) */
    int active;    /* requests in flight with it (queued or running) */
    int running;   /* of those, admitted to the running batch at least once (lora_reg_admit) */
};
int lora_reg_new(struct lora_reg **out, struct cerr *e);
void lora_reg_free(struct lora_reg *r); /* drops the registry's references */
/* Adapters mounted from now on (and those mounted already) hand their last reference to
 * hook(a, ud) instead of freeing at once (struct lora_adapter.free_hook): a server whose
 * backend memory may only be freed by its engine thread posts the free there. NULL: free
 * at once. lora_reg_free clears it on the adapters it holds (it runs after the engine). */
void lora_reg_set_free_hook(struct lora_reg *r, void (*hook)(struct lora_adapter *, void *),
                            void *ud);
/* Mounts a (takes over the caller's reference) as id with weight scale. CERR_INVALID when
 * the id is taken or malformed (letters, digits, '.', '_', '-'; no '+' or ','; not "none"). */
int lora_reg_mount(struct lora_reg *r, const char *id, struct lora_adapter *a, float scale,
                   struct cerr *e);
/* Unmounts id: new requests can no longer name it; requests already running with it keep
 * their reference and finish with it. CERR_INVALID when unknown. */
int lora_reg_unmount(struct lora_reg *r, const char *id, struct cerr *e);
/* Resolves a request's adapter text into *set (with references): "id", "a+b" or "a,b"
 * (stacked), "none" or "" (the empty set). Unknown id: CERR_INVALID with the message
 * "unknown adapter 'x'" and, when bad_id is non-NULL, the id copied there (cap bytes). */
int lora_reg_resolve(struct lora_reg *r, const char *spec, struct lora_set *set, char *bad_id,
                     size_t cap, struct cerr *e);
/* 1 when id is mounted. */
int lora_reg_has(struct lora_reg *r, const char *id);
/* Copies up to cap entries (mount order); returns how many are mounted. */
int lora_reg_list(struct lora_reg *r, struct lora_reg_entry *out, int cap);
/* The union of the targets of every adapter mounted so far (never shrinks): the
 * projections whose path the forward switches for every row, so a row's bits do not depend
 * on which adapters its step holds. */
unsigned lora_reg_paths(struct lora_reg *r);
/* Counts a request starting (+1) or ending (-1) with set s, per member id. */
void lora_reg_count(struct lora_reg *r, const struct lora_set *s, int delta);
/* Counts a request with set s entering the running batch (+1) or, having run, ending (-1). */
void lora_reg_admit(struct lora_reg *r, const struct lora_set *s, int delta);

#endif
