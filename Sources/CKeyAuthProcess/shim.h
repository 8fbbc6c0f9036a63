#ifndef CKEYAUTH_PROCESS_SHIM_H
#define CKEYAUTH_PROCESS_SHIM_H

#if defined(__linux__)
#include <sys/prctl.h>
#endif

/// Makes this process not dumpable: no core file, and no other process of the same user may
/// attach to it with ptrace or read its memory through /proc/PID/mem (what ssh-agent does).
/// prctl is variadic, which Swift cannot call. Returns 0 on success, -1 with errno otherwise.
static inline int ckeyauth_forbid_tracing(void) {
#if defined(__linux__)
    return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
#else
    return 0;
#endif
}

/// Makes this process dumpable again (tests that checked ckeyauth_forbid_tracing in-process).
static inline int ckeyauth_allow_tracing(void) {
#if defined(__linux__)
    return prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
#else
    return 0;
#endif
}

/// 1 when this process is dumpable, 0 when not, -1 with errno on failure.
static inline int ckeyauth_is_dumpable(void) {
#if defined(__linux__)
    return prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
#else
    return 1;
#endif
}

#endif
