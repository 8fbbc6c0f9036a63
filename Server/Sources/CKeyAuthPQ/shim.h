#ifndef CKEYAUTH_PQ_SHIM_H
#define CKEYAUTH_PQ_SHIM_H

#include <libpq-fe.h>

#endif
