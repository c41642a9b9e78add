/*
 * cosine_kernel: the cosine distance of two pgvector halfvec values, for the embedded server's exact
 * dense scan (issue 24; metis_pg.db.kernel builds it against the server's own headers and creates
 * metis_cosine_distance(halfvec, halfvec) from it).
 *
 * What it gains is not arithmetic (pgvector's loop and this one take the same time alone) but
 * memory: a heap page holds its rows from its end down, in line pointer order, so a sequential
 * scan reads the next row just below the one it has, while the CPU's prefetchers follow a row's
 * bytes upwards. Each call asks for the bytes of the PREFETCH_ROWS rows below (a prefetch never
 * faults): the top 50 of 100,000 rows in 20 ms instead of 37 (benchmarks/dense_kernel.py).
 *
 * It converts 16 halves a step with F16C and accumulates with FMA in six float32 accumulators of
 * 8 lanes (dot, |a|^2, |b|^2, two of each), summed in double; without AVX2/FMA/F16C (checked at
 * run time) a scalar loop. It answers as pgvector's <=> on halfvec does: 1 - dot / sqrt(|a|^2
 * |b|^2), clamped to [0, 2], NaN when either vector is zero, an error when the dimensions differ;
 * the sums differ from pgvector's in the last bits only (another order of the same products).
 *
 * The halfvec layout is pgvector's: a varlena header, int16 dim, int16 unused, then dim IEEE
 * binary16 values.
 */
#include "postgres.h"

#include <math.h>

#include "fmgr.h"
#include "utils/builtins.h"
#include "varatt.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define METIS_X86 1
#endif

PG_MODULE_MAGIC;

typedef struct MetisHalfvec
{
	int32		vl_len_;		/* varlena header (do not touch directly) */
	int16		dim;
	int16		unused;
	uint16		x[FLEXIBLE_ARRAY_MEMBER];
} MetisHalfvec;

/* IEEE binary16 -> float, for the scalar path (subnormals, infinities and NaN kept). */
static inline float
half_to_float(uint16 h)
{
	uint32		sign = (uint32) (h & 0x8000) << 16;
	uint32		exponent = (h >> 10) & 0x1F;
	uint32		mantissa = h & 0x3FF;
	union
	{
		uint32		u;
		float		f;
	}			out;

	if (exponent == 0)
	{
		if (mantissa == 0)
			out.u = sign;
		else
		{
			/* subnormal: normalise it */
			exponent = 127 - 15 + 1;
			while ((mantissa & 0x400) == 0)
			{
				mantissa <<= 1;
				exponent--;
			}
			mantissa &= 0x3FF;
			out.u = sign | (exponent << 23) | (mantissa << 13);
		}
	}
	else if (exponent == 0x1F)
		out.u = sign | 0x7F800000 | (mantissa << 13);
	else
		out.u = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
	return out.f;
}

static void
sums_scalar(const uint16 *a, const uint16 *b, int dim, double *dot, double *na, double *nb)
{
	float		d = 0,
				x = 0,
				y = 0;

	for (int i = 0; i < dim; i++)
	{
		float		ai = half_to_float(a[i]);
		float		bi = half_to_float(b[i]);

		d += ai * bi;
		x += ai * ai;
		y += bi * bi;
	}
	*dot = d;
	*na = x;
	*nb = y;
}

#ifdef METIS_X86
__attribute__((target("avx2,fma,f16c")))
static inline double
hsum256(__m256 v)
{
	float		lanes[8];
	double		sum = 0;

	_mm256_storeu_ps(lanes, v);
	for (int i = 0; i < 8; i++)
		sum += lanes[i];
	return sum;
}

