/* testhook.h — test-only fault injection inside the engine (never set in production).
 *
 * CINFER_TEST_ABORT_AT_STEP=N      abort() when the engine finishes its N-th forward step
 *                                  (N >= 1), in every process that reads it (a crashing
 *                                  engine: the --isolate supervisor's crash-loop test).
 * CINFER_TEST_ABORT_AT_STEP=N:PATH the same, once: only while PATH does not exist; the file
 *                                  is created just before the abort, so a respawned engine
 *                                  runs normally (the injected-crash test).
 * CINFER_TEST_STEP_DELAY_MS=N       sleep N ms (1..10000) after every step: a slow engine, so
 *                                  that a test's streams are surely in flight when it acts
 *                                  (the embedding worker calls the hook after each forward
 *                                  too, with its own count).
 * Unset, empty or malformed: no effect. Read once per process. See docs/isolation.md.
 */
#ifndef CINFER_ENGINE_TESTHOOK_H
#define CINFER_ENGINE_TESTHOOK_H

/* Called by the engine thread after each forward step with the step count so far. */
void eng_test_step_hook(long steps);

#endif
