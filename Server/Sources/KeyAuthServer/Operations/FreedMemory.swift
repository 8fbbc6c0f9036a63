internal import CKeyAuthMalloc

/// The memory the allocator keeps after the server freed it, handed back once a cleanup pass.
///
/// glibc's malloc gives each thread that allocates at once its own arena and keeps freed memory
/// there for reuse rather than returning it. Under login load (a dozen threads: the HTTP
/// workers, the commit thread, the dispatch pool) that memory is spread over many arenas, and
/// what one arena freed is not reused by another thread: the server's resident memory rose by
/// about 16 MiB in a 10-minute soak while heaptrack found nothing held beyond the replay set
/// and the bounded caches, and the soak's check that memory stays flat failed once in two runs.
/// `malloc_trim` returns the whole free pages of every arena; it holds each arena's lock while
/// it walks it (0.4 to 1 ms in that soak), which is why it runs on the cleanup timer and never
/// on a request's path.
enum FreedMemory {
    /// Returns free heap pages to the kernel; a no-op where the C library has no such call.
    static func returnToSystem() {
        _ = ckeyauth_malloc_trim()
    }
}
