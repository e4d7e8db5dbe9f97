/* wait_policy.h — see wait_policy.c. */
#ifndef STSA_TOOLS_WAIT_POLICY_H
#define STSA_TOOLS_WAIT_POLICY_H

/* Starts the tool again with OMP_WAIT_POLICY=passive unless the user set
 * OMP_WAIT_POLICY or GOMP_SPINCOUNT; returns only when it did not (then
 * nothing has changed). argv: main's, NULL-terminated. */
void cli_wait_passive(char **argv);

/* The OpenMP wait policy this process runs: OMP_WAIT_POLICY's value, or
 * "default" (libgomp's own, which spins a while) when it is not set. */
const char *cli_wait_policy(void);

#endif
