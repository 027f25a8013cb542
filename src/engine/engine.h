/* engine.h — the engine: one thread that owns the model's KV pool and runs every request.
 *
 * Callers on any thread submit requests (token ids + sampling + limits) and receive events
 * through a callback that runs ON THE ENGINE THREAD: text deltas (detokenized, stop-matched),
 * then exactly one terminal event (DONE or ERROR). The engine knows nothing of HTTP.
 * Each step takes every running decode, then fills a token budget with prefill chunks of
 * the other running requests, admitting waiting ones FIFO up to the sequence cap, and runs
 * them as one flattened forward (DESIGN.md §3–§5). When the KV pool runs out, the youngest
 * running request is preempted (its blocks freed) and recomputed later; its output is
 * unchanged because CPU kernels are batch-invariant.
 * Lifetimes: the engine borrows the model and tokenizer (they must outlive it).
 */
#ifndef CINFER_ENGINE_ENGINE_H
#define CINFER_ENGINE_ENGINE_H

#include <stdint.h>

#include "engine/grammar/gram.h"
#include "engine/sampler.h"
#include "engine/spec/spec.h"
#include "model/model.h"
#include "tokenizer/tok.h"
#include "util/err.h"

struct kv_listener;

struct engine_config {
    int n_ctx;           /* max positions of one sequence (prompt + generated) */
    int max_seqs;        /* concurrent sequences per step (--batch) */
    int max_step_tokens; /* tokens per forward (--max-batch-tokens) */
    int block_size;      /* KV positions per block */
    int n_blocks;        /* KV pool size in blocks */
    int kv_dtype;        /* DT_F16, DT_F32 or a quantized scheme code (backend/kvq.h) */
    const int *kv_layer_dtype; /* [n_layer] each layer's KV dtype (--kv-quant turbo/config;
                                * kv/kvq_scheme.h), NULL = kv_dtype everywhere; copied */
    int max_queue;       /* waiting requests beyond this make submit fail with CERR_LIMIT */
    int32_t extra_eos[8]; /* end-of-generation ids beyond the tokenizer's (generation_config) */
    int n_extra_eos;
    int prompt_cache_blocks; /* unreferenced cached blocks kept (LRU cap); -1 disables the
                                prefix cache */
    size_t kv_budget_bytes;  /* cap on the projected KV (prompt + max_tokens) of the running
                                requests; joiners wait FIFO; 0 = off */
    int check_invariants;    /* run kv_pool_check after every step (tests; CINFER_CHECK_KV=1) */
    int no_swa_pool;         /* keep sliding-window layers in the one pool (tests, A/B) */
    /* observer of the prefix cache's full blocks (KV events), group 0 = the global layers'
     * pool, 1 = the sliding-window layers' own pool; NULL = none. Must outlive the engine;
     * its callbacks run on the engine thread (kv_pool.h). */
    const struct kv_listener *kv_listener;
    /* SSD cold tier of the prefix cache (engine/tier.c, kv/ssd.h); off when ssd_dir is NULL */
    const char *ssd_dir;
    size_t ssd_max_bytes;         /* cap on the files' bytes */
    int ssd_verify;               /* hash every payload on restore */
    double ssd_demote_idle_s;     /* LRU blocks unused this long move to disk; 0 = never */
    int ssd_writebehind;          /* persist new cached blocks 1 s after requests settle */
    size_t ssd_spill_queue_bytes; /* cap on pending spills */
    double ssd_close_timeout_s;   /* at shutdown, write what is pending for at most this */
    int ssd_gen_checkpoint;       /* a running request's new KV is written every N tokens; 0 = off */
    struct spec_config spec; /* speculative decoding (kind SPEC_NONE = off; spec/spec.h) */
    /* LoRA adapters mounted on this model (model/lora.h), or NULL (none can be used): its
     * lora_reg_paths decides every step's adapter path; must outlive the engine */
    struct lora_reg *lora;
};

/* Fills defaults for a model: n_ctx = min(train context, 32768), 8 sequences, 2048 tokens
 * per step, block 16, F16 KV, a pool of max(n_ctx, 65536) positions, queue 64, a prefix
 * cache that may keep the whole pool, no KV budget. */
void engine_config_default(struct engine_config *c, const struct model *m);

