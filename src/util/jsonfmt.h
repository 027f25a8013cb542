/* jsonfmt.h — JSON text with every real number written as the shortest decimal that reads
 * back as the same double (0.7, not jansson's %.17g 0.69999999999999996).
 *
 * json_dumps_short(j, flags): json_dumps(j, flags) with its reals shortened; malloc'd, free()
 * it; NULL when json_dumps fails. json_shorten_reals(s): rewrites, in place, each number
 * token of the JSON text s that has a '.' or an exponent (strings and integers untouched)
 * to the fewest significant digits (1..17) that strtod reads back as the same double, in
 * jansson's spelling (no '+' or leading zeros in the exponent; ".0" added when the form
 * would read as an integer). The text only shrinks. Returns s. Any thread.
 */
#ifndef CINFER_UTIL_JSONFMT_H
#define CINFER_UTIL_JSONFMT_H

#include <stddef.h>

#include <jansson.h>

char *json_shorten_reals(char *s);
char *json_dumps_short(const json_t *j, size_t flags);

#endif
