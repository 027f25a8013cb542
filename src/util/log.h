/* log.h — the one place library code writes diagnostics (to stderr).
 *
 * Library code never printf()s; it logs. Level is process-wide, set once at start-up
 * (CINFER_LOG=debug|info|warn|error or the CLI). Thread-safe: one fprintf per line.
 */
#ifndef CINFER_UTIL_LOG_H
#define CINFER_UTIL_LOG_H

enum log_level { LOG_DEBUG = 0, LOG_INFO = 1, LOG_WARN = 2, LOG_ERROR = 3, LOG_OFF = 4 };

void log_set_level(enum log_level lvl);
enum log_level log_get_level(void);
/* Reads CINFER_LOG from the environment, if set. */
void log_init_from_env(void);
void log_msg(enum log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

#endif
