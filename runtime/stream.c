/* stream.c: what libqfuse asks of a caller's CUDA stream (stream.h). */
#include "stream.h"

#include <cuda_runtime_api.h>

int qf_stream_capturing(void *stream) {
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing((cudaStream_t)stream, &cs) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    return cs != cudaStreamCaptureStatusNone;
}
