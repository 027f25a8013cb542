/* engine_int.h — the engine's internals, shared by engine.c (API, step, thread) and
 * sched.c (queues, the running list, planning, KV reservation and preemption). Not for use
 * outside src/engine. Everything here except the submit queue (in, cancels, st) belongs to
 * the engine thread.
 */
#ifndef CINFER_ENGINE_ENGINE_INT_H
#define CINFER_ENGINE_ENGINE_INT_H

#include <pthread.h>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "kv/kv_pool.h"
#include "model/model.h"
#include "tokenizer/tok.h"

struct stop_matcher;
struct tok_stream;

struct ereq {
    uint64_t id;
    struct ereq *next;       /* incoming / waiting queue link */
    int32_t *tokens;         /* (cap) prompt then generated */
    int n_tokens, cap, n_prompt, n_past, n_gen, max_tokens;
    int n_cached, admitted;  /* prompt positions reused from the prefix cache */
    size_t projected;        /* (prompt + max_tokens) KV bytes, for the KV budget */
    int ignore_eos, cancelled, want_lp;
    int plp, plp_done, plp_k; /* prompt logprobs (promptlp.c): on; prompt tokens answered
                                 (token 0 has none: starts at 1); alternatives asked */
    struct kv_seq seq;
    struct kv_seq seq_swa;   /* sliding-window layers' blocks (when they have their own pool) */
    struct sampler *smp;
    struct spec_req *spec;   /* speculation state, or NULL */
    int spec_drafted, spec_accepted, spec_calls;
    struct tok_stream *ts;
    struct stop_matcher *stop;
    char *out;               /* text released by this token */
    size_t out_len, out_cap;
    engine_cb cb;
    void *ud;
    struct lora_set lora;      /* adapters (n == 0: none), referenced (lora_eng.c) */
    int lora_run;              /* its adapters count as running (admitted, not preempted) */
    uint8_t root[KV_KEY_BYTES]; /* prefix-cache chain root: the engine's, + the adapter set */
};

struct queue {
    struct ereq *head, *tail;
    int n;
};

struct row {
    struct ereq *r;
    int n;    /* tokens fed this step (a decode row with drafts: 1 + k) */
    int out;  /* logits row (a row with drafts: the first of its k + 1), or -1 */
    int k;    /* draft tokens, at r->tokens[n_tokens ..] (speculation; 0 = none) */
    int plp;  /* prompt logprobs: the logits row of its first token (one per token), or -1 */
    int pad;  /* of the k drafts: filler tokens that only round the step's size up to one
               * the backend has seen (speculation, spec_engine.c; not proposals) */
};

struct engine {
    const struct model *m;
    const struct tok *tk;
    struct engine_config c;
    struct gram_vocab *gvocab; /* built on the first grammar request (under mu) */
    struct kv_pool *kv;
    struct kv_pool *kv_swa;  /* sliding-window layers' pool, or NULL (one pool for all) */
    int window;              /* their window */
    struct model_kv_view view; /* per-layer buffers from the right pool */
    void **view_k, **view_v;
    int *ldt; /* [n_layer] each layer's KV dtype (the view's layer_dtype) */
    struct model_ws *ws;
    int max_blocks; /* per sequence */

    pthread_t th;
    int th_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* under mu */
    int quit;
    struct queue in;
    uint64_t *cancels;
    int n_cancel, cap_cancel;
    uint64_t next_id;
    struct engine_stats st;
    int (*side_fn)(void *ud); /* side work between steps (side.c), or NULL */
    void *side_ud;
    int side_due;             /* side work was announced and has not run since */

