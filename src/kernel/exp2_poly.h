/*
 * exp2_poly.h — the exp2 approximation shared by every backend, so that all
 * of them agree on its accuracy: range reduction x = n + f, f in [-0.5, 0.5],
 * 2^f by a degree-5 polynomial, 2^n by building the exponent bits. Inputs
 * below -126 give exactly 0.
 *
 * The coefficients minimise the largest relative error on [-0.5, 0.5] (a
 * linear program on 4001 points; 6.8e-8 in exact arithmetic), with the
 * constant term 1 so that 2^0 = 1 exactly (a row's largest score gets
 * p = 1). Evaluated by Horner's rule in f32 with FMAs, the error is 2.2e-7
 * at most, as the degree-6 Taylor polynomial used before gave with one FMA
 * more per exp2 (measured on 2 million points against exp2 in double).
 */
#ifndef STSA_KERNEL_EXP2_POLY_H
#define STSA_KERNEL_EXP2_POLY_H

#define STSA_EXP2_C1 0.69314659591524286f
#define STSA_EXP2_C2 0.2402216600835185f
#define STSA_EXP2_C3 0.055510473825077962f
#define STSA_EXP2_C4 0.009674951930204425f
#define STSA_EXP2_C5 0.0013202982319889182f
#define STSA_EXP2_MIN (-126.0f)

#endif
