import KeyAuthCLI

#if canImport(Glibc)
    import Glibc
#endif

// Wiring only: pam_keyauth.so starts this process; the logic is KeyAuthCLI's PAMHelper.
exit(await PAMHelper().run())
