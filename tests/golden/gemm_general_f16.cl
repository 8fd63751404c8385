/*
 * kspec gemm.general, OpenCL C, 32 lanes per work-group.
 * Generated from the kernel's IR; do not edit.
 */
/* Built with -cl-std=CL1.2 -cl-fp32-correctly-rounded-divide-sqrt. */
#pragma OPENCL FP_CONTRACT OFF
typedef long ks_i64;
typedef uint ks_u32;
typedef ushort ks_u16;

/* f16 -> f32, exact for every pattern. */
float ksh_f16_to_f32(ks_u16 a)
{
	const ks_u32 t1 = (ks_u32)a;
	const ks_u32 t4 = (t1 & 0x7fffu);
	const ks_u32 t5 = (t4 << 13u);
	const ks_u32 t7 = (t5 & 0xf800000u);
	const ks_u32 t9 = (t5 + 0x38000000u);
	const ks_u32 t11 = (t9 + 0x38000000u);
	const float t13 = as_float(0x38800000u);
	const ks_u32 t15 = (t9 + 0x800000u);
	const float t16 = as_float(t15);
	const float t17 = (t16 - t13);
	const ks_u32 t18 = as_uint(t17);
	const int t20 = (t7 == 0u);
	const ks_u32 t21 = (t20 ? t18 : t9);
	const int t23 = (t7 == 0xf800000u);
	const ks_u32 t24 = (t23 ? t11 : t21);
	const ks_u32 t27 = (t1 & 0x8000u);
	const ks_u32 t28 = (t27 << 16u);
	const ks_u32 t29 = (t24 | t28);
	const float t30 = as_float(t29);
	return t30;
}

/* f32 -> f16, round to nearest even; NaN stays a quiet NaN. */
ks_u16 ksh_f32_to_f16(float a)
{
	const ks_u32 t1 = as_uint(a);
	const ks_u32 t3 = (t1 & 0x80000000u);
	const ks_u32 t4 = (t1 ^ t3);
	const int t6 = (t4 >= 0x47800000u);
	const int t8 = (t4 < 0x38800000u);
	const ks_u32 t12 = (t4 >> 13u);
	const ks_u32 t13 = (t12 & 0x3ffu);
	const ks_u32 t15 = (0x7e00u | t13);
	const int t17 = (t4 > 0x7f800000u);
	const ks_u32 t18 = (t17 ? t15 : 0x7c00u);
	const float t21 = as_float(t4);
	const float t22 = (t21 + as_float(0x3f000000u));
	const ks_u32 t23 = as_uint(t22);
	const ks_u32 t24 = (t23 - 0x3f000000u);
	const ks_u32 t28 = (t4 >> 13u);
	const ks_u32 t29 = (t28 & 1u);
	const ks_u32 t31 = (0xc8000fffu + t29);
	const ks_u32 t32 = (t4 + t31);
	const ks_u32 t33 = (t32 >> 13u);
	const ks_u32 t34 = (t8 ? t24 : t33);
	const ks_u32 t35 = (t6 ? t18 : t34);
	const ks_u32 t37 = (t3 >> 16u);
	const ks_u32 t38 = (t35 | t37);
	const ks_u16 t39 = (ks_u16)t38;
	return t39;
}

/* i64 min. */
ks_i64 ksh_imin(ks_i64 a, ks_i64 b)
{
	const int t2 = (a < b);
	const ks_i64 t3 = (t2 ? a : b);
	return t3;
}

/* The canonical tree over 32 lanes: t[l] = t[l] op t[l + s], s = 16 .. 1,
 * computed by every work-item. */
