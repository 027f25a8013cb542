/* sched.c — see engine_int.h: the waiting and running queues, cancellations, and each
 * step's plan: running decodes first, then prefill chunks of running requests, then FIFO
 * admissions (pool-aware, --kv-budget, prefix-cache lookup), all within max_step_tokens;
 * then KV reservation, preempting the youngest running request when the pool is short.
 */
#include <string.h>

#include "engine/engine_int.h"

/* ---- queue helpers ---------------------------------------------------------------- */

void eng_q_push(struct queue *q, struct ereq *r)
{
    r->next = NULL;
    if (q->tail)
        q->tail->next = r;
    else
        q->head = r;
    q->tail = r;
    q->n++;
}

void eng_q_push_front(struct queue *q, struct ereq *r)
{
    r->next = q->head;
    q->head = r;
    if (!q->tail)
        q->tail = r;
    q->n++;
}

struct ereq *eng_q_pop(struct queue *q)
{
    struct ereq *r = q->head;
    if (r) {
        q->head = r->next;
        if (!q->head)
            q->tail = NULL;
        r->next = NULL;
        q->n--;
    }
    return r;
}

/* Removes r from the running list (keeps order). */
void eng_run_remove(struct engine *g, struct ereq *r)
{
    for (int i = 0; i < g->n_run; i++)
        if (g->run[i] == r) {
            memmove(g->run + i, g->run + i + 1, (size_t)(g->n_run - i - 1) * sizeof *g->run);
            g->n_run--;
            g->projected -= r->projected;
            return;
        }
}

/* Moves submissions into the waiting queue and applies cancellations. Called with mu held;
 * collects cancelled requests into *dead (finished by the caller without the lock). */
void eng_take_inputs(struct engine *g, struct queue *dead)
{
    struct ereq *r;
    while ((r = eng_q_pop(&g->in)))
        eng_q_push(&g->wait, r);
    for (int c = 0; c < g->n_cancel; c++) {
        uint64_t id = g->cancels[c];
        for (int i = 0; i < g->n_run; i++)
            if (g->run[i]->id == id)
                g->run[i]->cancelled = 1;
        for (r = g->wait.head; r; r = r->next)
            if (r->id == id)
                r->cancelled = 1;
    }
    g->n_cancel = 0;
    /* pull cancelled ones out */
    for (int i = 0; i < g->n_run;) {
        if (g->run[i]->cancelled) {
            struct ereq *x = g->run[i];
            eng_run_remove(g, x);
            eng_q_push(dead, x);
        } else
            i++;
    }
    struct queue keep = {0};
    while ((r = eng_q_pop(&g->wait)))
        eng_q_push(r->cancelled ? dead : &keep, r);
    g->wait = keep;
    g->st.waiting = g->wait.n; /* exact, for the queue bound in engine_submit */
}