__attribute__((target("avx2,fma,f16c")))
static void
sums_avx2(const uint16 *a, const uint16 *b, int dim, double *dot, double *na, double *nb)
{
	__m256		d0 = _mm256_setzero_ps(),
				d1 = _mm256_setzero_ps();
	__m256		x0 = _mm256_setzero_ps(),
				x1 = _mm256_setzero_ps();
	__m256		y0 = _mm256_setzero_ps(),
				y1 = _mm256_setzero_ps();
	int			i = 0;
	float		d = 0,
				x = 0,
				y = 0;

	for (; i + 16 <= dim; i += 16)
	{
		__m256		a0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) (a + i)));
		__m256		a1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) (a + i + 8)));
		__m256		b0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) (b + i)));
		__m256		b1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) (b + i + 8)));

		d0 = _mm256_fmadd_ps(a0, b0, d0);
		d1 = _mm256_fmadd_ps(a1, b1, d1);
		x0 = _mm256_fmadd_ps(a0, a0, x0);
		x1 = _mm256_fmadd_ps(a1, a1, x1);
		y0 = _mm256_fmadd_ps(b0, b0, y0);
		y1 = _mm256_fmadd_ps(b1, b1, y1);
	}
	for (; i < dim; i++)
	{
		float		ai = _cvtsh_ss(a[i]);
		float		bi = _cvtsh_ss(b[i]);

		d += ai * bi;
		x += ai * ai;
		y += bi * bi;
	}
	*dot = hsum256(_mm256_add_ps(d0, d1)) + d;
	*na = hsum256(_mm256_add_ps(x0, x1)) + x;
	*nb = hsum256(_mm256_add_ps(y0, y1)) + y;
}
#endif

/*
 * A heap page holds its tuples from its end down, in the order of their line pointers, so a
 * sequential scan reads the next row just below this one: the CPU's prefetchers, which follow
 * ascending streams of a row's bytes, do not see it coming. Ask for the bytes below now (a
 * prefetch never faults, so an address outside the page costs nothing but a wasted line).
 */
#ifndef PREFETCH_ROWS
#define PREFETCH_ROWS 3
#endif

static inline void
prefetch_below(const char *value, Size size)
{
	for (Size offset = 64; offset <= PREFETCH_ROWS * size + 64 && PREFETCH_ROWS > 0; offset += 64)
		__builtin_prefetch(value - offset, 0, 0);
}

typedef void (*sums_fn) (const uint16 *, const uint16 *, int, double *, double *, double *);
static sums_fn sums = NULL;

static sums_fn
choose_sums(void)
{
#ifdef METIS_X86
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
		return sums_avx2;
#endif
	return sums_scalar;
}

PG_FUNCTION_INFO_V1(metis_halfvec_cosine_distance);
Datum
metis_halfvec_cosine_distance(PG_FUNCTION_ARGS)
{
	MetisHalfvec *a = (MetisHalfvec *) PG_DETOAST_DATUM(PG_GETARG_DATUM(0));
	MetisHalfvec *b = (MetisHalfvec *) PG_DETOAST_DATUM(PG_GETARG_DATUM(1));
	double		dot,
				na,
				nb,
				similarity;

	if (a->dim != b->dim)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("different halfvec dimensions %d and %d", a->dim, b->dim)));
	if (sums == NULL)
		sums = choose_sums();
	prefetch_below((const char *) a, VARSIZE_ANY(a));
	sums(a->x, b->x, a->dim, &dot, &na, &nb);
	if (na * nb == 0)
		PG_RETURN_FLOAT8(NAN);
	similarity = dot / sqrt(na * nb);
	if (similarity > 1)
		similarity = 1;
	else if (similarity < -1)
		similarity = -1;
	PG_RETURN_FLOAT8(1 - similarity);
}

PG_FUNCTION_INFO_V1(metis_kernel_path);
/* Which loop this server process uses: 'avx2' or 'scalar' (for tests and benchmarks). */
Datum
metis_kernel_path(PG_FUNCTION_ARGS)
{
	if (sums == NULL)
		sums = choose_sums();
#ifdef METIS_X86
	if (sums == sums_avx2)
		PG_RETURN_TEXT_P(cstring_to_text("avx2"));
#endif
	PG_RETURN_TEXT_P(cstring_to_text("scalar"));
}
