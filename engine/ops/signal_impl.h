/* signal_impl.h -- what the signal op definitions (engine/ops/signal.c) and
 * their kernels (engine/cpu/signal_kernels.c, engine/cuda/signal.cu) share:
 * each op's parameters (the *_params functions, which infer and both
 * kernels call) and the value of one output element as an inline
 * ENG_OPS_HD function, so the CPU and the GPU evaluate the same
 * expression element by element, in double.
 *
 * DFT and STFT are direct sums (O(n) per output element, no FFT): each
 * term's angle is 2 pi ((k t) mod n) / n, exact in its integer part, so
 * long transforms keep their accuracy. DFT follows ONNX 1.23 for both
 * versions: onesided with inverse is the inverse of the one-sided
 * spectrum (numpy's irfft: the first n/2 + 1 bins extended by conjugate
 * symmetry, the imaginary parts of bin 0 and of bin n/2 ignored), a real
 * output of n = dft_length (default 2 * (bins - 1)) values.
 *
 * Threading: pure functions. */
#ifndef FS_ENGINE_OPS_SIGNAL_IMPL_H
#define FS_ENGINE_OPS_SIGNAL_IMPL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/op.h"
#include "engine/ops/ops_hd.h"
#include "engine/ops/value_hd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The longest transform: the angles' k * t stays inside int64. */
#define ENG_DFT_MAX_LENGTH ((int64_t)1 << 31)

/* cos and sin of 2 pi m / n, for 0 <= m < n. Cannot fail. */
ENG_OPS_HD static inline void eng_dft_twiddle(int64_t m, int64_t n, double *c, double *s)
{
    double a = 6.283185307179586476925 * (double)m / (double)n;
    *c = cos(a);
    *s = sin(a);
}

/* ---- DFT ----------------------------------------------------------------- */

typedef struct eng_dft {
    bool inverse, irfft;        /* irfft: inverse and onesided */
    int comp_in, comp_out;      /* last dims: 1 (real) or 2 (complex) */
    int64_t inner;              /* elements between the axis and the last dim */
    int64_t len_in;             /* the input's axis dim */
    int64_t n;                  /* dft_length */
    int64_t n_out;              /* the output's axis dim */
    eng_dtype_t dt;
    eng_shape_t y;
} eng_dft_t;

/* DFT's parameters (axis from the attribute before opset 20, from the
 * input from 20; dft_length and axis must be known). 0, FS_EINVAL,
 * FS_ENOTSUP (dtype, length) or FS_EDYNAMIC. */
int eng_dft_params(const eng_op_ctx_t *c, eng_dft_t *p);

/* Output element i of DFT. Cannot fail. */
ENG_OPS_HD static inline double eng_dft_at(const eng_dft_t *p, const void *x, int64_t i)
{
    int64_t comp = i % p->comp_out, r = i / p->comp_out;
    int64_t in = r % p->inner, k = r / p->inner % p->n_out, o = r / p->inner / p->n_out;
    int64_t n = p->n, at0 = o * p->len_in * p->inner + in;
    double cs, sn;
    if (p->irfft) {
        int64_t bins = n / 2 + 1, t_end = bins < p->len_in ? bins : p->len_in;
        double sum = 0;
        for (int64_t j = 0; j < t_end; j++) {
            const int64_t e = (at0 + j * p->inner) * p->comp_in;
            double xr = eng_hd_load(x, p->dt, e);
            double xi = p->comp_in == 2 ? eng_hd_load(x, p->dt, e + 1) : 0.0;
            eng_dft_twiddle(j * k % n, n, &cs, &sn);
            if (j == 0)
                sum += xr;
            else if (2 * j == n)
                sum += xr * cs;
            else
                sum += 2 * (xr * cs - xi * sn);
        }
        return sum / (double)n;
    }
    int64_t t_end = n < p->len_in ? n : p->len_in;
    double re = 0, im = 0;
    for (int64_t t = 0; t < t_end; t++) {
        const int64_t e = (at0 + t * p->inner) * p->comp_in;
        double xr = eng_hd_load(x, p->dt, e);
        double xi = p->comp_in == 2 ? eng_hd_load(x, p->dt, e + 1) : 0.0;
        eng_dft_twiddle(k * t % n, n, &cs, &sn);
        if (p->inverse) {
            re += xr * cs - xi * sn;
            im += xi * cs + xr * sn;
        } else {
            re += xr * cs + xi * sn;
            im += xi * cs - xr * sn;
        }
    }
    double v = comp == 0 ? re : im;
    return p->inverse ? v / (double)n : v;
}

/* ---- STFT ---------------------------------------------------------------- */

typedef struct eng_stft {
    bool has_window;
    int comp_in;                /* the signal's last dim */
    int64_t sig_len, step;      /* signal length, frame_step */
    int64_t n;                  /* frame_length: the DFT's length */
    int64_t frames, bins;
    eng_dtype_t dt, win_dt;
    eng_shape_t y;              /* [batch, frames, bins, 2] */
} eng_stft_t;

/* STFT's parameters (frame_step and frame_length must be known). 0,
 * FS_EINVAL, FS_ENOTSUP or FS_EDYNAMIC. */
