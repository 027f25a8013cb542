/* embed.c — the embedding scheduler's worker (contract in embed.h).
 *
 * One mutex guards the FIFO of jobs that still have untaken sequences. The worker (or, in
 * driven mode, the driver's embedq_run_once) plans a forward under the lock (taking
 * sequences in order until the token or sequence cap), runs it without the lock, and hands
 * results back. A job leaves the FIFO when its last
 * sequence is taken; it is finished (done) when its last sequence is computed.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/embed.h"
#include "engine/testhook.h"

struct slot {
    struct embed_job *j;
    int s;
};

struct embedq {
    struct embed_model em;
    struct embedq_config c;
    struct bert_ws *ws;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct embed_job *head, *tail;
    int stop;
    struct embed_stats st;
    /* the worker's per-forward arrays (max_seqs each) */
    struct slot *slots;
    const int32_t **ids;
    int *lens;
    float *out; /* (max_seqs, n_embd) */
};

/* Under the lock: takes the next forward's sequences. Returns how many. */
static int plan(struct embedq *q, int *n_tok)
{
    int n = 0, t = 0;
    while (q->head && n < q->c.max_seqs) {
        struct embed_job *j = q->head;
        while (j->next_seq < j->n_seq && n < q->c.max_seqs) {
            int len = j->lens[j->next_seq];
            if (n > 0 && t + len > q->c.max_batch_tokens)
                goto full;
            q->slots[n] = (struct slot){j, j->next_seq};
            q->ids[n] = j->ids[j->next_seq];
            q->lens[n] = len;
            n++, t += len, j->next_seq++;
        }
        if (j->next_seq == j->n_seq) { /* fully taken: leaves the FIFO */
            q->head = j->next;
            if (!q->head)
                q->tail = NULL;
        }
    }
full:
    *n_tok = t;
    return n;
}

/* One forward of the sequences plan() takes (n of them), results handed back. */
static void run_forward(struct embedq *q, int n, int n_tok)
{
    int d = q->em.n_embd;
    struct cerr e = {0};
    int rc = q->em.bert ? bert_embed(q->em.bert, q->ws, q->ids, q->lens, n, q->out, &e)
                        : dec_embed(q->em.dec, q->ids, q->lens, n, q->out, &e);
    pthread_mutex_lock(&q->mu);
    q->st.forwards++;
    q->st.seqs += n;
    q->st.tokens += n_tok;
    if (n > q->st.max_seqs_in_forward)
        q->st.max_seqs_in_forward = n;
    long fw = q->st.forwards;
    pthread_mutex_unlock(&q->mu);
    eng_test_step_hook(fw); /* tests: CINFER_TEST_STEP_DELAY_MS slows forwards */
    for (int i = 0; i < n; i++) {
        struct embed_job *j = q->slots[i].j;
        pthread_mutex_lock(&q->mu); /* status and n_done: embedq_cancel too */
        if (rc && !j->status) {
            j->status = rc;
            snprintf(j->error, sizeof j->error, "%s", e.msg);
        } else if (!rc && !j->status)
            memcpy(j->out + (size_t)q->slots[i].s * d, q->out + (size_t)i * d,
                   (size_t)d * sizeof(float));
        int fin = ++j->n_done == j->n_seq;
        pthread_mutex_unlock(&q->mu);
        if (fin)
            j->done(j, j->ud);
    }
}

static void *worker(void *arg)
{
    struct embedq *q = arg;
    for (;;) {
        pthread_mutex_lock(&q->mu);
        while (!q->stop && !q->head)
            pthread_cond_wait(&q->cv, &q->mu);
        if (q->stop) {
            pthread_mutex_unlock(&q->mu);
            break;
        }
        int n_tok, n = plan(q, &n_tok);
        pthread_mutex_unlock(&q->mu);
        run_forward(q, n, n_tok);
    }
    return NULL;
}

int embedq_run_once(struct embedq *q)
{
    pthread_mutex_lock(&q->mu);
    int n_tok = 0, n = q->stop ? 0 : plan(q, &n_tok);
    pthread_mutex_unlock(&q->mu);
    if (n > 0)
        run_forward(q, n, n_tok);
    pthread_mutex_lock(&q->mu);
    int more = !q->stop && q->head != NULL;
    pthread_mutex_unlock(&q->mu);
    return more;
}