/* PROMPT (engine_req.prompt_logprobs): prompt token `token` (the second on, in order) and
 * its logprob given the tokens before it (lp: the raw log-softmax, no sampler processing),
 * all of them before the first DELTA. */
enum engine_ev { ENGINE_EV_DELTA = 0, ENGINE_EV_DONE = 1, ENGINE_EV_ERROR = 2, ENGINE_EV_PROMPT = 3 };

enum engine_finish {
    ENGINE_FINISH_EOS = 0,       /* an end-of-generation token */
    ENGINE_FINISH_LENGTH = 1,    /* max_tokens or the context was reached */
    ENGINE_FINISH_STOP = 2,      /* a stop string fired (stop_index says which) */
    ENGINE_FINISH_CANCELLED = 3, /* engine_cancel() or engine shutdown */
};

struct engine_event {
    int type;                /* enum engine_ev */
    /* DELTA: the newly generated token and the text it released (may be empty: held back
     * partial UTF-8 or a possible stop prefix). DONE: any text released at the end. */
    int32_t token;           /* DELTA and PROMPT */
    const char *text;
    size_t len;
    const struct sampler_logprob *lp; /* DELTA with logprobs requested, PROMPT; else NULL */
    /* DONE */
    int finish;              /* enum engine_finish */
    int stop_index;
    /* DONE and ERROR: counts so far */
    int n_prompt, n_gen, n_cached;
    int n_cache_write;       /* prompt tokens this request wrote to the prefix cache (0 when
                                the cache is off) */
    /* speculation (DONE and ERROR): draft tokens scored / accepted, target forwards that
     * produced a token of this request */
    int spec_on; /* the request ran with speculation on */
    int spec_drafted, spec_accepted, spec_calls;
    const char *error;       /* ERROR: the reason */
    int error_status;        /* ERROR: 400 when the request itself is at fault (its grammar is
                                too ambiguous to enforce), 0 for a server-side failure */
};

/* Called on the engine thread; must not block for long and must not call back into the
 * engine except engine_cancel. After the terminal event (DONE or ERROR) the engine never
 * uses ud again. */
typedef void (*engine_cb)(void *ud, const struct engine_event *ev);

struct engine_req {
    const int32_t *ids;  /* prompt; copied */
    int n_ids;
    struct sampler_params sp; /* logit_bias is copied */
    int max_tokens;
    const char *const *stops; /* copied */
    int n_stops;
    int n_stops_outside; /* the last n of stops fire only outside the reasoning block that
                            think_open/think_close/think_inside describe (stop_gate_block) */
    const char *think_open, *think_close; /* the block's tags (NULL: none) */
    int think_inside;    /* the prompt leaves the block open */
    int ignore_eos;
    struct gram *grammar; /* constrained decoding (engine/grammar/gram.h): the engine takes
                             its own reference; NULL = none */
    const char *grammar_prime; /* bytes the grammar takes before the first token (text the
                                  prompt already ends with), or NULL */
    const char *grammar_trigger; /* non-NULL: the grammar waits until the output contains
                                    this text (a tool call's opening), see
                                    sampler_set_grammar_lazy */
    int grammar_after;           /* the grammar starts after the trigger (reasoning end) */
    const char *grammar_open;    /* non-NULL (with grammar_trigger = the block's end): the
                                    output may open a reasoning block with this text first
                                    (free until the trigger); else the grammar applies from
                                    the first token; see sampler_set_grammar_reasoning */
    /* the adapter set every step of the request runs (model/lora.h; the engine takes its
     * own references; NULL or n == 0 = none); its KV never shares the prefix cache with
     * another set's (the chain root includes it) */
    const struct lora_set *lora;
    int prompt_logprobs; /* score the prompt: ENGINE_EV_PROMPT events with sp.top_logprobs
                            alternatives (at least the token itself). The request reads no
                            prefix from the cache and feeds its prompt in chunks of at most
                            ENG_PLP_ROWS tokens a step (engine/promptlp.c); other requests
                            are not slowed beyond sharing those steps. */
    engine_cb cb;
    void *ud;
};

