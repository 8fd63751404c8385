/*
 * kspec gemm.gemv_m1, CUDA C, 32 lanes per work-group.
 * Generated from the kernel's IR; do not edit.
 */
/* Compiled with --fmad=false --prec-div=true --prec-sqrt=true --ftz=false. */
typedef long long ks_i64;
typedef unsigned int ks_u32;
typedef unsigned short ks_u16;

/* bf16 -> f32: the upper half of the f32 pattern. */
static __device__ __forceinline__ float ksh_bf16_to_f32(ks_u16 a)
{
	const ks_u32 t2 = (ks_u32)a;
	const ks_u32 t3 = (t2 << 16u);
	const float t4 = __uint_as_float(t3);
	return t4;
}

/* f32 -> bf16, round to nearest even; NaN stays a quiet NaN. */
static __device__ __forceinline__ ks_u16 ksh_f32_to_bf16(float a)
{
	const ks_u32 t1 = __float_as_uint(a);
	const ks_u32 t4 = (t1 & 0x7fffffffu);
	const int t5 = (t4 > 0x7f800000u);
	const ks_u32 t9 = (t1 >> 16u);
	const ks_u32 t10 = (t9 & 1u);
	const ks_u32 t12 = (0x7fffu + t10);
	const ks_u32 t13 = (t1 + t12);
	const ks_u32 t14 = (t13 >> 16u);
	const ks_u32 t17 = (t1 >> 16u);
	const ks_u32 t18 = (t17 | 64u);
	const ks_u32 t19 = (t5 ? t18 : t14);
	const ks_u16 t20 = (ks_u16)t19;
	return t20;
}

/* i64 min. */
static __device__ __forceinline__ ks_i64 ksh_imin(ks_i64 a, ks_i64 b)
{
	const int t2 = (a < b);
	const ks_i64 t3 = (t2 ? a : b);
	return t3;
}

/* The canonical tree over 32 lanes: t[l] = t[l] op t[l + s], s = 16 .. 1. */
static __device__ __forceinline__ float ksh_reduce_sum_f32(float v)
{
	v = v + __shfl_down_sync(0xffffffffu, v, 16);
	v = v + __shfl_down_sync(0xffffffffu, v, 8);
	v = v + __shfl_down_sync(0xffffffffu, v, 4);
	v = v + __shfl_down_sync(0xffffffffu, v, 2);
	v = v + __shfl_down_sync(0xffffffffu, v, 1);
	return __shfl_sync(0xffffffffu, v, 0);
}

