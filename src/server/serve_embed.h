/* serve_embed.h — embeddings in `cinfer serve` (serve_embed.c): POST /v1/embeddings, and
 * the embedding-only server of a BERT-family model directory. Loop thread unless said.
 */
#ifndef CINFER_SERVER_SERVE_EMBED_H
#define CINFER_SERVER_SERVE_EMBED_H

struct serve;
struct serve_opts;
struct be;
struct be_config;

/* Parses --embeddings last|mean (a = the flag, v = its value) into o->embed_pool. Returns 1
 * when a is ours, 0 when not, -1 on a bad value (message printed). */
int serve_embed_flag(struct serve_opts *o, const char *a, const char *v);
/* Main thread, after the engine of a generative model is up: with --embeddings, gives the
 * engine the embedding queue as side work (engine_set_side), so embedding forwards
 * (last-token or mean pooling of the final-normed hidden states, L2-normalized) run on the
 * engine's model and thread between generation steps. 0 (also when the flag is off), or -1
 * with the message printed. */
int serve_embed_decoder(struct serve *sv);

/* A generative server's /stats (serve_metrics.c): adds the "embeddings" object (requests,
 * inputs, forwards, ...) when --embeddings is on. Loop thread. */
struct json_t;
void serve_embed_stats_json(struct serve *sv, struct json_t *j);

/* 1 when MODEL is an encoder directory that `serve` runs for embeddings only. */
int serve_embed_wanted(const char *model);
/* Main thread, at start-up: loads the encoder, its tokenizer and the embedding scheduler
 * onto be; sets sv->emb and sv->emb_only. 0, or -1 with the message printed (sv->emb may
 * be set: serve_embed_free it). */
int serve_embed_load(struct serve *sv, struct be *be);
/* The ready card of an embedding-only server (stdout). */
void serve_embed_card(struct serve *sv, double t_ready);
/* Registers POST /v1/embeddings, and for an embedding-only server first the refusals of the
 * generation routes and its own /v1/models, /stats, /metrics (before the generic routes,
 * which they shadow). 0 or -1. */
int serve_embed_install(struct serve *sv);
/* 1 while embedding requests are in flight and no shutdown cancelled everything: a SIGTERM
 * drain lets them finish (the last one's answer stops the loop). */
int serve_embed_pending(struct serve *sv);
/* After the HTTP loop stopped: stops the scheduler and frees the encoder. */
void serve_embed_free(struct serve *sv);

#endif