/* Plans rows for this step without reserving. admit: may take waiting requests. */
static int plan(struct engine *g, int admit)
{
    int n = 0, budget = g->c.max_step_tokens, plp_left = eng_plp_budget(g);
    for (int i = 0; i < g->n_run && budget > 0; i++) {
        struct ereq *r = g->run[i];
        if (r->n_tokens - r->n_past == 1) {
            g->rows[n++] = (struct row){r, 1, -1, 0, -1, 0};
            budget--;
        }
    }
    for (int i = 0; i < g->n_run && budget > 0; i++) {
        struct ereq *r = g->run[i];
        int left = r->n_tokens - r->n_past;
        if (left > 1) {
            int c = eng_plp_chunk(r, left < budget ? left : budget, &plp_left);
            if (c == 0)
                continue; /* scoring its prompt: no rows left this step */
            g->rows[n++] = (struct row){r, c, -1, 0, -1, 0};
            budget -= c;
        }
    }
    while (admit && budget > 0 && g->n_run < g->c.max_seqs && g->wait.head) {
        struct ereq *r = g->wait.head;
        if (r->plp && plp_left == 0)
            break;
        /* --kv-budget: the head waits (FIFO) until the running rows leave room */
        if (g->c.kv_budget_bytes && g->n_run > 0 &&
            g->projected + r->projected > g->c.kv_budget_bytes)
            break;
        /* admit only what the pool can take this step next to the running rows (each may
         * open a block), so that a tight pool does not preempt-and-readmit in a loop */
        int first = r->n_tokens - r->n_past < budget ? r->n_tokens - r->n_past : budget;
        int need = (first + g->c.block_size - 1) / g->c.block_size + 1;
        if (g->n_run > 0 && (need > kv_pool_available(g->kv) - g->n_run ||
                             (g->kv_swa && need > kv_pool_available(g->kv_swa) - g->n_run)))
            break;
        eng_q_pop(&g->wait);
        g->run[g->n_run++] = r;
        g->projected += r->projected;
        if (r->seq.n_blocks == 0 && r->n_past == 0 && !r->plp) { /* scoring needs every row */
            /* the prefix cache: share the longest cached prefix instead of computing it */
            struct cerr e = {0};
            int hit = g->kv_swa ? kv_cache_lookup_swa(g->kv, &r->seq, g->kv_swa, &r->seq_swa,
                                                      r->root, r->tokens, r->n_tokens,
                                                      g->window, &e)
                                : kv_cache_lookup(g->kv, &r->seq, r->root, r->tokens,
                                                  r->n_tokens, &e);
            if (hit > 0) {
                r->n_past = hit;
                if (!r->admitted)
                    r->n_cached = hit < r->n_prompt ? hit : r->n_prompt;
            }
        }
        eng_lora_admitted(g, r); /* its adapters count as running (again, after a preemption) */
        r->admitted = 1;
        pthread_mutex_lock(&g->mu);
        g->st.waiting = g->wait.n;
        g->st.running = g->n_run;
        pthread_mutex_unlock(&g->mu);
        int left = r->n_tokens - r->n_past;
        int c = eng_plp_chunk(r, left < budget ? left : budget, &plp_left);
        g->rows[n++] = (struct row){r, c, -1, 0, -1, 0};
        budget -= c;
    }
    return n;
}

/* Preempts the youngest running request: frees its blocks; it waits at the head. */
static void preempt_youngest(struct engine *g)
{
    struct ereq *r = g->run[--g->n_run];
    g->projected -= r->projected;
    kv_seq_release(g->kv, &r->seq);
    if (g->kv_swa)
        kv_seq_release(g->kv_swa, &r->seq_swa);
    r->n_past = 0;
    eng_lora_preempted(g, r); /* its adapters count as waiting again */
    eng_q_push_front(&g->wait, r);
    pthread_mutex_lock(&g->mu);
    g->st.waiting = g->wait.n;
    pthread_mutex_unlock(&g->mu);
    g->preempted++;
}

/* Reserves KV for every planned row, preempting the youngest request until they fit.
 * Returns the number of rows that can run. */
int eng_plan_and_reserve(struct engine *g, struct queue *dead)
{
    int admit = 1, spec = g->spec != NULL;
    for (;;) {
        int n = plan(g, admit), ok = 1;
        if (spec)
            eng_spec_plan(g, n); /* drafts for the decode rows (spec/spec_engine.c) */
        for (int i = 0; i < n && ok; i++) {
            struct ereq *r = g->rows[i].r;
            if (kv_seq_reserve(g->kv, &r->seq, r->n_past + g->rows[i].n, NULL) ||
                (g->kv_swa &&
                 kv_seq_reserve(g->kv_swa, &r->seq_swa, r->n_past + g->rows[i].n, NULL)))
                ok = 0;
        }
        if (ok)
            return n;
        if (spec && eng_spec_unplan(g, n)) { /* without drafts before preempting */
            spec = admit = 0;
            continue;
        }
        if (g->n_run <= 1) {
            /* one request alone does not fit the pool: it can never run */
            if (g->n_run == 1) {
                struct ereq *r = g->run[0];
                g->n_run = 0;
                g->projected -= r->projected;
                r->cancelled = 2;
                eng_q_push(dead, r);
            }
            return 0;
        }
        preempt_youngest(g);
        admit = 0;
    }
}
