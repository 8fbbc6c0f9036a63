#if canImport(Glibc)
    import Glibc
#endif

/// Names the calling thread as `ps -L`, `top -H`, gdb and `/proc/PID/task/*/comm` show it, so
/// that a stuck process says which of its threads is which.
///
/// Foundation's `Thread.name` does not do it on Linux: set before `start()` it never reaches the
/// thread, which keeps the name of the thread that started it; set after, it may name a thread
/// that has already ended. The kernel's file for the calling thread has neither problem.
package enum ThreadName {
    /// The kernel keeps 15 bytes of a thread's name.
    package static let maximumBytes = 15

    /// Names the calling thread `name`, cut to ``maximumBytes``; does nothing when `/proc` is not
    /// mounted, since a name only helps diagnosis.
    package static func setCurrent(_ name: String) {
        let descriptor = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return }
        defer { close(descriptor) }
        DescriptorIO.writeAll(descriptor, bytes: Array(name.utf8.prefix(maximumBytes)))
    }
}
