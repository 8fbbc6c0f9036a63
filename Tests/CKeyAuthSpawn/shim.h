#ifndef CKEYAUTH_SPAWN_SHIM_H
#define CKEYAUTH_SPAWN_SHIM_H

// The tests' child processes (Tests/KeyAuthTestSupport/ChildProcess.swift) need three GNU
// extensions of glibc's posix_spawn that <spawn.h> declares only under _GNU_SOURCE, which the
// toolchain's Glibc module is not built with (defining it here would not reach that module).
// They are declared again below exactly as glibc 2.36 declares them; glibc has had them since
// 2.34 (closefrom), 2.29 (chdir) and 2.26 (setsid), and Debian 12 ships 2.36.

#include <spawn.h>

// Closes every descriptor from `from` up in the child, after the earlier file actions: the
// child then inherits only the standard streams it was given. Without it, a child spawned at the
// same moment as another can hold descriptors the test process meant for that other child (a
// pipe's write end, Foundation's exit-notification socket) and keep them open for its life.
extern int posix_spawn_file_actions_addclosefrom_np(posix_spawn_file_actions_t *actions, int from);

// Changes the child's working directory: chdir in the parent would move every thread of the
// test process.
extern int posix_spawn_file_actions_addchdir_np(posix_spawn_file_actions_t *restrict actions,
                                                const char *restrict path);

// setsid() in the child, for a process that must be a session leader with a controlling
// terminal of its own (the prompts typed into a pseudo-terminal).
#ifndef POSIX_SPAWN_SETSID
#define POSIX_SPAWN_SETSID 0x80
#endif

// A descriptor for one child process, and signals sent through it (Linux 5.3). A child's id can
// come to name another process once something else in the test process has reaped it; a pidfd
// cannot. syscall(2) is variadic, which Swift does not call, hence these wrappers.
#include <sys/syscall.h>
#include <unistd.h>

static inline int keyauth_pidfd_open(pid_t pid) {
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

static inline int keyauth_pidfd_send_signal(int pidfd, int sig) {
    return (int)syscall(SYS_pidfd_send_signal, pidfd, sig, (void *)0, 0);
}

#endif