    /* engine thread only */
    struct ereq **run; /* (max_seqs) running, oldest first */
    int n_run;
    struct queue wait;
    struct row *rows;  /* (max_seqs) */
    int32_t *tokens, *pos, *seqv, *slots; /* (max_step_tokens) */
    int32_t *out_idx;  /* (max_seqs) */
    int32_t *tables;   /* (max_seqs, max_blocks) */
    int32_t *slots_swa, *tables_swa; /* the sliding pool's, when split */
    float *logits;     /* (max_seqs, n_vocab) */
    int32_t *am;       /* (max_seqs) argmax ids from the backend (steps of plain greedy rows) */
    int can_argmax;    /* the backend computes argmax (CINFER_HOST_ARGMAX=1: never use it) */
    int overlap;       /* decode bursts: queue the next greedy step before reading this one's
                        * ids (engine.c run_burst): on an asynchronous backend, or forced
                        * (CINFER_ENGINE_OVERLAP=1; =0: never) */
    long burst_steps;  /* steps run in decode bursts (stats) */
    int table_round;   /* a decode step's block tables are a multiple of this many blocks
                        * wide, -1: a power of two (eng_table_width; CINFER_KV_TABLE_ROUND) */
    int spec_burst;    /* decode bursts with model-free speculation (CINFER_SPEC_BURST=0: off) */
    void *cands;       /* (max_seqs, be_topcand_stride(cand_cap)) bytes: sampling candidates
                        * from the backend (steps with a row that can sample from them) */
    int cand_cap;      /* 0 = never (no topcand op, CINFER_HOST_ARGMAX=1 or CINFER_HOST_SAMPLE=1) */
    long cand_rows, full_rows; /* rows sampled from candidates / that fetched their logits */
    int dev_sample;    /* the backend's op sample decides rows it can (engine.c samp_fill) */
    int32_t *samp;     /* (model_samp_words_max(max_seqs)) the op's parameters for a step */
    /* grammar rows the op decides with their bitset (eng_samp_fill; off with
     * CINFER_GRAMMAR_DEVICE=0): their samplers, the words of their bitsets in samp (written
     * while the forward runs, from word gm_late on) */
    int gm_dev, n_gm, gm_late;
    struct sampler *gm_smp[BE_SAMPLE_MASK_ROWS];
    int gm_off[BE_SAMPLE_MASK_ROWS];
    long dev_rows;     /* rows the op sample decided (not counting plain greedy argmax) */
    long preempted, steps;
    int32_t *xtc_exempt; /* EOS ids and ids whose text holds a newline */
    int n_xtc_exempt;
    uint8_t root[KV_KEY_BYTES]; /* prefix-cache namespace */
    size_t kv_per_token, projected;
    long invariant_failures;
    char invariant_error[256];
    const struct kv_seq **check_seqs, **check_seqs_swa; /* (max_seqs) */
    /* SSD tier (tier.c), NULL when off */
    struct kv_ssd *ssd;
    struct kv_ssd *ssd_swa;    /* the sliding-window layers' pool's own tier (kv_swa), or NULL */
    double t_settled;          /* when the engine last went idle (write-behind debounce) */
    long flush_req, flush_done; /* under mu: engine_ssd_flush requests / served */
    long demote_req, demoted;   /* under mu: engine_ssd_demote requests (flush_req ids), blocks */
    pthread_cond_t flush_cv;    /* with mu: flush_done moved */
    struct spec *spec; /* speculation, or NULL */
    struct step_prof *prof; /* step times by class and size (CINFER_STEP_PROF), or NULL */
    double t_end;      /* when the last forward's results were back (speculation: the gap) */
    int max_out;       /* logits rows per step: max_seqs + the draft tokens a step may hold */
    long spec_gen;     /* tokens emitted beyond one per row by verify rows (stats) */
    const struct lora_set **lsets; /* (max_seqs) a step's sets (lora_eng.c), or NULL */
    struct eng_call *calls, *calls_tail; /* under mu: engine_post/engine_call (eng_calls.c) */
};

/* ---- eng_calls.c ---- */

/* Engine thread (or engine_free once it stopped): runs the queued calls. */
void eng_calls_run(struct engine *g);

/* ---- sched.c ---- */

/* FIFO of requests linked through ereq.next. */
void eng_q_push(struct queue *q, struct ereq *r);
void eng_q_push_front(struct queue *q, struct ereq *r);
struct ereq *eng_q_pop(struct queue *q); /* NULL when empty */

/* Removes r from the running list (keeps order) and its projected KV bytes. */
void eng_run_remove(struct engine *g, struct ereq *r);

/* Moves submissions into the waiting queue and applies cancellations. Called with g->mu
 * held; cancelled requests go to *dead (the caller finishes them without the lock). */
void eng_take_inputs(struct engine *g, struct queue *dead);
/* side.c: runs the side work once (engine thread); re-announces it when more is queued. */
void eng_side_run(struct engine *g);