int embedq_new(struct embedq **out, const struct embed_model *em,
               const struct embedq_config *c, struct cerr *e)
{
    *out = NULL;
    if (!em->bert == !em->dec)
        return cerr_set(e, CERR_INVALID, "an embedding queue runs one encoder or one decoder");
    if (c->max_seqs < 1 || c->max_batch_tokens < em->max_len)
        return cerr_set(e, CERR_INVALID,
                        "embedding batch of %d tokens / %d sequences: needs at least %d tokens "
                        "(the model's longest input) and 1 sequence",
                        c->max_batch_tokens, c->max_seqs, em->max_len);
    struct embedq *q = calloc(1, sizeof *q);
    if (!q)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    q->em = *em;
    q->c = *c;
    int max_seqs = c->max_seqs < c->max_batch_tokens ? c->max_seqs : c->max_batch_tokens;
    q->c.max_seqs = max_seqs;
    q->slots = calloc((size_t)max_seqs, sizeof *q->slots);
    q->ids = calloc((size_t)max_seqs, sizeof *q->ids);
    q->lens = calloc((size_t)max_seqs, sizeof *q->lens);
    q->out = calloc((size_t)max_seqs * (size_t)em->n_embd, sizeof *q->out);
    int rc = (!q->slots || !q->ids || !q->lens || !q->out)
                 ? cerr_set(e, CERR_NOMEM, "out of memory")
             : em->bert ? bert_ws_new(&q->ws, em->bert, c->max_batch_tokens, max_seqs, e)
                        : 0;
    if (rc) {
        free(q->slots), free(q->ids), free(q->lens), free(q->out);
        free(q);
        return rc;
    }
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    if (!c->wake && pthread_create(&q->th, NULL, worker, q)) {
        bert_ws_free(q->ws);
        free(q->slots), free(q->ids), free(q->lens), free(q->out);
        free(q);
        return cerr_set(e, CERR_IO, "cannot start the embedding thread");
    }
    *out = q;
    return 0;
}

int embedq_submit(struct embedq *q, struct embed_job *j)
{
    if (j->n_seq < 1)
        return -1;
    j->status = 0;
    j->error[0] = 0;
    j->next_seq = j->n_done = j->cancelled = 0;
    j->next = NULL;
    pthread_mutex_lock(&q->mu);
    if (q->stop) {
        pthread_mutex_unlock(&q->mu);
        return -1;
    }
    if (q->tail)
        q->tail->next = j;
    else
        q->head = j;
    q->tail = j;
    q->st.jobs++;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
    if (q->c.wake)
        q->c.wake(q->c.wake_ud);
    return 0;
}

void embedq_cancel(struct embedq *q, struct embed_job *j)
{
    pthread_mutex_lock(&q->mu);
    if (j->n_done == j->n_seq || j->cancelled) { /* finished, or cancelled before */
        pthread_mutex_unlock(&q->mu);
        return;
    }
    j->cancelled = 1;
    j->status = CERR_IO;
    snprintf(j->error, sizeof j->error, "the client went away");
    int untaken = j->n_seq - j->next_seq;
    if (untaken > 0) { /* still in the FIFO: unlink it, its untaken inputs count as done */
        struct embed_job *prev = NULL;
        for (struct embed_job *it = q->head; it; prev = it, it = it->next)
            if (it == j) {
                if (prev)
                    prev->next = j->next;
                else
                    q->head = j->next;
                if (q->tail == j)
                    q->tail = prev;
                break;
            }
        j->next_seq = j->n_seq;
        j->n_done += untaken;
        q->st.cancelled_seqs += untaken;
    }
    int fin = j->n_done == j->n_seq;
    pthread_mutex_unlock(&q->mu);
    if (fin) /* nothing of it in the running forward */
        j->done(j, j->ud);
}

void embedq_stats(struct embedq *q, struct embed_stats *out)
{
    pthread_mutex_lock(&q->mu);
    *out = q->st;
    pthread_mutex_unlock(&q->mu);
}

void embedq_free(struct embedq *q)
{
    if (!q)
        return;
    pthread_mutex_lock(&q->mu);
    q->stop = 1;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
    if (!q->c.wake)
        pthread_join(q->th, NULL);
    /* jobs never fully taken: finish them with an error (a partly computed job too) */
    for (struct embed_job *j = q->head, *nx; j; j = nx) {
        nx = j->next;
        j->status = CERR_IO;
        snprintf(j->error, sizeof j->error, "the server is shutting down");
        j->done(j, j->ud);
    }
    bert_ws_free(q->ws);
    free(q->slots), free(q->ids), free(q->lens), free(q->out);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    free(q);
}
