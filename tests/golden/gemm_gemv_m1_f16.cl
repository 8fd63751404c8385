/*
 * kspec gemm.gemv_m1, OpenCL C, 32 lanes per work-group.
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
void ks_gemm_gemv_m1(
	__global const ks_u16 *restrict p_x,
	__global const ks_u16 *restrict p_W,
	__global ks_u16 *p_y)
{
	__local float ks_red_f32[32];
	const ks_i64 ks_lane = (ks_i64)get_local_id(0);
	const ks_i64 ks_group = (ks_i64)get_group_id(0);

	ks_i64 v_n0 = (ks_group * 8L);
	ks_i64 v_yo = v_n0;
	ks_i64 v_wo0 = (ksh_imin(v_n0, 4095L) * 4096L);
	ks_i64 v_wo1 = (ksh_imin((v_n0 + 1L), 4095L) * 4096L);
	ks_i64 v_wo2 = (ksh_imin((v_n0 + 2L), 4095L) * 4096L);
	ks_i64 v_wo3 = (ksh_imin((v_n0 + 3L), 4095L) * 4096L);
	ks_i64 v_wo4 = (ksh_imin((v_n0 + 4L), 4095L) * 4096L);
	ks_i64 v_wo5 = (ksh_imin((v_n0 + 5L), 4095L) * 4096L);
	ks_i64 v_wo6 = (ksh_imin((v_n0 + 6L), 4095L) * 4096L);
	ks_i64 v_wo7 = (ksh_imin((v_n0 + 7L), 4095L) * 4096L);
	float v_acc0 = 0.0f;
	float v_acc1 = 0.0f;
	float v_acc2 = 0.0f;
	float v_acc3 = 0.0f;
	float v_acc4 = 0.0f;
	float v_acc5 = 0.0f;
	float v_acc6 = 0.0f;
	float v_acc7 = 0.0f;
	for (ks_i64 v_k0 = 0L; v_k0 < 4096L; v_k0 += 32L) {
		/* lanes: this thread is lane ks_lane */
		{
			ks_i64 v_k = (v_k0 + ks_lane);
			float v_xv = ksh_f16_to_f32(p_x[v_k]);
			v_acc0 = fma(v_xv, ksh_f16_to_f32(p_W[(v_wo0 + v_k)]), v_acc0);
			v_acc1 = fma(v_xv, ksh_f16_to_f32(p_W[(v_wo1 + v_k)]), v_acc1);
			v_acc2 = fma(v_xv, ksh_f16_to_f32(p_W[(v_wo2 + v_k)]), v_acc2);
			v_acc3 = fma(v_xv, ksh_f16_to_f32(p_W[(v_wo3 + v_k)]), v_acc3);
			v_acc4 = fma(v_xv, ksh_f16_to_f32(p_W[(v_wo4 + v_k)]), v_acc4);
			v_acc5 = fma(v_xv, ksh_f16_to_f32(p_W[(v_wo5 + v_k)]), v_acc5);
			v_acc6 = fma(v_xv, ksh_f16_to_f32(p_W[(v_wo6 + v_k)]), v_acc6);
			v_acc7 = fma(v_xv, ksh_f16_to_f32(p_W[(v_wo7 + v_k)]), v_acc7);
		}
	}
	const float ks_t0 = ksh_reduce_sum_f32(v_acc0, ks_lane, ks_red_f32);
	if ((v_n0 < 4096L)) {
		{
			const ks_i64 ks_t1 = v_yo;
			const float ks_t2 = ks_t0;

			if (ks_lane == 0)
				p_y[ks_t1] = ksh_f32_to_f16(ks_t2);
		}
	}
	const float ks_t3 = ksh_reduce_sum_f32(v_acc1, ks_lane, ks_red_f32);
	if (((v_n0 + 1L) < 4096L)) {
		{
			const ks_i64 ks_t4 = (v_yo + 1L);
			const float ks_t5 = ks_t3;

			if (ks_lane == 0)
				p_y[ks_t4] = ksh_f32_to_f16(ks_t5);
		}
	}
	const float ks_t6 = ksh_reduce_sum_f32(v_acc2, ks_lane, ks_red_f32);
	if (((v_n0 + 2L) < 4096L)) {
		{
			const ks_i64 ks_t7 = (v_yo + 2L);
			const float ks_t8 = ks_t6;

			if (ks_lane == 0)
				p_y[ks_t7] = ksh_f32_to_f16(ks_t8);
		}
	}
	const float ks_t9 = ksh_reduce_sum_f32(v_acc3, ks_lane, ks_red_f32);
	if (((v_n0 + 3L) < 4096L)) {
		{
			const ks_i64 ks_t10 = (v_yo + 3L);
			const float ks_t11 = ks_t9;

			if (ks_lane == 0)
				p_y[ks_t10] = ksh_f32_to_f16(ks_t11);
		}
	}
	const float ks_t12 = ksh_reduce_sum_f32(v_acc4, ks_lane, ks_red_f32);
	if (((v_n0 + 4L) < 4096L)) {
		{
			const ks_i64 ks_t13 = (v_yo + 4L);
			const float ks_t14 = ks_t12;

			if (ks_lane == 0)
				p_y[ks_t13] = ksh_f32_to_f16(ks_t14);
		}
	}
	const float ks_t15 = ksh_reduce_sum_f32(v_acc5, ks_lane, ks_red_f32);
	if (((v_n0 + 5L) < 4096L)) {
		{
			const ks_i64 ks_t16 = (v_yo + 5L);
			const float ks_t17 = ks_t15;

			if (ks_lane == 0)
				p_y[ks_t16] = ksh_f32_to_f16(ks_t17);
		}
	}
	const float ks_t18 = ksh_reduce_sum_f32(v_acc6, ks_lane, ks_red_f32);
	if (((v_n0 + 6L) < 4096L)) {
		{
			const ks_i64 ks_t19 = (v_yo + 6L);
			const float ks_t20 = ks_t18;

			if (ks_lane == 0)
				p_y[ks_t19] = ksh_f32_to_f16(ks_t20);
		}
	}
	const float ks_t21 = ksh_reduce_sum_f32(v_acc7, ks_lane, ks_red_f32);
	if (((v_n0 + 7L) < 4096L)) {
		{
			const ks_i64 ks_t22 = (v_yo + 7L);
			const float ks_t23 = ks_t21;

			if (ks_lane == 0)
				p_y[ks_t22] = ksh_f32_to_f16(ks_t23);
		}
	}
}
