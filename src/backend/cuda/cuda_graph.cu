/* cuda_graph.cu — deferred ops and CUDA-graph replay of repeated steps.
 *
 * With graphs on (default; CINFER_CUDA_GRAPHS=0 turns them off), the vtable's ops do not
 * launch at once: each call is recorded with its arguments (pointers and scalars, never
 * the data behind them). The list is flushed when the caller needs the stream (sync,
 * download, upload, free, weight_prepare, destroy). A flush hashes the list: the first
 * time a list is seen it runs as plain launches; the second time it is captured into a
 * CUDA graph (if it has at least CU_GRAPH_MIN calls); from then on the graph is replayed
 * with one launch. A decode step of a given batch shape and context capacity is such a
 * repeated list, so its ~10 launches per layer cost one graph launch. Kernels read their
 * inputs (ids, positions, slots, block tables) from device memory at run time, so a
 * replay computes the current step. A failed capture falls back to plain launches.
 * The list is also flushed every CU_GRAPH_SEG calls (CINFER_CUDA_GRAPH_SEG; 0 = never), so
 * a step runs as a few graph segments and the GPU starts on the first while the rest of
 * the step is still being recorded; the segments of a repeated step repeat too.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/cuda/cuda_int.cuh"
#include "backend/cuda/cuda_lora_mm.cuh"

extern "C" {
#include "backend/kvq.h"
}

enum {
    CU_GRAPH_MIN = 8,     /* shorter lists are not worth a graph */
    CU_GRAPH_SEG = 32,    /* segment length: the GPU starts while later calls are recorded */
    CU_GRAPH_MAX_N = 128, /* lists with a matmul over more rows are never captured */
    CU_GRAPH_CACHE = 256,  /* graphs kept (CINFER_CUDA_GRAPH_CACHE: 1 .. CU_GRAPH_CACHE_MAX;
                            * 64 thrashed with speculation: verify steps of a few sizes, burst
                            * and waited steps, ~5 segments a step) */
    CU_GRAPH_CACHE_MAX = 512,
    CU_ARGS = 2816, /* bytes of one recorded call's arguments (lora: 1080, matmul_fused +
                     * rope: ~400, both folded: ~1500, + the next call's shrink (fold 6):
                     * ~2600) */
    CU_LOG = 64,   /* graph launches remembered for be_cuda_replay_last */
};

struct cu_call {
    void (*run)(struct be *b, const void *args);
    size_t size;
    uint64_t args[CU_ARGS / 8];
};

struct cu_graph_ent {
    uint64_t key;
    int n_calls;
    int seen;    /* times run without a graph */
    int failed;  /* capture failed: never try again */
    cudaGraphExec_t exec;
    uint64_t last_use;
};

struct cu_graphs {
    struct cu_call *calls;
    int n, cap;
    struct cu_graph_ent ent[CU_GRAPH_CACHE_MAX];
    int n_ent; /* entries in use: CU_GRAPH_CACHE or CINFER_CUDA_GRAPH_CACHE */
    uint64_t tick;
    int64_t replays, captures;
    /* CINFER_STEP_PROF (engine/spec/step_prof.h): lists run as plain launches and their
     * calls, graphs evicted while they held a capture, seconds spent capturing */
    int64_t eager, eager_calls, evicted, failed;
    double capture_s;
    int nocapture; /* the pending list has a prefill-sized GEMM: shapes rarely repeat */
    int seg;       /* flush every seg calls (0: only when the stream is needed) */
    int min;       /* shortest list captured (CU_GRAPH_MIN; CINFER_CUDA_GRAPH_MIN) */
    unsigned epoch; /* cb->scratch_epoch the cached graphs were captured under */
    uint64_t log[CU_LOG]; /* keys of the last graph launches (ring; log_n launches in all) */
    int64_t log_n;
    /* CINFER_CUDA_LORA_FOLD=8 (lk8_pass): the folded calls' accumulators, LK8_SLOT a call in
     * list order, and how many calls of the pending list have a slot (zeroed by run_all) */
    unsigned long long *acc8;
    int acc8_cap, n8;
};

int cu_graphs_init(struct cu_be *cb, int want)
{
    const char *env = getenv("CINFER_CUDA_GRAPHS");
    if (want < 0 || (want == 0 && env && !strcmp(env, "0")))
        return 0;
    cb->graphs = (struct cu_graphs *)calloc(1, sizeof *cb->graphs);
    if (!cb->graphs)
        return -1;
    const char *sg = getenv("CINFER_CUDA_GRAPH_SEG");
    cb->graphs->seg = sg && *sg ? atoi(sg) : CU_GRAPH_SEG;
    if (cb->graphs->seg < 0)
        cb->graphs->seg = 0;
    const char *mn = getenv("CINFER_CUDA_GRAPH_MIN");
    cb->graphs->min = mn && atoi(mn) >= 1 ? atoi(mn) : CU_GRAPH_MIN;
    const char *nc = getenv("CINFER_CUDA_GRAPH_CACHE");
    const int n_ent = nc && *nc ? atoi(nc) : CU_GRAPH_CACHE;
    cb->graphs->n_ent = n_ent < 1 ? 1 : n_ent > CU_GRAPH_CACHE_MAX ? CU_GRAPH_CACHE_MAX : n_ent;
    return 0;
}

static void run_all(struct cu_be *cb)
{
    struct cu_graphs *g = cb->graphs;
    if (g->n8 > 0) { /* fold 8: the list's accumulators start at zero (a memset node) */
        cudaError_t rc = cudaMemsetAsync(g->acc8, 0, (size_t)g->n8 * LK8_SLOT * 8, cb->stream);
        cb->last_kernel = 0; /* (no PDL launch right after a memset) */
        if (rc != cudaSuccess) {
            cudaGetLastError();
            cu_latch(cb, "lora accumulators", rc);
        }
    }
    for (int i = 0; i < g->n; i++)
        g->calls[i].run(&cb->base, g->calls[i].args);
}

/* Hash of the pending list: each call's function and argument words (the bytes past an
 * argument struct's size are zeroed when it is recorded). */
