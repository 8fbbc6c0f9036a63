#ifndef CKEYAUTH_SQLITE_SHIM_H
#define CKEYAUTH_SQLITE_SHIM_H

#include <sqlite3.h>

/// SQLITE_TRANSIENT is a macro casting -1 to a function pointer; Swift cannot import it.
static inline sqlite3_destructor_type ckeyauth_sqlite_transient(void) {
    return SQLITE_TRANSIENT;
}

/// sqlite3_config is variadic; Swift cannot call it. Used to make the library serialized.
static inline int ckeyauth_sqlite_config_multithread(void) {
    return sqlite3_config(SQLITE_CONFIG_MULTITHREAD);
}

#endif
