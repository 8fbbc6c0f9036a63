import Glibc
import KeyAuthServer

// Wiring only: the command's logic, and libmicrohttpd's callbacks, live in KeyAuthServer.
exit(
    ServerCommand.main(
        arguments: Array(CommandLine.arguments.dropFirst()), environment: ServerCommand.processEnvironment()))