static uint64_t list_key(const struct cu_graphs *g)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < g->n; i++) {
        const struct cu_call *c = &g->calls[i];
        h = (h ^ (uint64_t)(uintptr_t)c->run) * 0x100000001b3ull;
        h ^= h >> 29;
        for (size_t j = 0; j < (c->size + 7) / 8; j++) {
            h = (h ^ c->args[j]) * 0x100000001b3ull;
            h ^= h >> 29;
        }
    }
    return h;
}

static struct cu_graph_ent *find_or_add(struct cu_graphs *g, uint64_t key, int n)
{
    struct cu_graph_ent *lru = &g->ent[0];
    for (int i = 0; i < g->n_ent; i++) {
        struct cu_graph_ent *e = &g->ent[i];
        if (e->last_use && e->key == key && e->n_calls == n)
            return e;
        if (e->last_use < lru->last_use)
            lru = e;
    }
    if (lru->exec) {
        cudaGraphExecDestroy(lru->exec);
        g->evicted++;
    }
    memset(lru, 0, sizeof *lru);
    lru->key = key;
    lru->n_calls = n;
    return lru;
}

/* Captures the pending list into e->exec; 0 on success (the graph is not launched). */
static int capture(struct cu_be *cb, struct cu_graph_ent *e)
{
    int err0 = cb->err;
    cudaGraph_t graph = NULL;
    if (cudaStreamBeginCapture(cb->stream, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    run_all(cb);
    cudaError_t rc = cudaStreamEndCapture(cb->stream, &graph);
    if (rc == cudaSuccess && cb->err == err0)
        rc = cudaGraphInstantiate(&e->exec, graph, 0);
    else if (rc == cudaSuccess)
        rc = cudaErrorStreamCaptureInvalidated;
    if (graph)
        cudaGraphDestroy(graph);
    if (rc != cudaSuccess) {
        cudaGetLastError();
        e->exec = NULL;
        if (!err0) /* errors raised by the capture itself are not the caller's */
            cb->err = 0;
        return -1;
    }
    return 0;
}

static void lkm_host_pass(struct cu_graphs *g);
static void lk8_pass(struct cu_be *cb, struct cu_graphs *g);

void cu_flush(struct cu_be *cb)
{
    struct cu_graphs *g = cb->graphs;
    if (!g || g->n == 0)
        return;
    if (g->epoch != cb->scratch_epoch) { /* a scratch buffer moved: graphs hold old pointers */
        cudaStreamSynchronize(cb->stream);
        for (int i = 0; i < g->n_ent; i++)
            if (g->ent[i].exec)
                cudaGraphExecDestroy(g->ent[i].exec);
        memset(g->ent, 0, sizeof g->ent);
        g->epoch = cb->scratch_epoch;
    }
    if (cu_lkm_on() == 6)
        lkm_host_pass(g);
    g->n8 = 0;
    if (cu_lkm_on() == 8)
        lk8_pass(cb, g);
    struct cu_graph_ent *e = find_or_add(g, list_key(g), g->n);
    e->last_use = ++g->tick;
    if (!e->exec && !e->failed && !g->nocapture && e->seen >= 1 && g->n >= g->min) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (capture(cb, e) == 0)
            g->captures++;
        else
            e->failed = 1, g->failed++;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        g->capture_s += (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    }
    if (e->exec) {
        cudaError_t rc = cudaGraphLaunch(e->exec, cb->stream);
        if (rc != cudaSuccess)
            cu_latch(cb, "graph launch", rc);
        g->replays++;
        g->log[g->log_n++ % CU_LOG] = e->key;
    } else {
        run_all(cb);
        e->seen++;
        g->eager++;
        g->eager_calls += g->n;
    }
    g->n = 0;
    g->nocapture = 0;
}

void cu_graphs_free(struct cu_be *cb)
{
    struct cu_graphs *g = cb->graphs;
    if (!g)
        return;
    const char *pv = getenv("CINFER_STEP_PROF"); /* engine/spec/step_prof.h: the same file */
    if (pv && *pv && strcmp(pv, "0")) {
        char path[600];
        snprintf(path, sizeof path, "%s.%ld.txt", pv, (long)getpid());
        FILE *f = strcmp(pv, "1") ? fopen(path, "a") : NULL;
        fprintf(f ? f : stderr,
                "cuda graphs: %lld replays, %lld captures (%.1f ms capturing, %lld failed), "
                "%lld lists run as plain launches (%lld calls), %lld graphs evicted (cache %d)\n",
                (long long)g->replays, (long long)g->captures, 1e3 * g->capture_s,
                (long long)g->failed, (long long)g->eager, (long long)g->eager_calls,
                (long long)g->evicted, g->n_ent);
        if (f)
            fclose(f);
    }
    for (int i = 0; i < g->n_ent; i++)
        if (g->ent[i].exec)
            cudaGraphExecDestroy(g->ent[i].exec);
    if (g->acc8)
        cudaFree(g->acc8);
    free(g->calls);
    free(g);
    cb->graphs = NULL;
}

static void r_rkv(struct be *b, const void *p);

/* Records one call (or runs it now when graphs are off or memory is short). */
static void defer(struct be *b, void (*run)(struct be *, const void *), const void *args,
                  size_t size)
{
    struct cu_be *cb = cu_be(b);
    struct cu_graphs *g = cb->graphs;
    if (!g || size > CU_ARGS) { /* (a larger argument struct would end every segment here) */
        cu_flush(cb);
        run(b, args);
        return;
    }
    if (g->n == g->cap) {
        int cap = g->cap ? 2 * g->cap : 256;
        struct cu_call *nc = (struct cu_call *)realloc(g->calls, (size_t)cap * sizeof *nc);
        if (!nc) {
            cu_flush(cb);
            run(b, args);
            return;
        }
        g->calls = nc;
        g->cap = cap;
    }
    struct cu_call *c = &g->calls[g->n++];
    c->run = run;
    c->size = size;
    c->args[(size + 7) / 8 - 1] = 0; /* the last word's tail hashes as zeros */
    memcpy(c->args, args, size);
    if (g->seg && g->n >= g->seg && !(run == r_rkv && cu_kvq_store_attn_on()))
        cu_flush(cb); /* (not between a rope_kv_store and the attention that may take it) */
}

/* ---- the recorded ops: one argument struct each (zeroed, so padding hashes alike) ---- */

/* Argument structs copied member by member into zeroed storage (the recorded struct is
 * memset first): a struct assignment may carry the caller's padding bytes, which would
 * change the list's hash from step to step (a repeated step would never be captured). */
static void canon_t(struct be_tensor *t, const struct be_tensor *w)
{
    t->dtype = w->dtype;
    memcpy(t->ne, w->ne, sizeof t->ne);
    t->data = w->data;
    t->nbytes = w->nbytes; /* name stays NULL: messages only */
}

static void canon_attn(struct be_attn *d, const struct be_attn *a)
{
    struct be_attn &t = *d;
    t.n_tok = a->n_tok, t.n_head = a->n_head, t.n_kv_head = a->n_kv_head;
    t.head_dim = a->head_dim, t.scale = a->scale, t.softcap = a->softcap, t.window = a->window;
    t.pos = a->pos, t.seq = a->seq, t.block_tables = a->block_tables;
    t.max_blocks = a->max_blocks, t.block_size = a->block_size, t.kv_dtype = a->kv_dtype;
    t.k_cache = a->k_cache, t.v_cache = a->v_cache, t.one_per_seq = a->one_per_seq;
}

static void canon_rkv(struct be_rope_kv *d, const struct be_rope_kv *r)
{
    struct be_rope_kv &t = *d;
    t.q = r->q, t.k = r->k, t.v = r->v, t.pos = r->pos, t.slots = r->slots;
    t.n_tok = r->n_tok, t.n_head = r->n_head, t.n_kv_head = r->n_kv_head;
    t.head_dim = r->head_dim, t.rot_dim = r->rot_dim, t.mode = r->mode;
    t.inv_freq = r->inv_freq, t.mscale = r->mscale;
    t.k_cache = r->k_cache, t.v_cache = r->v_cache, t.kv_dtype = r->kv_dtype;
}

#define DEFER(name, T, ...)                                                                    \
    do {                                                                                       \
        cu_be(b)->ss_ok = 0; /* any other op ends a matmul_fused chain */                      \
        T a_;                                                                                  \
        memset(&a_, 0, sizeof a_);                                                             \
        __VA_ARGS__;                                                                           \
        defer(b, name, &a_, sizeof a_);                                                        \
    } while (0)

struct a_rows { float *out; struct be_tensor w; const int32_t *ids; int n; };
static void r_rows(struct be *b, const void *p)
{
    const struct a_rows *a = (const struct a_rows *)p;
    cu_get_rows(b, a->out, &a->w, a->ids, a->n);
}
void cq_get_rows(struct be *b, float *out, const struct be_tensor *w, const int32_t *ids, int n)
{
    DEFER(r_rows, struct a_rows, a_.out = out, canon_t(&a_.w, w), a_.ids = ids, a_.n = n);
}

struct a_mm { float *y; const float *x; int n; struct be_tensor w; };
static void r_mm(struct be *b, const void *p)
{
    const struct a_mm *a = (const struct a_mm *)p;
    cu_matmul(b, a->y, a->x, a->n, &a->w);
}
void cq_matmul(struct be *b, float *y, const float *x, int n, const struct be_tensor *w)
{
    if (n > CU_GRAPH_MAX_N && cu_be(b)->graphs)
        cu_be(b)->graphs->nocapture = 1;
    DEFER(r_mm, struct a_mm, a_.y = y, a_.x = x, a_.n = n, canon_t(&a_.w, w));
}

struct a_rms { float *y; const float *x, *w; int rows, dim; float eps; };
static void r_rms(struct be *b, const void *p)
{
    const struct a_rms *a = (const struct a_rms *)p;
    cu_rmsnorm(b, a->y, a->x, a->w, a->rows, a->dim, a->eps);
}
void cq_rmsnorm(struct be *b, float *y, const float *x, const float *w, int rows, int dim, float eps)
{
    DEFER(r_rms, struct a_rms, a_.y = y, a_.x = x, a_.w = w, a_.rows = rows, a_.dim = dim,
          a_.eps = eps);
}

struct a_rope { float *x; const int32_t *pos; int n_tok, n_head, head_dim, rot_dim, mode;
                const float *inv; float msc; };
static void r_rope(struct be *b, const void *p)
{
    const struct a_rope *a = (const struct a_rope *)p;
    cu_rope(b, a->x, a->pos, a->n_tok, a->n_head, a->head_dim, a->rot_dim, a->mode, a->inv, a->msc);
}
void cq_rope(struct be *b, float *x, const int32_t *pos, int n_tok, int n_head, int head_dim,
             int rot_dim, int mode, const float *inv_freq, float mscale)
{
    DEFER(r_rope, struct a_rope, a_.x = x, a_.pos = pos, a_.n_tok = n_tok, a_.n_head = n_head,
          a_.head_dim = head_dim, a_.rot_dim = rot_dim, a_.mode = mode, a_.inv = inv_freq,
          a_.msc = mscale);
}

struct a_kv { void *kc, *vc; int dt; const float *k, *v; const int32_t *slots; int n_tok, kv_dim; };
static void r_kv(struct be *b, const void *p)
{
    const struct a_kv *a = (const struct a_kv *)p;
    cu_kv_store(b, a->kc, a->vc, a->dt, a->k, a->v, a->slots, a->n_tok, a->kv_dim);
}
void cq_kv_store(struct be *b, void *k_cache, void *v_cache, int kv_dtype, const float *k,
                 const float *v, const int32_t *slots, int n_tok, int kv_dim)
{
    DEFER(r_kv, struct a_kv, a_.kc = k_cache, a_.vc = v_cache, a_.dt = kv_dtype, a_.k = k,
          a_.v = v, a_.slots = slots, a_.n_tok = n_tok, a_.kv_dim = kv_dim);
}

struct a_rkv { struct be_rope_kv r; };
static void r_rkv(struct be *b, const void *p)
{
    cu_rope_kv_store(b, &((const struct a_rkv *)p)->r);
}

struct a_att { float *out; const float *q; struct be_attn at; };
static void r_att(struct be *b, const void *p)
{
    const struct a_att *a = (const struct a_att *)p;
    cu_attention(b, a->out, a->q, &a->at);
}
/* CINFER_KVQ_STORE=attn: the rope + quantized K/V store just recorded, and the decode
 * attention that reads its q and cache, as one call (cu_kvq_attention_store; apart when it
 * declines). */
struct a_rkatt { struct be_rope_kv r; float *out; const float *q; struct be_attn at; };
static_assert(sizeof(struct a_rkatt) <= CU_ARGS, "a folded rope + attention must fit a call");
static void r_rkatt(struct be *b, const void *p)
{
    const struct a_rkatt *a = (const struct a_rkatt *)p;
    if (cu_kvq_attention_store(cu_be(b), a->out, a->q, &a->at, &a->r))
        return;
    cu_rope_kv_store(b, &a->r);
    cu_attention(b, a->out, a->q, &a->at);
}
/* Folds the attention at into the previous recorded call when that is the rope_kv_store of
 * its q and cache, the step has one token per sequence and CINFER_KVQ_STORE=attn: returns 1. */
static int rkv_fold(struct cu_be *cb, float *out, const float *q, const struct be_attn *at)
{
    struct cu_graphs *gr = cb->graphs;
    if (!gr || gr->n < 1 || !at->one_per_seq || !cu_kvq_store_attn_on() ||
        gr->calls[gr->n - 1].run != r_rkv || !kvq_is(at->kv_dtype))
        return 0;
    struct cu_call *c = &gr->calls[gr->n - 1];
    const struct a_rkv *ra = (const struct a_rkv *)c->args;
    const struct be_rope_kv *r = &ra->r;
    if (r->q != q || r->pos != at->pos || r->n_tok != at->n_tok || r->n_head != at->n_head ||
        r->n_kv_head != at->n_kv_head || r->head_dim != at->head_dim ||
        r->kv_dtype != at->kv_dtype || r->k_cache != at->k_cache || r->v_cache != at->v_cache ||
        (const float *)out == q || (const float *)out == r->k || (const float *)out == r->v)
        return 0;
    struct a_rkatt *t = (struct a_rkatt *)calloc(1, sizeof *t);
    if (!t)
        return 0;
    canon_rkv(&t->r, r); /* (zeroed storage: the padding stays zero) */
    t->out = out, t->q = q;
    canon_attn(&t->at, at);
    c->run = r_rkatt;
    c->size = sizeof *t;
    c->args[(sizeof *t + 7) / 8 - 1] = 0;
    memcpy(c->args, t, sizeof *t);
    free(t);
    cb->ss_ok = 0;
    return 1;
}
void cq_attention(struct be *b, float *out, const float *q, const struct be_attn *at)
{
    if (rkv_fold(cu_be(b), out, q, at))
        return;
    DEFER(r_att, struct a_att, a_.out = out, a_.q = q, canon_attn(&a_.at, at));
}

struct a_ew { int kind; float *y; const float *a, *x; float s; int64_t n; int act; };
static void r_ew(struct be *b, const void *p)
{
    const struct a_ew *a = (const struct a_ew *)p;
    switch (a->kind) {
    case 0: cu_act_mul(b, a->y, a->a, a->x, a->n, a->act); break;
    case 1: cu_add(b, a->y, a->a, a->x, a->n); break;
    case 2: cu_scale(b, a->y, a->x, a->s, a->n); break;
    case 3: cu_softcap(b, a->y, a->x, a->s, a->n); break;
    default: cu_add_row(b, a->y, a->a, (int)a->n, a->act); break;
    }
}
static void r_lk(struct be *b, const void *p);
/* The act_mul of a gate/up pair whose deltas the previous recorded call adds (fused, one
 * lora call with gate and up: cuda_lora.cuh act_y) rides on that call: returns 1. */
static int lk_act(struct cu_be *cb, float *y, const float *gate, const float *up, int64_t n,
                  int act)
{
    struct cu_graphs *gr = cb->graphs;
    if (!gr || gr->n < 1 || n <= 0 || cu_lora_mode() != CU_LK_FUSED || !cu_lkf_act_on() ||
        gr->calls[gr->n - 1].run != r_lk)
        return 0;
    struct cu_lk *l = (struct cu_lk *)gr->calls[gr->n - 1].args;
    if (l->n_proj != 2 || l->y[0] != gate || l->y[1] != up || l->M[0] != l->M[1] ||
        l->M[0] <= 0 || n % l->M[0] || n / l->M[0] > (1 << 24) || l->act_y || l->ss_out ||
        (const float *)y == up)
        return 0;
    l->act_y = y, l->act = act, l->act_rows = (int)(n / l->M[0]);
    cb->ss_ok = 0;
    return 1;
}

static int lkm_act(struct cu_be *cb, float *y, const float *gate, const float *up, int64_t n,
                   int act);
void cq_act_mul(struct be *b, float *y, const float *gate, const float *up, int64_t n, int act)
{
    if (lk_act(cu_be(b), y, gate, up, n, act) || lkm_act(cu_be(b), y, gate, up, n, act))
        return;
    DEFER(r_ew, struct a_ew, a_.kind = 0, a_.y = y, a_.a = gate, a_.x = up, a_.n = n, a_.act = act);
}
void cq_add(struct be *b, float *y, const float *a, const float *x, int64_t n)
{
    DEFER(r_ew, struct a_ew, a_.kind = 1, a_.y = y, a_.a = a, a_.x = x, a_.n = n);
}
void cq_scale(struct be *b, float *y, const float *x, float s, int64_t n)
{
    DEFER(r_ew, struct a_ew, a_.kind = 2, a_.y = y, a_.x = x, a_.s = s, a_.n = n);
}
void cq_softcap(struct be *b, float *y, const float *x, float s, int64_t n)
{
    DEFER(r_ew, struct a_ew, a_.kind = 3, a_.y = y, a_.x = x, a_.s = s, a_.n = n);
}
void cq_add_row(struct be *b, float *y, const float *bias, int rows, int dim)
{
    DEFER(r_ew, struct a_ew, a_.kind = 4, a_.y = y, a_.a = bias, a_.n = rows, a_.act = dim);
}

struct a_lora {
    float *y;
    const float *x;
    int K, M, n;
    struct be_lora_grp g[CU_LORA_GRP];
};
static_assert(sizeof(struct a_lora) <= CU_ARGS, "a recorded lora call must fit a call");
static void r_lora(struct be *b, const void *p)
{
    const struct a_lora *a = (const struct a_lora *)p;
    cu_lora(b, a->y, a->x, a->K, a->M, a->g, a->n);
}
static_assert(sizeof(struct cu_lk) <= CU_ARGS, "a recorded lora call must fit a call");
static void r_lk(struct be *b, const void *p)
{
    cu_lk_run(b, (const struct cu_lk *)p);
}
/* The deltas of one projection (x normed on the fly when norm is set); appended to the
 * previous recorded call when that is a lora call reading the same x with the same groups
 * (q, k, v; gate, up: cuda_lora.cuh). */
static int lk_pre(const struct cu_be *cb, const float *x);
static int lk_fold(struct be *b, float *y, const float *x, const float *norm, float eps, int K,
                   int M, const struct be_lora_grp *g, int n_grp);
static struct cu_lk *lk_prev(struct cu_graphs *gr);
static void lk_record(struct be *b, float *y, const float *x, const float *norm, float eps,
                      int K, int M, const struct be_lora_grp *g, int n_grp)
{
    struct cu_graphs *gr = cu_be(b)->graphs;
    const int pre = lk_pre(cu_be(b), x);
    struct cu_lk *prev = lk_prev(gr);
    if (prev && cu_lk_merge(prev, y, x, norm, eps, K, M, g, n_grp) == 0) {
        cu_be(b)->ss_ok = 0;
        return; /* (the list is hashed when it is flushed) */
    }
    for (int i = lk_fold(b, y, x, norm, eps, K, M, g, n_grp); i < n_grp;) {
        int took = 0;
        DEFER(r_lk, struct cu_lk,
              took = cu_lk_first(&a_, y, x, norm, eps, K, M, g + i, n_grp - i);
              a_.pre = i == 0 ? pre : 0); /* (after a lora call: no) */
        i += took;
    }
}
void cq_lora(struct be *b, float *y, const float *x, int K, int M, const struct be_lora_grp *g,
             int n_grp)
{
    if (cu_lora_v1()) {
        for (int i = 0; i < n_grp; i += CU_LORA_GRP) { /* the groups by value */
            int n = n_grp - i < CU_LORA_GRP ? n_grp - i : CU_LORA_GRP;
            DEFER(r_lora, struct a_lora, a_.y = y, a_.x = x, a_.K = K, a_.M = M, a_.n = n,
                  memcpy(a_.g, g + i, (size_t)n * sizeof *g));
        }
        return;
    }
    lk_record(b, y, x, NULL, 0.0f, K, M, g, n_grp);
}
void cq_lora_norm(struct be *b, float *y, const float *x, const float *norm, float eps, int K,
                  int M, const struct be_lora_grp *g, int n_grp)
{
    lk_record(b, y, x, norm, eps, K, M, g, n_grp);
}

struct a_mmf { struct be_mm m; struct be_tensor w[3]; struct be_rope_kv r; };
static_assert(sizeof(struct a_mmf) <= CU_ARGS, "a recorded matmul_fused must fit a call");
static void r_mmf(struct be *b, const void *p)
{
    const struct a_mmf *a = (const struct a_mmf *)p;
    struct be_mm m = a->m;
    for (int i = 0; i < m.n_w && i < 3; i++)
        m.w[i] = &a->w[i];
    if (a->m.rope)
        m.rope = &a->r;
    cu_matmul_fused(b, &m);
}
/* ---- the lora call folded into the projection before it (cuda_lora_mm.cuh) ---- */

/* rope (CINFER_CUDA_LORA_FOLD=3, lkm_rope): f.r is the rope + K/V store after the deltas */
/* hosted (CINFER_CUDA_LORA_FOLD=6, lkm_host_pass): the call before runs l's shrink */
struct a_mmlk { struct a_mmf f; struct cu_lk l; int rope, hosted; };
static_assert(sizeof(struct a_mmlk) <= CU_ARGS, "a folded projection must fit a call");
static void mmlk_run(struct be *b, const struct a_mmlk *a, const struct cu_lk *host)
{
    struct be_mm m = a->f.m;
    for (int i = 0; i < m.n_w && i < 3; i++)
        m.w[i] = &a->f.w[i];
    m.rope = a->rope ? &a->f.r : NULL;
    if ((a->hosted || host) ? cu_matmul_fused_lk6(b, &m, &a->l, a->hosted, host)
                            : cu_matmul_fused_lk(b, &m, &a->l))
        return;
    m.rope = NULL; /* apart: the projection, the deltas, then the rope */
    cu_matmul_fused(b, &m);
    cu_lk_run(b, &a->l);
    if (a->rope)
        cu_rope_kv_store(b, &a->f.r);
}
static void r_mmlk(struct be *b, const void *p)
{
    mmlk_run(b, (const struct a_mmlk *)p, NULL);
}
/* Fold 6: a folded projection whose grid also runs the next call's shrink (h) */
struct a_mmlkh { struct a_mmlk k; struct cu_lk h; };
static_assert(sizeof(struct a_mmlkh) <= CU_ARGS, "a folded projection and a shrink must fit");
static void r_mmlkh(struct be *b, const void *p)
{
    const struct a_mmlkh *a = (const struct a_mmlkh *)p;
    mmlk_run(b, &a->k, &a->h);
}

/* CINFER_CUDA_LORA_FOLD=6 (cuda_lora_mm.cuh), on a pending list about to be flushed (no call
 * is appended to it any more): each folded projection C whose x the folded projection
 * recorded just before it (P) writes (P an ADD into C's x, or a GLU whose activation is
 * C's x) gives its shrink to P: P becomes r_mmlkh with a copy of C's call, C is marked
 * hosted. At run time C skips its shrink only when P did launch it (cu_matmul_fused_lk6). */
static void lkm_host_pass(struct cu_graphs *g)
{
    for (int i = 1; i < g->n; i++) {
        struct cu_call *pc = &g->calls[i - 1], *cc = &g->calls[i];
        if ((pc->run != r_mmlk && pc->run != r_mmlkh) || (cc->run != r_mmlk && cc->run != r_mmlkh))
            continue;
        struct a_mmlk *p = (struct a_mmlk *)pc->args, *c = (struct a_mmlk *)cc->args;
        const float *cx = c->l.x;
        const int writes = (p->f.m.mode == BE_MM_ADD && !p->rope && p->f.m.y[0] == cx) ||
                           (p->l.act_y && p->l.act_y == cx);
        if (!writes || pc->run == r_mmlkh || c->hosted)
            continue;
        struct a_mmlkh *h = (struct a_mmlkh *)pc->args;     /* (a_mmlk at its front) */
        memset((char *)pc->args + sizeof(struct a_mmlk), 0, /* (padding hashes as zeros) */
               sizeof(struct a_mmlkh) - sizeof(struct a_mmlk));
        memcpy(&h->h, &c->l, sizeof c->l);
        pc->run = r_mmlkh;
        pc->size = sizeof *h;
        c->hosted = 1;
    }
}

/* CINFER_CUDA_LORA_FOLD=8 (cuda_lora_mm.cuh level 8), on a pending list about to be flushed:
 * every folded projection gets its own LK8_SLOT accumulators, in list order (so a repeated
 * list gets the same pointers and its graph is found again); run_all zeroes them first.
 * When the buffer has to grow, the old one is freed after the stream drains and the cached
 * graphs (which hold its pointers) are dropped at the next flush (scratch_epoch). No buffer:
 * the calls keep acc8 NULL and fold as level 4. */
static void lk8_pass(struct cu_be *cb, struct cu_graphs *g)
{
    int n = 0;
    for (int i = 0; i < g->n; i++)
        n += g->calls[i].run == r_mmlk;
    if (n == 0)
        return;
    if (n > g->acc8_cap) {
        const int cap = n < 64 ? 64 : 2 * n;
        if (g->acc8) {
            cudaStreamSynchronize(cb->stream);
            cudaFree(g->acc8);
            g->acc8 = NULL, g->acc8_cap = 0;
            cb->scratch_epoch++;
        }
        if (cudaMalloc(&g->acc8, (size_t)cap * LK8_SLOT * 8) != cudaSuccess) {
            cudaGetLastError();
            g->acc8 = NULL;
            return;
        }
        g->acc8_cap = cap;
    }
    int k = 0;
    for (int i = 0; i < g->n; i++)
        if (g->calls[i].run == r_mmlk)
            ((struct a_mmlk *)g->calls[i].args)->l.acc8 = g->acc8 + (size_t)k++ * LK8_SLOT;
    g->n8 = k;
}

/* The lora call the previous recorded call holds (to append a projection to), or NULL. */
static struct cu_lk *lk_prev(struct cu_graphs *gr)
{
    if (!gr || gr->n == 0)
        return NULL;
    struct cu_call *c = &gr->calls[gr->n - 1];
    return c->run == r_lk ? (struct cu_lk *)c->args
           : c->run == r_mmlk ? &((struct a_mmlk *)c->args)->l
                              : NULL;
}

/* With CINFER_CUDA_LORA_FOLD=1: when the previous recorded call is a projection (PLAIN or
 * ADD, no rope, no chain (2: a PLAIN one may take a chain), at most LKM_COLS rows) that
 * reads x (and norms it the same way)
 * and writes y, the first groups' deltas become part of that call (r_mmlk: one kernel at run
 * time when cu_matmul_fused_lk takes it). Returns the groups taken (0: none). */
static int lk_fold(struct be *b, float *y, const float *x, const float *norm, float eps, int K,
                   int M, const struct be_lora_grp *g, int n_grp)
{
    struct cu_graphs *gr = cu_be(b)->graphs;
    if (!gr || gr->n == 0 || !cu_lkm_on() || gr->calls[gr->n - 1].run != r_mmf || n_grp < 1)
        return 0;
    struct cu_call *c = &gr->calls[gr->n - 1];
    const struct a_mmf *f = (const struct a_mmf *)c->args;
    const struct be_mm *m = &f->m;
    int w = 0;
    while (w < m->n_w && w < 3 && m->y[w] != y)
        w++;
    if (w == m->n_w || w == 3 || m->x != x || m->norm != norm || (norm && m->eps != eps) ||
        m->rope || (m->chain && (cu_lkm_on() < 2 || m->mode != BE_MM_PLAIN)) ||
        (m->mode != BE_MM_PLAIN && m->mode != BE_MM_ADD) ||
        m->n > LKM_COLS || (const float *)y == x || f->w[0].ne[0] != K || f->w[w].ne[1] != M)
        return 0;
    struct a_mmlk *t = (struct a_mmlk *)calloc(1, sizeof *t);
    if (!t)
        return 0;
    memcpy(&t->f, f, sizeof *f); /* (zeroed storage: the padding stays zero) */
    const int took = cu_lk_first(&t->l, y, x, norm, eps, K, M, g, n_grp);
    c->run = r_mmlk;
    c->size = sizeof *t;
    c->args[(sizeof *t + 7) / 8 - 1] = 0;
    memcpy(c->args, t, sizeof *t);
    free(t);
    cu_be(b)->ss_ok = 0;
    return took;
}

/* CINFER_CUDA_LORA_FOLD=2: the act_mul of a gate/up pair whose projection and deltas the
 * previous recorded call holds (r_mmlk) rides on it (one GLU pass at run time; its fallback
 * runs the act_mul after the deltas, cu_lk_run): returns 1. */
static int lkm_act(struct cu_be *cb, float *y, const float *gate, const float *up, int64_t n,
                   int act)
{
    struct cu_graphs *gr = cb->graphs;
    if (!gr || gr->n < 1 || n <= 0 || cu_lkm_on() < 2 || gr->calls[gr->n - 1].run != r_mmlk)
        return 0;
    struct a_mmlk *t = (struct a_mmlk *)gr->calls[gr->n - 1].args;
    struct cu_lk *l = &t->l;
    const struct be_mm *m = &t->f.m;
    if (m->mode != BE_MM_PLAIN || m->n_w != 2 || m->y[0] != gate || m->y[1] != up ||
        l->n_proj != 2 || l->y[0] != gate || l->y[1] != up || l->M[0] != l->M[1] ||
        l->M[0] <= 0 || t->f.w[0].ne[1] != l->M[0] || t->f.w[1].ne[1] != l->M[0] ||
        n != (int64_t)l->M[0] * m->n || l->act_y || l->ss_out || y != gate)
        return 0;
    l->act_y = y, l->act = act, l->act_rows = m->n;
    cb->ss_ok = 0;
    return 1;
}

/* 1 when a lora call recorded next may read x before its PDL wait (cuda_lora_fu.cu): the
 * previous recorded call is a projection of at most cu_mv_lim rows without rope (its last
 * kernel is the skinny kernel, which waits for the kernels before it before it lets the next
 * one launch, or a matvec or element-wise kernel, which never lets it launch early; never
 * cuBLAS: more rows, or an x not 16-byte aligned) that does not write x. */
static int lk_pre(const struct cu_be *cb, const float *x)
{
    const struct cu_graphs *gr = cb->graphs;
    if (!gr || gr->n == 0 || !cu_lkf_pre_on())
        return 0;
    const struct cu_call *c = &gr->calls[gr->n - 1];
    if (c->run == r_mm) {
        const struct a_mm *a = (const struct a_mm *)c->args;
        return a->y != x && a->n <= cu_mv_lim(cb) && ((uintptr_t)a->x & 15) == 0;
    }
    if (c->run != r_mmf)
        return 0;
    const struct a_mmf *a = (const struct a_mmf *)c->args;
    return !a->m.rope && a->m.n <= cu_mv_lim(cb) && ((uintptr_t)a->m.x & 15) == 0 &&
           a->m.y[0] != x && a->m.y[1] != x && a->m.y[2] != x;
}

/* A norm chain across an adapter's delta (CINFER_CUDA_LORA=fused; cuda_lora.cuh): m is a
 * projection that norms x with m->norm, x is the output of the residual ADD two calls back
 * (not gathering: the forward turns the chain off on the adapter path), and the call in
 * between is a one-projection lora call adding its delta to x. Then the ADD gathers for m
 * after all, the lora call rewrites the chained values of the rows it changes, and m takes
 * the chain (returns 1). */
static int lk_chain(struct cu_be *cb, const struct be_mm *m)
{
    struct cu_graphs *gr = cb->graphs;
    if (!gr || gr->n < 2 || cu_lora_mode() != CU_LK_FUSED || !cu_lkf_chain_on() ||
        m->mode != BE_MM_PLAIN || !m->norm || m->rope || m->chain)
        return 0;
    struct cu_call *c1 = &gr->calls[gr->n - 1], *c2 = &gr->calls[gr->n - 2];
    if (c1->run != r_lk || c2->run != r_mmf)
        return 0;
    struct cu_lk *l = (struct cu_lk *)c1->args;
    struct a_mmf *a = (struct a_mmf *)c2->args;
    if (a->m.mode != BE_MM_ADD || a->m.chain || a->m.norm || a->m.rope || a->m.y[0] != m->x ||
        a->m.n != m->n || l->n_proj != 1 || l->y[0] != m->x || l->ss_out ||
        l->M[0] != (int)m->w[0]->ne[0] || l->M[0] % 16)
        return 0;
    struct be_mm am = a->m; /* the ADD as it would gather */
    am.w[0] = &a->w[0];
    am.chain = 1, am.next_norm = m->norm;
    if (!cu_mm_chain_ok(cb, &am) || !cu_mm_chain_ok(cb, m))
        return 0;
    a->m.chain = 1, a->m.next_norm = m->norm;
    l->ss_out = cb->ss_buf, l->xg_out = cb->xg_buf, l->gnext = m->norm;
    return 1;
}

/* CINFER_CUDA_LORA_FOLD=2 (cuda_lora_mm.cuh): m norms x (q/k/v or gate/up), x is the output
 * of the residual ADD just recorded with its o/down delta folded in (r_mmlk, not gathering:
 * the forward turns the chain off on the adapter path). Then that ADD gathers for m after
 * all (after its delta; its fallback rewrites the gathered values of the rows it changes,
 * cu_lkf_fix) and m takes the chain (returns 1). */
static int lkm_chain(struct cu_be *cb, const struct be_mm *m)
{
    struct cu_graphs *gr = cb->graphs;
    if (!gr || gr->n < 1 || cu_lkm_on() < 2 || m->mode != BE_MM_PLAIN || !m->norm || m->rope ||
        m->chain || m->n_w < 2 || gr->calls[gr->n - 1].run != r_mmlk)
        return 0;
    struct a_mmlk *t = (struct a_mmlk *)gr->calls[gr->n - 1].args;
    struct cu_lk *l = &t->l;
    if (t->f.m.mode != BE_MM_ADD || t->f.m.chain || t->f.m.norm || t->f.m.rope ||
        t->f.m.y[0] != m->x || t->f.m.n != m->n || l->n_proj != 1 || l->y[0] != m->x ||
        l->ss_out || l->act_y || l->M[0] != (int)m->w[0]->ne[0] || l->M[0] % 16)
        return 0;
    struct be_mm am = t->f.m; /* the ADD as it would gather */
    am.w[0] = &t->f.w[0];
    am.chain = 1, am.next_norm = m->norm;
    if (!cu_mm_chain_ok(cb, &am) || !cu_mm_chain_ok(cb, m))
        return 0;
    t->f.m.chain = 1, t->f.m.next_norm = m->norm;
    l->ss_out = cb->ss_buf, l->xg_out = cb->xg_buf, l->gnext = m->norm;
    return 1;
}

void cq_matmul_fused(struct be *b, const struct be_mm *m)
{
    if (m->n > CU_GRAPH_MAX_N && cu_be(b)->graphs)
        cu_be(b)->graphs->nocapture = 1;
    struct a_mmf a_; /* the tensors by value: the caller's may not outlive the call */
    memset(&a_, 0, sizeof a_);
    a_.m.mode = m->mode, a_.m.act = m->act, a_.m.n = m->n, a_.m.x = m->x;
    a_.m.norm = m->norm, a_.m.eps = m->eps, a_.m.n_w = m->n_w, a_.m.next_norm = m->next_norm;
    /* chain (be_mm): decided here, in call order, so a replayed segment never leaves it
     * stale; kept only when the ADD gathers and this call can read what it gathered */
    struct cu_be *cb = cu_be(b);
    if (m->mode == BE_MM_ADD) {
        a_.m.chain = m->chain && cu_mm_chain_ok(cb, m);
        cb->ss_ok = a_.m.chain, cb->ss_y = m->y[0], cb->ss_n = m->n;
        cb->ss_m = (int)m->w[0]->ne[1], cb->ss_g = m->next_norm;
    } else {
        const int claimed = m->chain && cb->ss_ok && m->x == cb->ss_y && m->n == cb->ss_n &&
                            m->w[0]->ne[0] == cb->ss_m && m->norm == cb->ss_g;
        a_.m.chain = (claimed && cu_mm_chain_ok(cb, m)) || lk_chain(cb, m) || lkm_chain(cb, m);
        cb->n_chained += a_.m.chain;
        cb->ss_ok = 0;
        struct cu_graphs *g = cb->graphs;
        if (claimed && !a_.m.chain && g && g->n > 0 && g->calls[g->n - 1].run == r_mmf) {
            /* this projection declines the chain: the ADD just recorded (still pending)
             * need not gather its sums of squares */
            struct a_mmf *prev = (struct a_mmf *)g->calls[g->n - 1].args;
            if (prev->m.mode == BE_MM_ADD && prev->m.y[0] == m->x)
                prev->m.chain = 0;
        }
    }
    for (int i = 0; i < 3; i++) {
        a_.m.y[i] = m->y[i];
        if (i < m->n_w)
            canon_t(&a_.w[i], m->w[i]);
    }
    if (m->rope) { /* by value too; the pointer only marks that there is one */
        canon_rkv(&a_.r, m->rope);
        a_.m.rope = (const struct be_rope_kv *)1;
    }
    defer(b, r_mmf, &a_, sizeof a_);
}

/* CINFER_CUDA_LORA_FOLD=3: the rope + K/V store of a q/k/v projection whose deltas the
 * previous recorded call holds (r_mmlk) rides on it (the RoPE epilogue after the deltas at
 * run time; apart, after them): returns 1. */
static int lkm_rope(struct cu_be *cb, const struct be_rope_kv *r)
{
    struct cu_graphs *gr = cb->graphs;
    if (!gr || gr->n < 1 || cu_lkm_on() < 3 || gr->calls[gr->n - 1].run != r_mmlk)
        return 0;
    struct a_mmlk *t = (struct a_mmlk *)gr->calls[gr->n - 1].args;
    const struct be_mm *m = &t->f.m;
    if (t->rope || m->rope || m->mode != BE_MM_PLAIN || m->n_w != 3 || m->y[0] != r->q ||
        m->y[1] != r->k || m->y[2] != r->v || m->n != r->n_tok || t->l.act_y)
        return 0;
    canon_rkv(&t->f.r, r);
    t->rope = 1;
    cb->ss_ok = 0;
    return 1;
}

void cq_rope_kv_store(struct be *b, const struct be_rope_kv *r)
{
    if (lkm_rope(cu_be(b), r))
        return;
    DEFER(r_rkv, struct a_rkv, canon_rkv(&a_.r, r));
}

struct a_am { int32_t *out; const float *x; int rows, n; };
static void r_am(struct be *b, const void *p)
{
    const struct a_am *a = (const struct a_am *)p;
    cu_argmax(b, a->out, a->x, a->rows, a->n);
}
void cq_argmax(struct be *b, int32_t *out, const float *x, int rows, int n)
{
    DEFER(r_am, struct a_am, a_.out = out, a_.x = x, a_.rows = rows, a_.n = n);
}

struct a_tc { void *out; const float *x; int rows, n; float span; int cap; };
static void r_tc(struct be *b, const void *p)
{
    const struct a_tc *a = (const struct a_tc *)p;
    cu_topcand_launch(b, a->out, a->x, a->rows, a->n, a->span, a->cap);
}
void cq_topcand(struct be *b, void *out, const float *x, int rows, int n, float span, int cap)
{
    DEFER(r_tc, struct a_tc, a_.out = out, a_.x = x, a_.rows = rows, a_.n = n, a_.span = span,
          a_.cap = cap);
}

struct a_sp { int32_t *out; float *x; int rows, n; const void *params; const int32_t *prev; };
static void r_sp(struct be *b, const void *p)
{
    const struct a_sp *a = (const struct a_sp *)p;
    cu_sample(b, a->out, a->x, a->rows, a->n, a->params, a->prev);
}
void cq_sample(struct be *b, int32_t *out, float *x, int rows, int n, const void *params,
               const int32_t *prev)
{
    DEFER(r_sp, struct a_sp, a_.out = out, a_.x = x, a_.rows = rows, a_.n = n,
          a_.params = params, a_.prev = prev);
}

int cu_graph_replay_last(struct cu_be *cb, int k, int reps, double *us)
{
    struct cu_graphs *g = cb->graphs;
    if (!g || k < 1 || k > CU_LOG || k > g->log_n || reps < 1)
        return -1;
    cu_flush(cb);
    cudaGraphExec_t ex[CU_LOG];
    for (int i = 0; i < k; i++) { /* by key: an evicted graph is not replayed */
        const uint64_t key = g->log[(g->log_n - k + i) % CU_LOG];
        ex[i] = NULL;
        for (int j = 0; j < g->n_ent; j++)
            if (g->ent[j].last_use && g->ent[j].key == key && g->ent[j].exec)
                ex[i] = g->ent[j].exec;
        if (!ex[i])
            return -2;
    }
    cudaEvent_t e0, e1;
    if (cudaEventCreate(&e0) != cudaSuccess) {
        cudaGetLastError();
        return -3;
    }
    if (cudaEventCreate(&e1) != cudaSuccess) {
        cudaGetLastError();
        cudaEventDestroy(e0);
        return -3;
    }
    int rc = -3;
    float ms = 0.0f;
    if (cudaEventRecord(e0, cb->stream) == cudaSuccess) {
        int ok = 1;
        for (int r = 0; r < reps && ok; r++)
            for (int i = 0; i < k && ok; i++)
                ok = cudaGraphLaunch(ex[i], cb->stream) == cudaSuccess;
        if (ok && cudaEventRecord(e1, cb->stream) == cudaSuccess &&
            cudaEventSynchronize(e1) == cudaSuccess &&
            cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess) {
            *us = 1000.0 * ms / reps;
            rc = 0;
        }
    }
    cudaGetLastError();
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return rc;
}

void cu_graph_stats(struct cu_be *cb, int64_t *replays, int64_t *captures)
{
    *replays = cb->graphs ? cb->graphs->replays : 0;
    *captures = cb->graphs ? cb->graphs->captures : 0;
}
