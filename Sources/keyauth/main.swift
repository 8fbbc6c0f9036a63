import KeyAuthCLI

#if canImport(Glibc)
    import Glibc
#endif

// Wiring only: the command's logic lives in KeyAuthCLI, where tests run it with injected I/O.
let status = await KeyAuthCommand.runHandlingInterrupts(Array(CommandLine.arguments.dropFirst()), io: .standard())
exit(status)