extern "C" __global__ void __launch_bounds__(32)
ks_gemm_gemv_m1(
	const ks_u16 *__restrict__ p_x,
	const ks_u16 *__restrict__ p_W,
	ks_u16 *p_y)
{
	const ks_i64 ks_lane = (ks_i64)threadIdx.x;
	const ks_i64 ks_group = (ks_i64)blockIdx.x;

	ks_i64 v_n0 = (ks_group * 8LL);
	ks_i64 v_yo = v_n0;
	ks_i64 v_wo0 = (ksh_imin(v_n0, 4095LL) * 4096LL);
	ks_i64 v_wo1 = (ksh_imin((v_n0 + 1LL), 4095LL) * 4096LL);
	ks_i64 v_wo2 = (ksh_imin((v_n0 + 2LL), 4095LL) * 4096LL);
	ks_i64 v_wo3 = (ksh_imin((v_n0 + 3LL), 4095LL) * 4096LL);
	ks_i64 v_wo4 = (ksh_imin((v_n0 + 4LL), 4095LL) * 4096LL);
	ks_i64 v_wo5 = (ksh_imin((v_n0 + 5LL), 4095LL) * 4096LL);
	ks_i64 v_wo6 = (ksh_imin((v_n0 + 6LL), 4095LL) * 4096LL);
	ks_i64 v_wo7 = (ksh_imin((v_n0 + 7LL), 4095LL) * 4096LL);
	float v_acc0 = 0.0f;
	float v_acc1 = 0.0f;
	float v_acc2 = 0.0f;
	float v_acc3 = 0.0f;
	float v_acc4 = 0.0f;
	float v_acc5 = 0.0f;
	float v_acc6 = 0.0f;
	float v_acc7 = 0.0f;
	#pragma unroll 4
	for (ks_i64 v_k0 = 0LL; v_k0 < 4096LL; v_k0 += 32LL) {
		/* lanes: this thread is lane ks_lane */
		{
			ks_i64 v_k = (v_k0 + ks_lane);
			float v_xv = ksh_bf16_to_f32(p_x[v_k]);
			v_acc0 = fmaf(v_xv, ksh_bf16_to_f32(p_W[(v_wo0 + v_k)]), v_acc0);
			v_acc1 = fmaf(v_xv, ksh_bf16_to_f32(p_W[(v_wo1 + v_k)]), v_acc1);
			v_acc2 = fmaf(v_xv, ksh_bf16_to_f32(p_W[(v_wo2 + v_k)]), v_acc2);
			v_acc3 = fmaf(v_xv, ksh_bf16_to_f32(p_W[(v_wo3 + v_k)]), v_acc3);
			v_acc4 = fmaf(v_xv, ksh_bf16_to_f32(p_W[(v_wo4 + v_k)]), v_acc4);
			v_acc5 = fmaf(v_xv, ksh_bf16_to_f32(p_W[(v_wo5 + v_k)]), v_acc5);
			v_acc6 = fmaf(v_xv, ksh_bf16_to_f32(p_W[(v_wo6 + v_k)]), v_acc6);
			v_acc7 = fmaf(v_xv, ksh_bf16_to_f32(p_W[(v_wo7 + v_k)]), v_acc7);
		}
	}
	const float ks_t0 = ksh_reduce_sum_f32(v_acc0);
	if ((v_n0 < 4096LL)) {
		{
			const ks_i64 ks_t1 = v_yo;
			const float ks_t2 = ks_t0;

			if (ks_lane == 0)
				p_y[ks_t1] = ksh_f32_to_bf16(ks_t2);
		}
	}
	const float ks_t3 = ksh_reduce_sum_f32(v_acc1);
	if (((v_n0 + 1LL) < 4096LL)) {
		{
			const ks_i64 ks_t4 = (v_yo + 1LL);
			const float ks_t5 = ks_t3;

			if (ks_lane == 0)
				p_y[ks_t4] = ksh_f32_to_bf16(ks_t5);
		}
	}
	const float ks_t6 = ksh_reduce_sum_f32(v_acc2);
	if (((v_n0 + 2LL) < 4096LL)) {
		{
			const ks_i64 ks_t7 = (v_yo + 2LL);
			const float ks_t8 = ks_t6;

			if (ks_lane == 0)
				p_y[ks_t7] = ksh_f32_to_bf16(ks_t8);
		}
	}
	const float ks_t9 = ksh_reduce_sum_f32(v_acc3);
	if (((v_n0 + 3LL) < 4096LL)) {
		{
			const ks_i64 ks_t10 = (v_yo + 3LL);
			const float ks_t11 = ks_t9;

			if (ks_lane == 0)
				p_y[ks_t10] = ksh_f32_to_bf16(ks_t11);
		}
	}
	const float ks_t12 = ksh_reduce_sum_f32(v_acc4);
	if (((v_n0 + 4LL) < 4096LL)) {
		{
			const ks_i64 ks_t13 = (v_yo + 4LL);
			const float ks_t14 = ks_t12;

			if (ks_lane == 0)
				p_y[ks_t13] = ksh_f32_to_bf16(ks_t14);
		}
	}
	const float ks_t15 = ksh_reduce_sum_f32(v_acc5);
	if (((v_n0 + 5LL) < 4096LL)) {
		{
			const ks_i64 ks_t16 = (v_yo + 5LL);
			const float ks_t17 = ks_t15;

			if (ks_lane == 0)
				p_y[ks_t16] = ksh_f32_to_bf16(ks_t17);
		}
	}
	const float ks_t18 = ksh_reduce_sum_f32(v_acc6);
	if (((v_n0 + 6LL) < 4096LL)) {
		{
			const ks_i64 ks_t19 = (v_yo + 6LL);
			const float ks_t20 = ks_t18;

			if (ks_lane == 0)
				p_y[ks_t19] = ksh_f32_to_bf16(ks_t20);
		}
	}
	const float ks_t21 = ksh_reduce_sum_f32(v_acc7);
	if (((v_n0 + 7LL) < 4096LL)) {
		{
			const ks_i64 ks_t22 = (v_yo + 7LL);
			const float ks_t23 = ks_t21;

			if (ks_lane == 0)
				p_y[ks_t22] = ksh_f32_to_bf16(ks_t23);
		}
	}
}
