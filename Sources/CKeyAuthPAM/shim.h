#ifndef CKEYAUTH_PAM_SHIM_H
#define CKEYAUTH_PAM_SHIM_H

#include <security/pam_appl.h>

#endif
