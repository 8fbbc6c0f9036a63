/*
 * pam_keyauth: log a Linux user in with their keyauth device key (docs/HOST-LOGIN.md).
 *
 * Why C and a helper process: this object is loaded into sshd, sudo, login and gdm. Linking the
 * Swift runtime into them would start its threads in a process that forks, changes uids and
 * handles signals in ways it does not expect. So this module only talks PAM: it starts
 * keyauth-pam-helper with posix_spawn (a clean environment, only descriptors 0-2), sends it the
 * request over a socket pair, asks the PIN through the PAM conversation when the helper wants
 * one, and maps the helper's one-line answer to a PAM status. Every wait on the helper is
 * bounded with poll(); the helper is killed and reaped by its pid when the time is up. The
 * host's signal handlers are left alone (no SIGCHLD handler; MSG_NOSIGNAL instead of SIGPIPE).
 *
 * Module arguments (all optional but server=):
 *   server=URL     the keyauth server whose accounts may log in (set by root, never by the user)
 *   home=PATH      the user's keyauth home; "~/" is the user's home, %u the user name
 *                  (default ~/.local/share/keyauth, the keyauth command's default)
 *   users=PATH     the mapping of Linux users to keyauth users (default /etc/keyauth/pam-users)
 *   helper=PATH    the helper (default /usr/libexec/keyauth/keyauth-pam-helper)
 *   timeout=SECS   how long the helper may take for one answer (default 10, 1..120)
 *   tcti=TCTI      the TPM of TPM-held keys (default: the kernel's resource manager)
 *   mode=MODE      auto (default: the device key here, else push), local or push
 *   hostconf=PATH  the host's client credentials for push login (default /etc/keyauth/pam.conf)
 *   offline=no     never log in by offline grant when the server cannot be reached (default yes)
 *   insecure_http  accept a plain http:// server= on loopback (a test machine only: any local
 *                  user can answer on its port while the server is down)
 *
 * Built by scripts/build-pam-module.sh with the C compiler alone: SwiftPM would link libswiftCore
 * into a dynamic library product. libpam finds the three entry points by name; everything else
 * here is static. The contract with the helper is docs/PROTOCOL.md section 7.2.
 */
#define _GNU_SOURCE

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#define PAM_SM_AUTH
#define PAM_SM_ACCOUNT
#include <security/pam_ext.h>
#include <security/pam_modules.h>

#define KEYAUTH_DEFAULT_HELPER "/usr/libexec/keyauth/keyauth-pam-helper"
#define KEYAUTH_ANSWER_MAX 1024
#define KEYAUTH_REQUEST_MAX 8192

/* What the module arguments say; the strings point into argv, which libpam keeps. */
struct options {
    const char *helper;
    const char *server;
    const char *home;
    const char *users;
    const char *tcti;
    const char *mode;
    const char *hostconf;
    const char *offline;
    const char *insecure_http;
    int timeout_ms;
};

/* The helper while it runs: its pid and our end of the socket pair. */
struct helper {
    pid_t pid;
    int fd;
};

