import CKeyAuthProcess
import Testing

@testable import KeyAuthCLI

#if canImport(Glibc)
    import Glibc
#endif

/// What `keyauth agent` does first, before a PIN is read: its memory, which holds the unlocked
/// key for hours, stays its own.
@Suite("keyauth agent keeps its memory to itself")
struct AgentMemoryTests {
    @Test("the agent's process is not dumpable and writes no core, as ssh-agent's")
    func notDumpable() {
        #expect(ckeyauth_is_dumpable() == 1, "the test process started dumpable")
        AgentCommand.keepMemoryToItself()
        // Not dumpable: no other process of the user may ptrace it or read /proc/PID/mem.
        #expect(ckeyauth_is_dumpable() == 0)
        var core = rlimit()
        #expect(getrlimit(__rlimit_resource_t(RLIMIT_CORE.rawValue), &core) == 0)
        #expect(core.rlim_cur == 0 && core.rlim_max == 0)
        #expect(ckeyauth_allow_tracing() == 0)
    }
}
