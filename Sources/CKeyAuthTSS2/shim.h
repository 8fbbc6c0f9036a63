#ifndef CKEYAUTH_TSS2_SHIM_H
#define CKEYAUTH_TSS2_SHIM_H

// The TPM Software Stack (tpm2-tss), used where OpenSSL's tpm2 provider cannot answer: the TPM's
// properties (manufacturer, dictionary-attack lockout state), which key sizes it supports, the
// public part of a TSS2 key blob, and the commands the provider does not offer (certifying a key,
// changing its authorization value). Signing and key creation go through OpenSSL, not here.
#include <tss2/tss2_esys.h>
#include <tss2/tss2_mu.h>
#include <tss2/tss2_rc.h>
#include <tss2/tss2_tctildr.h>

#endif