static int parse_options(pam_handle_t *pamh, int argc, const char **argv, struct options *options) {
    options->helper = KEYAUTH_DEFAULT_HELPER;
    options->server = NULL;
    options->home = NULL;
    options->users = NULL;
    options->tcti = NULL;
    options->mode = NULL;
    options->hostconf = NULL;
    options->offline = NULL;
    options->insecure_http = NULL;
    options->timeout_ms = 10000;
    for (int i = 0; i < argc; i++) {
        const char *argument = argv[i];
        if (strncmp(argument, "helper=", 7) == 0) {
            options->helper = argument + 7;
        } else if (strncmp(argument, "server=", 7) == 0) {
            options->server = argument + 7;
        } else if (strncmp(argument, "home=", 5) == 0) {
            options->home = argument + 5;
        } else if (strncmp(argument, "users=", 6) == 0) {
            options->users = argument + 6;
        } else if (strncmp(argument, "tcti=", 5) == 0) {
            options->tcti = argument + 5;
        } else if (strncmp(argument, "mode=", 5) == 0) {
            options->mode = argument + 5;
        } else if (strncmp(argument, "hostconf=", 9) == 0) {
            options->hostconf = argument + 9;
        } else if (strcmp(argument, "offline=yes") == 0 || strcmp(argument, "offline=no") == 0) {
            options->offline = argument + 8;
        } else if (strcmp(argument, "insecure_http") == 0) {
            options->insecure_http = "yes";
        } else if (strncmp(argument, "timeout=", 8) == 0) {
            char *end = NULL;
            long seconds = strtol(argument + 8, &end, 10);
            if (end == argument + 8 || *end != '\0' || seconds < 1 || seconds > 120) {
                pam_syslog(pamh, LOG_ERR, "invalid module argument %s (1 to 120 seconds)", argument);
                return -1;
            }
            options->timeout_ms = (int)seconds * 1000;
        } else {
            pam_syslog(pamh, LOG_ERR, "unknown module argument %s", argument);
            return -1;
        }
    }
    if (options->helper[0] != '/') {
        pam_syslog(pamh, LOG_ERR, "helper= must be an absolute path");
        return -1;
    }
    /* Relative, they would be found from the working directory of whoever runs sudo or su. */
    if ((options->users != NULL && options->users[0] != '/') ||
        (options->hostconf != NULL && options->hostconf[0] != '/')) {
        pam_syslog(pamh, LOG_ERR, "users= and hostconf= must be absolute paths");
        return -1;
    }
    if (options->home != NULL && options->home[0] != '/' && strcmp(options->home, "~") != 0 &&
        strncmp(options->home, "~/", 2) != 0) {
        pam_syslog(pamh, LOG_ERR, "home= must be an absolute path, ~ or start with ~/");
        return -1;
    }
    return 0;
}

/* A value that can travel on one request line: no control characters at all. */
static int is_line_safe(const char *value) {
    for (const unsigned char *p = (const unsigned char *)value; *p != '\0'; p++) {
        if (*p < 0x20 || *p == 0x7f) return 0;
    }
    return 1;
}

static long long now_ms(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

/* Starts the helper with only the socket as standard input and output, /dev/null as standard
 * error, and an environment of our own (the host's may hold anything). */
static int start_helper(pam_handle_t *pamh, const struct options *options, struct helper *helper) {
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
        pam_syslog(pamh, LOG_ERR, "socketpair: %s", strerror(errno));
        return -1;
    }
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attributes);
    /* dup2 clears close-on-exec on the copies; everything else above 2 is closed. */
    posix_spawn_file_actions_adddup2(&actions, pair[1], 0);
    posix_spawn_file_actions_adddup2(&actions, pair[1], 1);
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addclosefrom_np(&actions, 3);
    /* The host may block or ignore signals; the helper starts with the defaults. */
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attributes, &none);
    posix_spawnattr_setsigdefault(&attributes, &all);
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    char *const arguments[] = {(char *)options->helper, NULL};
    char *const environment[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", NULL};
    pid_t pid = 0;
    int status = posix_spawn(&pid, options->helper, &actions, &attributes, arguments, environment);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
    close(pair[1]);
    if (status != 0) {
        pam_syslog(pamh, LOG_ERR, "cannot start %s: %s", options->helper, strerror(status));
        close(pair[0]);
        return -1;
    }
    helper->pid = pid;
    helper->fd = pair[0];
    return 0;
}

/* Closes our end and reaps the helper: it has a moment to exit by itself, then it is killed.
 * Only this pid is waited for, so the host's other children are not touched. */
