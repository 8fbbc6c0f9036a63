import Foundation

/// A shared library of a test's own, compiled from C source with the system's `cc`, for
/// `LD_PRELOAD` into a process of the built binaries: it plays a fault that cannot be arranged
/// from outside the process, such as a slow system call or a descriptor closed under its owner.
public enum PreloadLibrary {
    /// Compiles `source` into `directory` as `name.so` and returns the library's path.
    ///
    /// - Throws: ``TestFailure`` with the compiler's messages when it fails.
    public static func compile(_ source: String, named name: String, in directory: String) throws -> String {
        let sourcePath = directory + "/" + name + ".c"
        let library = directory + "/" + name + ".so"
        try Data(source.utf8).write(to: URL(fileURLWithPath: sourcePath))
        let compiled = try ExternalCommand.run(["cc", "-shared", "-fPIC", "-O2", "-o", library, sourcePath, "-ldl"])
        guard compiled.status == 0 else { throw TestFailure("cc \(sourcePath): \(compiled.errorOutput)") }
        return library
    }
}
