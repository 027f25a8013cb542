#!/usr/bin/env python3
"""run.py — speculative decoding benchmark (not a test): decode speed-up over no speculation.

One `cinfer serve` per configuration (none, ngram, suffix, two-model), the same target model
(default Qwen2.5-Coder-1.5B-Instruct Q4_K_M; draft for two-model: Qwen2.5-Coder-0.5B), the
same threads. Batch-1 workloads, each measured as decode tok/s of a streamed greedy
generation (tokens after the first / time from the first token to the last: prefill is not
counted, and every prompt is sent once beforehand (3 tokens) so that the prefix caches hold
it — the target's, and the draft model's, which computes a prompt at the first decode step
that drafts):
  code_edit: a ~150-line C file in the prompt, "return the whole file with this one change";
  agent:     a replayed 3-turn tool loop (read a file, edit it through a tool call quoting
             the code, report) — each turn's prompt holds the previous turns;
  prose:     free prose with nothing to copy.
aggregate_ratio_at_8: tok/s with 8 requests in flight at every moment (--batch 8; 8 clients,
2 code edits, 3 agent turns, 3 prose, each sending its next new request as soon as its last
finished; tokens counted by arrival after a warm-up, --agg-seconds a repetition), speculation
over none, the least kind. The burst of 8 (the mix once, tokens / time to the last) is kept
as aggregate_burst_*: its concurrency falls as rows finish, so it measures when the slowest
prose row ends more than a throughput at 8.
All configurations' servers are up at once per workload and run interleaved repetitions
(none, then each kind, --reps times) so that they see the same load; a kind's figure is its
best repetition over none's best in the same repetitions (suffix runs its first only, since
its corpus of finished outputs then holds the very answer, and is held to none's first);
the 1-minute load average is recorded beside each figure.
--warm-shapes (on by default with --backend cuda): before the measured repetitions each server
also answers one unmeasured request of the same shape about something else (tally.c, another
story; 8 at once for the aggregate), so that its CUDA graphs and block-table widths exist as on
a server that has been up a while (a cold GPU server captures a graph for each new step shape:
~0.5 ms each, up to 10% of a 256-token reply), without putting a measured answer into suffix's
corpus.

Writes the "cpu" (or --section) half of bench/results/spec.json:
  {SECTION: {KIND: {WORKLOAD: {"speedup", "acceptance_rate", ...}}, "aggregate_ratio_at_8": ..}}
Usage: bench/spec/run.py [--threads 2] [--max-tokens 320] [--kinds ngram,suffix,two_model]
                         [--backend cpu] [--section cpu]
"""
import argparse
import json
import os
import platform
import socket
import subprocess
import threading
import time
import urllib.request

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.join(os.environ["BIN"], "cinfer") if os.environ.get("BIN") else \
    os.path.join(REPO, "build", "cinfer")
TARGET = os.path.join(REPO, "models", "qwen2.5-coder-1.5b-instruct-Q4_K_M.gguf")
DRAFT = os.path.join(REPO, "models", "qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf")
CODE_FILE = os.path.join(REPO, "bench", "spec", "data", "ring.c")
WARM_FILE = os.path.join(REPO, "bench", "spec", "data", "tally.c")