static void stop_helper(struct helper *helper) {
    if (helper->fd >= 0) {
        close(helper->fd);
        helper->fd = -1;
    }
    if (helper->pid <= 0) return;
    int status = 0;
    for (int i = 0; i < 100; i++) {
        pid_t done = waitpid(helper->pid, &status, WNOHANG);
        if (done == helper->pid || (done < 0 && errno != EINTR)) {
            helper->pid = -1;
            return;
        }
        struct timespec pause = {0, 10 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    kill(helper->pid, SIGKILL);
    while (waitpid(helper->pid, &status, 0) < 0 && errno == EINTR) {
    }
    helper->pid = -1;
}

/* Writes all of `length` bytes, never raising SIGPIPE in the host. */
static int send_all(int fd, const char *bytes, size_t length) {
    while (length > 0) {
        ssize_t sent = send(fd, bytes, length, MSG_NOSIGNAL);
        if (sent < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        bytes += sent;
        length -= (size_t)sent;
    }
    return 0;
}

/* Reads one answer line (without its newline) within the timeout. Returns 0, or -1 on timeout,
 * end of input, an overlong line or an error, with `why` saying which. */
static int read_answer(int fd, int timeout_ms, char *line, size_t size, const char **why) {
    size_t used = 0;
    long long deadline = now_ms() + timeout_ms;
    for (;;) {
        long long left = deadline - now_ms();
        if (left <= 0) {
            *why = "the helper did not answer in time";
            return -1;
        }
        struct pollfd entry = {.fd = fd, .events = POLLIN};
        int ready = poll(&entry, 1, (int)left);
        if (ready < 0) {
            if (errno == EINTR) continue;
            *why = "poll failed";
            return -1;
        }
        if (ready == 0) continue;
        char byte;
        ssize_t got = recv(fd, &byte, 1, 0);
        if (got < 0) {
            if (errno == EINTR) continue;
            *why = "reading the helper's answer failed";
            return -1;
        }
        if (got == 0) {
            *why = "the helper ended without an answer";
            return -1;
        }
        if (byte == '\n') {
            line[used] = '\0';
            return 0;
        }
        if (used + 1 >= size) {
            *why = "the helper's answer is too long";
            return -1;
        }
        line[used++] = byte;
    }
}

/* Control characters in an answer would forge lines in the journal: they become '?'. */
static void sanitize(char *text) {
    for (unsigned char *p = (unsigned char *)text; *p != '\0'; p++) {
        if (*p < 0x20 || *p == 0x7f) *p = '?';
    }
}

/* Appends "key value\n" to the request when the value is set. */
static int append_line(char *request, size_t size, size_t *used, const char *key, const char *value) {
    if (value == NULL) return 0;
    if (!is_line_safe(value)) return -1;
    int written = snprintf(request + *used, size - *used, "%s %s\n", key, value);
    if (written < 0 || (size_t)written >= size - *used) return -1;
    *used += (size_t)written;
    return 0;
}

/* Asks the PIN through the application's conversation (a terminal, ssh keyboard-interactive, a
 * display manager's dialog), sends it, and zeroes every copy.
 *
 * The helper asks for the PIN before it reaches the server, so that the person types while it
 * does. When it finds out meanwhile that the login cannot go on (the server refused, the key is
 * locked after wrong PINs), it answers and exits without reading the PIN, and sending it fails.
 * That is not the login's failure: the helper's answer, already in the socket, says what is, and
 * the caller reads it as it would have. */
static int send_pin(pam_handle_t *pamh, struct helper *helper, const char *prompt) {
    char *response = NULL;
    int status = pam_prompt(pamh, PAM_PROMPT_ECHO_OFF, &response, "%s", prompt);
    if (status != PAM_SUCCESS || response == NULL) {
        pam_syslog(pamh, LOG_NOTICE, "no PIN from the conversation: %s", pam_strerror(pamh, status));
        return status == PAM_SUCCESS ? PAM_CONV_ERR : status;
    }
    size_t length = strlen(response);
    int result = PAM_SUCCESS;
    if (memchr(response, '\n', length) != NULL || memchr(response, '\r', length) != NULL) {
        pam_syslog(pamh, LOG_NOTICE, "refused: the PIN has a line break");
        result = PAM_AUTH_ERR;
    } else if (send_all(helper->fd, response, length) != 0 || send_all(helper->fd, "\n", 1) != 0) {
        pam_syslog(pamh, LOG_INFO, "the helper did not take the PIN (%s); reading its answer", strerror(errno));
    }
    explicit_bzero(response, length);
    free(response);
    return result;
}

/* A push login's "wait SECONDS TEXT": shows TEXT (the host and the code to type on the device),
 * then asks for Enter, since sshd's keyboard-interactive passes messages to the client only with
 * a prompt. Sets how long the final answer may take: SECONDS (the request's life) plus timeout.
 * A cancelled prompt (Control-C, a closed connection) ends the login. */
static int show_wait(pam_handle_t *pamh, char *text, int *timeout_ms) {
    char *end = NULL;
    long seconds = strtol(text, &end, 10);
    if (end == text || *end != ' ' || seconds < 1 || seconds > 3600) {
        pam_syslog(pamh, LOG_ERR, "refused: malformed wait from the helper");
        return PAM_AUTH_ERR;
    }
    sanitize(end + 1);
    pam_info(pamh, "%s", end + 1);
    char *response = NULL;
    int status = pam_prompt(pamh, PAM_PROMPT_ECHO_ON, &response, "Press Enter once you have approved it: ");
    if (response != NULL) {
        explicit_bzero(response, strlen(response));
        free(response);
    }
    if (status != PAM_SUCCESS) {
        pam_syslog(pamh, LOG_NOTICE, "push login cancelled at the prompt: %s", pam_strerror(pamh, status));
        return status;
    }
    *timeout_ms += (int)seconds * 1000;
    return PAM_SUCCESS;
}

/* Maps the helper's final answer to a PAM status, with the reason in the journal. */
static int final_status(pam_handle_t *pamh, int flags, const char *user, char *answer) {
    sanitize(answer);
    if (strcmp(answer, "ok") == 0 || strncmp(answer, "ok ", 3) == 0) {
        pam_syslog(pamh, LOG_INFO, "user %s logged in with the keyauth device key%s", user, answer + 2);
        return PAM_SUCCESS;
    }
    const char *space = strchr(answer, ' ');
    const char *reason = space != NULL ? space + 1 : "no reason given";
    if (strncmp(answer, "unknown ", 8) == 0) {
        pam_syslog(pamh, LOG_NOTICE, "user %s: %s", user, reason);
        return PAM_USER_UNKNOWN;
    }
    int status;
    if (strncmp(answer, "refused ", 8) == 0) {
        status = PAM_AUTH_ERR;
    } else if (strncmp(answer, "unavailable ", 12) == 0) {
        status = PAM_AUTHINFO_UNAVAIL;
    } else {
        pam_syslog(pamh, LOG_ERR, "user %s refused: malformed answer from the helper", user);
        return PAM_AUTH_ERR;
    }
    pam_syslog(pamh, LOG_NOTICE, "user %s refused: %s", user, reason);
    if ((flags & PAM_SILENT) == 0) pam_error(pamh, "keyauth: %s", reason);
    return status;
}

static int authenticate(pam_handle_t *pamh, int flags, const struct options *options, const char *user) {
    const void *item = NULL;
    const char *service = "unknown";
    if (pam_get_item(pamh, PAM_SERVICE, &item) == PAM_SUCCESS && item != NULL) service = item;
    char request[KEYAUTH_REQUEST_MAX];
    size_t used = 0;
    if (append_line(request, sizeof request, &used, "keyauth-pam", "1") != 0 ||
        append_line(request, sizeof request, &used, "user", user) != 0 ||
        append_line(request, sizeof request, &used, "service", service) != 0 ||
        append_line(request, sizeof request, &used, "server", options->server) != 0 ||
        append_line(request, sizeof request, &used, "home", options->home) != 0 ||
        append_line(request, sizeof request, &used, "users", options->users) != 0 ||
        append_line(request, sizeof request, &used, "tcti", options->tcti) != 0 ||
        append_line(request, sizeof request, &used, "mode", options->mode) != 0 ||
        append_line(request, sizeof request, &used, "hostconf", options->hostconf) != 0 ||
        append_line(request, sizeof request, &used, "offline", options->offline) != 0 ||
        append_line(request, sizeof request, &used, "insecure-http", options->insecure_http) != 0 ||
        used + 1 >= sizeof request) {
        pam_syslog(pamh, LOG_ERR, "user %s refused: a module argument or the service name cannot be sent", user);
        return PAM_AUTH_ERR;
    }
    /* How long the final answer may take after the PIN, so that the helper fits its work in it. */
    char timeout[16];
    (void)snprintf(timeout, sizeof timeout, "%d", options->timeout_ms / 1000);
    if (append_line(request, sizeof request, &used, "timeout", timeout) != 0 || used + 1 >= sizeof request) {
        pam_syslog(pamh, LOG_ERR, "user %s refused: the request is too long", user);
        return PAM_AUTH_ERR;
    }
    request[used++] = '\n';

    struct helper helper = {.pid = -1, .fd = -1};
    if (start_helper(pamh, options, &helper) != 0) return PAM_AUTHINFO_UNAVAIL;
    int status;
    char answer[KEYAUTH_ANSWER_MAX];
    const char *why = NULL;
    /* A helper that answered without reading (and exited) makes the send fail; its answer is
     * still read below, and a helper that neither reads nor answers fails there. */
    (void)send_all(helper.fd, request, used);
    /* At most one pin and one wait come before the final answer. */
    int timeout_ms = options->timeout_ms;
    int asked_pin = 0, waited = 0;
    for (;;) {
        if (read_answer(helper.fd, timeout_ms, answer, sizeof answer, &why) != 0) {
            pam_syslog(pamh, LOG_ERR, "user %s refused: %s", user, why);
            status = PAM_AUTHINFO_UNAVAIL;
            break;
        }
        if (!asked_pin && strncmp(answer, "pin ", 4) == 0) {
            asked_pin = 1;
            sanitize(answer);
            status = send_pin(pamh, &helper, answer + 4);
        } else if (!waited && strncmp(answer, "wait ", 5) == 0) {
            waited = 1;
            status = show_wait(pamh, answer + 5, &timeout_ms);
        } else {
            status = final_status(pamh, flags, user, answer);
            break;
        }
        if (status != PAM_SUCCESS) break;
    }
    explicit_bzero(answer, sizeof answer);
    stop_helper(&helper);
    return status;
}

PAM_EXTERN int pam_sm_authenticate(pam_handle_t *pamh, int flags, int argc, const char **argv) {
    struct options options;
    if (parse_options(pamh, argc, argv, &options) != 0) return PAM_SERVICE_ERR;
    const char *user = NULL;
    int status = pam_get_user(pamh, &user, NULL);
    if (status != PAM_SUCCESS || user == NULL || user[0] == '\0') {
        pam_syslog(pamh, LOG_NOTICE, "no user name: %s", pam_strerror(pamh, status));
        return status == PAM_SUCCESS ? PAM_USER_UNKNOWN : status;
    }
    if (!is_line_safe(user) || strlen(user) > 256) {
        pam_syslog(pamh, LOG_NOTICE, "refused a user name with control characters or over 256 bytes");
        return PAM_USER_UNKNOWN;
    }
    if (options.server == NULL) {
        pam_syslog(pamh, LOG_ERR, "user %s refused: the module has no server= argument", user);
        return PAM_AUTHINFO_UNAVAIL;
    }
    return authenticate(pamh, flags, &options, user);
}

/* Credentials belong to other modules (pam_unix, pam_systemd); success keeps a stack that calls
 * every auth module's setcred from failing because of this one. */
PAM_EXTERN int pam_sm_setcred(pam_handle_t *pamh, int flags, int argc, const char **argv) {
    (void)pamh;
    (void)flags;
    (void)argc;
    (void)argv;
    return PAM_SUCCESS;
}

/* Account checks (expiry, access lists) stay with pam_unix and friends; the server's answer at
 * authentication already said whether the device is active for this user. */
PAM_EXTERN int pam_sm_acct_mgmt(pam_handle_t *pamh, int flags, int argc, const char **argv) {
    (void)pamh;
    (void)flags;
    (void)argc;
    (void)argv;
    return PAM_IGNORE;
}