int eng_stft_params(const eng_op_ctx_t *c, eng_stft_t *p);

/* Output element i of STFT; window is NULL when absent. Cannot fail. */
ENG_OPS_HD static inline double eng_stft_at(const eng_stft_t *p, const void *x, const void *window,
                                            int64_t i)
{
    int64_t comp = i % 2, k = i / 2 % p->bins, f = i / 2 / p->bins % p->frames;
    int64_t b = i / 2 / p->bins / p->frames, n = p->n;
    int64_t at0 = (b * p->sig_len + f * p->step) * p->comp_in;
    double re = 0, im = 0, cs, sn;
    for (int64_t t = 0; t < n; t++) {
        double w = window ? eng_hd_load(window, p->win_dt, t) : 1.0;
        double xr = eng_hd_load(x, p->dt, at0 + t * p->comp_in) * w;
        double xi = p->comp_in == 2 ? eng_hd_load(x, p->dt, at0 + t * p->comp_in + 1) * w : 0.0;
        eng_dft_twiddle(k * t % n, n, &cs, &sn);
        re += xr * cs + xi * sn;
        im += xi * cs - xr * sn;
    }
    return comp == 0 ? re : im;
}

/* ---- HannWindow, HammingWindow, BlackmanWindow --------------------------- */

typedef enum eng_window_kind { ENG_WIN_HANN, ENG_WIN_HAMMING, ENG_WIN_BLACKMAN } eng_window_kind_t;

typedef struct eng_window {
    int kind;                   /* eng_window_kind_t */
    int64_t size;
    bool periodic;
    eng_dtype_t dt;             /* output_datatype */
} eng_window_t;

/* A window op's parameters (size must be known). 0, FS_EINVAL, FS_ENOTSUP
 * (output_datatype) or FS_EDYNAMIC. */
int eng_window_params(const eng_op_ctx_t *c, eng_window_t *p);

/* Element i of the window: a0 - a1 cos(2 pi i / N) + a2 cos(4 pi i / N),
 * N = size (periodic) or size - 1. Cannot fail. */
ENG_OPS_HD static inline double eng_window_at(const eng_window_t *p, int64_t i)
{
    double n = (double)(p->periodic ? p->size : p->size - 1);
    double a = 6.283185307179586476925 * (double)i / n;
    switch (p->kind) {
    case ENG_WIN_HANN: return 0.5 - 0.5 * cos(a);
    case ENG_WIN_HAMMING: return 25.0 / 46.0 - 21.0 / 46.0 * cos(a);
    default: return 0.42 - 0.5 * cos(a) + 0.08 * cos(2 * a);
    }
}

/* ---- MelWeightMatrix ----------------------------------------------------- */

typedef struct eng_mel {
    int64_t mel_bins, dft_length, sample_rate;
    eng_dtype_t dt;             /* output_datatype */
    eng_dtype_t edge_dt;        /* lower_edge_hertz's and upper_edge_hertz's */
    eng_shape_t y;              /* [dft_length / 2 + 1, mel_bins] */
} eng_mel_t;

/* MelWeightMatrix's parameters (num_mel_bins, dft_length and sample_rate
 * must be known; the edges are read at run). 0, FS_EINVAL, FS_ENOTSUP or
 * FS_EDYNAMIC. */
int eng_mel_params(const eng_op_ctx_t *c, eng_mel_t *p);

/* The spectrogram bin of mel point i (0 .. mel_bins + 1). */
ENG_OPS_HD static inline int64_t eng_mel_point(const eng_mel_t *p, double low_mel, double step,
                                               int64_t i)
{
    double f = 700.0 * (pow(10.0, ((double)i * step + low_mel) / 2595.0) - 1.0);
    double v = floor((double)(p->dft_length + 1) * f / (double)p->sample_rate);
    return v < -1e15 ? -1000000000000000LL : v > 1e15 ? 1000000000000000LL : (int64_t)v;
}

/* Output element i of MelWeightMatrix, from the edges' values: the
 * triangle of mel bin i % mel_bins at spectrogram bin i / mel_bins.
 * Cannot fail. */
ENG_OPS_HD static inline double eng_mel_at(const eng_mel_t *p, double lower, double upper,
                                           int64_t i)
{
    int64_t j = i / p->mel_bins, m = i % p->mel_bins;
    double low_mel = 2595.0 * log10(1.0 + lower / 700.0);
    double high_mel = 2595.0 * log10(1.0 + upper / 700.0);
    double step = (high_mel - low_mel) / (double)(p->mel_bins + 2);
    int64_t l = eng_mel_point(p, low_mel, step, m), c = eng_mel_point(p, low_mel, step, m + 1);
    int64_t h = eng_mel_point(p, low_mel, step, m + 2);
    double v = 0;
    if (c == l) {
        if (j == c)
            v = 1;
    } else if (l <= j && j <= c) {
        v = (double)(j - l) / (double)(c - l);
    }
    if (h > c && c <= j && j < h)
        v = (double)(h - j) / (double)(h - c);
    return v;
}

#ifdef __cplusplus
}
#endif
#endif
