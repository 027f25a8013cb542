/* isolate.h — `cinfer serve --isolate`: a supervisor in front of engine child processes.
 *
 * The process the user starts owns the public listener (same routes, same limits, same
 * --api-key) and never loads weights. Each model's engine is a child: the same binary,
 * `serve MODEL --host unix:SOCK` with the engine flags the user gave, its socket in a private
 * 0700 directory. Every request the supervisor does not answer itself (/health, /engine, the
 * browser page) is relayed to the child over HTTP/1.1 on that socket, byte for byte, SSE
 * chunk by chunk (iso_proxy.c). When a child dies, its in-flight requests get a 502 in their
 * protocol's error shape (a stream: an error event, then the end), and the child is respawned:
 * at most 3 restarts in 60 s, then a back-off (5 s doubling to 60 s) during which /health is
 * degraded and /engine names the reason. A request whose connection the engine refused, and a
 * bodyless GET that got no answer, is retried once on the respawned engine. See
 * docs/isolation.md. Everything runs on the one HTTP loop thread; no call blocks it.
 */
#ifndef CINFER_SERVER_ISOLATE_H
#define CINFER_SERVER_ISOLATE_H

struct serve_opts;

/* Runs the supervisor until SIGINT/SIGTERM (which stop the children too). o comes from
 * cmd_serve's flag parser, with o->argrole saying which argv entries the engine child gets.
 * Returns the process exit status. */
int isolate_main(const struct serve_opts *o, int argc, char **argv);

#endif
