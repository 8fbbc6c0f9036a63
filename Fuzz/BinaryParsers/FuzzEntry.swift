// libFuzzer's entry, compiled only when Fuzz/run-binary.sh builds the target with
// -DKEYAUTH_LIBFUZZER; an ordinary build compiles ReplayDriver.swift instead.
#if KEYAUTH_LIBFUZZER
    import KeyAuthBinaryFuzzing
    import KeyAuthFuzzSupport

    /// The program's entry (SwiftPM's name for this target's `main`): libFuzzer over the harness.
    @_cdecl("keyauth_fuzz_binary_main")
    public func fuzzBinaryMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
        LibFuzzer.run(argc, argv, name: "keyauth-fuzz-binary") { { BinaryParserHarness.check($0).violations } }
    }
#endif
