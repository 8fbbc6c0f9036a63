import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The permission bits of `path` (as `stat` sees it, following a final symlink), or nil when it
/// does not exist.
public func fileMode(_ path: String) -> mode_t? {
    var info = stat()
    guard stat(path, &info) == 0 else { return nil }
    return info.st_mode & 0o777
}
