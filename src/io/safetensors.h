/*
 * safetensors.h — what the safetensors reader (safetensors_read.c) and
 * writer (safetensors_write.c) share: the reserved key and the format's
 * dtype names (internal).
 */
#ifndef STSA_IO_SAFETENSORS_H
#define STSA_IO_SAFETENSORS_H

#include "stsa.h"

/* The header key of the string -> string metadata object. */
#define STSA_ST_META_KEY "__metadata__"

/* The format's name of a dtype: "F32", "F16", "BF16"; "unknown" for any
 * other value. Not stsa_dtype_name's: the file format spells them its way. */
static inline const char *stsa_st_dtype_name(stsa_dtype dtype) {
  static const char *const names[STSA_DTYPE_COUNT_] = {
      [STSA_F32] = "F32",
      [STSA_F16] = "F16",
      [STSA_BF16] = "BF16",
  };
  return (unsigned)dtype < STSA_DTYPE_COUNT_ ? names[dtype] : "unknown";
}

#endif /* STSA_IO_SAFETENSORS_H */
