/* The C kernels of cera-audio-kws (cffi cdef and C header in one: plain declarations only).
   Every function computes exactly what the numpy code beside it computes (frontend.py,
   fixed_fft.py, network.py); tests/audio_kws compare the two. */

/* TFLite Micro's front end on n frames: frames[f * frame_stride + i], i < window. The noise
   estimate (channels values) is read and updated; out receives n * channels features.
   The filterbank is sparse: bin b adds wval[2b + j] * energy to channel wchan[2b + j] (j < 2; -1: none). */
void kws_frontend(const int16_t *frames, int n, int frame_stride, int window, const int32_t *coef,
                  int fft_size, int n_factors, const int32_t *factors, const int32_t *tw, const int32_t *stw,
                  int start_bin, int end_bin, const int32_t *wchan, const uint32_t *wval, int channels,
                  int smoothing_bits, const uint64_t *smoothing, const uint64_t *one_minus,
                  uint64_t min_signal_remaining, uint64_t *estimate,
                  int pcan, const int64_t *pcan_lut, int snr_shift,
                  int log, int correction_bits, int log_scale_shift, const int64_t *log_lut,
                  int16_t *scratch, uint16_t *out);

/* A quantized convolution or dense layer over gathered inputs:
   acc[p][c] = bias[c] + sum_k x[idx[p*K + k]] * w[k*C + c], requantized per channel
   (TFLite's MultiplyByQuantizedMultiplier), + zp, clamped to [lo, hi]: out[p*C + c]. */
void kws_dense(const int8_t *x, const int32_t *idx, int P, int K, const int8_t *w, int C,
               const int32_t *bias, const int32_t *mult, const int32_t *shift, int zp, int lo, int hi, int8_t *out);

/* The same for a depthwise convolution: acc[p][c] = bias[c] + sum_k x[idx[(p*K + k)*C + c]] * w[k*C + c]. */
void kws_depthwise(const int8_t *x, const int32_t *idx, int P, int K, const int8_t *w, int C,
                   const int32_t *bias, const int32_t *mult, const int32_t *shift, int zp, int lo, int hi, int8_t *out);

/* A whole network step as one call: n records of KWS_RECORD int64 values each,
   [op, args...] with op 1 = copy (dst, src, rows, row_bytes, dst_stride, src_stride),
   2 = table (dst, src, n, table: dst[j] = table[(uint8) src[j]]),
   3 = kws_dense and 4 = kws_depthwise (their 13 arguments, pointers as addresses). */
void kws_run(const int64_t *program, int n);
