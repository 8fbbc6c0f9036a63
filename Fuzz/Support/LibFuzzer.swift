// libFuzzer's entry points, shared by the fuzz targets and compiled only when a run script builds
// them with -DKEYAUTH_LIBFUZZER (-sanitize=fuzzer then links libFuzzer's runtime, which defines
// LLVMFuzzerRunDriver and needs LLVMFuzzerTestOneInput).
#if KEYAUTH_LIBFUZZER
    import Foundation

    /// The target's name for messages, and how it makes its check (once, on the first input:
    /// libFuzzer calls from one thread).
    nonisolated(unsafe) private var targetName = "keyauth-fuzz"
    nonisolated(unsafe) private var makeCheck: (() throws -> ([UInt8]) -> [String])?
    nonisolated(unsafe) private var check: (([UInt8]) -> [String])?

    @_cdecl("LLVMFuzzerTestOneInput")
    public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
        if check == nil {
            do {
                check = try makeCheck?()
            } catch {
                FileHandle.standardError.write(Data("\(targetName): setup failed: \(error)\n".utf8))
                abort()
            }
        }
        let input = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
        let violations = check?(input) ?? []
        if !violations.isEmpty {
            FileHandle.standardError.write(Data(("\(targetName): " + violations.joined(separator: "\n") + "\n").utf8))
            abort()
        }
        return 0
    }

    /// libFuzzer's driver, declared by symbol name: its arguments are C `int *`, `char ***` and a
    /// C function pointer.
    @_silgen_name("LLVMFuzzerRunDriver")
    private func runFuzzerDriver(
        _ argc: UnsafeMutablePointer<Int32>,
        _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
        _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32
    ) -> Int32

    /// How a fuzz target's executable starts libFuzzer's driver itself (SwiftPM links an
    /// executable target's `main` to `MODULE_main`, which the target defines with `@_cdecl`).
    public enum LibFuzzer {
        /// Runs libFuzzer with the program's arguments; each input goes to the check `harness`
        /// makes, and an input it finds violations in aborts the run (libFuzzer saves it).
        public static func run(
            _ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?, name: String,
            harness: @escaping () throws -> ([UInt8]) -> [String]
        ) -> Int32 {
            targetName = name
            makeCheck = harness
            var count = argc
            var arguments = argv
            return runFuzzerDriver(&count, &arguments) { data, size in fuzzOneInput(data, size) }
        }
    }
#endif