/* Plans this step's rows into g->rows (running decodes, then prefill chunks, then
 * admissions with prefix-cache lookups) and reserves their KV blocks, preempting the
 * youngest request until they fit. A request that cannot fit the pool alone goes to *dead
 * with cancelled = 2. Returns the number of rows to run. */
int eng_plan_and_reserve(struct engine *g, struct queue *dead);

/* ---- tier.c (the SSD tier's engine side) ---- */

/* Opens the tier when c.ssd_dir is set: strengthens g->root with a fingerprint of the
 * weights' content and of the tokenizer, opens the store and attaches it to the pool (not
 * for a model whose sliding-window layers have their own pool: a note is logged). */
int eng_tier_open(struct engine *g, struct cerr *e);
/* Engine thread, while no request runs or waits: answers flush requests, runs the
 * debounced write-behind snapshot and the idle demotion in small slices. Returns the
 * seconds to wait before calling again (0: at once, there is more), or -1 (nothing due). */
double eng_tier_idle(struct engine *g);
/* Engine thread with mu held, in place of the idle cond_wait: runs eng_tier_idle without
 * the lock, then waits (timed when something is due later). */
void eng_tier_wait(struct engine *g);
/* Engine thread, between steps: answers flush requests; tells the writer to wait. */
void eng_tier_busy(struct engine *g);
/* Engine thread at shutdown: queues every cached block not on disk yet. */
void eng_tier_quit(struct engine *g);
/* After the engine thread ended: writes what is pending (bounded) and closes the tier. */
void eng_tier_close(struct engine *g);
/* ---- spec/spec_engine.c: speculation's hooks ---- */

/* Sets up g->spec from g->c.spec (NULL when off); called by engine_new before the workspace
 * is sized (g->max_out). */
int eng_spec_init(struct engine *g, struct cerr *e);
/* After the plan: offers drafts to the planned decode rows within the step's token budget
 * (the policy picks how many each keeps); writes them after each row's tokens and widens
 * its row (n = 1 + k). */
void eng_spec_plan(struct engine *g, int n_rows);
/* Drops every planned row's drafts (the pool could not hold them). Returns 1 if any. */
int eng_spec_unplan(struct engine *g, int n_rows);
/* Whether decode bursts may run with this kind of speculation (the model-free kinds, whose
 * proposal the host makes between steps). */
int eng_spec_burst_ok(const struct engine *g);
/* In a decode burst of g->rows[0..n_rows) (each row's newest token read, the next step in
 * flight): 1 when the step after it may be queued without drafts — the plan eng_spec_plan
 * would make now takes none (counted as a plain step, as the plan counts one); 0 when a row
 * would draft (a match the policy takes, or a probe due): the burst ends and the next plan
 * drafts. */
int eng_spec_burst_more(struct engine *g, int n_rows);
/* Publishes the module's counters into g->st (call with g->mu held). */
void eng_spec_stats(struct engine *g);
/* After the step: row w fed its last token and w->k drafts; samples the k + 1 rows in order,
 * keeps drafts while they equal the sampled ids, rolls the rest back. */
void eng_spec_verify(struct engine *g, struct row *w, int use_am, int use_tc);

/* ---- engine.c, shared with burst.c ---- */

/* Terminal DONE for r with reason (ENGINE_FINISH_*) and the stop string's index (or -1):
 * publishes, frees. r must not be in run/wait. */
void eng_finish(struct engine *g, struct ereq *r, int reason, int stop_index);
/* The engine thread's loop (started by engine_new, engine_new.c). */
void *eng_main(void *arg);
/* 1 when id ends generation (the tokenizer's end-of-generation set or the model's). */
int eng_is_eog(const struct engine *g, int32_t id);
/* Terminal ERROR for r: publishes, frees. r must not be in run/wait. */
void eng_fail(struct engine *g, struct ereq *r, const char *msg);
/* eng_fail with the event's error_status (engine.h: 400 when the request is at fault). */
void eng_fail_as(struct engine *g, struct ereq *r, const char *msg, int status);
/* Handles a sampled token: append, detokenize, stop-match, publish; may finish r.
 * Returns 1 when r finished (and was freed). */