def load():
    return os.getloadavg()[0]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Server:
    def __init__(self, args, kind, threads, batch, backend, tag=""):
        self.port = free_port()
        self.seq = {}  # the sustained aggregate's requests sent, per workload
        self.base = f"http://127.0.0.1:{self.port}"
        cmd = [BIN, "serve", args.target, "--port", str(self.port), "-t", str(threads),
               "--batch", str(batch), "--no-open", "--backend", backend]
        if args.chat_template:
            cmd += ["--chat-template", args.chat_template]
        cmd += args.server_args.split()
        if kind == "two_model":
            cmd += ["--draft-model", args.draft]
        elif kind != "none":
            cmd += ["--draft-kind", kind]
        self.log = open(f"/tmp/cinfer-spec-bench-{self.port}.log", "w+")
        env = dict(os.environ)
        if os.environ.get("CINFER_STEP_PROF_DIR"):  # step profiles: DIR/TAG-KIND.PID.txt
            env["CINFER_STEP_PROF"] = os.path.join(os.environ["CINFER_STEP_PROF_DIR"],
                                                   f"{tag or 'run'}-{kind}")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        t0 = time.time()
        while time.time() - t0 < 600:
            if self.proc.poll() is not None:
                self.log.seek(0)
                raise RuntimeError("server exited: " + self.log.read()[-2000:])
            try:
                urllib.request.urlopen(self.base + "/health", timeout=2).read()
                return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError("server not ready")

    def cpu_s(self):
        """CPU seconds the server has used (user + system, all threads): on a shared machine
        the work a configuration needs, which the wall clock shows only through the noise of
        whoever else runs."""
        f = open(f"/proc/{self.proc.pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def chat(self, messages, max_tokens, tools=None, times=None):
        """Streams a greedy chat completion; returns (text, n_tokens, decode_s, usage); the
        arrival time of every chunk that carries text is appended to times (a list) if
        given."""
        body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0,
                "stream": True, "stream_options": {"include_usage": True}}
        if tools:
            body["tools"] = tools
        req = urllib.request.Request(self.base + "/v1/chat/completions",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        t_first = t_last = None
        text, usage = [], None
        with urllib.request.urlopen(req, timeout=3600) as r:
            for line in r:
                line = line.strip()
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                j = json.loads(line[6:])
                if j.get("usage"):
                    usage = j["usage"]
                for c in j.get("choices", []):
                    d = c.get("delta", {})
                    piece = (d.get("content") or "") + json.dumps(d.get("tool_calls") or "")
                    if piece:
                        now = time.time()
                        t_first = t_first or now
                        t_last = now
                        if times is not None:
                            times.append(now)
                        text.append(d.get("content") or "")
                        for tc in d.get("tool_calls") or []:
                            text.append(tc.get("function", {}).get("arguments") or "")
        n = usage["completion_tokens"] if usage else 0
        return "".join(text), n, (t_last - t_first) if t_first else 0, usage

    def stats(self):
        return json.loads(urllib.request.urlopen(self.base + "/stats", timeout=10).read())


# ---- workloads ------------------------------------------------------------------------------

def code_edit():
    src = open(CODE_FILE).read()
    return [[{"role": "user", "content":
              "Rename the function `ring_push` to `ring_put` everywhere in this file (its "
              "definition, its comment and every call). Return the whole file with this one "
              "change and nothing else.\n\n```c\n" + src + "```"}]]


TOOLS = [{"type": "function", "function": {
    "name": "edit_file", "description": "Replace old_text with new_text in a file.",
    "parameters": {"type": "object", "properties": {
        "path": {"type": "string"}, "old_text": {"type": "string"},
        "new_text": {"type": "string"}}, "required": ["path", "old_text", "new_text"]}}}]


def agent_turns():
    """A replayed tool loop: the prompts of three turns, each holding the earlier ones (the
    assistant turns are replayed as recorded, so every configuration sees the same prompts)."""
    src = open(CODE_FILE).read()
    part = "\n".join(src.splitlines()[40:100])
    sys_msg = {"role": "system", "content": "You are a coding agent. Use the edit_file tool "
               "to change files; quote old_text exactly as it appears in the file."}
    u1 = {"role": "user", "content": "In ring.c, make ring_pop return -1 instead of 0 when "
          "the ring is empty, and update its comment."}
    a1 = {"role": "assistant", "content": None, "tool_calls": [{
        "id": "call_1", "type": "function", "function": {
            "name": "read_file", "arguments": json.dumps({"path": "ring.c"})}}]}
    t1 = {"role": "tool", "tool_call_id": "call_1", "content": part}
    turn1 = [sys_msg, u1, a1, t1]
    a2 = {"role": "assistant", "content": "I will now rewrite the whole function block with "
          "the change.", "tool_calls": None}
    u2 = {"role": "user", "content": "Now show the complete edited section (the code above "
          "with the change applied), unchanged lines included, as one code block."}
    turn2 = turn1 + [a2, u2]
    u3 = {"role": "user", "content": "Also rename the variable `r` to `ring` in that section. "
          "Show the whole section again as one code block."}
    return [turn1, turn2, turn2 + [{"role": "assistant", "content": "(section shown)"}, u3]]


def prose():
    return [[{"role": "user", "content": "Write a short original story (about 250 words) "
              "about a lighthouse keeper who finds a message in a bottle. Plain prose, no "
              "title."}]]


WORKLOADS = {"code_edit": code_edit, "agent": agent_turns, "prose": prose}


def run_workload(srv, turns, max_tokens, tools=None):
    n_tot, t_tot, dr, acc = 0, 0.0, 0, 0
    for msgs in turns:
        _, n, dt, u = srv.chat(msgs, max_tokens, tools)
        n_tot += max(n - 1, 0)
        t_tot += dt
        sp = (u or {}).get("speculation") or {}
        dr += sp.get("drafted", 0)
        acc += sp.get("accepted", 0)
    return n_tot, t_tot, dr, acc


def warm_reqs():
    """Unmeasured requests shaped like the workloads but about other things (another C file,
    another story): --warm-shapes sends them before the measured repetitions, so that every
    server's step shapes (CUDA graphs, block-table widths) exist, as on a server that has
    been up a while, while no measured answer enters suffix's corpus of finished outputs."""
    src = open(WARM_FILE).read()
    code = [{"role": "user", "content": "Rename the function `tally_add` to `tally_bump` "
             "everywhere in this file (its definition, its comment and every call). Return the "
             "whole file with this one change and nothing else.\n\n```c\n" + src + "```"}]
    agent = [{"role": "system", "content": "You are a coding agent. Use the edit_file tool "
              "to change files; quote old_text exactly as it appears in the file."},
             {"role": "user", "content": "In tally.c, make tally_get return -1 for a word "
              "that was never added, and update its comment. Here is the file:\n\n```c\n" +
              "\n".join(src.splitlines()[60:120]) + "\n```"}]
    story = [{"role": "user", "content": "Write a short original story (about 250 words) "
              "about a baker who wakes up to find the town's clocks have all stopped. Plain "
              "prose, no title."}]
    return code, agent, story


def warm_shapes(srv, wl, max_tokens):
    """One unmeasured round of warm_reqs(): workload wl's kind alone, or for "agg8" 8 at once
    (the aggregate's mix: 2 code, 3 agent, 3 prose)."""
    code, agent, story = warm_reqs()
    if wl != "agg8":
        m = {"code_edit": code, "agent": agent, "prose": story}[wl]
        srv.chat(m, max_tokens, TOOLS if wl == "agent" else None)
        return
    reqs = [code, agent, story, code, agent, story, agent, story]
    th = [threading.Thread(target=srv.chat, args=(m, max_tokens)) for m in reqs]
    for t in th:
        t.start()
    for t in th:
        t.join()


def AGG_REQS():
    reqs = code_edit() + agent_turns()[:2] + prose() + code_edit() + agent_turns()[2:] + \
        prose() + prose()
    return reqs[:8]


def aggregate(srv, max_tokens):
    reqs = AGG_REQS()
    out = [0] * len(reqs)

    def one(i):
        out[i] = srv.chat(reqs[i], max_tokens)[1]

    th = [threading.Thread(target=one, args=(i,)) for i in range(len(reqs))]
    t0 = time.time()
    for t in th:
        t.start()
    for t in th:
        t.join()
    return sum(out) / (time.time() - t0), sum(out)


# ---- the sustained aggregate: 8 requests in flight at every moment -------------------------

RING_FUNCS = ["ring_push", "ring_pop", "ring_peek", "ring_clear", "ring_sum", "ring_max",
              "ring_empty", "ring_full", "ring_free", "ring_print", "ring_new"]
NEW_NAMES = ["put", "take", "look", "reset", "total", "largest", "is_empty", "is_full",
             "destroy", "dump", "create", "add", "get", "scan"]
TOPICS = ["a lighthouse keeper", "a retired astronaut", "a street musician", "a beekeeper",
          "a night-shift nurse", "a cartographer", "a river ferryman", "a clockmaker",
          "a schoolteacher in a mountain village", "a deep-sea diver", "a train conductor",
          "a librarian", "a glassblower", "a fisherman's daughter", "a weather forecaster",
          "a chess champion", "a locksmith", "a night-time baker", "a tailor", "a park ranger"]
EVENTS = ["finds a message in a bottle", "loses their voice for a day",
          "receives a letter from twenty years ago", "meets a talking crow",
          "discovers a hidden door in their house", "wins a prize they never entered for",
          "wakes up in the wrong city"]
AGENT_EDITS = ["make {f} return -1 instead of 0 on failure, and update its comment",
               "add a NULL check for the ring at the start of {f}",
               "rename the local variable `i` in {f} to `k`",
               "make {f} log its arguments to stderr at entry",
               "add a comment above {f} that explains its return value"]


REASONS = ["", "The tests fail: ", "A reviewer asked: ", "Quick fix: ",
           "Per the issue tracker: "]
STYLES = ["", " Keep every other line exactly as it is.", " Do not add any explanation.",
          " Preserve the formatting and the blank lines."]
TONES = ["", " Give it a hopeful ending.", " Set it in winter.", " Tell it in the present tense."]


def radix(j, *sizes):
    """j in mixed radix: distinct digits for every j < the product of sizes."""
    out = []
    for n in sizes:
        out.append(j % n)
        j //= n
    return out


def sustained_reqs(kind, j):
    """The j-th request of workload kind for the sustained aggregate: distinct for every j
    below the kind's count (code 616, agent 1100, prose 560), the same kinds of text as the
    batch-1 workloads, so that no prompt is sent twice to a server (no answer is served again
    from a prefix cache or from suffix's corpus of finished outputs as a whole). The file
    comes before the instruction, as an agent's context does: its prefix is cached after the
    first request, so the figure is about decoding, not about prefilling a new file."""
    src = open(CODE_FILE).read()
    if kind == "code":
        fi, ni, si = radix(j, len(RING_FUNCS), len(NEW_NAMES), len(STYLES))
        f, nn = RING_FUNCS[fi], "ring_" + NEW_NAMES[ni]
        return [{"role": "user", "content": "Here is ring.c:\n\n```c\n" + src + "```\n\n"
                 f"Rename the function `{f}` to `{nn}` everywhere in this file (its "
                 "definition, its comment and every call). Return the whole file with this "
                 "one change and nothing else." + STYLES[si]}], None
    if kind == "agent":
        fi, ei, oi, ri = radix(j, len(RING_FUNCS), len(AGENT_EDITS), len(STYLES),
                               len(REASONS))
        edit = AGENT_EDITS[ei].format(f=RING_FUNCS[fi])
        part = "\n".join(src.splitlines()[40:100])
        return [{"role": "system", "content": "You are a coding agent. Use the edit_file tool "
                 "to change files; quote old_text exactly as it appears in the file."},
                {"role": "user", "content": "Here is part of ring.c:\n\n```c\n" + part +
                 f"\n```\n\n{REASONS[ri]}In ring.c, {edit}." + STYLES[oi]}], TOOLS
    ti, ei, oi = radix(j, len(TOPICS), len(EVENTS), len(TONES))
    return [{"role": "user", "content": f"Write a short original story (about 250 words) "
             f"about {TOPICS[ti]} who {EVENTS[ei]}. Plain prose, no title." + TONES[oi]}], None


SUSTAINED_MIX = ["code", "agent", "prose", "code", "agent", "prose", "agent", "prose"]


def sustained(srv, max_tokens, seconds, warmup):
    """Aggregate tok/s with 8 requests in flight at every moment: 8 clients (2 code edits,
    3 agent turns, 3 prose, the burst's mix), each sending its next request as soon as its
    last one finished, for `seconds`; every request is new to the server (srv.seq counts each
    workload's requests over the server's life). Tokens are counted by arrival time (each
    streamed chunk carries its request's completion_tokens / chunks) inside [warmup,
    seconds], where all 8 clients are busy. Returns (tok/s, tokens in the window, requests
    finished, tokens of all requests)."""
    t0 = time.time()
    stamps, done = [], [0, 0]
    lock = threading.Lock()

    def client(ci):
        kind = SUSTAINED_MIX[ci]
        while time.time() - t0 < seconds:
            with lock:
                j = srv.seq.get(kind, 0)
                srv.seq[kind] = j + 1
            msgs, tools = sustained_reqs(kind, j)
            times = []
            _, n, _, _ = srv.chat(msgs, max_tokens, tools, times)
            w = n / len(times) if times else 0
            with lock:
                stamps.extend((t, w) for t in times)
                done[0] += 1
                done[1] += n

    th = [threading.Thread(target=client, args=(i,)) for i in range(len(SUSTAINED_MIX))]
    for t in th:
        t.start()
    for t in th:
        t.join()
    a, b = t0 + warmup, t0 + seconds
    tok = sum(w for t, w in stamps if a <= t < b)
    return tok / (b - a), tok, done[0], done[1]


class Servers:
    """The configurations' servers: all up at once (interleaved repetitions: the same load for
    each), or with --sequential one at a time. order() yields (rep, kind); srvs[kind] is the
    server, started and warmed (warm(srv): the prompts sent once) before its first use."""

    def __init__(self, args, confs, batch, warm, tag=""):
        self.args, self.confs, self.batch, self.warm = args, confs, batch, warm
        self.tag = tag
        self.live = {}
        if not args.sequential:
            for k in confs:
                self.live[k] = Server(args, k, args.threads, batch, args.backend, tag)
            for k in confs:
                warm(self.live[k])

    def order(self):
        if not self.args.sequential:
            for rep in range(self.args.reps):
                for kind in self.confs:
                    yield rep, kind
            return
        for kind in self.confs:
            self.live[kind] = Server(self.args, kind, self.args.threads, self.batch,
                                     self.args.backend, self.tag)
            try:
                self.warm(self.live[kind])
                for rep in range(self.args.reps):
                    yield rep, kind
            finally:
                self.live.pop(kind).stop()

    def __getitem__(self, kind):
        return self.live[kind]

    def stop(self):
        for s in self.live.values():
            s.stop()
        self.live = {}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--warm-shapes", choices=("auto", "on", "off"), default="auto",
                    help="before the measured repetitions, one unmeasured round of unrelated "
                    "requests of the same shapes per server (auto: on with --backend cuda, "
                    "whose first steps of each shape capture CUDA graphs)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=320)
    ap.add_argument("--agg-tokens", type=int, default=120)
    ap.add_argument("--kinds", default="ngram,suffix,two_model")
    ap.add_argument("--workloads", default="code_edit,agent,prose")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--section", default="cpu")
    ap.add_argument("--target", default=TARGET)
    ap.add_argument("--draft", default=DRAFT)
    ap.add_argument("--no-aggregate", action="store_true")
    ap.add_argument("--agg-mode", choices=("sustained", "burst", "both"), default="both",
                    help="aggregate_ratio_at_8 from 8 requests always in flight (sustained), "
                    "the burst of 8 (recorded as aggregate_burst_*), or both")
    ap.add_argument("--agg-seconds", type=float, default=None,
                    help="sustained: seconds a repetition (default 60 on the CPU, 15 on CUDA)")
    ap.add_argument("--agg-warmup", type=float, default=None,
                    help="sustained: seconds not counted at the start (default a quarter)")
    ap.add_argument("--agg-reps", type=int, default=None, help="default --reps")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--chat-template", default=None, help="for models without one")
    ap.add_argument("--server-args", default="", help="more serve flags, e.g. '-c 4096'")
    ap.add_argument("--sequential", action="store_true",
                    help="one server at a time (a GPU that cannot hold every configuration's "
                    "weights at once; its load is its own, so interleaving is not needed)")
    ap.add_argument("--not-measured", action="append", default=[], metavar="KIND=REASON",
                    help="record KIND as not measured, with the reason (its workloads get "
                    "speedup and acceptance_rate null and a not_measured string); repeatable")
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "results", "spec.json"))
    args = ap.parse_args()
    if args.agg_seconds is None:
        args.agg_seconds = 15.0 if args.backend == "cuda" else 60.0
    if args.agg_warmup is None:
        args.agg_warmup = args.agg_seconds / 4
    if args.agg_reps is None:
        args.agg_reps = args.reps
    if args.warm_shapes == "auto":
        args.warm_shapes = "on" if args.backend == "cuda" else "off"

    def warm(srv, wl, max_tokens, prompts, tools):
        for m in prompts:  # the measured prompts once (3 tokens): the prefix caches hold them
            srv.chat(m, 3, tools)
        if args.warm_shapes == "on":
            warm_shapes(srv, wl, max_tokens)

    kinds = [k for k in args.kinds.split(",") if k]
    res = {k: {} for k in kinds}
    for nm in args.not_measured:
        kind, _, why = nm.partition("=")
        res[kind] = {wl: {"speedup": None, "acceptance_rate": None, "not_measured": why}
                     for wl in WORKLOADS}
    raw = {"machine": platform.node(), "threads": args.threads, "backend": args.backend,
           "max_tokens": args.max_tokens, "target": os.path.basename(args.target),
           "draft": os.path.basename(args.draft), "warm_shapes": args.warm_shapes,
           "runs": []}
    for wl in [w for w in args.workloads.split(",") if w]:
        turns = WORKLOADS[wl]()
        tools = TOOLS if wl == "agent" else None
        confs = ["none"] + kinds
        # every configuration's server up and warm at once, then interleaved repetitions
        # (none, kind1, kind2, ... again): they see the same load; best of --reps each
        srvs = Servers(args, confs, 1, lambda srv: warm(srv, wl, args.max_tokens, turns, tools),
                       wl)
        try:
            by_rep = {}
            for rep, kind in srvs.order():
                if kind == "suffix" and rep > 0:
                    continue  # its corpus now holds this very output: one rep only
                l0 = load()
                c0 = srvs[kind].cpu_s()
                n, dt, dr, acc = run_workload(srvs[kind], turns, args.max_tokens, tools)
                cpu = srvs[kind].cpu_s() - c0
                tps = n / dt if dt > 0 else 0
                row = {"workload": wl, "kind": kind, "rep": rep, "tokens": n,
                       "decode_s": round(dt, 3), "tok_s": round(tps, 3),
                       "cpu_s_per_token": round(cpu / n, 4) if n else None, "drafted": dr,
                       "accepted": acc, "load_1m_before": round(l0, 2),
                       "load_1m_after": round(load(), 2)}
                st = srvs[kind].stats()  # steps and burst steps so far (the server's)
                row["steps"] = {k: st.get("batch", {}).get(k) for k in ("steps",
                                                                       "overlapped_steps")}
                if kind != "none":  # the policy's measured costs (speculation's /stats)
                    sp = st.get("speculation", {})
                    row["stats"] = {k: sp[k] for k in ("step_cost", "step_ms", "draft_cost",
                                                       "draft_ms", "acceptance_rate",
                                                       "lookup_drafted", "lookup_accepted",
                                                       "verify_rows") if k in sp}
                print(json.dumps(row), flush=True)
                raw["runs"].append(row)
                by_rep[(kind, rep)] = (tps, dr, acc, l0, cpu / n if n else None)
        finally:
            srvs.stop()
        for kind in kinds:
            # best of the kind's repetitions over the best of none's in the same repetitions
            # (suffix runs only the first: it is held to none's first, not to none's best)
            reps = [r for (k, r) in by_rep if k == kind]
            tps, dr, acc, l0, cpu = max((by_rep[(kind, r)] for r in reps), key=lambda x: x[0])
            b = max((by_rep[("none", r)] for r in reps), key=lambda x: x[0])
            cpus = [by_rep[(kind, r)][4] for r in reps if by_rep[(kind, r)][4]]
            cpub = [by_rep[("none", r)][4] for r in reps if by_rep[("none", r)][4]]
            res[kind][wl] = {"speedup": round(tps / b[0], 3) if b[0] else None,
                             "acceptance_rate": round(acc / dr, 3) if dr else 0.0,
                             "tok_s": round(tps, 2), "baseline_tok_s": round(b[0], 2),
                             "load_1m": round(l0, 2), "baseline_load_1m": round(b[3], 2),
                             "reps": len(reps)}
            if cpus and cpub:  # CPU time per token, none over kind (least of each)
                res[kind][wl]["cpu_time_speedup"] = round(min(cpub) / min(cpus), 3)
        save(args, res, raw)
    if not args.no_aggregate and args.agg_mode in ("burst", "both"):
        agg_burst(args, kinds, res, raw, warm)
        save(args, res, raw)
    if not args.no_aggregate and args.agg_mode in ("sustained", "both"):
        agg_sustained(args, kinds, res, raw, warm)
    save(args, res, raw)
    print(json.dumps({k: v for k, v in res.items() if k != "raw"}, indent=1))


