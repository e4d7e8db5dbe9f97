/*
 * exp2_poly.h — the exp2 approximation shared by every backend, so that all
 * of them agree on its accuracy: range reduction x = n + f, f in [-0.5, 0.5],
 * 2^f by a degree-6 Taylor polynomial (max relative error ~1.2e-7), 2^n by
 * building the exponent bits. Inputs below -126 give exactly 0.
 */
#ifndef STSA_KERNEL_EXP2_POLY_H
#define STSA_KERNEL_EXP2_POLY_H

#define STSA_EXP2_C1 0.6931471805599453f
#define STSA_EXP2_C2 0.2402265069591007f
#define STSA_EXP2_C3 0.0555041086648216f
#define STSA_EXP2_C4 0.0096181291076285f
#define STSA_EXP2_C5 0.0013333558146428f
#define STSA_EXP2_C6 0.0001540353039338f
#define STSA_EXP2_MIN (-126.0f)

#endif