int eng_on_token(struct engine *g, struct ereq *r, int32_t id, const struct sampler_logprob *lp);
/* The op sample's parameters for the step's output rows into g->samp (see engine.c).
 * Returns the words used (*n_dev: rows the op decides), or -1. */
int eng_samp_fill(struct engine *g, int n_rows, int ahead, int burst, int skip_ok, int *n_dev);
/* The step's block tables, mb wide, from g->rows (and the sliding pool's, when split). */
void eng_fill_tables(struct engine *g, int n_rows, int mb);
/* Samples output row out of r (the argmax, the candidates, or the logits) as run_step does. */
int32_t eng_sample_row(struct engine *g, struct ereq *r, int out, int use_am, int use_tc,
                       struct sampler_logprob *lp);
/* Publishes the step counters into g->st (gen_delta tokens generated since the last call). */
void eng_publish_stats(struct engine *g, long gen_delta);
/* The block-pool invariant checker over every live sequence (CINFER_CHECK_KV=1). */
void eng_check_pool(struct engine *g);

/* ---- lora_eng.c: adapters per request ---- */

/* Takes r's set from q (references, the registry's request counts) and derives r->root
 * from g->root and the set. 0, or CERR_INVALID when the set belongs to another model or
 * the engine has no registry. */
int eng_lora_submit(struct engine *g, struct ereq *r, const struct engine_req *q,
                    struct cerr *e);
/* r enters the running batch (the registry's waiting -> running; a no-op when it counts
 * as running already). */
void eng_lora_admitted(struct engine *g, struct ereq *r);
/* r was preempted: it waits again (running -> waiting) until it is admitted again. */
void eng_lora_preempted(struct engine *g, struct ereq *r);
/* Drops r's references (request end). */
void eng_lora_release(struct engine *g, struct ereq *r);
/* Sets b->lora and b->lora_paths for a step whose sequence s is g->rows[s]. */
void eng_lora_batch(struct engine *g, int n_rows, struct model_batch *b);
/* ---- promptlp.c: prompt logprobs (engine_req.prompt_logprobs) ---- */

/* Logits rows a step keeps for prompt scoring, beyond one per sequence (engine_new widens
 * max_out by this much). */
#define ENG_PLP_ROWS 16
/* Plan: the prompt chunk c of r, cut to the scoring rows *left in the step (taken from it);
 * c itself for a request that does not score its prompt or is past it. */
int eng_plp_chunk(const struct ereq *r, int c, int *left);
/* The scoring rows a step may give (plan's budget for eng_plp_chunk). */
int eng_plp_budget(const struct engine *g);
/* Whether r scores the prompt tokens of a row that starts at n_past. */
int eng_plp_row(const struct ereq *r);
/* After the forward, before r->n_past moves: the PROMPT events of row w (its logits rows on
 * the host from w->plp on). */
void eng_plp_emit(struct engine *g, const struct row *w);

/* ---- burst.c: decode bursts ---- */

/* Reads the switches of burst.c (CINFER_KV_TABLE_ROUND, CINFER_SPEC_BURST) and opens the
 * step profile (CINFER_STEP_PROF); engine_new. eng_burst_deinit closes the profile. */
void eng_burst_init(struct engine *g);
void eng_burst_deinit(struct engine *g);
/* A run_step forward of n_tok tokens (n_rows rows; decode_only: no prompt chunk) began at
 * t0 and its results are back now: feeds speculation's step curve and host gap and the
 * step profile. */
void eng_step_timed(struct engine *g, int decode_only, int n_tok, int n_rows, double t0);
/* The width of the block tables of a step of g->rows[0..n_rows) whose longest row holds mb
 * blocks: for a step of decode rows only, mb rounded up to a multiple of g->table_round (-1:
 * to a power of two, at least 32), at most g->max_blocks; else mb. The tables past a row's blocks read
 * block 0 and are never attended to; a width that changes less often lets a device replay
 * the step's recorded graph (the width is part of it) across more positions. */
int eng_table_width(const struct engine *g, int n_rows, int mb);
/* Whether the planned step can run as a burst: 0 no, 1 argmax rows, 2 op-sample rows. */
int eng_burst_ok(struct engine *g, int n_rows);
/* Runs the burst (ds: eng_burst_ok's answer) until a row or the queue ends it. 0 or -1. */
int eng_run_burst(struct engine *g, int n_rows, int ds);

#endif
