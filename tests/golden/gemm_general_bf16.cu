/*
 * kspec gemm.general, CUDA C, 32 lanes per work-group.
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
ks_gemm_general(
	const ks_u16 *__restrict__ p_x,
	const ks_u16 *__restrict__ p_W,
	ks_u16 *p_y,
	ks_i64 p_M,
	ks_i64 p_N,
	ks_i64 p_K)
{
	const ks_i64 ks_lane = (ks_i64)threadIdx.x;
	const ks_i64 ks_group = (ks_i64)blockIdx.x;

	ks_i64 v_nb = ((p_N + 3LL) / 4LL);
	ks_i64 v_m0 = ((ks_group / v_nb) * 4LL);
	ks_i64 v_n0 = ((ks_group % v_nb) * 4LL);
	ks_i64 v_wo0 = (ksh_imin(v_n0, (p_N - 1LL)) * p_K);
	ks_i64 v_wo1 = (ksh_imin((v_n0 + 1LL), (p_N - 1LL)) * p_K);
	ks_i64 v_wo2 = (ksh_imin((v_n0 + 2LL), (p_N - 1LL)) * p_K);
	ks_i64 v_wo3 = (ksh_imin((v_n0 + 3LL), (p_N - 1LL)) * p_K);
	ks_i64 v_xo0 = (ksh_imin(v_m0, (p_M - 1LL)) * p_K);
	ks_i64 v_xo1 = (ksh_imin((v_m0 + 1LL), (p_M - 1LL)) * p_K);
	ks_i64 v_xo2 = (ksh_imin((v_m0 + 2LL), (p_M - 1LL)) * p_K);
	ks_i64 v_xo3 = (ksh_imin((v_m0 + 3LL), (p_M - 1LL)) * p_K);
	float v_tacc0_0 = 0.0f;
	float v_tacc0_1 = 0.0f;
	float v_tacc0_2 = 0.0f;
	float v_tacc0_3 = 0.0f;
	float v_tacc1_0 = 0.0f;
	float v_tacc1_1 = 0.0f;
	float v_tacc1_2 = 0.0f;
	float v_tacc1_3 = 0.0f;
	float v_tacc2_0 = 0.0f;
	float v_tacc2_1 = 0.0f;
	float v_tacc2_2 = 0.0f;
	float v_tacc2_3 = 0.0f;
	float v_tacc3_0 = 0.0f;
	float v_tacc3_1 = 0.0f;
	float v_tacc3_2 = 0.0f;
	float v_tacc3_3 = 0.0f;
	for (ks_i64 v_tk0 = 0LL; v_tk0 < (p_K - (p_K % 32LL)); v_tk0 += 32LL) {
		/* lanes: this thread is lane ks_lane */
		{
			ks_i64 v_tk = (v_tk0 + ks_lane);
			float v_wv0 = ksh_bf16_to_f32(p_W[(v_wo0 + v_tk)]);
			float v_wv1 = ksh_bf16_to_f32(p_W[(v_wo1 + v_tk)]);
			float v_wv2 = ksh_bf16_to_f32(p_W[(v_wo2 + v_tk)]);
			float v_wv3 = ksh_bf16_to_f32(p_W[(v_wo3 + v_tk)]);
			float v_xv0 = ksh_bf16_to_f32(p_x[(v_xo0 + v_tk)]);
			v_tacc0_0 = fmaf(v_xv0, v_wv0, v_tacc0_0);
			v_tacc0_1 = fmaf(v_xv0, v_wv1, v_tacc0_1);
			v_tacc0_2 = fmaf(v_xv0, v_wv2, v_tacc0_2);
			v_tacc0_3 = fmaf(v_xv0, v_wv3, v_tacc0_3);
			float v_xv1 = ksh_bf16_to_f32(p_x[(v_xo1 + v_tk)]);
			v_tacc1_0 = fmaf(v_xv1, v_wv0, v_tacc1_0);
			v_tacc1_1 = fmaf(v_xv1, v_wv1, v_tacc1_1);
			v_tacc1_2 = fmaf(v_xv1, v_wv2, v_tacc1_2);
			v_tacc1_3 = fmaf(v_xv1, v_wv3, v_tacc1_3);
			float v_xv2 = ksh_bf16_to_f32(p_x[(v_xo2 + v_tk)]);
			v_tacc2_0 = fmaf(v_xv2, v_wv0, v_tacc2_0);
			v_tacc2_1 = fmaf(v_xv2, v_wv1, v_tacc2_1);
			v_tacc2_2 = fmaf(v_xv2, v_wv2, v_tacc2_2);
			v_tacc2_3 = fmaf(v_xv2, v_wv3, v_tacc2_3);
			float v_xv3 = ksh_bf16_to_f32(p_x[(v_xo3 + v_tk)]);
			v_tacc3_0 = fmaf(v_xv3, v_wv0, v_tacc3_0);
			v_tacc3_1 = fmaf(v_xv3, v_wv1, v_tacc3_1);
			v_tacc3_2 = fmaf(v_xv3, v_wv2, v_tacc3_2);
			v_tacc3_3 = fmaf(v_xv3, v_wv3, v_tacc3_3);
		}
	}
	if (((p_K % 32LL) != 0LL)) {
		/* lanes: this thread is lane ks_lane */
		{
			ks_i64 v_tkt = ((p_K - (p_K % 32LL)) + ks_lane);
			if ((v_tkt < p_K)) {
				float v_wt0 = ksh_bf16_to_f32(p_W[(v_wo0 + v_tkt)]);
				float v_wt1 = ksh_bf16_to_f32(p_W[(v_wo1 + v_tkt)]);
				float v_wt2 = ksh_bf16_to_f32(p_W[(v_wo2 + v_tkt)]);
				float v_wt3 = ksh_bf16_to_f32(p_W[(v_wo3 + v_tkt)]);
				float v_xt0 = ksh_bf16_to_f32(p_x[(v_xo0 + v_tkt)]);
				v_tacc0_0 = fmaf(v_xt0, v_wt0, v_tacc0_0);
				v_tacc0_1 = fmaf(v_xt0, v_wt1, v_tacc0_1);
				v_tacc0_2 = fmaf(v_xt0, v_wt2, v_tacc0_2);
				v_tacc0_3 = fmaf(v_xt0, v_wt3, v_tacc0_3);
				float v_xt1 = ksh_bf16_to_f32(p_x[(v_xo1 + v_tkt)]);
				v_tacc1_0 = fmaf(v_xt1, v_wt0, v_tacc1_0);
				v_tacc1_1 = fmaf(v_xt1, v_wt1, v_tacc1_1);
				v_tacc1_2 = fmaf(v_xt1, v_wt2, v_tacc1_2);
				v_tacc1_3 = fmaf(v_xt1, v_wt3, v_tacc1_3);
				float v_xt2 = ksh_bf16_to_f32(p_x[(v_xo2 + v_tkt)]);
				v_tacc2_0 = fmaf(v_xt2, v_wt0, v_tacc2_0);
				v_tacc2_1 = fmaf(v_xt2, v_wt1, v_tacc2_1);
				v_tacc2_2 = fmaf(v_xt2, v_wt2, v_tacc2_2);
				v_tacc2_3 = fmaf(v_xt2, v_wt3, v_tacc2_3);
				float v_xt3 = ksh_bf16_to_f32(p_x[(v_xo3 + v_tkt)]);
				v_tacc3_0 = fmaf(v_xt3, v_wt0, v_tacc3_0);
				v_tacc3_1 = fmaf(v_xt3, v_wt1, v_tacc3_1);
				v_tacc3_2 = fmaf(v_xt3, v_wt2, v_tacc3_2);
				v_tacc3_3 = fmaf(v_xt3, v_wt3, v_tacc3_3);
			}
		}
	}
	const float ks_t0 = ksh_reduce_sum_f32(v_tacc0_0);
	if (((v_n0 < p_N) && (v_m0 < p_M))) {
		{
			const ks_i64 ks_t1 = ((v_m0 * p_N) + v_n0);
			const float ks_t2 = ks_t0;

			if (ks_lane == 0)
				p_y[ks_t1] = ksh_f32_to_bf16(ks_t2);
		}
	}
	const float ks_t3 = ksh_reduce_sum_f32(v_tacc1_0);
	if (((v_n0 < p_N) && ((v_m0 + 1LL) < p_M))) {
		{
			const ks_i64 ks_t4 = (((v_m0 + 1LL) * p_N) + v_n0);
			const float ks_t5 = ks_t3;

			if (ks_lane == 0)
				p_y[ks_t4] = ksh_f32_to_bf16(ks_t5);
		}
	}
	const float ks_t6 = ksh_reduce_sum_f32(v_tacc2_0);
	if (((v_n0 < p_N) && ((v_m0 + 2LL) < p_M))) {
		{
			const ks_i64 ks_t7 = (((v_m0 + 2LL) * p_N) + v_n0);
			const float ks_t8 = ks_t6;

			if (ks_lane == 0)
				p_y[ks_t7] = ksh_f32_to_bf16(ks_t8);
		}
	}
	const float ks_t9 = ksh_reduce_sum_f32(v_tacc3_0);
	if (((v_n0 < p_N) && ((v_m0 + 3LL) < p_M))) {
		{
			const ks_i64 ks_t10 = (((v_m0 + 3LL) * p_N) + v_n0);
			const float ks_t11 = ks_t9;

			if (ks_lane == 0)
				p_y[ks_t10] = ksh_f32_to_bf16(ks_t11);
		}
	}
	const float ks_t12 = ksh_reduce_sum_f32(v_tacc0_1);
	if ((((v_n0 + 1LL) < p_N) && (v_m0 < p_M))) {
		{
			const ks_i64 ks_t13 = (((v_m0 * p_N) + v_n0) + 1LL);
			const float ks_t14 = ks_t12;

			if (ks_lane == 0)
				p_y[ks_t13] = ksh_f32_to_bf16(ks_t14);
		}
	}
	const float ks_t15 = ksh_reduce_sum_f32(v_tacc1_1);
	if ((((v_n0 + 1LL) < p_N) && ((v_m0 + 1LL) < p_M))) {
		{
			const ks_i64 ks_t16 = ((((v_m0 + 1LL) * p_N) + v_n0) + 1LL);
			const float ks_t17 = ks_t15;

			if (ks_lane == 0)
				p_y[ks_t16] = ksh_f32_to_bf16(ks_t17);
		}
	}
	const float ks_t18 = ksh_reduce_sum_f32(v_tacc2_1);
	if ((((v_n0 + 1LL) < p_N) && ((v_m0 + 2LL) < p_M))) {
		{
			const ks_i64 ks_t19 = ((((v_m0 + 2LL) * p_N) + v_n0) + 1LL);
			const float ks_t20 = ks_t18;

			if (ks_lane == 0)
				p_y[ks_t19] = ksh_f32_to_bf16(ks_t20);
		}
	}
	const float ks_t21 = ksh_reduce_sum_f32(v_tacc3_1);
	if ((((v_n0 + 1LL) < p_N) && ((v_m0 + 3LL) < p_M))) {
		{
			const ks_i64 ks_t22 = ((((v_m0 + 3LL) * p_N) + v_n0) + 1LL);
			const float ks_t23 = ks_t21;

			if (ks_lane == 0)
				p_y[ks_t22] = ksh_f32_to_bf16(ks_t23);
		}
	}
	const float ks_t24 = ksh_reduce_sum_f32(v_tacc0_2);
	if ((((v_n0 + 2LL) < p_N) && (v_m0 < p_M))) {
		{
			const ks_i64 ks_t25 = (((v_m0 * p_N) + v_n0) + 2LL);
			const float ks_t26 = ks_t24;

			if (ks_lane == 0)
				p_y[ks_t25] = ksh_f32_to_bf16(ks_t26);
		}
	}
	const float ks_t27 = ksh_reduce_sum_f32(v_tacc1_2);
	if ((((v_n0 + 2LL) < p_N) && ((v_m0 + 1LL) < p_M))) {
		{
			const ks_i64 ks_t28 = ((((v_m0 + 1LL) * p_N) + v_n0) + 2LL);
			const float ks_t29 = ks_t27;

			if (ks_lane == 0)
				p_y[ks_t28] = ksh_f32_to_bf16(ks_t29);
		}
	}
	const float ks_t30 = ksh_reduce_sum_f32(v_tacc2_2);
	if ((((v_n0 + 2LL) < p_N) && ((v_m0 + 2LL) < p_M))) {
		{
			const ks_i64 ks_t31 = ((((v_m0 + 2LL) * p_N) + v_n0) + 2LL);
			const float ks_t32 = ks_t30;

			if (ks_lane == 0)
				p_y[ks_t31] = ksh_f32_to_bf16(ks_t32);
		}
	}
	const float ks_t33 = ksh_reduce_sum_f32(v_tacc3_2);
	if ((((v_n0 + 2LL) < p_N) && ((v_m0 + 3LL) < p_M))) {
		{
			const ks_i64 ks_t34 = ((((v_m0 + 3LL) * p_N) + v_n0) + 2LL);
			const float ks_t35 = ks_t33;

			if (ks_lane == 0)
				p_y[ks_t34] = ksh_f32_to_bf16(ks_t35);
		}
	}
	const float ks_t36 = ksh_reduce_sum_f32(v_tacc0_3);
	if ((((v_n0 + 3LL) < p_N) && (v_m0 < p_M))) {
		{
			const ks_i64 ks_t37 = (((v_m0 * p_N) + v_n0) + 3LL);
			const float ks_t38 = ks_t36;

			if (ks_lane == 0)
				p_y[ks_t37] = ksh_f32_to_bf16(ks_t38);
		}
	}
	const float ks_t39 = ksh_reduce_sum_f32(v_tacc1_3);
	if ((((v_n0 + 3LL) < p_N) && ((v_m0 + 1LL) < p_M))) {
		{
			const ks_i64 ks_t40 = ((((v_m0 + 1LL) * p_N) + v_n0) + 3LL);
			const float ks_t41 = ks_t39;

			if (ks_lane == 0)
				p_y[ks_t40] = ksh_f32_to_bf16(ks_t41);
		}
	}
	const float ks_t42 = ksh_reduce_sum_f32(v_tacc2_3);
	if ((((v_n0 + 3LL) < p_N) && ((v_m0 + 2LL) < p_M))) {
		{
			const ks_i64 ks_t43 = ((((v_m0 + 2LL) * p_N) + v_n0) + 3LL);
			const float ks_t44 = ks_t42;

			if (ks_lane == 0)
				p_y[ks_t43] = ksh_f32_to_bf16(ks_t44);
		}
	}
	const float ks_t45 = ksh_reduce_sum_f32(v_tacc3_3);
	if ((((v_n0 + 3LL) < p_N) && ((v_m0 + 3LL) < p_M))) {
		{
			const ks_i64 ks_t46 = ((((v_m0 + 3LL) * p_N) + v_n0) + 3LL);
			const float ks_t47 = ks_t45;

			if (ks_lane == 0)
				p_y[ks_t46] = ksh_f32_to_bf16(ks_t47);
		}
	}
}
