/* embed.h — the embedding scheduler: batches the sequences of concurrent embedding jobs
 * into encoder forwards on one worker thread.
 *
 * A job is n_seq token sequences; its vectors land in job->out. The worker takes queued
 * sequences FIFO (across jobs: a job's sequences may span several forwards, and one
 * forward holds sequences of several jobs) up to max_batch_tokens tokens and max_seqs
 * sequences, runs one non-causal encoder pass (bert_embed), copies each sequence's vector
 * to its job, and calls job->done on the worker thread when the job's last sequence is
 * done (or once with an error). Nothing is kept between forwards (no KV).
 * Threads: embedq_submit from any thread; done runs on the worker thread; embedq_free
 * from the creating thread after no more submissions (it finishes queued jobs' callbacks
 * with an error first).
 * Driven mode (embedq_config.wake set): no worker thread. A driver — the generation
 * engine's thread for a decoder model, so that the model and backend it already owns do the
 * forwards between its own steps (engine_set_side) — calls embedq_run_once; each
 * submission calls wake so the driver knows there is work; done runs on the driver's thread.
 */
#ifndef CINFER_ENGINE_EMBED_H
#define CINFER_ENGINE_EMBED_H

#include <stdint.h>

#include "model/bert.h"
#include "model/model.h"
#include "util/err.h"

/* ---- decoder models (embed_dec.c) ----
 * Embeddings from a generative model: each input prefilled alone in chunks into a private
 * F32 KV cache, its final-normed hidden states pooled by the mean or the last token
 * (BERT_POOL_MEAN / BERT_POOL_LAST), then L2-normalized when normalize is set. Only one
 * thread may run forwards of the model at a time: serve hands the queue to the engine as
 * side work (driven mode below), so the engine's thread runs them between its steps. */
struct dec_embedder;
int dec_embedder_new(struct dec_embedder **out, const struct model *m, int pool, int normalize,
                     int max_len, struct cerr *e);
void dec_embedder_free(struct dec_embedder *d);
/* n_seq inputs ids[s][0 .. lens[s]) (1 <= lens[s] <= max_len) -> out (n_seq, n_embd). */
int dec_embed(struct dec_embedder *d, const int32_t *const *ids, const int *lens, int n_seq,
              float *out, struct cerr *e);

struct embed_job {
    /* in: n_seq sequences, ids[s][0 .. lens[s]) (owned by the caller until done runs) */
    int n_seq;
    const int32_t *const *ids;
    const int *lens;
    float *out; /* (n_seq, n_embd), written by the worker */
    void (*done)(struct embed_job *j, void *ud);
    void *ud;
    /* out: 0, or an error (status + message) when done runs */
    int status;
    char error[512];
    /* internal */
    int next_seq, n_done, cancelled;
    struct embed_job *next;
};

struct embedq_config {
    int max_batch_tokens; /* tokens of one forward (>= the model's longest input) */
    int max_seqs;         /* sequences of one forward */
    void (*wake)(void *ud); /* driven mode (see above): called after each submission, from
                               the submitting thread, outside the queue's lock; NULL = own
                               worker thread */
    void *wake_ud;
};

/* What the worker runs: an encoder (bert) or a decoder (dec); exactly one is set. */
struct embed_model {
    const struct bert *bert;
    struct dec_embedder *dec; /* owned by the caller; used by the worker thread only */
    int n_embd, max_len;
};

struct embed_stats {
    long jobs, seqs, tokens, forwards;
    long cancelled_seqs; /* inputs of cancelled jobs never computed */
    int max_seqs_in_forward; /* the most sequences one forward held so far */
};

struct embedq;
/* Starts the worker for em (whose models must outlive the queue). 0, or a CERR_* with e. */
int embedq_new(struct embedq **out, const struct embed_model *em,
               const struct embedq_config *c, struct cerr *e);
/* Queues j (its fields in: set; the rest is reset). Returns 0, or -1 when the queue is
 * shutting down (done is not called then). */
int embedq_submit(struct embedq *q, struct embed_job *j);
/* Cancels j (a client went away): its inputs not yet taken by a forward are dropped. j->done
 * still runs exactly once, with status CERR_IO, on the worker thread when inputs of j are
 * in the forward running now, else on the calling thread before this returns. No-op when
 * j already finished. Any thread. */
void embedq_cancel(struct embedq *q, struct embed_job *j);
void embedq_stats(struct embedq *q, struct embed_stats *out);
/* Driven mode: runs one forward of queued sequences (if any) on the calling thread and
 * calls the done of the jobs it finished. Returns 1 when sequences are still queued, else
 * 0. One driver thread at a time; never after embedq_free started. */
int embedq_run_once(struct embedq *q);
/* In driven mode the driver must have stopped calling embedq_run_once first. */
void embedq_free(struct embedq *q);

#endif
