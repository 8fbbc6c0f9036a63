import KeyAuthCLI

#if canImport(Glibc)
    import Glibc
#endif

// Wiring only: the command's logic lives in KeyAuthCLI, where tests run it with injected I/O.
// Started under the name keyauth-pam-helper (a link to this binary, which pam_keyauth.so starts),
// it is the PAM module's helper: one binary, not a second copy of the statically linked runtime.
if PAMHelper.isProgramName(CommandLine.arguments.first) {
    exit(await PAMHelper().run())
}
let status = await KeyAuthCommand.runHandlingInterrupts(Array(CommandLine.arguments.dropFirst()), io: .standard())
exit(status)