float ksh_reduce_sum_f32(float v, ks_i64 lane, __local float *t)
{
	float u[16];

	t[lane] = v;
	barrier(CLK_LOCAL_MEM_FENCE);
	u[0] = t[0] + t[16];
	u[1] = t[1] + t[17];
	u[2] = t[2] + t[18];
	u[3] = t[3] + t[19];
	u[4] = t[4] + t[20];
	u[5] = t[5] + t[21];
	u[6] = t[6] + t[22];
	u[7] = t[7] + t[23];
	u[8] = t[8] + t[24];
	u[9] = t[9] + t[25];
	u[10] = t[10] + t[26];
	u[11] = t[11] + t[27];
	u[12] = t[12] + t[28];
	u[13] = t[13] + t[29];
	u[14] = t[14] + t[30];
	u[15] = t[15] + t[31];
	u[0] = u[0] + u[8];
	u[1] = u[1] + u[9];
	u[2] = u[2] + u[10];
	u[3] = u[3] + u[11];
	u[4] = u[4] + u[12];
	u[5] = u[5] + u[13];
	u[6] = u[6] + u[14];
	u[7] = u[7] + u[15];
	u[0] = u[0] + u[4];
	u[1] = u[1] + u[5];
	u[2] = u[2] + u[6];
	u[3] = u[3] + u[7];
	u[0] = u[0] + u[2];
	u[1] = u[1] + u[3];
	u[0] = u[0] + u[1];
	const float r = u[0];

	barrier(CLK_LOCAL_MEM_FENCE);
	return r;
}