def server_counters(srv, kind, row):
    """The server's steps so far and, speculating, the policy's measured costs and counters
    (/stats) into row."""
    st = srv.stats()
    row["steps"] = {k: st.get("batch", {}).get(k) for k in ("steps", "overlapped_steps")}
    if kind != "none":
        sp = st.get("speculation", {})
        row["stats"] = {k: sp[k] for k in ("step_cost", "step_ms", "draft_cost", "draft_ms",
                                           "drafted", "accepted", "lookup_drafted",
                                           "lookup_accepted", "verify_rows") if k in sp}


def agg_burst(args, kinds, res, raw, warm):
    """The burst aggregate: the 8 requests of AGG_REQS at once, generated tokens / wall time
    until the last finishes, speculation over none (best over none's best in the same
    repetitions; suffix its first only). As rows finish the concurrency falls (a speculating
    server finishes its copyable rows first and then runs the prose rows alone), so this is
    a makespan, not a throughput at 8: kept beside the sustained figure as
    aggregate_burst_*."""
    confs = ["none"] + kinds
    srvs = Servers(args, confs, 8,
                   lambda srv: warm(srv, "agg8", args.agg_tokens, AGG_REQS(), None), "agg8")
    agg, agg_rep = {}, {}
    try:
        for rep, kind in srvs.order():
            if kind == "suffix" and rep > 0:
                continue
            l0 = load()
            c0 = srvs[kind].cpu_s()
            v, ntok = aggregate(srvs[kind], args.agg_tokens)
            cpu_tok = (srvs[kind].cpu_s() - c0) / ntok if ntok else None
            print(json.dumps({"aggregate_at_8": kind, "rep": rep, "tok_s": round(v, 3),
                              "load_1m": round(l0, 2)}), flush=True)
            row = {"aggregate_at_8": kind, "rep": rep, "tok_s": round(v, 3),
                   "cpu_s_per_token": round(cpu_tok, 4) if cpu_tok else None,
                   "load_1m_before": round(l0, 2)}
            agg_rep[(kind, rep)] = (v, cpu_tok)
            server_counters(srvs[kind], kind, row)
            if kind != "none":
                print(json.dumps(row), flush=True)
            raw["runs"].append(row)
            agg[kind] = max(agg.get(kind, 0), v)
    finally:
        srvs.stop()
    ratios, cpu_ratios = {}, {}
    for k in kinds:  # best over none's best in the same repetitions (as above)
        reps = [r for (kk, r) in agg_rep if kk == k]
        ratios[k] = round(agg[k] / max(agg_rep[("none", r)][0] for r in reps), 3)
        ck = [agg_rep[(k, r)][1] for r in reps if agg_rep[(k, r)][1]]
        cn = [agg_rep[("none", r)][1] for r in reps if agg_rep[("none", r)][1]]
        if ck and cn:
            cpu_ratios[k] = round(min(cn) / min(ck), 3)
    res["aggregate_burst_ratio_at_8"] = min(ratios.values())
    res["aggregate_burst_ratio_at_8_by_kind"] = ratios
    res["aggregate_burst_tok_s_at_8"] = {k: round(v, 2) for k, v in agg.items()}
    if cpu_ratios:
        res["aggregate_burst_cpu_time_ratio_at_8_by_kind"] = cpu_ratios


