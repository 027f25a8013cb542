/* ssd.h — the SSD cold tier of the prefix cache: KV blocks on disk, keyed by the same
 * chained block key as the RAM cache (kv_pool.h), one file per block.
 *
 * Layout: <dir>/<ns16>/<key64>.kvb where ns16 is the first 8 bytes of the namespace root in
 * hex and key64 the block key in hex; <dir>/quarantine/ holds files that failed a check.
 * A file is a fixed header (struct kv_ssd_hdr: magic, format version, namespace, key,
 * token count, KV geometry, payload size, payload SHA-256, header SHA-256) followed by the
 * payload: for every layer the block's K rows then its V rows, as the pool stores them.
 *
 * Writes go through a background writer thread: kv_ssd_put() queues a payload (at most
 * spill_queue_bytes pending; over it the oldest pending one is dropped — a future miss,
 * never a wrong result); the writer writes a temporary file, fsyncs it and renames it into
 * place, so a crash leaves nothing visible but a stray .tmp file (deleted at the next
 * start). The writer only writes while the engine is idle (kv_ssd_set_busy), unless a drain
 * forces it. At max_bytes the entries with the oldest mtime (a hit touches it) are deleted.
 * A file that fails a check on read (truncated, header hash, foreign namespace or key,
 * payload hash with verify on) is moved to the quarantine folder and counted.
 *
 * Threads: kv_ssd_has/read/put/set_busy are for the engine thread; kv_ssd_stats and
 * kv_ssd_drain for any thread. Engine lifetime.
 */
#ifndef CINFER_KV_SSD_H
#define CINFER_KV_SSD_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define KV_SSD_KEY 32
#define KV_SSD_VERSION 1
#define KV_SSD_HDR_BYTES 184

/* The on-disk header, decoded. */
struct kv_ssd_hdr {
    uint32_t version;
    uint8_t ns[KV_SSD_KEY];
    uint8_t key[KV_SSD_KEY];
    uint32_t n_tok, block_size, n_layer, kv_dim, kv_dtype;
    uint64_t payload_bytes;
    uint8_t payload_hash[KV_SSD_KEY];
};

/* Encodes h into buf (KV_SSD_HDR_BYTES), computing the header hash. */
void kv_ssd_hdr_encode(const struct kv_ssd_hdr *h, uint8_t buf[KV_SSD_HDR_BYTES]);
/* Decodes and checks a header from buf[0..n): magic, version, header hash, sane fields.
 * Returns 0, or CERR_FORMAT with the reason in e. Never reads past n. */
int kv_ssd_hdr_parse(const uint8_t *buf, size_t n, struct kv_ssd_hdr *out, struct cerr *e);

struct kv_ssd_config {
    const char *dir;
    size_t max_bytes;          /* cap on the bytes of this namespace's files */
    int verify;                /* hash every payload on read */
    size_t spill_queue_bytes;  /* cap on pending (queued, unwritten) payload bytes */
    /* the geometry every entry must have */
    int n_layer, kv_dim, block_size, kv_dtype;
    size_t payload_bytes;      /* one block's payload */
};

struct kv_ssd_stats {
    long entries;
    long long bytes, max_bytes;
    long hits, misses, restored_tokens, restored_blocks, spilled_blocks, writes, write_errors;
    long pending_spills;
    long long pending_spill_bytes;
    long dropped_spills, quarantined, evictions, demoted_blocks;
    long entries_at_start;
    long checkpoint_blocks; /* blocks queued by generation checkpoints (KV_SSD_URGENT) */
    double last_flush_ms;
};

struct kv_ssd;

/* Opens (creating) the directory, scans this namespace's files into the index (names and
 * sizes only; headers are checked on read), deletes stray temporary files, and starts the
 * writer. ns is the namespace root. Returns 0, or an error naming the directory when it
 * cannot be created or written. */
int kv_ssd_open(struct kv_ssd **out, const struct kv_ssd_config *c, const uint8_t ns[KV_SSD_KEY],
                struct cerr *e);
/* Stops the writer after writing what is pending, for at most timeout_s seconds (what is
 * still pending then is lost and logged), and frees. */
void kv_ssd_close(struct kv_ssd *s, double timeout_s);

/* 1 when the index has key with n_tok tokens. */
int kv_ssd_has(struct kv_ssd *s, const uint8_t key[KV_SSD_KEY], int n_tok);
/* 1 when key is on disk or pending (queued for the writer). */
int kv_ssd_known(struct kv_ssd *s, const uint8_t key[KV_SSD_KEY]);
/* Reads key's payload (cfg payload_bytes) into dst after checking the file. Returns 0; or
 * CERR_LIMIT (not on disk: a miss), CERR_FORMAT (the file failed a check and was
 * quarantined) or CERR_IO. Touches the mtime on success. */
int kv_ssd_read(struct kv_ssd *s, const uint8_t key[KV_SSD_KEY], int n_tok, void *dst,
                struct cerr *e);
/* kv_ssd_put flags */
#define KV_SSD_MAY_DROP 1 /* over the queue cap, drop the oldest pending payloads (spills) */
#define KV_SSD_URGENT 2   /* a generation checkpoint: written even while the engine is busy */
/* Queues payload (malloc'd, taken in every case) for writing under key. KV_SSD_MAY_DROP: when
 * the queue is over its cap, drop the oldest pending payloads to make room (spills); else
 * refuse (returns 1, payload freed) so that the caller retries later (snapshots). Returns 0
 * when queued. A key already on disk or pending is not queued again (returns 0).
 * KV_SSD_URGENT: the writer works through the queue while the engine is busy until every
 * urgent payload is written (counted in checkpoint_blocks). */
int kv_ssd_put(struct kv_ssd *s, const uint8_t key[KV_SSD_KEY], int n_tok, void *payload,
               int flags);
/* gone(ud, key) runs, under the tier's lock (it must not call back into the tier), whenever
 * an entry leaves the index: its file deleted, its pending write dropped or failed, or the
 * file quarantined. NULL = nobody is told. */
void kv_ssd_set_gone(struct kv_ssd *s, void (*gone)(void *ud, const uint8_t key[KV_SSD_KEY]),
                     void *ud);
/* The engine is running steps (1) or idle (0): the writer waits while busy (unless an urgent
 * payload is pending). */
void kv_ssd_set_busy(struct kv_ssd *s, int busy);
/* Waits until nothing is pending (the writer works even while busy) for at most timeout_s.
 * Returns 0 when everything queued was written, 1 when something stayed pending. */
int kv_ssd_drain(struct kv_ssd *s, double timeout_s);
void kv_ssd_stats(struct kv_ssd *s, struct kv_ssd_stats *out);
/* Counters kept by the callers (kv_tier): demoted blocks, a restore's tokens. */
void kv_ssd_count(struct kv_ssd *s, long demoted, long restored_tokens, long restored_blocks,
                  long spilled);
const char *kv_ssd_dir(const struct kv_ssd *s);
/* Fault hooks for tests, read at open: CINFER_SSD_FAULT=enospc makes every write fail as
 * if the disk were full; =stall makes the writer stop halfway through its first temporary
 * file until the tier closes (then the write fails), so that a test can kill -9 mid-write. */

/* A fingerprint of a model's weights from their content (not their path): SHA-256 over the
 * size and sampled 64 KiB windows of the file (for a directory: of each regular file, in
 * name order). Returns 0, or CERR_IO. */
int kv_ssd_fingerprint(const char *path, uint8_t out[KV_SSD_KEY], struct cerr *e);

#endif