__kernel __attribute__((reqd_work_group_size(32, 1, 1)))
void ks_gemm_general(
	__global const ks_u16 *restrict p_x,
	__global const ks_u16 *restrict p_W,
	__global ks_u16 *p_y,
	ks_i64 p_M,
	ks_i64 p_N,
	ks_i64 p_K)
{
	__local float ks_red_f32[32];
	const ks_i64 ks_lane = (ks_i64)get_local_id(0);
	const ks_i64 ks_group = (ks_i64)get_group_id(0);

	ks_i64 v_nb = ((p_N + 3L) / 4L);
	ks_i64 v_m0 = ((ks_group / v_nb) * 4L);
	ks_i64 v_n0 = ((ks_group % v_nb) * 4L);
	ks_i64 v_wo0 = (ksh_imin(v_n0, (p_N - 1L)) * p_K);
	ks_i64 v_wo1 = (ksh_imin((v_n0 + 1L), (p_N - 1L)) * p_K);
	ks_i64 v_wo2 = (ksh_imin((v_n0 + 2L), (p_N - 1L)) * p_K);
	ks_i64 v_wo3 = (ksh_imin((v_n0 + 3L), (p_N - 1L)) * p_K);
	ks_i64 v_xo0 = (ksh_imin(v_m0, (p_M - 1L)) * p_K);
	ks_i64 v_xo1 = (ksh_imin((v_m0 + 1L), (p_M - 1L)) * p_K);
	ks_i64 v_xo2 = (ksh_imin((v_m0 + 2L), (p_M - 1L)) * p_K);
	ks_i64 v_xo3 = (ksh_imin((v_m0 + 3L), (p_M - 1L)) * p_K);
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
	for (ks_i64 v_tk0 = 0L; v_tk0 < (p_K - (p_K % 32L)); v_tk0 += 32L) {
		/* lanes: this thread is lane ks_lane */
		{
			ks_i64 v_tk = (v_tk0 + ks_lane);
			float v_wv0 = ksh_f16_to_f32(p_W[(v_wo0 + v_tk)]);
			float v_wv1 = ksh_f16_to_f32(p_W[(v_wo1 + v_tk)]);
			float v_wv2 = ksh_f16_to_f32(p_W[(v_wo2 + v_tk)]);
			float v_wv3 = ksh_f16_to_f32(p_W[(v_wo3 + v_tk)]);
			float v_xv0 = ksh_f16_to_f32(p_x[(v_xo0 + v_tk)]);
			v_tacc0_0 = fma(v_xv0, v_wv0, v_tacc0_0);
			v_tacc0_1 = fma(v_xv0, v_wv1, v_tacc0_1);
			v_tacc0_2 = fma(v_xv0, v_wv2, v_tacc0_2);
			v_tacc0_3 = fma(v_xv0, v_wv3, v_tacc0_3);
			float v_xv1 = ksh_f16_to_f32(p_x[(v_xo1 + v_tk)]);
			v_tacc1_0 = fma(v_xv1, v_wv0, v_tacc1_0);
			v_tacc1_1 = fma(v_xv1, v_wv1, v_tacc1_1);
			v_tacc1_2 = fma(v_xv1, v_wv2, v_tacc1_2);
			v_tacc1_3 = fma(v_xv1, v_wv3, v_tacc1_3);
			float v_xv2 = ksh_f16_to_f32(p_x[(v_xo2 + v_tk)]);
			v_tacc2_0 = fma(v_xv2, v_wv0, v_tacc2_0);
			v_tacc2_1 = fma(v_xv2, v_wv1, v_tacc2_1);
			v_tacc2_2 = fma(v_xv2, v_wv2, v_tacc2_2);
			v_tacc2_3 = fma(v_xv2, v_wv3, v_tacc2_3);
			float v_xv3 = ksh_f16_to_f32(p_x[(v_xo3 + v_tk)]);
			v_tacc3_0 = fma(v_xv3, v_wv0, v_tacc3_0);
			v_tacc3_1 = fma(v_xv3, v_wv1, v_tacc3_1);
			v_tacc3_2 = fma(v_xv3, v_wv2, v_tacc3_2);
			v_tacc3_3 = fma(v_xv3, v_wv3, v_tacc3_3);
		}
	}
	if (((p_K % 32L) != 0L)) {
		/* lanes: this thread is lane ks_lane */
		{
			ks_i64 v_tkt = ((p_K - (p_K % 32L)) + ks_lane);
			if ((v_tkt < p_K)) {
				float v_wt0 = ksh_f16_to_f32(p_W[(v_wo0 + v_tkt)]);
				float v_wt1 = ksh_f16_to_f32(p_W[(v_wo1 + v_tkt)]);
				float v_wt2 = ksh_f16_to_f32(p_W[(v_wo2 + v_tkt)]);
				float v_wt3 = ksh_f16_to_f32(p_W[(v_wo3 + v_tkt)]);
				float v_xt0 = ksh_f16_to_f32(p_x[(v_xo0 + v_tkt)]);
				v_tacc0_0 = fma(v_xt0, v_wt0, v_tacc0_0);
				v_tacc0_1 = fma(v_xt0, v_wt1, v_tacc0_1);
				v_tacc0_2 = fma(v_xt0, v_wt2, v_tacc0_2);
				v_tacc0_3 = fma(v_xt0, v_wt3, v_tacc0_3);
				float v_xt1 = ksh_f16_to_f32(p_x[(v_xo1 + v_tkt)]);
				v_tacc1_0 = fma(v_xt1, v_wt0, v_tacc1_0);
				v_tacc1_1 = fma(v_xt1, v_wt1, v_tacc1_1);
				v_tacc1_2 = fma(v_xt1, v_wt2, v_tacc1_2);
				v_tacc1_3 = fma(v_xt1, v_wt3, v_tacc1_3);
				float v_xt2 = ksh_f16_to_f32(p_x[(v_xo2 + v_tkt)]);
				v_tacc2_0 = fma(v_xt2, v_wt0, v_tacc2_0);
				v_tacc2_1 = fma(v_xt2, v_wt1, v_tacc2_1);
				v_tacc2_2 = fma(v_xt2, v_wt2, v_tacc2_2);
				v_tacc2_3 = fma(v_xt2, v_wt3, v_tacc2_3);
				float v_xt3 = ksh_f16_to_f32(p_x[(v_xo3 + v_tkt)]);
				v_tacc3_0 = fma(v_xt3, v_wt0, v_tacc3_0);
				v_tacc3_1 = fma(v_xt3, v_wt1, v_tacc3_1);
				v_tacc3_2 = fma(v_xt3, v_wt2, v_tacc3_2);
				v_tacc3_3 = fma(v_xt3, v_wt3, v_tacc3_3);
			}
		}
	}
	const float ks_t0 = ksh_reduce_sum_f32(v_tacc0_0, ks_lane, ks_red_f32);
	if (((v_n0 < p_N) && (v_m0 < p_M))) {
		{
			const ks_i64 ks_t1 = ((v_m0 * p_N) + v_n0);
			const float ks_t2 = ks_t0;

			if (ks_lane == 0)
				p_y[ks_t1] = ksh_f32_to_f16(ks_t2);
		}
	}
	const float ks_t3 = ksh_reduce_sum_f32(v_tacc1_0, ks_lane, ks_red_f32);
	if (((v_n0 < p_N) && ((v_m0 + 1L) < p_M))) {
		{
			const ks_i64 ks_t4 = (((v_m0 + 1L) * p_N) + v_n0);
			const float ks_t5 = ks_t3;

			if (ks_lane == 0)
				p_y[ks_t4] = ksh_f32_to_f16(ks_t5);
		}
	}
	const float ks_t6 = ksh_reduce_sum_f32(v_tacc2_0, ks_lane, ks_red_f32);
	if (((v_n0 < p_N) && ((v_m0 + 2L) < p_M))) {
		{
			const ks_i64 ks_t7 = (((v_m0 + 2L) * p_N) + v_n0);
			const float ks_t8 = ks_t6;

			if (ks_lane == 0)
				p_y[ks_t7] = ksh_f32_to_f16(ks_t8);
		}
	}
	const float ks_t9 = ksh_reduce_sum_f32(v_tacc3_0, ks_lane, ks_red_f32);
	if (((v_n0 < p_N) && ((v_m0 + 3L) < p_M))) {
		{
			const ks_i64 ks_t10 = (((v_m0 + 3L) * p_N) + v_n0);
			const float ks_t11 = ks_t9;

			if (ks_lane == 0)
				p_y[ks_t10] = ksh_f32_to_f16(ks_t11);
		}
	}
	const float ks_t12 = ksh_reduce_sum_f32(v_tacc0_1, ks_lane, ks_red_f32);
	if ((((v_n0 + 1L) < p_N) && (v_m0 < p_M))) {
		{
			const ks_i64 ks_t13 = (((v_m0 * p_N) + v_n0) + 1L);
			const float ks_t14 = ks_t12;

			if (ks_lane == 0)
				p_y[ks_t13] = ksh_f32_to_f16(ks_t14);
		}
	}
	const float ks_t15 = ksh_reduce_sum_f32(v_tacc1_1, ks_lane, ks_red_f32);
	if ((((v_n0 + 1L) < p_N) && ((v_m0 + 1L) < p_M))) {
		{
			const ks_i64 ks_t16 = ((((v_m0 + 1L) * p_N) + v_n0) + 1L);
			const float ks_t17 = ks_t15;

			if (ks_lane == 0)
				p_y[ks_t16] = ksh_f32_to_f16(ks_t17);
		}
	}
	const float ks_t18 = ksh_reduce_sum_f32(v_tacc2_1, ks_lane, ks_red_f32);
	if ((((v_n0 + 1L) < p_N) && ((v_m0 + 2L) < p_M))) {
		{
			const ks_i64 ks_t19 = ((((v_m0 + 2L) * p_N) + v_n0) + 1L);
			const float ks_t20 = ks_t18;

			if (ks_lane == 0)
				p_y[ks_t19] = ksh_f32_to_f16(ks_t20);
		}
	}
	const float ks_t21 = ksh_reduce_sum_f32(v_tacc3_1, ks_lane, ks_red_f32);
	if ((((v_n0 + 1L) < p_N) && ((v_m0 + 3L) < p_M))) {
		{
			const ks_i64 ks_t22 = ((((v_m0 + 3L) * p_N) + v_n0) + 1L);
			const float ks_t23 = ks_t21;

			if (ks_lane == 0)
				p_y[ks_t22] = ksh_f32_to_f16(ks_t23);
		}
	}
	const float ks_t24 = ksh_reduce_sum_f32(v_tacc0_2, ks_lane, ks_red_f32);
	if ((((v_n0 + 2L) < p_N) && (v_m0 < p_M))) {
		{
			const ks_i64 ks_t25 = (((v_m0 * p_N) + v_n0) + 2L);
			const float ks_t26 = ks_t24;

			if (ks_lane == 0)
				p_y[ks_t25] = ksh_f32_to_f16(ks_t26);
		}
	}
	const float ks_t27 = ksh_reduce_sum_f32(v_tacc1_2, ks_lane, ks_red_f32);
	if ((((v_n0 + 2L) < p_N) && ((v_m0 + 1L) < p_M))) {
		{
			const ks_i64 ks_t28 = ((((v_m0 + 1L) * p_N) + v_n0) + 2L);
			const float ks_t29 = ks_t27;

			if (ks_lane == 0)
				p_y[ks_t28] = ksh_f32_to_f16(ks_t29);
		}
	}
	const float ks_t30 = ksh_reduce_sum_f32(v_tacc2_2, ks_lane, ks_red_f32);
	if ((((v_n0 + 2L) < p_N) && ((v_m0 + 2L) < p_M))) {
		{
			const ks_i64 ks_t31 = ((((v_m0 + 2L) * p_N) + v_n0) + 2L);
			const float ks_t32 = ks_t30;

			if (ks_lane == 0)
				p_y[ks_t31] = ksh_f32_to_f16(ks_t32);
		}
	}
	const float ks_t33 = ksh_reduce_sum_f32(v_tacc3_2, ks_lane, ks_red_f32);
	if ((((v_n0 + 2L) < p_N) && ((v_m0 + 3L) < p_M))) {
		{
			const ks_i64 ks_t34 = ((((v_m0 + 3L) * p_N) + v_n0) + 2L);
			const float ks_t35 = ks_t33;

			if (ks_lane == 0)
				p_y[ks_t34] = ksh_f32_to_f16(ks_t35);
		}
	}
	const float ks_t36 = ksh_reduce_sum_f32(v_tacc0_3, ks_lane, ks_red_f32);
	if ((((v_n0 + 3L) < p_N) && (v_m0 < p_M))) {
		{
			const ks_i64 ks_t37 = (((v_m0 * p_N) + v_n0) + 3L);
			const float ks_t38 = ks_t36;

			if (ks_lane == 0)
				p_y[ks_t37] = ksh_f32_to_f16(ks_t38);
		}
	}
	const float ks_t39 = ksh_reduce_sum_f32(v_tacc1_3, ks_lane, ks_red_f32);
	if ((((v_n0 + 3L) < p_N) && ((v_m0 + 1L) < p_M))) {
		{
			const ks_i64 ks_t40 = ((((v_m0 + 1L) * p_N) + v_n0) + 3L);
			const float ks_t41 = ks_t39;

			if (ks_lane == 0)
				p_y[ks_t40] = ksh_f32_to_f16(ks_t41);
		}
	}
	const float ks_t42 = ksh_reduce_sum_f32(v_tacc2_3, ks_lane, ks_red_f32);
	if ((((v_n0 + 3L) < p_N) && ((v_m0 + 2L) < p_M))) {
		{
			const ks_i64 ks_t43 = ((((v_m0 + 2L) * p_N) + v_n0) + 3L);
			const float ks_t44 = ks_t42;

			if (ks_lane == 0)
				p_y[ks_t43] = ksh_f32_to_f16(ks_t44);
		}
	}
	const float ks_t45 = ksh_reduce_sum_f32(v_tacc3_3, ks_lane, ks_red_f32);
	if ((((v_n0 + 3L) < p_N) && ((v_m0 + 3L) < p_M))) {
		{
			const ks_i64 ks_t46 = ((((v_m0 + 3L) * p_N) + v_n0) + 3L);
			const float ks_t47 = ks_t45;

			if (ks_lane == 0)
				p_y[ks_t46] = ksh_f32_to_f16(ks_t47);
		}
	}
}
