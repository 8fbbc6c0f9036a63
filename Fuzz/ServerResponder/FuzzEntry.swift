// libFuzzer's entry, compiled only when Fuzz/run-server.sh builds the target with
// -DKEYAUTH_LIBFUZZER; an ordinary build compiles ReplayDriver.swift instead.
#if KEYAUTH_LIBFUZZER
    import KeyAuthFuzzSupport
    import KeyAuthServerFuzzing

    /// The program's entry (SwiftPM's name for this target's `main`): libFuzzer over the harness.
    @_cdecl("keyauth_fuzz_server_main")
    public func fuzzServerMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
        LibFuzzer.run(argc, argv, name: "keyauth-fuzz-server") { try ServerFuzzHarness().run }
    }
#endif