def agg_sustained(args, kinds, res, raw, warm):
    """aggregate_ratio_at_8: tok/s with 8 requests in flight at every moment (sustained(),
    --agg-seconds each, counted after --agg-warmup), speculation over none; interleaved
    repetitions (--agg-reps), a kind's best over none's best in the same repetitions; every
    prompt new to its server, so suffix runs every repetition."""
    confs = ["none"] + kinds
    # the prompts' shared prefixes (the file, the system turn) cached as for the batch-1
    # workloads: one request of each kind, 3 tokens, from the end of its range (never sent
    # in a repetition)
    ends = {"code": 615, "agent": 1099, "prose": 559}
    pre = [sustained_reqs(k, j) for k, j in ends.items()]

    def warm_s(srv):
        for m, tools in pre:
            srv.chat(m, 3, tools)
        warm(srv, "agg8", args.agg_tokens, AGG_REQS(), None)

    srvs = Servers(args, confs, 8, warm_s, "agg8s")
    best, by_rep = {}, {}
    reps, args.reps = args.reps, args.agg_reps  # (srvs.order() reads args.reps)
    try:
        for rep, kind in srvs.order():
            srv = srvs[kind]
            l0 = load()
            c0 = srv.cpu_s()
            v, ntok, nreq, nall = sustained(srv, args.agg_tokens, args.agg_seconds,
                                            args.agg_warmup)
            cpu = srv.cpu_s() - c0
            row = {"aggregate_sustained_at_8": kind, "rep": rep, "tok_s": round(v, 3),
                   "tokens_in_window": round(ntok, 1), "requests": nreq,
                   "tokens_total": nall, "cpu_s": round(cpu, 2),
                   "cpu_s_per_token": round(cpu / nall, 4) if nall else None,
                   "load_1m_before": round(l0, 2)}
            server_counters(srv, kind, row)
            print(json.dumps(row), flush=True)
            raw["runs"].append(row)
            by_rep[(kind, rep)] = v
            best[kind] = max(best.get(kind, 0), v)
    finally:
        args.reps = reps
        srvs.stop()
    ratios = {k: round(best[k] / best["none"], 3) for k in kinds if best.get("none")}
    res["aggregate_ratio_at_8"] = min(ratios.values()) if ratios else None
    res["aggregate_ratio_at_8_by_kind"] = ratios
    res["aggregate_tok_s_at_8"] = {k: round(v, 2) for k, v in best.items()}
    res["aggregate_ratio_at_8_by_rep"] = {
        k: [round(by_rep[(k, r)] / by_rep[("none", r)], 3) for r in range(args.agg_reps)
            if by_rep.get(("none", r))] for k in kinds}
    res["aggregate_method"] = (
        f"sustained: 8 clients (2 code edits, 3 agent turns, 3 prose), each sending its next "
        f"new request as its last finished, {args.agg_seconds:g} s, tokens counted after the "
        f"first {args.agg_warmup:g} s; {args.agg_tokens} tokens a request; best of "
        f"{args.agg_reps} interleaved repetitions over none's best; min over kinds "
        f"(aggregate_burst_*: the 8 requests once, tokens / time to the last)")


def save(args, res, raw):
    """Writes res (with raw) as args.section of args.out, keeping the other sections; called
    after every workload too, so that a run cut short by a time limit leaves what it did."""
    res["raw"] = raw
    data = {}
    if os.path.exists(args.out):
        data = json.load(open(args.out))
    data[args.section] = res
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
