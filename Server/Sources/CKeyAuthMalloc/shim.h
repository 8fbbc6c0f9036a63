#ifndef CKEYAUTH_MALLOC_SHIM_H
#define CKEYAUTH_MALLOC_SHIM_H

#if defined(__GLIBC__) || (defined(__linux__) && __has_include(<malloc.h>))
#include <malloc.h>
#endif

/// Returns the free pages of every glibc malloc arena to the kernel; 1 when some were returned.
/// Glibc's own header is not part of Swift's Glibc module, and other C libraries have no such
/// call (0: nothing to do).
static inline int ckeyauth_malloc_trim(void) {
#if defined(__GLIBC__)
    return malloc_trim(0);
#else
    return 0;
#endif
}

#endif
