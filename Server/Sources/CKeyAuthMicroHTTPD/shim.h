#ifndef CKEYAUTH_MICROHTTPD_SHIM_H
#define CKEYAUTH_MICROHTTPD_SHIM_H

#include <stdarg.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <microhttpd.h>

/// MHD_start_daemon is variadic; Swift cannot call it. This is the one place the daemon's
/// options are listed, each with a typed parameter so that Swift passes the right C types
/// (the varargs list reads them by exact type; a wrong width would be read as garbage).
/// The port argument is 0 because MHD_OPTION_SOCK_ADDR carries the address and port.
/// A per-address limit of 0 means none (libmicrohttpd's default). The accept policy decides,
/// for each connection accepted, whether it is served or closed at once. `raw_target` sees each
/// request's target before libmicrohttpd decodes it, and must return NULL (its result would
/// become the request's context).
static inline struct MHD_Daemon *ckeyauth_mhd_start_daemon(
    unsigned int flags,
    const struct sockaddr *address,
    MHD_AcceptPolicyCallback accept_policy,
    void *accept_policy_context,
    unsigned int thread_pool_size,
    unsigned int connection_limit,
    unsigned int per_address_connection_limit,
    unsigned int connection_timeout_seconds,
    size_t connection_memory_limit,
    MHD_AccessHandlerCallback handler,
    void *handler_context,
    MHD_RequestCompletedCallback completed,
    void *completed_context,
    MHD_NotifyConnectionCallback connection_notice,
    void *connection_notice_context,
    void *(*raw_target)(void *context, const char *uri, struct MHD_Connection *connection),
    void *raw_target_context)
{
    return MHD_start_daemon(
        flags, 0, accept_policy, accept_policy_context, handler, handler_context,
        MHD_OPTION_SOCK_ADDR, address,
        MHD_OPTION_THREAD_POOL_SIZE, thread_pool_size,
        MHD_OPTION_CONNECTION_LIMIT, connection_limit,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_address_connection_limit,
        MHD_OPTION_CONNECTION_TIMEOUT, connection_timeout_seconds,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, connection_memory_limit,
        MHD_OPTION_NOTIFY_COMPLETED, completed, completed_context,
        MHD_OPTION_NOTIFY_CONNECTION, connection_notice, connection_notice_context,
        MHD_OPTION_URI_LOG_CALLBACK, raw_target, raw_target_context,
        MHD_OPTION_END);
}

/// MHD_get_daemon_info is variadic; Swift cannot call it. Returns the port the daemon bound,
/// which tests need after asking for port 0; 0 when the daemon cannot tell.
static inline uint16_t ckeyauth_mhd_bound_port(struct MHD_Daemon *daemon)
{
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info == NULL ? 0 : info->port;
}

/// MHD_get_connection_info is variadic; Swift cannot call it. Returns the peer's address
/// (owned by libmicrohttpd, valid while the connection lives), or NULL.
static inline const struct sockaddr *ckeyauth_mhd_client_address(struct MHD_Connection *connection)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    return info == NULL ? NULL : info->client_addr;
}

/// MHD_get_connection_info is variadic; Swift cannot call it. Returns the connection's socket,
/// which the request deadline shuts down (libmicrohttpd then closes the connection itself),
/// or -1.
static inline int ckeyauth_mhd_connection_socket(struct MHD_Connection *connection)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info == NULL ? -1 : info->connect_fd;
}

/// MHD_get_connection_info is variadic; Swift cannot call it. Returns the per-socket pointer
/// the connection notice stored when the connection started, or NULL.
static inline void *ckeyauth_mhd_socket_context(struct MHD_Connection *connection)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info == NULL ? NULL : info->socket_context;
}

#endif