struct engine_stats {
    int running, waiting;
    long submitted, finished, cancelled, failed, preempted;
    long prompt_tokens, gen_tokens, steps;
    int blocks_total, blocks_free; /* free = free list + evictable cached blocks */
    /* prefix cache */
    int cache_entries, cache_lru_blocks;
    int cache_full_blocks;     /* cached full blocks (those KV events report) */
    long cache_hits, cache_misses, cache_hit_tokens, cache_evictions, cache_cow;
    size_t kv_projected_bytes; /* projected KV of the running requests (--kv-budget) */
    long invariant_failures;   /* kv_pool_check failures (check_invariants) */
    /* sliding-window layers' own pool (0 when the model has none or shares the pool) */
    int swa_blocks_total, swa_blocks_free, swa_max_held;
    /* sampled rows (not plain greedy) of steps that read candidates from the backend: taken
     * from the candidates / that fetched their row's logits (op topcand, see engine.c) */
    long cand_rows, cand_full_rows;
    /* steps of decode bursts (engine.c run_burst), each queued before the previous step's
     * ids were read back */
    long burst_steps;
    struct spec_stats spec; /* speculation (kind SPEC_NONE when off) */
    char last_invariant_error[256];
};

struct engine;

/* Creates the engine (KV pool, workspace) and starts its thread. */
int engine_new(struct engine **out, const struct model *m, const struct tok *t,
               const struct engine_config *c, struct cerr *e);
/* Cancels everything in flight (each gets DONE/CANCELLED), joins the thread, frees. */
void engine_free(struct engine *g);
/* Any thread. Queues a request; *id identifies it for engine_cancel. Fails (CERR_LIMIT)
 * when the queue is full or the prompt leaves no room in the context, CERR_INVALID on bad
 * ids or when the request alone exceeds the KV budget. On failure the callback is never
 * called. */
int engine_submit(struct engine *g, const struct engine_req *r, uint64_t *id, struct cerr *e);
/* Any thread. Cancels a request at the next step; unknown or finished ids are ignored. */
void engine_cancel(struct engine *g, uint64_t id);
/* Any thread. A consistent snapshot of the counters. */
void engine_get_stats(struct engine *g, struct engine_stats *out);
const struct engine_config *engine_config_of(const struct engine *g);

struct kv_ssd_stats;
/* Any thread. The SSD tier's counters; returns 0, or -1 when the tier is off. */
int engine_ssd_stats(struct engine *g, struct kv_ssd_stats *out);
/* Any thread; blocks for at most timeout_s. Queues every cached block that is not on disk
 * yet (between steps), then waits for the writer to write everything pending. Returns 0
 * when all of it is durable, 1 when something stayed pending (or failed), -1 when the tier
 * is off. */
int engine_ssd_flush(struct engine *g, double timeout_s);
/* Any thread; blocks for at most timeout_s. engine_ssd_flush, and then every cached block
 * nothing uses is demoted: written (or already on disk) and freed from the pool, so the
 * next use restores it from the disk. *blocks = how many were demoted. Returns as
 * engine_ssd_flush. Meant for a quiesced engine (a drain, a sleep): blocks in use by a
 * running request stay. */
int engine_ssd_demote(struct engine *g, double timeout_s, long *blocks);
/* Runs fn(ud) on the engine thread between steps (once the engine has stopped: in
 * engine_free, on its caller's thread). A device backend's stream and frees belong to that
 * thread: mounting or freeing LoRA adapters while serving goes through here. FIFO.
 * engine_post: any thread (the engine's too); returns at once: 0, or -1 out of memory
 * (nothing queued). engine_call: any thread but the engine's, while the engine runs;
 * waits until fn has run; 0, or -1 when it could not queue it. */
int engine_post(struct engine *g, void (*fn)(void *ud), void *ud);
int engine_call(struct engine *g, void (*fn)(void *ud), void *ud);
/* Side work on the engine thread (side.c): fn(ud) runs between steps after each
 * engine_side_wake, and again one step later for as long as it returns 1 (more queued), so
 * it takes turns with generation. Decoder embeddings use it (engine/embed.h, driven mode):
 * their forwards run on the engine's own model and backend. Set once, before the first
 * wake; fn runs on the engine thread only; at engine_free it is simply not called again. */
void engine_set_side(struct engine *g, int (*fn)(void *ud), void *ud);
/* Any thread: side work is queued. */
void engine_side_wake(struct engine *g);
/* KV bytes one position takes (all layers, K and V). */
size_t engine_kv_bytes_per_token(const struct engine *g);

#endif
