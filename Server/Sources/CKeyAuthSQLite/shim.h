#ifndef CKEYAUTH_SQLITE_SHIM_H
#define CKEYAUTH_SQLITE_SHIM_H

#include <sqlite3.h>
#include <stdint.h>

/// SQLITE_TRANSIENT is a macro casting -1 to a function pointer; Swift cannot import it.
static inline sqlite3_destructor_type ckeyauth_sqlite_transient(void) {
    return SQLITE_TRANSIENT;
}

/// sqlite3_config is variadic; Swift cannot call it. Used to make the library serialized.
static inline int ckeyauth_sqlite_config_multithread(void) {
    return sqlite3_config(SQLITE_CONFIG_MULTITHREAD);
}

/// Adds one to a counter that other processes share through a mapping of the same file.
/// Swift's `Atomic` cannot be placed on memory it did not allocate; these builtins can.
static inline void ckeyauth_shared_counter_increment(uint64_t *counter) {
    __atomic_fetch_add(counter, 1, __ATOMIC_SEQ_CST);
}

/// Reads a shared counter (see ckeyauth_shared_counter_increment).
static inline uint64_t ckeyauth_shared_counter_load(const uint64_t *counter) {
    return __atomic_load_n(counter, __ATOMIC_SEQ_CST);
}

/// Sets a shared counter; only while no other process has the file (see SQLiteDeviceChanges).
static inline void ckeyauth_shared_counter_store(uint64_t *counter, uint64_t value) {
    __atomic_store_n(counter, value, __ATOMIC_SEQ_CST);
}

#endif
