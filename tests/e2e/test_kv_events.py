"""test_kv_events.py — `cinfer serve --kv-events`: a real ZMQ subscriber (pyzmq + msgpack)
decodes vLLM's wire format (topic, 8-byte big-endian seq, msgpack EventBatch), fills what it
missed through the replay socket, and rebuilds the server's prefix cache exactly: the live
block count equals /stats prompt_cache.full_blocks, every stored block's tokens are the
served prompt's tokens in order along the parent chain, evictions arrive as BlockRemoved,
and the rebuilt cache predicts the cached_tokens of the next request.
"""
import json
import subprocess
import time

import pytest

from conftest import BIN, STORIES, STORIES_TEMPLATE, Server, free_port

zmq = pytest.importorskip("zmq")
msgpack = pytest.importorskip("msgpack")

BS = 4
END = (1 << 64) - 1  # the replay's end marker, -1 as 8 bytes


def tokenize(text):
    out = subprocess.run([BIN, "tokenize", STORIES, "--text", text, "--add-special"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def normalize(ev):
    """An event of either layout -> (tag, dict of fields)."""
    if isinstance(ev, dict):
        return ev["type"], ev
    tag = ev[0]
    if tag == "BlockStored":
        names = ["block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
                 "medium"]
    elif tag == "BlockRemoved":
        names = ["block_hashes", "medium"]
    else:
        names = []
    assert len(ev) == len(names) + 1, ev
    return tag, dict(zip(names, ev[1:]))


class Subscriber:
    def __init__(self, pub_port, replay_port):
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.connect(f"tcp://127.0.0.1:{pub_port}")
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.replay_port = replay_port
        self.batches = {}  # seq -> payload bytes

    def drain(self, timeout_ms=100):
        while self.sub.poll(timeout_ms):
            topic, seq, payload = self.sub.recv_multipart()
            assert topic == b"" and len(seq) == 8
            self.batches[int.from_bytes(seq, "big")] = payload

    def replay(self, start):
        d = self.ctx.socket(zmq.DEALER)
        d.connect(f"tcp://127.0.0.1:{self.replay_port}")
        d.send_multipart([b"", start.to_bytes(8, "big")])
        got = []
        while True:
            assert d.poll(30000), "the replay socket did not answer"
            empty, seq, payload = d.recv_multipart()
            assert empty == b""
            s = int.from_bytes(seq, "big")
            if s == END:
                assert payload == b""
                break
            got.append(s)
            self.batches[s] = payload
        d.close(0)
        return got

    def close(self):
        self.sub.close(0)
        self.ctx.term()


def rebuild(batches):
    """Applies the batches in seq order; returns (live {hash: (parent, tokens)}, counts)."""
    live, counts = {}, {"stored": 0, "removed": 0, "cleared": 0}
    for seq in sorted(batches):
        batch = msgpack.unpackb(batches[seq], raw=False)
        assert isinstance(batch, list) and len(batch) == 3, batch
        ts, events, dp_rank = batch
        assert isinstance(ts, float) and ts > 1.6e9 and dp_rank == 0
        for ev in events:
            tag, f = normalize(ev)
            if tag == "BlockStored":
                hashes, toks = f["block_hashes"], f["token_ids"]
                assert f["block_size"] == BS and f["medium"] == "GPU" and f["lora_id"] is None
                assert len(toks) == len(hashes) * BS
                parent = f["parent_block_hash"]
                for i, h in enumerate(hashes):
                    assert 0 <= h < 1 << 64
                    live[h] = (parent, toks[i * BS:(i + 1) * BS])
                    parent = h
                counts["stored"] += len(hashes)
            elif tag == "BlockRemoved":
                for h in f["block_hashes"]:
                    assert h in live, "removed a block never stored"
                    del live[h]
                counts["removed"] += len(f["block_hashes"])
            else:
                assert tag == "AllBlocksCleared", tag
                live.clear()
                counts["cleared"] += 1
    return live, counts


def prefix_of(live, h):
    """The whole token prefix a cached block ends, or None when a parent is gone."""
    toks = []
    while h is not None:
        if h not in live:
            return None
        parent, t = live[h]
        toks = t + toks
        h = parent
    return toks


@pytest.mark.parametrize("layout", ["array", "map"])
def test_subscriber_rebuilds_the_cache(layout):
    pub, rep = free_port(), free_port()
    srv = Server(STORIES, "--kv-block-size", str(BS), "--prompt-cache", "0.0001",
                 "--kv-events", f"tcp://*:{pub}", "--kv-events-replay", f"tcp://*:{rep}",
                 "--kv-events-layout", layout)
    sub = Subscriber(pub, rep)
    try:
        prompts = [f"Story number {i}. Once upon a time there was a little dog named Max "
                   f"who lived in house {i} and loved to play in the park." for i in range(10)]
        for p in prompts:
            st, body, _ = srv.post("/v1/completions", {"prompt": p, "max_tokens": 6,
                                                       "temperature": 0})
            assert st == 200, body
            sub.drain(10)

        def settled():
            sub.drain(50)
            n = srv.stats()["kv_events"]["batches"]
            return n > 0 and max(sub.batches, default=-1) == n - 1
        t0 = time.time()
        while not settled():
            assert time.time() - t0 < 60, (srv.stats().get("kv_events"), sorted(sub.batches))
        # a slow joiner misses the first batches (at least the startup AllBlocksCleared):
        # the replay socket has every one since seq 0
        live_seen = dict(sub.batches)
        got = sub.replay(0)
        assert got == sorted(got) and got[0] == 0
        for s_, payload in live_seen.items():
            assert sub.batches[s_] == payload  # replayed bytes are the published bytes
        stats = srv.stats()
        n = stats["kv_events"]["batches"]
        assert sorted(sub.batches) == list(range(n)), "a gap in the sequence numbers"
        assert stats["kv_events"]["dropped"] == 0
        live, counts = rebuild(sub.batches)
        assert counts["cleared"] == 1  # the startup clear
        assert counts["removed"] > 0, "the small cache should have evicted"
        assert stats["prompt_cache"]["evictions"] > 0
        # the rebuilt cache is the server's, block for block
        assert len(live) == stats["prompt_cache"]["full_blocks"], (len(live), stats)
        # the freshest request's blocks carry its prompt's tokens along the parent chain
        ids = tokenize(prompts[-1])
        prefixes = {tuple(t) for t in (prefix_of(live, h) for h in live) if t is not None}
        n_full = len(ids) // BS
        assert n_full >= 5
        for k in range(1, n_full + 1):
            assert tuple(ids[:k * BS]) in prefixes, f"block {k} of the last prompt is not cached"
        # the rebuilt cache predicts the next hit: the same prompt again
        st, body, _ = srv.post("/v1/completions", {"prompt": prompts[-1], "max_tokens": 1,
                                                   "temperature": 0})
        cached = json.loads(body)["usage"]["prompt_tokens_details"]["cached_tokens"]
        # (a hit leaves one token to compute: the full blocks before it, maybe a partial one)
        predicted = min(n_full, (len(ids) - 1) // BS) * BS
        assert predicted <= cached <= len(ids) - 1, (cached, predicted, len(ids))
    finally:
        sub.close()
        assert srv.stop() == 0, srv.output()


def test_bad_endpoint_is_refused():
    p = subprocess.run([BIN, "serve", STORIES, "--port", str(free_port()), "--kv-events",
                        "tcp://nohostport"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1
    assert "--kv-events" in p.stderr and "HOST:PORT" in p.stderr


def test_published_blocks_cover_every_turn_of_a_chat():
    """What a KV-aware router needs: before each turn of a chat, the blocks published so far
    cover the new prompt (as POST /tokenize gives its ids) up to the last full block of the
    previous turn's prompt, and the server's cache hit agrees."""
    pub, rep = free_port(), free_port()
    srv = Server(STORIES, "--chat-template", STORIES_TEMPLATE, "--kv-block-size", str(BS),
                 "--kv-events", f"tcp://*:{pub}", "--kv-events-replay", f"tcp://*:{rep}")
    sub = Subscriber(pub, rep)
    try:
        sub.replay(0)
        msgs = [{"role": "system", "content": "You tell short stories about a red fox."}]
        prev = 0
        for t in range(4):
            msgs.append({"role": "user", "content": f"Story {t}, please."})
            st, raw, _ = srv.post("/tokenize", {"messages": msgs})
            assert st == 200, raw
            ids = json.loads(raw)["tokens"]
            deadline = time.time() + 30
            while True:  # the previous turn's events may still be on their way
                sub.drain()
                if len(sub.batches) == max(sub.batches, default=-1) + 1:
                    live, _ = rebuild(sub.batches)
                    by = {(p, tuple(tk)): h for h, (p, tk) in live.items()}
                    par, n = None, 0
                    while n + BS <= len(ids) and (par, tuple(ids[n:n + BS])) in by:
                        par, n = by[(par, tuple(ids[n:n + BS]))], n + BS
                    if n >= prev // BS * BS:
                        break
                else:  # a gap: fill it from the replay socket
                    sub.replay(0)
                assert time.time() < deadline, (t, n, prev)
            st, raw, _ = srv.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 8,
                                                           "temperature": 0})
            assert st == 200, raw
            r = json.loads(raw)
            assert r["usage"]["prompt_tokens"] == len(ids)
            assert r["usage"]["prompt_tokens_details"]["cached_tokens"] >= n
            msgs.append({"role": "assistant", "content": r["choices"][0]["message"]["content"]})
            prev = len(ids)
    finally:
        sub.close()
        assert srv.stop() == 0, srv.output()


def test_ssd_tier_blocks_on_the_disk_medium(tmp_path):
    """With --ssd-cache, a block queued for the disk is announced again on the "DISK" medium
    (same hash, parent and tokens as its pool event) and a file that leaves the tier (the
    cap deletes the oldest) gets a BlockRemoved on "DISK" — only full blocks, as on the
    pool's medium (the tier also keeps partial tail blocks, which no event names)."""
    pub, rep = free_port(), free_port()
    # a cap of a few dozen stories260K blocks (about 20 KB each at block size 16)
    srv = Server(STORIES, "--kv-events", f"tcp://*:{pub}", "--kv-events-replay",
                 f"tcp://*:{rep}", "--ssd-cache", str(tmp_path / "ssd"), "--ssd-cache-max",
                 "0.0004")
    sub = Subscriber(pub, rep)
    try:
        sub.replay(0)
        for i in range(12):  # distinct chains of 3-4 full blocks each
            st, raw, _ = srv.post("/v1/completions", {
                "prompt": f"Story {i}: once upon a time a bird named B{i} flew over the big "
                          f"green hill and saw a cat who liked to sing songs all day long.",
                "max_tokens": 4, "temperature": 0})
            assert st == 200, raw
        st, raw, _ = srv.post("/admin/cache/flush", {})
        assert st == 200 and json.loads(raw)["durable"] is True, raw
        stats = srv.stats()
        ssd, published = stats["ssd_cache"], stats["kv_events"]["batches"]
        assert ssd["evictions"] > 0, ssd  # the cap deleted files: removals are due
        gpu, disk, removed_disk = {}, {}, 0
        deadline = time.time() + 30
        while True:
            sub.drain()
            if len(sub.batches) != max(sub.batches, default=-1) + 1:
                sub.replay(0)
            gpu, disk, removed_disk = {}, {}, 0
            for seq in sorted(sub.batches):
                for ev in msgpack.unpackb(sub.batches[seq], raw=False)[1]:
                    tag, f = normalize(ev)
                    if tag == "BlockStored":
                        where = disk if f["medium"] == "DISK" else gpu
                        assert f["medium"] in ("GPU", "DISK"), f
                        parent = f["parent_block_hash"]
                        for j, h in enumerate(f["block_hashes"]):
                            where[h] = (parent, f["token_ids"][16 * j:16 * (j + 1)])
                            parent = h
                    elif tag == "BlockRemoved" and f["medium"] == "DISK":
                        for h in f["block_hashes"]:
                            assert h in disk, "a disk removal of a block never announced"
                            del disk[h]
                            removed_disk += 1
            if len(sub.batches) >= published:  # everything published by the flush's end
                break
            assert time.time() < deadline, (len(sub.batches), published)
        assert disk and 0 < removed_disk <= ssd["evictions"], (len(disk), removed_disk, ssd)
        assert len(disk) <= ssd["entries"]
        for h, v in disk.items():  # the same block as the pool announced
            assert gpu.get(h) == v, h
    finally:
        sub.close()
        assert srv.stop() == 0, srv.output()
