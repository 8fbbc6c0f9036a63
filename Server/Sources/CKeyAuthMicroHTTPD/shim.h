#ifndef CKEYAUTH_MICROHTTPD_SHIM_H
#define CKEYAUTH_MICROHTTPD_SHIM_H

#include <stdarg.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <microhttpd.h>

#endif
