/* stream.h: what libqfuse asks of a caller's CUDA stream. */
#ifndef QF_STREAM_H
#define QF_STREAM_H

#include "status.h"

/* 1 when stream is being captured into a CUDA graph, 0 when not, -1 when the runtime cannot say
 * (the error is cleared). */
QF_INTERNAL int qf_stream_capturing(void *stream);

#endif /* QF_STREAM_H */
