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

/* The AVX-512 kernels reduce with floor instead, x = n + f with f in
 * [0, 1): vreduceps gives f in one instruction and vscalefps takes
 * floor(x) from x itself, which saves the rounding and the subtraction.
 * These coefficients minimise the largest relative error of 2^f on [0, 1]
 * in the same way (6.4e-8 in exact arithmetic, constant term 1: 2^0 = 1
 * exactly). In f32 with FMAs the error is 1.9e-7 at most (4 million points
 * on [-30, 20] against exp2 in double). */
#define STSA_EXP2_FLOOR_C1 0.6931505628048813f
#define STSA_EXP2_FLOOR_C2 0.24017270655495912f
#define STSA_EXP2_FLOOR_C3 0.05577343129623807f
#define STSA_EXP2_FLOOR_C4 0.009048875325900107f
#define STSA_EXP2_FLOOR_C5 0.0018542968413513207f

#endif
