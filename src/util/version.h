/* version.h — the cinfer version string shown by --version, /v1 and the ready card. */
#ifndef CINFER_UTIL_VERSION_H
#define CINFER_UTIL_VERSION_H

#define CINFER_VERSION "0.1.0"

#endif
