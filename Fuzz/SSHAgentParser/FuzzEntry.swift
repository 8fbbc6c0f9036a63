// libFuzzer's entry, compiled only when Fuzz/run-ssh-agent.sh builds the target with
// -DKEYAUTH_LIBFUZZER; an ordinary build compiles ReplayDriver.swift instead.
#if KEYAUTH_LIBFUZZER
    import KeyAuthFuzzSupport
    import KeyAuthSSHAgentFuzzing

    /// The program's entry (SwiftPM's name for this target's `main`): libFuzzer over the harness.
    @_cdecl("keyauth_fuzz_ssh_agent_main")
    public func fuzzSSHAgentMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
        LibFuzzer.run(argc, argv, name: "keyauth-fuzz-ssh-agent") { try SSHAgentFuzzHarness().run }
    }
#endif
