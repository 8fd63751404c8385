/*
 * kspec gemm.small_m, OpenCL C, 32 lanes per work-group.
 * Generated from the kernel's IR; do not edit.
 */
/* Built with -cl-std=CL1.2 -cl-fp32-correctly-rounded-divide-sqrt. */
#pragma OPENCL FP_CONTRACT OFF
typedef long ks_i64;
typedef uint ks_u32;
typedef ushort ks_u16;

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
void ks_gemm_small_m(
	__global const float *restrict p_x,
	__global const float *restrict p_W,
	__global float *p_y)
{
	__local float ks_red_f32[32];
	const ks_i64 ks_lane = (ks_i64)get_local_id(0);
	const ks_i64 ks_group = (ks_i64)get_group_id(0);

	ks_i64 v_n0 = (ks_group * 4L);
	ks_i64 v_wo0 = (ksh_imin(v_n0, 4095L) * 4096L);
	ks_i64 v_wo1 = (ksh_imin((v_n0 + 1L), 4095L) * 4096L);
	ks_i64 v_wo2 = (ksh_imin((v_n0 + 2L), 4095L) * 4096L);
	ks_i64 v_wo3 = (ksh_imin((v_n0 + 3L), 4095L) * 4096L);
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
	for (ks_i64 v_tk0 = 0L; v_tk0 < 4096L; v_tk0 += 32L) {
		/* lanes: this thread is lane ks_lane */
		{
			ks_i64 v_tk = (v_tk0 + ks_lane);
			float v_wv0 = (p_W[(v_wo0 + v_tk)]);
			float v_wv1 = (p_W[(v_wo1 + v_tk)]);
			float v_wv2 = (p_W[(v_wo2 + v_tk)]);
			float v_wv3 = (p_W[(v_wo3 + v_tk)]);
			float v_xv0 = (p_x[v_tk]);
			v_tacc0_0 = fma(v_xv0, v_wv0, v_tacc0_0);
			v_tacc0_1 = fma(v_xv0, v_wv1, v_tacc0_1);
			v_tacc0_2 = fma(v_xv0, v_wv2, v_tacc0_2);
			v_tacc0_3 = fma(v_xv0, v_wv3, v_tacc0_3);
			float v_xv1 = (p_x[(4096L + v_tk)]);
			v_tacc1_0 = fma(v_xv1, v_wv0, v_tacc1_0);
			v_tacc1_1 = fma(v_xv1, v_wv1, v_tacc1_1);
			v_tacc1_2 = fma(v_xv1, v_wv2, v_tacc1_2);
			v_tacc1_3 = fma(v_xv1, v_wv3, v_tacc1_3);
			float v_xv2 = (p_x[(8192L + v_tk)]);
			v_tacc2_0 = fma(v_xv2, v_wv0, v_tacc2_0);
			v_tacc2_1 = fma(v_xv2, v_wv1, v_tacc2_1);
			v_tacc2_2 = fma(v_xv2, v_wv2, v_tacc2_2);
			v_tacc2_3 = fma(v_xv2, v_wv3, v_tacc2_3);
		}
	}
	const float ks_t0 = ksh_reduce_sum_f32(v_tacc0_0, ks_lane, ks_red_f32);
	if ((v_n0 < 4096L)) {
		{
			const ks_i64 ks_t1 = v_n0;
			const float ks_t2 = ks_t0;

			if (ks_lane == 0)
				p_y[ks_t1] = (ks_t2);
		}
	}
	const float ks_t3 = ksh_reduce_sum_f32(v_tacc1_0, ks_lane, ks_red_f32);
	if ((v_n0 < 4096L)) {
		{
			const ks_i64 ks_t4 = (4096L + v_n0);
			const float ks_t5 = ks_t3;

			if (ks_lane == 0)
				p_y[ks_t4] = (ks_t5);
		}
	}
	const float ks_t6 = ksh_reduce_sum_f32(v_tacc2_0, ks_lane, ks_red_f32);
	if ((v_n0 < 4096L)) {
		{
			const ks_i64 ks_t7 = (8192L + v_n0);
			const float ks_t8 = ks_t6;

			if (ks_lane == 0)
				p_y[ks_t7] = (ks_t8);
		}
	}
	const float ks_t9 = ksh_reduce_sum_f32(v_tacc0_1, ks_lane, ks_red_f32);
	if (((v_n0 + 1L) < 4096L)) {
		{
			const ks_i64 ks_t10 = (v_n0 + 1L);
			const float ks_t11 = ks_t9;

			if (ks_lane == 0)
				p_y[ks_t10] = (ks_t11);
		}
	}
	const float ks_t12 = ksh_reduce_sum_f32(v_tacc1_1, ks_lane, ks_red_f32);
	if (((v_n0 + 1L) < 4096L)) {
		{
			const ks_i64 ks_t13 = ((4096L + v_n0) + 1L);
			const float ks_t14 = ks_t12;

			if (ks_lane == 0)
				p_y[ks_t13] = (ks_t14);
		}
	}
	const float ks_t15 = ksh_reduce_sum_f32(v_tacc2_1, ks_lane, ks_red_f32);
	if (((v_n0 + 1L) < 4096L)) {
		{
			const ks_i64 ks_t16 = ((8192L + v_n0) + 1L);
			const float ks_t17 = ks_t15;

			if (ks_lane == 0)
				p_y[ks_t16] = (ks_t17);
		}
	}
	const float ks_t18 = ksh_reduce_sum_f32(v_tacc0_2, ks_lane, ks_red_f32);
	if (((v_n0 + 2L) < 4096L)) {
		{
			const ks_i64 ks_t19 = (v_n0 + 2L);
			const float ks_t20 = ks_t18;

			if (ks_lane == 0)
				p_y[ks_t19] = (ks_t20);
		}
	}
	const float ks_t21 = ksh_reduce_sum_f32(v_tacc1_2, ks_lane, ks_red_f32);
	if (((v_n0 + 2L) < 4096L)) {
		{
			const ks_i64 ks_t22 = ((4096L + v_n0) + 2L);
			const float ks_t23 = ks_t21;

			if (ks_lane == 0)
				p_y[ks_t22] = (ks_t23);
		}
	}
	const float ks_t24 = ksh_reduce_sum_f32(v_tacc2_2, ks_lane, ks_red_f32);
	if (((v_n0 + 2L) < 4096L)) {
		{
			const ks_i64 ks_t25 = ((8192L + v_n0) + 2L);
			const float ks_t26 = ks_t24;

			if (ks_lane == 0)
				p_y[ks_t25] = (ks_t26);
		}
	}
	const float ks_t27 = ksh_reduce_sum_f32(v_tacc0_3, ks_lane, ks_red_f32);
	if (((v_n0 + 3L) < 4096L)) {
		{
			const ks_i64 ks_t28 = (v_n0 + 3L);
			const float ks_t29 = ks_t27;

			if (ks_lane == 0)
				p_y[ks_t28] = (ks_t29);
		}
	}
	const float ks_t30 = ksh_reduce_sum_f32(v_tacc1_3, ks_lane, ks_red_f32);
	if (((v_n0 + 3L) < 4096L)) {
		{
			const ks_i64 ks_t31 = ((4096L + v_n0) + 3L);
			const float ks_t32 = ks_t30;

			if (ks_lane == 0)
				p_y[ks_t31] = (ks_t32);
		}
	}
	const float ks_t33 = ksh_reduce_sum_f32(v_tacc2_3, ks_lane, ks_red_f32);
	if (((v_n0 + 3L) < 4096L)) {
		{
			const ks_i64 ks_t34 = ((8192L + v_n0) + 3L);
			const float ks_t35 = ks_t33;

			if (ks_lane == 0)
				p_y[ks_t34] = (ks_t35);
		}
	}
}
