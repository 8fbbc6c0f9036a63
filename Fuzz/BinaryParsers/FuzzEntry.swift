// libFuzzer's entry point, compiled only when Fuzz/run-binary.sh builds the target with
// -DKEYAUTH_LIBFUZZER; an ordinary build compiles ReplayDriver.swift instead.
#if KEYAUTH_LIBFUZZER
    import Foundation
    import KeyAuthBinaryFuzzing

    @_cdecl("LLVMFuzzerTestOneInput")
    public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
        let input = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
        let outcome = BinaryParserHarness.check(input)
        if !outcome.violations.isEmpty {
            FileHandle.standardError.write(
                Data(("keyauth-fuzz-binary: " + outcome.violations.joined(separator: "\n") + "\n").utf8))
            abort()
        }
        return 0
    }

    /// libFuzzer's driver (`LLVMFuzzerRunDriver`, in the runtime `-sanitize=fuzzer` links),
    /// declared by symbol name: its arguments are C `int *`, `char ***` and a function pointer.
    @_silgen_name("LLVMFuzzerRunDriver")
    private func runFuzzerDriver(
        _ argc: UnsafeMutablePointer<Int32>,
        _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
        _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32
    ) -> Int32

    /// The program's entry: SwiftPM links an executable target's `main` to this name, so the
    /// target starts libFuzzer's driver itself instead of relying on libFuzzer's own `main`.
    @_cdecl("keyauth_fuzz_binary_main")
    public func fuzzBinaryMain(
        _ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?
    ) -> Int32 {
        var count = argc
        var arguments = argv
        return runFuzzerDriver(&count, &arguments) { data, size in fuzzOneInput(data, size) }
    }
#endif
